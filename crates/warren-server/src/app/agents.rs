//! Agents: admins create and configure them; every signed-in user may list them (to pick
//! one). A configuration change re-renders the agent's workspaces.

use super::audit;
use super::{AppError, AppState, Principal};
use crate::crypto;
use crate::store::agents::{AgentDeletion, AgentRow};
use warren_types::api::{Agent, CreateAgentRequest, CreatedAgent, UpdateAgentRequest};
use warren_types::config::{AgentConfig, ResourceList};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};
use warren_types::AgentId;

/// The name prefix of the agent rows made for connector mounts (`connector-{mount}`).
pub const CONNECTOR_PREFIX: &str = "connector-";

/// Every agent (any signed-in user); connectors' rows are their mounts' business.
pub async fn list(state: &AppState, _who: &Principal) -> Result<Vec<Agent>, AppError> {
    Ok(state
        .store
        .list_agents()
        .await?
        .iter()
        .map(|a| a.to_api())
        .collect())
}

/// One agent by name or id (any signed-in user).
pub async fn get(state: &AppState, _who: &Principal, key: &str) -> Result<Agent, AppError> {
    Ok(by_key(state, key).await?.to_api())
}

async fn by_key(state: &AppState, key: &str) -> Result<AgentRow, AppError> {
    state
        .store
        .agent_by_key(key)
        .await?
        .ok_or_else(|| AppError::not_found(format!("agent {key:?}")))
}

/// Creates an agent (admins only); its token is returned once.
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: CreateAgentRequest,
) -> Result<CreatedAgent, AppError> {
    let r: Result<CreatedAgent, AppError> = async {
        who.require_admin()?;
        register(state, &req.name, &req.config.clone().unwrap_or_default()).await
    }
    .await;
    let target = match &r {
        Ok(c) => audit::Target::new("agent", c.agent.id, &c.agent.name),
        Err(_) => audit::Target::named("agent", &req.name),
    };
    audit::audited(state, who, "agent.create", target, r).await
}

/// Creates an agent on the operator's behalf (`warren up`'s default agent); its token is
/// returned once, stored hashed.
pub async fn register(
    state: &AppState,
    name: &str,
    config: &AgentConfig,
) -> Result<CreatedAgent, AppError> {
    validate_name(name).map_err(|e| AppError::invalid_field("name", e))?;
    if name.starts_with(CONNECTOR_PREFIX) {
        return Err(AppError::invalid_field(
            "name",
            format!("names starting with {CONNECTOR_PREFIX:?} belong to connectors' agent rows"),
        ));
    }
    validate_agent_config(config)?;
    let token = crypto::new_agent_token();
    let agent = state
        .store
        .insert_agent(
            name,
            config,
            &crypto::token_digest(&token),
            state.clock.now_ms(),
        )
        .await
        .map_err(super::error::already_exists(|| {
            format!("an agent named {name:?} already exists")
        }))?;
    Ok(CreatedAgent {
        agent: agent.to_api(),
        token,
    })
}

/// Gives an agent a new token (a lost or leaked one stops working at once); shown once.
pub async fn reset_token(state: &AppState, agent: AgentId) -> Result<String, AppError> {
    let token = crypto::new_agent_token();
    if state
        .store
        .set_agent_token(agent, &crypto::token_digest(&token), state.clock.now_ms())
        .await?
    {
        Ok(token)
    } else {
        Err(AppError::not_found(format!("agent {agent}")))
    }
}

