//! A validated devfile + agent configuration + request → the workspace's Kubernetes objects.
//!
//! Objects (desired-config.md): ServiceAccount, Secret `<name>-env`, Secret `<name>-files`,
//! ConfigMap `<name>-scripts`, PVCs (`<name>-warren-data`, then one per persistent devfile
//! volume), Service, NetworkPolicy (when enabled), ResourceQuota (when capped and not in a
//! shared namespace), Deployment — always in that order, so equal input gives equal output.
//!
//! # How containers start
//!
//! Warren's startup work (clone the project, then the devfile's `postStart` commands) runs
//! *inside* the main container, as a background step of a wrapper script, like a Kubernetes
//! `postStart` hook but with nothing the container engine runtime cannot do (Podman has no
//! hooks): the main container (and any container that has `postStart` commands) runs
//! `/bin/sh /warren/scripts/start-<container>.sh [command…]`. The script starts the startup
//! work in the background, logging to `$PROJECTS_ROOT/.warren/logs/<container>.log`, then
//! `exec`s the devfile's `command` + `args`, or, when the devfile gives neither, keeps the
//! container alive with a `sleep` loop that ends on SIGTERM. Only `/bin/sh` is needed (and
//! `git` for the clone; a missing `git` is logged, not fatal).
//!
//! A devfile that gives `args` but no `command` relies on the image's entrypoint, which Warren
//! cannot know; for *wrapped* containers those `args` are run as the command (the common
//! devfile idiom `args: [tail, -f, /dev/null]` keeps working). Containers that are not wrapped
//! keep the image's entrypoint and their `command`/`args` exactly as written.
//!
//! The clone is shallow (`--depth 1`, the requested ref), goes to a temporary directory that
//! is renamed into `/projects/<project>` only when complete (a restart retries cleanly; an
//! existing checkout is never touched), then is unshallowed in the background. Sidecars with
//! `postStart` commands wait (up to 10 minutes) for the clone before running theirs.
//! `preStart` commands run as init containers, before the clone (so their default working
//! directory is `$PROJECTS_ROOT`, not the not-yet-cloned project): an `exec` command in the
//! image of its component, an `apply` command as the applied container itself (which then
//! runs only as an init container).
//!
//! The project's git URL and ref travel in the `<name>-env` Secret, never in the ConfigMap.
//!
//! # A home that persists
//!
//! Wrapped containers that mount the sources get `HOME=<sources>/.home` ([`HOME_DIR`]), on the
//! workspace volume: shell history, dotfiles and editor state survive stops and restarts. The
//! wrapper creates it on first start, before the container's command runs, seeded with a copy
//! of the image's home (the user's `/etc/passwd` entry); a devfile that sets `HOME` itself
//! keeps its own. The owner's dotfiles repository, if they set one, is cloned into
//! `~/.dotfiles` at first start and its install script run (or its dotfiles linked), in the
//! background and logged; a failure there never stops the workspace.

mod editor;
mod names;
mod network;
mod objects;
mod pod;
mod resources;
mod scripts;
mod variables;

pub(crate) use names::object_name;
use names::*;
use network::network_policy;
pub use network::{protected_egress, PROTECTED as PROTECTED_EGRESS};
pub use pod::check_rendered_isolation;
use resources::*;
use scripts::*;

use crate::model::{CommandAction, Container, Devfile, Exposure};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use warren_types::api::{VariableKind, WorkspaceResources};
use warren_types::config::{AgentConfig, EDITOR_PORT_ANNOTATION};
use warren_types::git::GitCredential;
use warren_types::quantity::{parse_memory_bytes, QuantityError};
use warren_types::{AgentId, DesiredState, WorkspaceId};

/// Where the `<name>-files` Secret (file variables) is mounted, read-only, in every container.
pub const FILES_MOUNT_PATH: &str = "/warren/variables";
/// Where the `<name>-scripts` ConfigMap is mounted in wrapped containers.
pub const SCRIPTS_MOUNT_PATH: &str = "/warren/scripts";
/// The home directory under the sources root, on the workspace volume.
pub const HOME_DIR: &str = ".home";
/// Where the `<name>-git` Secret (the project's credential) is mounted, read-only, in
/// containers that mount the sources.
pub const GIT_MOUNT_PATH: &str = "/warren/git";

