//! Everything the server does with devfiles and rendered objects; the only module that
//! uses `warren-devfile`.

use super::{AppError, ErrorKind};
use crate::store::agents::AgentRow;
use crate::store::workspaces::{RenderedObjects, StoredVariable};
use serde_json::Value;
use warren_devfile::{Devfile, ProjectSource, RenderRequest, ResolvedVariable};
use warren_types::api::WorkspaceResources;
use warren_types::machine::MachineClass;
use warren_types::reconcile::CONFIG_GENERATION_ANNOTATION;
use warren_types::{error_chain, DesiredState, WorkspaceId};

/// The YAML the agent applies for replicas 1 and for replicas 0, rendered once when the
/// objects are stored so reconciles only decrypt, each Deployment annotated with `generation`
/// ([`CONFIG_GENERATION_ANNOTATION`]). Only here: the stored objects stay without it, so
/// comparing two renderings still compares what they ask of the runtime.
fn configs(objects: &[Value], generation: &str) -> (String, String) {
    let mut objects = objects.to_vec();
    for o in objects.iter_mut() {
        if o.get("kind").and_then(Value::as_str) != Some("Deployment") {
            continue;
        }
        if !o["metadata"]["annotations"].is_object() {
            o["metadata"]["annotations"] = Value::Object(Default::default());
        }
        o["metadata"]["annotations"][CONFIG_GENERATION_ANNOTATION] = Value::from(generation);
    }
    warren_devfile::set_replicas(&mut objects, 1);
    let running = warren_devfile::objects_to_yaml(&objects);
    warren_devfile::set_replicas(&mut objects, 0);
    let stopped = warren_devfile::objects_to_yaml(&objects);
    (running, stopped)
}

/// The largest parent devfile or registry index fetched.
pub const MAX_FETCHED_BYTES: usize = warren_devfile::MAX_DEVFILE_BYTES;

struct Fetch<'a>(&'a crate::devfile_fetch::DevfileFetcher);

impl warren_devfile::parent::ParentFetcher for Fetch<'_> {
    async fn fetch(&self, url: &str) -> Result<String, String> {
        self.0.fetch(url).await.map(|t| t.to_string())
    }
}

/// `text` with its `parent` (if any) fetched and merged in: what is stored with a workspace,
/// so later renders need no registry. Errors name `field`.
pub async fn resolve_parent(
    fetcher: &crate::devfile_fetch::DevfileFetcher,
    text: &str,
    field: &str,
) -> Result<String, AppError> {
    if text.len() > warren_devfile::MAX_DEVFILE_BYTES {
        // `parse` names the problem.
        return Ok(text.to_owned());
    }
    match warren_devfile::parent::resolve(text, &fetcher.registries, &Fetch(fetcher)).await {
        Ok(r) => Ok(r.text),
        Err(errs) => {
            let list = errs
                .0
                .iter()
                .map(|e| format!("  {e}"))
                .collect::<Vec<_>>()
                .join("\n");
            Err(AppError::new(
                ErrorKind::Unprocessable,
                "invalid_devfile",
                format!("{field} has {} error(s):\n{list}", errs.0.len()),
            )
            .with_field(field))
        }
    }
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
    /// A prebuild's own workspace (`app::prebuilds`).
    pub prebuild: bool,
    /// The prebuild its volumes start from.
    pub seed: Option<warren_types::prebuild::Seed<'a>>,
}

/// The code of a refusal because the workspace asks for a capability or a security option its
/// agent's admin does not allow.
pub const NOT_ALLOWED_BY_AGENT: &str = "not_allowed_by_agent";

/// A renderer's refusal as the API says it.
pub fn render_error(e: warren_devfile::RenderError) -> AppError {
    let code = match e {
        warren_devfile::RenderError::NotAllowed { .. } => NOT_ALLOWED_BY_AGENT,
        _ => "render_failed",
    };
    AppError::new(ErrorKind::Unprocessable, code, error_chain(&e))
}

/// The code of a refusal because a workspace's machine class is not (or no longer) one
/// its agent offers.
pub const NO_SUCH_CLASS: &str = "no_such_machine_class";

