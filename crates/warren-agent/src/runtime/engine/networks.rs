//! Workspace networks: listed and inspected through Podman's own API on Podman.
//!
//! Podman's Docker-compatible network endpoints name every network's containers, which it
//! finds by inspecting every container on the engine, for each network: a listing of 31
//! workspace networks took 1.05 s and one inspection 47 ms, growing with every workspace
//! present (issue 38). Podman's own endpoints (`/libpod/networks`) answer from the network
//! configuration alone (11 ms and 10 ms), so on Podman the runtime uses them; Docker's
//! endpoints are cheap and used as they are.

use super::*;
use serde::Deserialize;

/// What the runtime needs of a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NetworkInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Its subnets, as CIDRs.
    pub subnets: Vec<String>,
}

/// Podman's network configuration, as `/libpod/networks` answers.
#[derive(Debug, Deserialize)]
struct PodmanNetwork {
    name: String,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    subnets: Option<Vec<PodmanSubnet>>,
}

#[derive(Debug, Deserialize)]
struct PodmanSubnet {
    subnet: String,
}

impl From<PodmanNetwork> for NetworkInfo {
    fn from(n: PodmanNetwork) -> Self {
        NetworkInfo {
            name: n.name,
            labels: n.labels.unwrap_or_default(),
            subnets: n
                .subnets
                .unwrap_or_default()
                .into_iter()
                .map(|s| s.subnet)
                .collect(),
        }
    }
}

/// What Docker's answers (a listing's entries and an inspection alike) say of a network.
fn from_docker(
    name: Option<String>,
    labels: Option<HashMap<String, String>>,
    ipam: Option<bollard::models::Ipam>,
) -> NetworkInfo {
    NetworkInfo {
        name: name.unwrap_or_default(),
        labels: labels.unwrap_or_default().into_iter().collect(),
        subnets: ipam
            .and_then(|i| i.config)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| c.subnet)
            .collect(),
    }
}

impl From<bollard::models::Network> for NetworkInfo {
    fn from(n: bollard::models::Network) -> Self {
        from_docker(n.name, n.labels, n.ipam)
    }
}

impl From<bollard::models::NetworkInspect> for NetworkInfo {
    fn from(n: bollard::models::NetworkInspect) -> Self {
        from_docker(n.name, n.labels, n.ipam)
    }
}

/// The path of Podman's own API (any Podman 4 or later serves this version).
pub(super) const LIBPOD: &str = "/v4.0.0/libpod";

impl EngineRuntime {
    /// A client for Podman's own API on this engine's socket, made once.
    pub(super) fn libpod(&self) -> Result<&(reqwest::Client, String), RuntimeError> {
        if let Some(c) = self.inner.libpod.get() {
            return Ok(c);
        }
        let made = super::build::endpoint(&self.inner.host).map_err(|message| {
            RuntimeError::NotAvailable(format!("reaching Podman's API: {message}"))
        })?;
        Ok(self.inner.libpod.get_or_init(|| made))
    }

    /// The networks `selector` selects.
    pub(super) async fn networks(
        &self,
        selector: &Selector,
    ) -> Result<Vec<NetworkInfo>, RuntimeError> {
        let listed: Vec<NetworkInfo> = if self.inner.is_podman {
            let (client, base) = self.libpod()?;
            let filters = serde_json::json!({ "label": selector.filters() }).to_string();
            let url = format!("{base}{LIBPOD}/networks/json");
            let response = client
                .get(url)
                .query(&[("filters", filters)])
                .send()
                .await
                .map_err(|e| runtime_err("listing networks".into(), e))?;
            let status = response.status();
            if !status.is_success() {
                let text = response.text().await.unwrap_or_default();
                return Err(RuntimeError::Runtime {
                    context: "listing networks".into(),
                    source: format!("Podman answered {status}: {}", text.trim()).into(),
                });
            }
            response
                .json::<Vec<PodmanNetwork>>()
                .await
                .map_err(|e| runtime_err("reading the list of networks".into(), e))?
                .into_iter()
                .map(NetworkInfo::from)
                .collect()
        } else {
            let options = ListNetworksOptions {
                filters: Some(HashMap::from([("label".to_owned(), selector.filters())])),
            };
            let docker = &self.inner.docker;
            retry_transient(|| docker.list_networks(Some(options.clone())))
                .await
                .map_err(|e| runtime_err("listing networks".into(), e))?
                .into_iter()
                .map(NetworkInfo::from)
                .collect()
        };
        Ok(listed
            .into_iter()
            .filter(|n| selector.matches_btree(&n.labels))
            .collect())
    }

    /// The network called `name`; `None` when there is none.
    pub(super) async fn network(&self, name: &str) -> Result<Option<NetworkInfo>, RuntimeError> {
        let context = || format!("inspecting network {name}");
        if self.inner.is_podman {
            let (client, base) = self.libpod()?;
            let url = format!("{base}{LIBPOD}/networks/{name}/json");
            let response = client
                .get(url)
                .send()
                .await
                .map_err(|e| runtime_err(context(), e))?;
            let status = response.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !status.is_success() {
                let text = response.text().await.unwrap_or_default();
                return Err(RuntimeError::Runtime {
                    context: context(),
                    source: format!("Podman answered {status}: {}", text.trim()).into(),
                });
            }
            let network = response
                .json::<PodmanNetwork>()
                .await
                .map_err(|e| runtime_err(context(), e))?;
            return Ok(Some(network.into()));
        }
        match self
            .inner
            .docker
            .inspect_network(name, None::<InspectNetworkOptions>)
            .await
        {
            Ok(n) => Ok(Some(n.into())),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(runtime_err(context(), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_own_network_answer_is_read() {
        let text = r#"[{"name":"warren-a","id":"d4","driver":"bridge","network_interface":"podman4",
            "subnets":[{"subnet":"10.89.3.0/24","gateway":"10.89.3.1"}],"ipv6_enabled":false,
            "labels":{"warren.dev/workspace-name":"a"},"ipam_options":{"driver":"host-local"}},
            {"name":"bare","driver":"bridge"}]"#;
        let parsed: Vec<NetworkInfo> = serde_json::from_str::<Vec<PodmanNetwork>>(text)
            .unwrap()
            .into_iter()
            .map(NetworkInfo::from)
            .collect();
        assert_eq!(parsed[0].name, "warren-a");
        assert_eq!(parsed[0].subnets, vec!["10.89.3.0/24".to_owned()]);
        assert_eq!(parsed[0].labels["warren.dev/workspace-name"], "a");
        assert!(parsed[1].labels.is_empty() && parsed[1].subnets.is_empty());
    }
}