const LABEL_AGENT: &str = "warren.dev/agent-id";
const LABEL_WORKSPACE: &str = "warren.dev/workspace-id";
const ANNOTATION_HOST: &str = "warren.dev/host-template";
/// Pods allowed to reach workspace pods (the agent, which the proxy path goes through).
const LABEL_COMPONENT: &str = "warren.dev/component";
const AGENT_COMPONENT: &str = "agent";
const DATA_VOLUME: &str = "warren-data";
const SCRIPTS_VOLUME: &str = "warren-scripts";
const FILES_VOLUME: &str = "warren-variables";
const GIT_VOLUME: &str = "warren-git";
/// Size of a devfile volume that does not give one.
const DEFAULT_VOLUME_SIZE: &str = "1Gi";

/// The project cloned into the workspace.
#[derive(Debug, Clone, Copy)]
pub struct ProjectSource<'a> {
    /// Directory name under the sources root (`/projects/<name>`).
    pub name: &'a str,
    pub git_url: &'a str,
    /// Branch, tag or commit; empty for the repository's default branch.
    pub git_ref: &'a str,
    /// How to authenticate to the repository: files of a Secret `<name>-git` mounted at
    /// [`GIT_MOUNT_PATH`], used by a Git credential helper (HTTPS) or `GIT_SSH_COMMAND` (SSH)
    /// named in the environment, so clone, fetch and push work with no secret in the
    /// environment, the process list or the checkout's `.git/config`.
    pub credential: Option<&'a GitCredential>,
}

/// A user/workspace variable with its final value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVariable {
    pub key: String,
    pub value: String,
    pub kind: VariableKind,
}

#[derive(Debug, Clone, Copy)]
pub struct RenderRequest<'a> {
    /// Already validated DNS-safe by the server.
    pub workspace_name: &'a str,
    pub workspace_id: WorkspaceId,
    pub agent_id: AgentId,
    pub agent_config: &'a AgentConfig,
    pub project: Option<ProjectSource<'a>>,
    /// User-requested whole-workspace size (create/resize): sets the MAIN container's limits
    /// (cpu/memory); its requests become min(request, limit). None = devfile/defaults.
    pub resources: Option<&'a WorkspaceResources>,
    /// The workspace's machine class (its `cpu` and `memory` already in `resources`): the
    /// volume's size, the main container's devices, and the pod's placement.
    pub machine: Option<&'a warren_types::machine::MachineClass>,
    pub variables: &'a [ResolvedVariable],
    pub desired_state: DesiredState,
    /// The owner's dotfiles repository, cloned into the home and installed at first start.
    pub dotfiles_url: Option<&'a str>,
    /// The starter project cloned when there is no `project`, by name; the devfile's first
    /// when `None` (or when it names none).
    pub starter: Option<&'a str>,
    /// A prebuild's run ([`crate::PREBUILD_ATTRIBUTE`]): the startup clones, runs only the
    /// prebuild's commands and marks what it did in the volume, for a workspace started from
    /// it; no dotfiles, no editor.
    pub prebuild: bool,
    /// The prebuild whose volumes this workspace's new volumes start as copies of: its
    /// PersistentVolumeClaims name it, and its first start says when no copy was made.
    pub seed: Option<warren_types::prebuild::Seed<'a>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rendered {
    pub namespace: String,
    /// Every object, as JSON (apiVersion, kind, metadata, ...), in a deterministic order.
    pub objects: Vec<serde_json::Value>,
    /// Declared endpoints of all containers (for URLs and for the proxy's allow-list).
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub port: u16,
    pub container: String,
    pub main: bool,
    /// `public`, `internal` or `none`.
    pub exposure: String,
    /// `http`, `https`, `ws`, `wss`, `tcp` or `udp`.
    pub protocol: String,
    pub path: Option<String>,
}

/// Why a valid devfile cannot be rendered for this agent and request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(
        "workspace asks for {resource} {kind} {asked} in total, more than the agent's max_resources_per_workspace {kind} {resource} {cap}"
    )]
    ExceedsCap {
        resource: &'static str,
        kind: &'static str,
        asked: String,
        cap: String,
    },
    #[error(
        "container {container:?} has no {resource} {kind}, but the agent caps the workspace's {resource} {kind} (max_resources_per_workspace); set {field} in the devfile or a default in default_resources_per_workspace_container"
    )]
    Unbounded {
        container: String,
        resource: &'static str,
        kind: &'static str,
        field: &'static str,
    },
    #[error("invalid quantity in {field}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    /// The workspace name names its Service, which must be a DNS-1035 label.
    #[error("workspace name: {0}")]
    WorkspaceName(String),
    #[error("namespace {0:?} is not a valid namespace name")]
    Namespace(String),
    #[error("project name {0:?} cannot be a directory name (no '/', not '.' or '..', not empty)")]
    ProjectName(String),
    #[error("variable {key:?}: {reason}")]
    Variable { key: String, reason: String },
    #[error("invalid label or annotation {key:?} in the agent configuration: {reason}")]
    Metadata { key: String, reason: String },
    #[error(
        "container {container:?} asks for {what}, which this agent does not allow: workspaces run without it so that one tenant cannot reach another's; an admin may allow that value in the agent's configuration ({setting})"
    )]
    NotAllowed {
        container: String,
        what: String,
        setting: &'static str,
    },
}

