//! The NetworkPolicy kept in step with the workspaces' networks: the firewall written whole
//! at start, each network's chain set as it comes and goes, other installations' stale
//! tables collected.

use super::*;

impl EngineRuntime {
    /// Deletes the tables of installations that have no network left on this engine (an
    /// agent removed, or one that died with its workspaces deleted behind its back): their
    /// rules name subnets a new network may get. A live installation always has its
    /// networks, so its table is never taken.
    pub(super) async fn collect_stale_firewall_tables(&self) {
        if self.inner.isolation_warning.is_some() {
            return;
        }
        for (owner, table) in firewall::owner_tables().await {
            if owner == self.inner.owner {
                continue;
            }
            // Its GitOps pods' networks (the sibling's owner id, `gitops`) are in its
            // table too: an installation running only those is live.
            let mut left = 0;
            let mut failed = None;
            for owner in [owner.clone(), format!("{owner}g")] {
                let options = ListNetworksOptions {
                    filters: Some(HashMap::from([(
                        "label".to_owned(),
                        vec![format!("{OWNER_LABEL}={owner}")],
                    )])),
                };
                match self.inner.docker.list_networks(Some(options)).await {
                    Ok(networks) => left += networks.len(),
                    Err(e) => failed = Some(e),
                }
            }
            let listed = match failed {
                Some(e) => Err(e),
                None => Ok(left),
            };
            match listed {
                Ok(0) => {
                    let script = format!("table inet {table}\ndelete table inet {table}\n");
                    match firewall::nft(&["-f", "-"], Some(&script)).await {
                        Ok(_) => tracing::info!(table, "removed the firewall table of an installation with no workspace networks left"),
                        Err(e) => tracing::warn!(table, error = %e, "removing a stale firewall table failed"),
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %error_message(&e), "listing networks for stale firewall tables failed");
                    return;
                }
            }
        }
    }

    /// Why workspaces are not isolated here, if they are not.
    pub fn isolation_warning(&self) -> Option<&str> {
        self.inner.isolation_warning.as_deref()
    }

    /// Brings the agent's nftables table in line with the workspace networks of this
    /// installation and their policies (see `firewall`); a no-op where the agent cannot
    /// enforce them, or when nothing changed.
    pub(super) async fn sync_firewall(&self) -> Result<(), RuntimeError> {
        if let Some(parent) = &self.inner.parent {
            return match parent.upgrade() {
                Some(inner) => Box::pin(EngineRuntime { inner }.sync_firewall()).await,
                None => Ok(()),
            };
        }
        if self.inner.isolation_warning.is_some() {
            return Ok(());
        }
        let mut applied = self.inner.firewall.lock().await;
        let mut nets = self.workspace_nets("").await?;
        if let Some(gitops) = self.inner.gitops.get() {
            nets.extend(gitops.workspace_nets("gitops ").await?);
        }
        let table = firewall::table_name(&self.inner.owner, self.inner.config.agent_id.get());
        let rules = firewall::rules(&nets);
        let script = match applied.as_ref() {
            Some(old) => match firewall::update(&table, old, &rules) {
                Some(script) => script,
                None => return Ok(()),
            },
            None => firewall::ruleset(&table, &rules),
        };
        let incremental = applied.is_some();
        if let Err(message) = firewall::nft(&["-f", "-"], Some(&script)).await {
            // The table is not as remembered (changed by hand, or an update cut short):
            // replaced whole, as at start.
            *applied = None;
            if !incremental {
                return Err(RuntimeError::Apply {
                    workspace: "the workspaces' firewall rules".into(),
                    message,
                });
            }
            tracing::warn!(error = %message, "updating the firewall rules failed; replacing the whole table");
            firewall::nft(&["-f", "-"], Some(&firewall::ruleset(&table, &rules)))
                .await
                .map_err(|message| RuntimeError::Apply {
                    workspace: "the workspaces' firewall rules".into(),
                    message,
                })?;
        }
        tracing::debug!(
            workspaces = nets.len(),
            incremental,
            "firewall rules applied"
        );
        *applied = Some(rules);
        Ok(())
    }

    /// The networks of this runtime's pods with what their policies allow, named with
    /// `prefix` in the rules' comments.
    pub(super) async fn workspace_nets(
        &self,
        prefix: &str,
    ) -> Result<Vec<firewall::WorkspaceNet>, RuntimeError> {
        let known = lock(&self.inner.subnets).clone();
        let subnets = match known {
            Some(known) => known,
            None => {
                // At start (and after `resync`): what the engine holds. From then on the
                // runtime keeps it current as it makes and removes networks, so an update
                // lists no network of another workspace.
                let mut listed = BTreeMap::new();
                for network in self.networks(&self.selector()).await? {
                    let Some(workspace) = network.labels.get(WORKSPACE_NAME_LABEL).cloned() else {
                        continue;
                    };
                    if let Some(subnet) = firewall::ipv4_subnet(&network.subnets) {
                        listed.insert(workspace, subnet);
                    }
                }
                *lock(&self.inner.subnets) = Some(listed.clone());
                listed
            }
        };
        Ok(subnets
            .into_iter()
            .map(|(workspace, subnet)| firewall::WorkspaceNet {
                egress: self.egress_of(&workspace),
                workspace: format!("{prefix}{workspace}"),
                subnet,
            })
            .collect())
    }

    /// Records the subnet of workspace `name`'s network (`None`: it has none any more).
    pub(super) fn set_subnet(&self, name: &str, subnet: Option<ipnet::Ipv4Net>) {
        if let Some(known) = lock(&self.inner.subnets).as_mut() {
            known.remove(name);
            if let Some(subnet) = subnet {
                // A subnet belongs to one network at a time: an entry still naming it is
                // of a network removed behind the runtime's back, whose policy must not
                // apply to this one.
                known.retain(|_, s| *s != subnet);
                known.insert(name.to_owned(), subnet);
            }
        }
    }

    /// The workspace's egress, as its record says.
    pub(super) fn egress_of(&self, workspace: &str) -> Option<firewall::Egress> {
        if let Some(egress) = lock(&self.inner.egress).get(workspace) {
            return egress.clone();
        }
        let egress = self.read_record(workspace).and_then(|r| r.egress);
        lock(&self.inner.egress).insert(workspace.to_owned(), egress.clone());
        egress
    }
}
