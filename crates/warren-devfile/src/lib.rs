//! warren-devfile: parses and validates devfiles (2.0–2.3) and renders a workspace's objects.
//!
//! The pipeline is `parse_devfile` (text → validated [`Devfile`], every problem reported with
//! the path of the offending value) → [`render`] (devfile + agent configuration + request →
//! [`Rendered`], the Kubernetes objects as JSON) → [`objects_to_yaml`] (what agents apply).
//!
//! Parsing happens in stages so the errors are precise and the JSON schema stays the oracle:
//!
//! 1. size cap ([`MAX_DEVFILE_BYTES`]) and YAML/JSON syntax;
//! 2. *structure* ([`check_structure`]): exactly what the official devfile JSON schema checks
//!    (types, required fields, unknown keys, enums, name patterns, one-of choices);
//! 3. `{{variable}}` substitution from the devfile's `variables`;
//! 4. features Warren cannot honour, refused by name ("… is not supported by Warren");
//! 5. semantics (unique names, references, ports, quantities, the main container).
//!
//! See [`render`] for how the startup scripts keep the main container alive.

pub mod diff;
pub mod k8s;
mod model;
pub mod parent;
mod parse;
mod render;
mod yaml;

pub use model::{
    under_sources, Command, CommandAction, Container, Devfile, DevfileEndpoint, DevfileProject,
    EditorCustomizations, EnvVar, Exposure, Healthcheck, ImageComponent, IsolationExceptions,
    ManifestComponent, ManifestSource, Notice, ProjectOrigin, Protocol, Volume, VolumeMount,
    MAX_COMPOSITE_DEPTH,
};
pub use parse::check_structure;
pub use render::{
    check_rendered_isolation, exec_command_script, protected_egress, render, Endpoint,
    ProjectSource, RenderError, RenderRequest, Rendered, ResolvedVariable, FILES_MOUNT_PATH,
    PROTECTED_EGRESS, SCRIPTS_MOUNT_PATH,
};
pub use yaml::{is_static_object, objects_to_yaml, set_replicas};

use serde::Serialize;
use std::fmt;

/// The top-level attribute of a devfile made from a dev container configuration (by
/// `warren-devcontainer`): `{"path": <the configuration's path>, "notices": [{"path", "message"}]}`,
/// so the workspace shows what Warren did with that configuration as it shows a devfile's notices.
pub const DEVCONTAINER_ATTRIBUTE: &str = "warren.dev/devcontainer";

/// Attribute of an `image` component: the Dockerfile stage to build (`docker build
/// --target`), which the devfile schema has no field for. A dev container's `build.target`
/// travels in it.
pub const BUILD_TARGET_ATTRIBUTE: &str = "warren.dev/build-target";

/// Top-level attribute: a list of names that resolve to the workspace's pod (Kubernetes'
/// `hostAliases` for 127.0.0.1), so its containers reach one another by name. A Compose dev
/// container's service names travel in it.
pub const HOST_ALIASES_ATTRIBUTE: &str = "warren.dev/host-aliases";

/// Attribute of a container component: a [`Healthcheck`]; the containers after it
/// start once it passes (a Compose `depends_on` with `condition: service_healthy`).
pub const HEALTHCHECK_ATTRIBUTE: &str = "warren.dev/healthcheck";

/// Attribute of a container component: an [`IsolationExceptions`], what the container asks
/// beyond the confinement every workspace container gets (a dev container's `capAdd` and
/// `securityOpt` travel in it). The workspace is refused unless its agent's admin allows each
/// value (`security.allowed_capabilities`, `security.allowed_security_options`).
pub const ISOLATION_ATTRIBUTE: &str = "warren.dev/isolation";

/// Top-level attribute: an [`EditorCustomizations`] for the injected editor (a dev
/// container's `customizations.vscode` travels in it).
pub const EDITOR_ATTRIBUTE: &str = "warren.dev/editor";

/// Top-level attribute: the ids of exec commands of the main container to run whenever a
/// session attaches to the workspace (a terminal or SSH shell opened, the editor started),
/// each time, in order, their output in the workspace's `post-attach` log. A dev container's
/// `postAttachCommand` travels in it.
pub const POST_ATTACH_ATTRIBUTE: &str = "warren.dev/post-attach";

/// Top-level attribute: when the workspace is usable, for `--wait` and the startup status:
/// once the `postStart` exec command of the main container with this id ran, or, given `""`,
/// once the sources are in place; the later commands go on in the background. Without it, once
/// every command ran. A dev container's `waitFor` travels in it.
pub const WAIT_FOR_ATTRIBUTE: &str = "warren.dev/wait-for";

/// Top-level attribute: the ids of `postStart` exec commands a prebuild runs (after the
/// clone, in `postStart`'s order; the others wait for a workspace). A workspace started from
/// that prebuild's volume fetches the commits since and does not run these again at its first
/// start; later starts run them as any workspace's. A dev container's `onCreateCommand` and
/// `updateContentCommand` travel in it.
pub const PREBUILD_ATTRIBUTE: &str = "warren.dev/prebuild";