/// The `/bin/sh -c` script that runs an exec command on demand (`warren ws run`): its
/// environment exported, in its `workingDir` (without one: the project's directory, as for
/// postStart commands, where the container has it — one that does not mount the sources
/// stays in its own working directory), then its command line.
pub fn exec_command_script(
    command_line: &str,
    working_dir: Option<&str>,
    env: &[crate::model::EnvVar],
) -> String {
    match working_dir {
        Some(_) => command_script(command_line, working_dir, "${PROJECT_SOURCE}", env),
        None => {
            let mut s = String::new();
            for e in env {
                s.push_str(&format!(
                    "export {}={}\n",
                    e.name,
                    scripts::sh_quote(&e.value)
                ));
            }
            s.push_str("if [ -n \"${PROJECT_SOURCE:-}\" ] && [ -d \"$PROJECT_SOURCE\" ]; then cd \"$PROJECT_SOURCE\" || exit 1; fi\n");
            s.push_str(command_line);
            s.push('\n');
            s
        }
    }
}

/// Renders the workspace's objects. See the module docs for the startup design.
pub fn render(devfile: &Devfile, req: &RenderRequest<'_>) -> Result<Rendered, RenderError> {
    objects::render(devfile, req)
}

/// The `<name>-git` Secret's files: `credentials` (what a credential helper prints for
/// `get`) for HTTPS, `ssh-key` and `known_hosts` for SSH.
fn git_secret_data(c: &GitCredential) -> BTreeMap<String, k8s_openapi::ByteString> {
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        data.insert(k.to_owned(), k8s_openapi::ByteString(v.into_bytes()));
    };
    match c {
        GitCredential::SshKey {
            private_key,
            known_hosts,
        } => {
            put("ssh-key", format!("{}\n", private_key.trim_end()));
            put("known_hosts", known_hosts.clone().unwrap_or_default());
        }
        other => {
            if let Some((user, password)) = other.username_password() {
                put(
                    "credentials",
                    format!("username={user}\npassword={password}\n"),
                );
            }
        }
    }
    data
}

/// The environment that points Git at the mounted credential: a credential helper scoped to
/// the repository's origin (so the secret goes to that host only), or an SSH command with
/// the key. Names only paths, never the secret.
pub(super) fn git_credential_env(p: &ProjectSource<'_>) -> Vec<(String, String)> {
    match p.credential {
        None => vec![],
        Some(GitCredential::SshKey { known_hosts, .. }) => {
            let strict = if known_hosts.as_deref().is_some_and(|k| !k.trim().is_empty()) {
                "yes"
            } else {
                "accept-new"
            };
            vec![(
                "GIT_SSH_COMMAND".into(),
                format!(
                    "ssh -i {GIT_MOUNT_PATH}/ssh-key -o IdentitiesOnly=yes \
                     -o UserKnownHostsFile={GIT_MOUNT_PATH}/known_hosts -o StrictHostKeyChecking={strict}"
                ),
            )]
        }
        Some(_) => {
            let key = match http_origin(p.git_url) {
                Some(origin) => format!("credential.{origin}.helper"),
                None => "credential.helper".into(),
            };
            vec![
                ("GIT_CONFIG_COUNT".into(), "1".into()),
                ("GIT_CONFIG_KEY_0".into(), key),
                (
                    "GIT_CONFIG_VALUE_0".into(),
                    format!("!f() {{ test \"$1\" = get && cat {GIT_MOUNT_PATH}/credentials; }}; f"),
                ),
            ]
        }
    }
}

/// `scheme://host[:port]` of an http(s) URL.
fn http_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    (!host.is_empty()).then(|| format!("{}://{host}", scheme.to_ascii_lowercase()))
}