/// Gives an agent a new token (admins only), shown once. The old one stops working: the
/// server refuses it at once, the relays end the agent's GitOps streams at their next poll
/// (and then forget it), and otherwise refuse new connections with it once their cache of
/// accepted tokens (`auth_cache_seconds`, 300 s by default) lets it go.
pub async fn rotate_token(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<CreatedAgent, AppError> {
    let r: Result<CreatedAgent, AppError> = async {
        who.require_admin()?;
        let a = by_key(state, key).await?;
        let token = reset_token(state, a.id).await?;
        tracing::info!(agent = %a.name, by = %who.user.username, "agent token reset");
        Ok(CreatedAgent {
            agent: a.to_api(),
            token,
        })
    }
    .await;
    audit::audited(
        state,
        who,
        "agent.rotate_token",
        audit::Target::named("agent", key),
        r,
    )
    .await
}

/// Deletes an agent (admins only) once it has no workspaces left but gone ones: its token
/// stops working at once (the server refuses its next call), its GitOps sources and
/// prebuilds go with it. A connector's agent goes with its mount instead.
pub async fn delete(state: &AppState, who: &Principal, key: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        let a = by_key(state, key).await?;
        if a.is_connector() {
            return Err(AppError::conflict(
                "agent_is_connector",
                format!(
                    "agent {} is a connector's; it goes with its mount (`warren mount rm`)",
                    a.name
                ),
            ));
        }
        match state.store.delete_agent(a.id).await? {
            None => Err(AppError::not_found(format!("agent {key:?}"))),
            Some(AgentDeletion::HasWorkspaces(n)) => Err(AppError::conflict(
                "agent_has_workspaces",
                format!(
                    "agent {} still has {n} workspace(s); terminate them (`warren ws rm`) and \
                     let the agent remove them first",
                    a.name
                ),
            )),
            Some(AgentDeletion::Deleted) => {
                tracing::info!(agent = %a.name, by = %who.user.username, "agent deleted");
                // Its row is gone: pages showing agents change.
                state.changed();
                Ok(())
            }
        }
    }
    .await;
    audit::audited(
        state,
        who,
        "agent.delete",
        audit::Target::named("agent", key),
        r,
    )
    .await
}

/// Replaces an agent's configuration (admins only) and re-renders its workspaces,
/// restarting those whose objects changed; the agent is signalled.
pub async fn update(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &UpdateAgentRequest,
) -> Result<Agent, AppError> {
    let r: Result<Agent, AppError> = async {
        who.require_admin()?;
        let a = by_key(state, key).await?;
        validate_agent_config(&req.config)?;
        let a = state
            .store
            .update_agent_config(a.id, &req.config, state.clock.now_ms())
            .await?
            .ok_or_else(|| AppError::not_found(format!("agent {key:?}")))?;
        let changed = super::rerender::rerender_agent_workspaces(state, &a).await?;
        if changed > 0 {
            tracing::info!(agent = %a.name, workspaces = changed, "re-rendered workspaces after a configuration change");
        }
        state.signals.notify(a.id);
        Ok(a.to_api())
    }
    .await;
    audit::audited(
        state,
        who,
        "agent.update",
        audit::Target::named("agent", key),
        r,
    )
    .await
}

/// Names of agents and projects: DNS-label-like, 1–63 characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    warren_types::check_name(name)
}

fn check_resource_list(field: &str, l: &ResourceList) -> Result<(), AppError> {
    if let Some(c) = &l.cpu {
        parse_cpu_millis(c).map_err(|e| AppError::invalid_field(&format!("{field}.cpu"), e))?;
    }
    if let Some(m) = &l.memory {
        parse_memory_bytes(m)
            .map_err(|e| AppError::invalid_field(&format!("{field}.memory"), e))?;
    }
    Ok(())
}

/// Checks what serde cannot: value ranges, quantities, host names.
/// The editor's version names its default image tag, and its image and port end up in every
/// workspace's pod: each must be something Kubernetes and the engines accept.
fn check_editor(e: &warren_types::config::EditorConfig) -> Result<(), AppError> {
    let version_ok = !e.version.is_empty()
        && e.version.len() <= 64
        && e.version
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '+' | '_'))
        && e.version.starts_with(|ch: char| ch.is_ascii_alphanumeric());
    if !version_ok {
        return Err(AppError::invalid_field(
            "config.editor.version",
            format!(
                "{:?} is not a version (letters, digits, '.', '-', '+' and '_', up to 64)",
                e.version
            ),
        ));
    }
    if let Some(image) = &e.image {
        if let Some(problem) = image_reference_problem(image) {
            return Err(AppError::invalid_field("config.editor.image", problem));
        }
    }
    if let Some(g) = &e.extensions_gallery {
        let url_ok = (g.starts_with("https://") || g.starts_with("http://"))
            && g.len() <= 2048
            && !g.chars().any(|ch| {
                ch.is_whitespace() || ch.is_control() || matches!(ch, '"' | '\'' | '\\' | '`' | '$')
            });
        if !url_ok {
            return Err(AppError::invalid_field(
                "config.editor.extensions_gallery",
                format!("{g:?} is not an http(s) URL (without spaces, quotes, '$' or '`')"),
            ));
        }
    }
    if e.port < 1024 {
        return Err(AppError::invalid_field(
            "config.editor.port",
            format!(
                "{} is a privileged port, which the workspace's non-root user cannot listen on; use 1024 to 65535",
                e.port
            ),
        ));
    }
    Ok(())
}