/// The machine class `resources` names, among those `agent` offers.
pub fn machine_class<'a>(
    agent: &'a AgentRow,
    resources: &WorkspaceResources,
) -> Result<Option<&'a MachineClass>, AppError> {
    let Some(name) = &resources.class else {
        return Ok(None);
    };
    match agent.config.machine_class(name) {
        Some(c) => Ok(Some(c)),
        None => Err(AppError::new(
            ErrorKind::Unprocessable,
            NO_SUCH_CLASS,
            format!(
                "resources.class: agent {} offers no machine class {name:?}; {}",
                agent.name,
                offered(&agent.config)
            ),
        )
        .with_field("resources.class")),
    }
}

/// What an agent offers, said for a refusal.
pub fn offered(cfg: &warren_types::config::AgentConfig) -> String {
    if cfg.machine_classes.is_empty() {
        "it has none (give --cpu and --memory instead)".into()
    } else {
        let names: Vec<&str> = cfg
            .machine_classes
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        format!("it offers {}", names.join(", "))
    }
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
    let machine = machine_class(input.agent, input.resources)?;
    let sized;
    let resources = match machine {
        Some(m) => {
            sized = WorkspaceResources {
                class: None,
                cpu: m.cpu.clone(),
                memory: m.memory.clone(),
            };
            &sized
        }
        None => input.resources,
    };
    let has_resources = resources.cpu.is_some() || resources.memory.is_some();
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
        resources: has_resources.then_some(resources),
        machine,
        variables: &variables,
        desired_state: input.desired,
        dotfiles_url: input.dotfiles_url,
        starter: input.starter,
        prebuild: input.prebuild,
        seed: input.seed,
    };
    let rendered = warren_devfile::render(devfile, &req).map_err(render_error)?;
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
    // Random, not a digest of the objects: it says which rendering an agent applied, and
    // stored in clear beside the sealed objects it must reveal nothing about them.
    let config_generation = crate::crypto::random_secret(12);
    let (config_running, config_stopped) = configs(&rendered.objects, &config_generation);
    Ok(RenderedObjects {
        namespace: rendered.namespace,
        objects: rendered.objects,
        endpoints,
        url,
        config_running,
        config_stopped,
        config_generation,
    })
}

/// Sets every Deployment's replicas to 0, so two object sets compare without desired state.
pub fn normalise_replicas(objects: &mut [Value]) {
    warren_devfile::set_replicas(objects, 0);
}

fn image_target(im: &warren_devfile::ImageComponent) -> ApplyTarget {
    match im.build_paths() {
        Ok((context, dockerfile)) => ApplyTarget::Image {
            image_name: im.image_name.clone(),
            context,
            dockerfile,
            args: im.args.clone(),
            target: im.target.clone(),
        },
        Err(why) => ApplyTarget::Unavailable { why },
    }
}

/// Most bytes of an inlined manifest sent along with the command (the relay's exec request
/// is bounded; larger manifests belong in a file of the project).
const MAX_INLINE_MANIFEST: usize = 12 << 10;

fn manifest_target(m: &warren_devfile::ManifestComponent) -> ApplyTarget {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let script = match &m.source {
        warren_devfile::ManifestSource::Inlined(text) if text.len() > MAX_INLINE_MANIFEST => {
            return ApplyTarget::Unavailable {
                why: format!(
                    "component {}: the inlined manifest is {} KiB; above {} KiB keep it in a file of the project and name it with `uri`",
                    m.name,
                    text.len() >> 10,
                    MAX_INLINE_MANIFEST >> 10
                ),
            }
        }
        warren_devfile::ManifestSource::Inlined(text) => format!("printf '%s' {}", quote(text)),
        warren_devfile::ManifestSource::Uri(u) if u.starts_with("http://") || u.starts_with("https://") => {
            format!(
                "if command -v curl >/dev/null; then exec curl -fsSL {u}; else exec wget -qO- {u}; fi",
                u = quote(u)
            )
        }
        warren_devfile::ManifestSource::Uri(u) => format!(
            "cd \"$PROJECT_SOURCE\" && exec cat -- {}",
            quote(&warren_devfile::under_sources(u))
        ),
    };
    ApplyTarget::Manifest {
        kind: m.kind.clone(),
        script,
    }
}

/// A devfile command as the server runs it on demand (`warren ws run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandPlan {
    /// `/bin/sh -c script` in the container `component`.
    Exec {
        id: String,
        component: String,
        script: String,
    },
    Apply {
        id: String,
        component: String,
        target: ApplyTarget,
    },
    /// A composite: its commands one after another (stopping at the first failure), or all
    /// at once.
    Group {
        id: String,
        parallel: bool,
        steps: Vec<CommandPlan>,
    },
}

