//! Proxies beside a stack's own (issue 42): a region's front door, or another central proxy,
//! each with a workspace domain and an OAuth client of its own, signing in through the
//! stack's server like any proxy, and calling the server and relay where the test says (a
//! [`crate::latency`] link stands for the distance between regions).

use crate::{bind, proxy_config, spawn_service, Stack};
use anyhow::{Context, Result};
use serde_json::json;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

/// A running extra proxy (a region's, or another central one).
pub struct RegionalProxy {
    pub region: Option<String>,
    /// Its workspace hosts are `{port}-{workspace}.{domain}:{http_addr port}`.
    pub domain: String,
    pub http_addr: SocketAddr,
    pub ssh_addr: Option<SocketAddr>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl RegionalProxy {
    /// `http://{port}-{workspace}.{domain}:{port}{path}`.
    pub fn url(&self, port: u16, workspace: &str, path: &str) -> String {
        format!(
            "http://{port}-{workspace}.{}:{}{path}",
            self.domain,
            self.http_addr.port()
        )
    }

    /// Stops it as an operator's shutdown would (it tells the server it leaves) and waits
    /// until it has ended.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// Ends it at once, saying nothing to anyone (a crash, a lost machine).
    pub fn kill(&self) {
        self.task.abort();
        // Its background tasks (key polls, activity reports) end with it.
        self.stop.cancel();
    }
}

/// Where an extra proxy serves and whom it calls.
#[derive(Debug, Clone, Default)]
pub struct ProxyAt {
    /// Its `--region`; `None`: another central proxy.
    pub region: Option<String>,
    /// Its workspace domain (a name the test's clients resolve, or send as `Host`).
    pub domain: String,
    /// The server and relay it calls, when not the stack's own addresses (e.g. through a
    /// [`crate::latency`] link).
    pub server_url: Option<String>,
    pub relay_url: Option<String>,
}

impl Stack {
    /// Starts a proxy for `region` on `domain`; see [`Stack::proxy_at`].
    pub async fn regional_proxy(&self, region: &str, domain: &str) -> Result<RegionalProxy> {
        self.proxy_at(ProxyAt {
            region: Some(region.to_owned()),
            domain: domain.to_owned(),
            ..ProxyAt::default()
        })
        .await
    }

    /// Starts a proxy as `at` says, with its own OAuth client, calling the stack's server and
    /// first relay unless told otherwise, its region registered with (or changed to) this
    /// proxy's door; returns once the server lists it as serving.
    pub async fn proxy_at(&self, at: ProxyAt) -> Result<RegionalProxy> {
        let (http, http_addr) = bind().await?;
        let (ssh, ssh_addr) = match self.options.ssh {
            true => {
                let (l, a) = bind().await?;
                (Some(l), Some(a))
            }
            false => (None, None),
        };
        let port = http_addr.port();
        let home = self.home.path().join(format!("proxy-at-{port}"));
        let server_url = at.server_url.unwrap_or_else(|| self.api_url.clone());
        let relay_url = at
            .relay_url
            .unwrap_or_else(|| self.relay_internal_url.clone());
        let urls = [server_url.as_str(), relay_url.as_str()];
        let mut config = proxy_config(
            &home,
            &self.options,
            self.tls.as_ref(),
            port,
            urls,
            &self.shared_secret,
        )?;
        // Browsers go to the server itself to sign in, wherever the proxy reaches it from.
        config.server_public_url = self.api_url.parse()?;
        config.workspace_domain = at.domain.clone();
        config.region = at.region.clone();
        config.ssh_public_address = ssh_addr.map(|a| a.to_string());
        config.oauth_client_id = format!("warren-proxy-{port}");
        let client = self
            .api(
                reqwest::Method::POST,
                "/api/v1/oauth/clients",
                &self.admin.token,
                Some(json!({
                    "client_id": config.oauth_client_id,
                    "name": format!("Warren proxy on {}", at.domain),
                    "redirect_uris": [config.callback_url()],
                    "first_party": true,
                })),
            )
            .await
            .context("registering the proxy's OAuth client")?;
        config.oauth_client_secret = client["client_secret"]
            .as_str()
            .context("a confidential client has a secret")?
            .to_owned();
        // A region's door is an administrator's word: registered (or changed to this
        // proxy's) before the proxy says it serves it.
        if let Some(region) = &at.region {
            self.api(
                reqwest::Method::PUT,
                &format!("/api/v1/regions/{region}"),
                &self.admin.token,
                Some(json!({
                    "workspace_domain": format!("{}:{port}", at.domain),
                    "public_scheme": config.public_scheme,
                    "ssh_address": config.ssh_public_address,
                })),
            )
            .await
            .context("registering the proxy's region")?;
        }
        let stop = self.shutdown.child_token();
        let listeners = warren_proxy::ProxyListeners {
            http,
            ssh,
            metrics: None,
        };
        let task = spawn_service(
            "extra proxy",
            warren_proxy::run(config, listeners, stop.clone()),
        );
        let proxy = RegionalProxy {
            region: at.region.clone(),
            domain: at.domain.clone(),
            http_addr,
            ssh_addr,
            stop,
            task,
        };
        let admin = self.admin.token.clone();
        let domain = format!("{}:{port}", at.domain);
        crate::wait_for("the proxy to serve", 30, || async {
            let Ok(proxies) = self
                .api(reqwest::Method::GET, "/api/v1/proxies", &admin, None)
                .await
            else {
                return false;
            };
            proxies.as_array().is_some_and(|ps| {
                ps.iter()
                    .any(|p| p["workspace_domain"] == domain.as_str() && p["serving"] == true)
            })
        })
        .await?;
        Ok(proxy)
    }
}