/// Why `image` is not an image reference (`[registry/]name[:tag][@digest]`).
fn image_reference_problem(image: &str) -> Option<String> {
    if image.is_empty() || image.len() > 255 {
        return Some("an image reference has 1 to 255 characters".into());
    }
    if image.starts_with(['-', '.', '/', ':', '@']) || image.ends_with(['/', ':', '@']) {
        return Some(format!("{image:?} is not an image reference"));
    }
    if let Some(bad) = image
        .chars()
        .find(|ch| !(ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '_' | '/' | ':' | '@')))
    {
        return Some(format!(
            "{image:?} is not an image reference: {bad:?} cannot appear in one"
        ));
    }
    None
}

pub fn validate_agent_config(c: &AgentConfig) -> Result<(), AppError> {
    super::regions::check_workspace_domain("config.workspace_domain", &c.workspace_domain)?;
    if let Some(r) = &c.region {
        super::regions::check_region("config.region", r)?;
    }
    if c.workspace_scheme != "http" && c.workspace_scheme != "https" {
        return Err(AppError::invalid_field(
            "config.workspace_scheme",
            "must be http or https",
        ));
    }
    c.ports
        .validate()
        .map_err(|e| AppError::invalid_field("config.ports", e))?;
    if c.workspaces_quota < -1 {
        return Err(AppError::invalid_field(
            "config.workspaces_quota",
            "must be -1 (unlimited) or more",
        ));
    }
    if c.workspaces_per_user_quota < -1 {
        return Err(AppError::invalid_field(
            "config.workspaces_per_user_quota",
            "must be -1 (unlimited) or more",
        ));
    }
    if let Some(ns) = &c.shared_namespace {
        validate_name(ns).map_err(|e| AppError::invalid_field("config.shared_namespace", e))?;
        // The agent tells a workspace's own namespace by this form, and deletes it with the
        // workspace: a shared one of the form would be taken for a workspace's.
        if ns.starts_with("warren-ws-") {
            return Err(AppError::invalid_field(
                "config.shared_namespace",
                "warren-ws-<name> is the form of a workspace's own namespace; choose another name",
            ));
        }
    }
    validate_name(&c.network_policy.agent_namespace)
        .map_err(|e| AppError::invalid_field("config.network_policy.agent_namespace", e))?;
    let d = &c.default_resources_per_workspace_container;
    check_resource_list(
        "config.default_resources_per_workspace_container.requests",
        &d.requests,
    )?;
    check_resource_list(
        "config.default_resources_per_workspace_container.limits",
        &d.limits,
    )?;
    if let Some(m) = &c.max_resources_per_workspace {
        check_resource_list("config.max_resources_per_workspace.requests", &m.requests)?;
        check_resource_list("config.max_resources_per_workspace.limits", &m.limits)?;
    }
    parse_memory_bytes(&c.data_volume_size)
        .map_err(|e| AppError::invalid_field("config.data_volume_size", e))?;
    let classes = warren_types::machine::check_classes(
        &c.machine_classes,
        c.default_machine_class.as_deref(),
    );
    if let Some((field, problem)) = classes.into_iter().next() {
        return Err(AppError::invalid_field(&format!("config.{field}"), problem));
    }
    if c.weight_per_user_quota < -1 {
        return Err(AppError::invalid_field(
            "config.weight_per_user_quota",
            "must be -1 (unlimited) or at least 0",
        ));
    }
    // Every workspace object carries these: a key Kubernetes refuses would make every
    // workspace of the agent fail at apply time.
    use warren_devfile::k8s;
    for (k, v) in &c.labels {
        if let Some(p) = k8s::qualified_name_problem(k).or_else(|| k8s::label_value_problem(v)) {
            return Err(AppError::invalid_field(&format!("config.labels.{k}"), p));
        }
    }
    if let Some(p) = k8s::annotations_problem(&c.annotations) {
        return Err(AppError::invalid_field("config.annotations", p));
    }
    check_editor(&c.editor)?;
    for (i, cap) in c.security.allowed_capabilities.iter().enumerate() {
        warren_types::isolation::capability(cap).map_err(|e| {
            AppError::invalid_field(&format!("config.security.allowed_capabilities[{i}]"), e)
        })?;
    }
    for (i, opt) in c.security.allowed_security_options.iter().enumerate() {
        warren_types::isolation::SecurityOption::parse(opt).map_err(|e| {
            AppError::invalid_field(&format!("config.security.allowed_security_options[{i}]"), e)
        })?;
    }
    for (from, to) in &c.image_mirrors {
        let bad =
            |s: &str| s.is_empty() || s.chars().any(|ch| ch.is_whitespace() || ch.is_control());
        if bad(from) || bad(to) {
            return Err(AppError::invalid_field(
                &format!("config.image_mirrors.{from}"),
                "an image reference (or a prefix ending in `/`) and its replacement, neither empty nor with spaces",
            ));
        }
        if from.ends_with('/') != to.ends_with('/') {
            return Err(AppError::invalid_field(
                &format!("config.image_mirrors.{from}"),
                "a prefix (ending in `/`) is replaced by a prefix, a whole reference by a whole reference",
            ));
        }
    }
    for (i, s) in c.image_pull_secrets.iter().enumerate() {
        if let Some(p) = k8s::dns1123_subdomain_problem(&s.name) {
            return Err(AppError::invalid_field(
                &format!("config.image_pull_secrets[{i}].name"),
                p,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_types::config::EditorConfig;

    #[test]
    fn image_mirrors_are_checked_by_name() {
        let with = |from: &str, to: &str| AgentConfig {
            image_mirrors: [(from.to_owned(), to.to_owned())].into(),
            ..AgentConfig::default()
        };
        assert!(validate_agent_config(&with("docker.io/", "mirror.local/hub/")).is_ok());
        assert!(validate_agent_config(&with("quay.io/a@sha256:1", "localhost/a:1")).is_ok());
        for (from, to) in [("docker.io/", "mirror.local"), ("", "x"), ("a b", "c")] {
            let e = validate_agent_config(&with(from, to)).expect_err("refused");
            assert!(
                e.message.contains("config.image_mirrors")
                    || e.field
                        .as_deref()
                        .is_some_and(|f| f.starts_with("config.image_mirrors")),
                "{from} → {to}: {e:?}"
            );
        }
    }

    #[test]
    fn isolation_exceptions_are_checked_by_name() {
        let with = |caps: &[&str], opts: &[&str]| {
            let mut c = AgentConfig::default();
            c.security.allowed_capabilities = caps.iter().map(|s| (*s).to_owned()).collect();
            c.security.allowed_security_options = opts.iter().map(|s| (*s).to_owned()).collect();
            validate_agent_config(&c)
        };
        assert!(with(&["SYS_PTRACE", "cap_net_admin"], &["seccomp=unconfined"]).is_ok());
        for (caps, opts, field) in [
            (
                &["ALL"][..],
                &[][..],
                "config.security.allowed_capabilities[0]",
            ),
            (
                &["SYS_PTRACE", "PTRACE"],
                &[],
                "config.security.allowed_capabilities[1]",
            ),
            (
                &[],
                &["label=disable"],
                "config.security.allowed_security_options[0]",
            ),
        ] {
            let e = with(caps, opts).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
        }
    }

    #[test]
    fn editor_settings_are_checked_by_name() {
        let ok = EditorConfig::default();
        assert!(check_editor(&ok).is_ok());
        let problem = |e: EditorConfig| check_editor(&e).unwrap_err().to_string();
        let bad_version = problem(EditorConfig {
            version: "4.1; rm -rf /".into(),
            ..ok.clone()
        });
        assert!(bad_version.contains("is not a version"), "{bad_version}");
        let bad_image = problem(EditorConfig {
            image: Some("registry.example.com/tools editor".into()),
            ..ok.clone()
        });
        assert!(bad_image.contains("cannot appear"), "{bad_image}");
        let low_port = problem(EditorConfig {
            port: 80,
            ..ok.clone()
        });
        assert!(low_port.contains("privileged port"), "{low_port}");
        let bad_gallery = problem(EditorConfig {
            extensions_gallery: Some("https://gallery.example/$(reboot)".into()),
            ..ok.clone()
        });
        assert!(
            bad_gallery.contains("is not an http(s) URL"),
            "{bad_gallery}"
        );
        assert!(check_editor(&EditorConfig {
            extensions_gallery: Some("https://open-vsx.org/vscode/gallery".into()),
            ..ok.clone()
        })
        .is_ok());
        let mut config = AgentConfig::default();
        config.editor.port = 0;
        let e = validate_agent_config(&config).unwrap_err();
        assert!(e.to_string().contains("port"), "{e}");
    }
}