/// What an apply command acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyTarget {
    /// A container component: it runs with the workspace already.
    Container,
    /// An image component to build: the main container archives `context` (a directory of
    /// the project's sources), the agent builds from it with `dockerfile` (a path inside it).
    Image {
        image_name: String,
        context: String,
        dockerfile: String,
        args: Vec<String>,
        target: Option<String>,
    },
    /// Something Warren cannot do for this component, and why.
    Unavailable { why: String },
    /// A kubernetes or openshift component to apply: `script` writes its manifest (in the
    /// main container, which has the sources).
    Manifest { kind: String, script: String },
}

/// The commands of a workspace's devfile, for its owner to see (`warren ws show`).
pub fn commands(devfile_text: &str) -> Vec<warren_types::api::WorkspaceCommand> {
    use warren_devfile::CommandAction;
    let Ok(d) = warren_devfile::parse_devfile(devfile_text) else {
        return vec![];
    };
    d.commands
        .iter()
        .map(|c| {
            let summary = match &c.action {
                CommandAction::Exec {
                    component,
                    command_line,
                    ..
                } => {
                    let line = command_line.trim();
                    let first = line.lines().next().unwrap_or_default();
                    let mut shown: String = first.chars().take(60).collect();
                    if shown.len() < line.len() {
                        shown.push('…');
                    }
                    format!("{shown} (in {component})")
                }
                CommandAction::Apply { component } => {
                    if let Some(im) = d.images.iter().find(|i| &i.name == component) {
                        format!("build image {} ({component})", im.image_name)
                    } else if let Some(m) = d.manifests.iter().find(|m| &m.name == component) {
                        format!("apply {} component {component}", m.kind)
                    } else {
                        format!("start container {component}")
                    }
                }
                CommandAction::Composite { commands, parallel } => {
                    if *parallel {
                        format!("{} (in parallel)", commands.join(" | "))
                    } else {
                        commands.join(" + ")
                    }
                }
            };
            warren_types::api::WorkspaceCommand {
                id: c.id.clone(),
                kind: c.kind().into(),
                label: c.label.clone(),
                group: c.group.clone(),
                summary,
                at_start: d.pre_start.contains(&c.id) || d.post_start.contains(&c.id),
            }
        })
        .collect()
}

/// The plan of command `id` of a workspace's devfile; unknown ids name the ones there are.
pub fn command_plan(
    devfile_text: &str,
    workspace: &str,
    id: &str,
) -> Result<CommandPlan, AppError> {
    let d = parse(devfile_text, "devfile")?;
    if d.command(id).is_none() {
        let ids: Vec<&str> = d.commands.iter().map(|c| c.id.as_str()).collect();
        return Err(AppError::new(
            ErrorKind::NotFound,
            "not_found",
            format!(
                "the devfile of workspace {workspace} has no command {id:?} ({})",
                if ids.is_empty() {
                    "it has no commands".to_owned()
                } else {
                    format!("its commands: {}", ids.join(", "))
                }
            ),
        ));
    }
    Ok(plan_of(&d, id, 0))
}

fn plan_of(d: &Devfile, id: &str, depth: usize) -> CommandPlan {
    use warren_devfile::CommandAction;
    let Some(c) = d.command(id) else {
        // Parsing checked every reference; an empty group is all that is left to do.
        return CommandPlan::Group {
            id: id.into(),
            parallel: false,
            steps: vec![],
        };
    };
    match &c.action {
        CommandAction::Exec {
            component,
            command_line,
            working_dir,
            env,
        } => CommandPlan::Exec {
            id: id.into(),
            component: component.clone(),
            script: warren_devfile::exec_command_script(command_line, working_dir.as_deref(), env),
        },
        CommandAction::Apply { component } => CommandPlan::Apply {
            id: id.into(),
            component: component.clone(),
            target: if let Some(im) = d.images.iter().find(|i| &i.name == component) {
                image_target(im)
            } else if let Some(m) = d.manifests.iter().find(|m| &m.name == component) {
                manifest_target(m)
            } else {
                ApplyTarget::Container
            },
        },
        CommandAction::Composite { commands, parallel } => CommandPlan::Group {
            id: id.into(),
            parallel: *parallel,
            steps: if depth >= warren_devfile::MAX_COMPOSITE_DEPTH {
                vec![]
            } else {
                commands.iter().map(|c| plan_of(d, c, depth + 1)).collect()
            },
        },
    }
}