/// Top-level attribute: a [`warren_types::host_requirements::HostRequirements`] (`cpus`,
/// `memory`, `storage`, `gpu`: `no`, `optional` or `required`), the least the workspace's
/// machine must have; on an agent with machine classes it picks the class a workspace gets
/// when its creator names none. A dev container's `hostRequirements` travels in it.
pub const HOST_REQUIREMENTS_ATTRIBUTE: &str = "warren.dev/host-requirements";

pub use warren_types::config::POST_ATTACH_SCRIPT;

/// Devfiles larger than this are refused before any parsing. Published devfiles are a few
/// KiB; the cap bounds what one request can make the server parse and hold.
pub const MAX_DEVFILE_BYTES: usize = 1024 * 1024;

/// Most environment variables one container or command may set.
pub const MAX_ENV_VARS: usize = 1000;
/// Most bytes of one variable (`NAME=value`): Linux refuses a longer string in a new
/// process's environment (`MAX_ARG_STRLEN`, 128 KiB).
pub const MAX_ENV_VAR_BYTES: usize = 128 * 1024;
/// Most bytes of one container's or command's variables together: the environment and the
/// arguments of a new process share a budget (`ARG_MAX`), and Warren's start script needs
/// its part.
pub const MAX_ENV_BYTES: usize = 256 * 1024;

/// One problem in a devfile, with the path of the offending value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DevfileError {
    /// Like `components[1].container.memoryLimit`; empty for the document as a whole.
    pub path: String,
    pub message: String,
}

impl DevfileError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        DevfileError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// True when this error refuses a devfile feature Warren cannot honour (as opposed to a
    /// devfile that is malformed or inconsistent).
    pub fn is_unsupported(&self) -> bool {
        self.message.contains(UNSUPPORTED_MARKER)
    }
}

/// Every unsupported-feature message contains this phrase (see [`DevfileError::is_unsupported`]).
pub(crate) const UNSUPPORTED_MARKER: &str = "not supported by Warren";

impl fmt::Display for DevfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// All the problems found in a devfile; `Display` prints one `path: message` per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct DevfileErrors(pub Vec<DevfileError>);

impl fmt::Display for DevfileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Parses and validates a devfile (YAML or JSON text). All errors found, each with a path.
pub fn parse_devfile(text: &str) -> Result<Devfile, DevfileErrors> {
    parse::parse(text)
}

const DEFAULT_DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: default
  displayName: Warren default workspace
  description: One universal developer container with the project in /projects.
components:
  - name: dev
    attributes:
      warren.dev/main: true
    container:
      image: quay.io/devfile/universal-developer-image:ubi9-latest
      memoryRequest: 512Mi
      memoryLimit: 4Gi
      cpuRequest: 500m
      cpuLimit: "2"
      mountSources: true
"#;

/// The server's built-in default devfile: one universal developer container (it has `git` and
/// `/bin/sh`, which the startup script needs) with the project in `/projects`.
pub fn default_devfile() -> &'static str {
    DEFAULT_DEVFILE
}

/// Renders a devfile outside any real workspace, for `warren devfile render FILE [--name NAME]
/// [--agent-config FILE]`: workspace and agent ids 0, no project to clone, desired `Running`.
pub fn render_preview(
    devfile: &Devfile,
    workspace_name: &str,
    agent_config: &warren_types::config::AgentConfig,
) -> Result<Rendered, RenderError> {
    render(
        devfile,
        &RenderRequest {
            workspace_name,
            workspace_id: warren_types::WorkspaceId(0),
            agent_id: warren_types::AgentId(0),
            agent_config,
            project: None,
            resources: None,
            machine: None,
            variables: &[],
            desired_state: warren_types::DesiredState::Running,
            dotfiles_url: None,
            starter: None,
            prebuild: false,
            seed: None,
        },
    )
}

