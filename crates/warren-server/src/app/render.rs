//! Everything the server does with devfiles and rendered objects; the only module that
//! uses `warren-devfile`.

use super::{AppError, ErrorKind};
use crate::store::agents::AgentRow;
use crate::store::workspaces::{RenderedObjects, StoredVariable};
use serde_json::Value;
use warren_devfile::{Devfile, ProjectSource, RenderRequest, ResolvedVariable};
use warren_types::api::WorkspaceResources;
use warren_types::{error_chain, DesiredState, WorkspaceId};

/// The YAML the agent applies for replicas 1 and for replicas 0, rendered once when the
/// objects are stored so reconciles only decrypt.
fn configs(objects: &[Value]) -> (String, String) {
    let mut objects = objects.to_vec();
    warren_devfile::set_replicas(&mut objects, 1);
    let running = warren_devfile::objects_to_yaml(&objects);
    warren_devfile::set_replicas(&mut objects, 0);
    let stopped = warren_devfile::objects_to_yaml(&objects);
    (running, stopped)
}

/// The server's built-in default devfile.
pub fn builtin_default_devfile() -> &'static str {
    warren_devfile::default_devfile()
}

/// Parses a devfile; every error comes back with its path.
pub fn parse(text: &str, field: &str) -> Result<Devfile, AppError> {
    if text.len() > warren_devfile::MAX_DEVFILE_BYTES {
        return Err(AppError::new(
            ErrorKind::Unprocessable,
            "invalid_devfile",
            format!(
                "{field}: larger than the limit of {} KiB",
                warren_devfile::MAX_DEVFILE_BYTES >> 10
            ),
        )
        .with_field(field));
    }
    warren_devfile::parse_devfile(text).map_err(|errs| {
        let list = errs
            .0
            .iter()
            .map(|e| format!("  {e}"))
            .collect::<Vec<_>>()
            .join("\n");
        AppError::new(
            ErrorKind::Unprocessable,
            "invalid_devfile",
            format!("{field} has {} error(s):\n{list}", errs.0.len()),
        )
        .with_field(field)
    })
}

/// What the owner should know of what Warren did with a workspace's devfile (its notices,
/// and a starter project left unused because the workspace clones its own project).
pub fn notices(devfile_text: &str, has_project: bool, starter: Option<&str>) -> Vec<String> {
    let Ok(d) = warren_devfile::parse_devfile(devfile_text) else {
        return vec![];
    };
    let mut out: Vec<String> = d.notices.iter().map(ToString::to_string).collect();
    if has_project && !d.starter_projects.is_empty() {
        out.push(
            "starterProjects: not used: the workspace clones its project's repository instead"
                .into(),
        );
    } else if d.starter_projects.len() > 1 {
        let used = starter
            .and_then(|n| d.starter_projects.iter().find(|p| p.name == n))
            .unwrap_or(&d.starter_projects[0]);
        out.push(format!(
            "starterProjects: {:?} was cloned (choose another with `starter` at creation); the others are not used",
            used.name
        ));
    }
    out
}

/// The project a workspace clones.
#[derive(Debug, Clone, Copy)]
pub struct ProjectInput<'a> {
    pub name: &'a str,
    pub git_url: &'a str,
    pub git_ref: &'a str,
    pub credential: Option<&'a warren_types::git::GitCredential>,
}

/// Everything a render needs besides the devfile.
#[derive(Debug, Clone, Copy)]
pub struct RenderInput<'a> {
    pub name: &'a str,
    pub id: WorkspaceId,
    pub agent: &'a AgentRow,
    pub project: Option<ProjectInput<'a>>,
    pub resources: &'a WorkspaceResources,
    pub variables: &'a [StoredVariable],
    pub desired: DesiredState,
    /// The owner's dotfiles repository.
    pub dotfiles_url: Option<&'a str>,
    /// The starter project chosen at creation (the devfile's first when `None`).
    pub starter: Option<&'a str>,
}

/// Renders a workspace's objects and computes its URLs; a refusal says why.
pub fn render_workspace(
    devfile: &Devfile,
    input: RenderInput<'_>,
) -> Result<RenderedObjects, AppError> {
    let variables: Vec<ResolvedVariable> = input
        .variables
        .iter()
        .map(|v| ResolvedVariable {
            key: v.key.clone(),
            value: v.value.clone(),
            kind: v.kind,
        })
        .collect();
    let has_resources = input.resources.cpu.is_some() || input.resources.memory.is_some();
    let req = RenderRequest {
        workspace_name: input.name,
        workspace_id: input.id,
        agent_id: input.agent.id,
        agent_config: &input.agent.config,
        project: input.project.map(|p| ProjectSource {
            name: p.name,
            git_url: p.git_url,
            git_ref: p.git_ref,
            credential: p.credential,
        }),
        resources: has_resources.then_some(input.resources),
        variables: &variables,
        desired_state: input.desired,
        dotfiles_url: input.dotfiles_url,
        starter: input.starter,
    };
    let rendered = warren_devfile::render(devfile, &req)
        .map_err(|e| AppError::new(ErrorKind::Unprocessable, "render_failed", error_chain(&e)))?;
    let cfg = &input.agent.config;
    let url_of = |port: u16, path: &Option<String>| {
        let path = path.as_deref().unwrap_or("").trim_start_matches('/');
        format!(
            "{}://{port}-{}.{}/{path}",
            cfg.workspace_scheme, input.name, cfg.workspace_domain
        )
    };
    // Only public endpoints are reachable from outside (devfile `exposure` semantics).
    let reachable: Vec<_> = rendered
        .endpoints
        .iter()
        .filter(|e| e.exposure == "public")
        .collect();
    let endpoints = reachable
        .iter()
        .map(|e| (e.name.clone(), url_of(e.port, &e.path)))
        .collect();
    let url = reachable
        .iter()
        .find(|e| e.main)
        .or_else(|| reachable.first())
        .map(|e| url_of(e.port, &e.path));
    let (config_running, config_stopped) = configs(&rendered.objects);
    Ok(RenderedObjects {
        namespace: rendered.namespace,
        objects: rendered.objects,
        endpoints,
        url,
        config_running,
        config_stopped,
    })
}

/// Sets every Deployment's replicas to 0, so two object sets compare without desired state.
pub fn normalise_replicas(objects: &mut [Value]) {
    warren_devfile::set_replicas(objects, 0);
}