/// A short human summary of a valid devfile, for `warren devfile validate`.
pub fn summary(devfile: &Devfile) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "schemaVersion: {}", devfile.schema_version);
    if let Some(name) = &devfile.metadata_name {
        let _ = writeln!(s, "name: {name}");
    }
    let names = |cs: &mut dyn Iterator<Item = &Container>| -> String {
        or_none(&cs.map(|c| c.name.clone()).collect::<Vec<_>>())
    };
    let _ = writeln!(
        s,
        "containers: {}",
        names(&mut devfile.containers.iter().filter(|c| !c.init_only))
    );
    let _ = writeln!(s, "main container: {}", devfile.main_container().name);
    let init: Vec<&Container> = devfile.containers.iter().filter(|c| c.init_only).collect();
    if !init.is_empty() {
        let _ = writeln!(s, "init-only containers: {}", names(&mut init.into_iter()));
    }
    let eps: Vec<String> = devfile
        .containers
        .iter()
        .flat_map(|c| {
            c.endpoints.iter().map(move |e| {
                format!(
                    "{} ({}/{} in {}, {})",
                    e.name,
                    e.target_port,
                    e.protocol.as_str(),
                    c.name,
                    e.exposure.as_str()
                )
            })
        })
        .collect();
    let _ = writeln!(s, "endpoints: {}", or_none(&eps));
    let vols: Vec<String> = devfile
        .volumes
        .iter()
        .map(|v| {
            let mut d = v.name.clone();
            if let Some(size) = &v.size {
                d.push_str(&format!(" {size}"));
            }
            if v.ephemeral {
                d.push_str(" (ephemeral)");
            }
            d
        })
        .collect();
    let _ = writeln!(s, "volumes: {}", or_none(&vols));
    let built: Vec<String> = devfile
        .images
        .iter()
        .filter(|i| i.auto_build)
        .map(|i| {
            let base = match i.features.as_ref().and_then(|f| f.base_image.as_ref()) {
                Some(base) => format!("on {base}"),
                None => format!("from {}, context {}", i.dockerfile, i.build_context),
            };
            let features: Vec<String> = i
                .features
                .iter()
                .flat_map(|f| &f.features)
                .map(|f| f.source.to_string())
                .collect();
            if features.is_empty() {
                format!("{} ({base})", i.image_name)
            } else {
                format!(
                    "{} ({base}, with the Features {})",
                    i.image_name,
                    features.join(", ")
                )
            }
        })
        .collect();
    if !built.is_empty() {
        let _ = writeln!(s, "built when the workspace starts: {}", built.join(", "));
    }
    // Images built for root are the usual surprise: say who the containers run as.
    let security = warren_types::config::SecurityConfig::default();
    let _ = writeln!(
        s,
        "runs as: uid {}, gid {} (the agent's default; not root, whatever the image says), so \
         files the image creates must be writable by group {} (chgrp -R {} DIR && chmod -R g=u DIR)",
        security.run_as_user, security.run_as_group, security.run_as_group, security.run_as_group
    );
    let cmds: Vec<String> = devfile
        .commands
        .iter()
        .map(|c| match &c.action {
            CommandAction::Exec { component, .. } => format!("{} (exec in {component})", c.id),
            CommandAction::Apply { component } => format!("{} (apply {component})", c.id),
            CommandAction::Composite { commands, parallel } => format!(
                "{} ({}: {})",
                c.id,
                if *parallel { "parallel" } else { "composite" },
                commands.join(" + ")
            ),
        })
        .collect();
    let _ = writeln!(s, "commands: {}", or_none(&cmds));
    for im in &devfile.images {
        let _ = writeln!(
            s,
            "image {}: {} built from {} in {} (on demand)",
            im.name, im.image_name, im.dockerfile, im.build_context
        );
    }
    for m in &devfile.manifests {
        let from = match &m.source {
            ManifestSource::Inlined(_) => "inlined objects".to_owned(),
            ManifestSource::Uri(u) => u.clone(),
        };
        let _ = writeln!(s, "{} {}: {from} (applied on demand)", m.kind, m.name);
    }
    if !devfile.pre_start.is_empty() {
        let _ = writeln!(s, "preStart: {}", devfile.pre_start.join(", "));
    }
    if !devfile.post_start.is_empty() {
        let _ = writeln!(s, "postStart: {}", devfile.post_start.join(", "));
    }
    write_projects(&mut s, devfile);
    for n in &devfile.notices {
        let _ = writeln!(s, "notice: {n}");
    }
    s
}

/// A list for a summary line: its items, or `none`.
fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// The summary's lines of the projects fetched at the first start and the starter project.
fn write_projects(s: &mut String, devfile: &Devfile) {
    use std::fmt::Write;
    let origin = |p: &DevfileProject| match &p.origin {
        ProjectOrigin::Git { url, revision } => match revision {
            Some(r) => format!("{} from {url} at {r}", p.clone_path),
            None => format!("{} from {url}", p.clone_path),
        },
        ProjectOrigin::Zip { location } => format!("{} from {location} (zip)", p.clone_path),
    };
    if !devfile.projects.is_empty() {
        let list: Vec<String> = devfile.projects.iter().map(origin).collect();
        let _ = writeln!(
            s,
            "projects (fetched at the first start): {}",
            list.join(", ")
        );
    }
    if let Some(first) = devfile.starter_projects.first() {
        let _ = writeln!(
            s,
            "starter project (cloned when the workspace has no project repository): {}{}",
            origin(first),
            first
                .sub_dir
                .as_ref()
                .map(|d| format!(", keeping {d}"))
                .unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display_one_per_line() {
        let e = DevfileErrors(vec![
            DevfileError::new("components[1].container.memoryLimit", "expected a string"),
            DevfileError::new("", "the devfile is empty"),
        ]);
        assert_eq!(
            e.to_string(),
            "components[1].container.memoryLimit: expected a string\nthe devfile is empty"
        );
    }

    #[test]
    fn preview_renders_the_default_devfile() {
        let d = parse_devfile(default_devfile()).expect("default devfile is valid");
        let config = warren_types::config::AgentConfig::default();
        let r = render_preview(&d, "preview", &config).expect("renders");
        assert_eq!(r.namespace, "warren-ws-preview");
        assert!(objects_to_yaml(&r.objects).contains("kind: Deployment"));
        assert!(render_preview(&d, "Bad Name", &config).is_err());
    }
}
