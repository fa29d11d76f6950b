//! The editor Warren injects into the main container (ui.md, "The editor in every workspace"):
//! its endpoint, the tools volume and the init container that fills it, and the start-up lines
//! that launch it.
//!
//! Nothing is added to the devfile's image. The editor's files come from a tools image whose
//! `/warren-tools/install` copies them into the `warren-tools` volume (an `emptyDir`), which the
//! main container mounts read-only at `/warren/tools`. On Kubernetes the init container runs
//! at every pod start; the engine runtime recognises it by name and instead fills one shared
//! volume per tools image, once. The main container's startup script starts the editor after
//! `postStart`; when the image cannot run it (no glibc, the files missing), the workspace runs
//! on and the script says why, in its log and on the container's output (`warren ws logs`).
//!
//! The editor has no password of its own (`--auth none`: the proxy authenticates), so it
//! listens on the loopback unless the runtime says otherwise ([`EDITOR_ADDRESS_ENV`]): on
//! Kubernetes another pod with a forged label, or on a cluster whose network ignores
//! NetworkPolicies, finds nothing on the pod's address.

use super::resources::{parse_q, Res};
use crate::model::{Container, Devfile};
use k8s_openapi::api::core::v1 as core;
use warren_types::config::{
    AgentConfig, EDITOR_ADDRESS_ENV, EDITOR_ENDPOINT, TOOLS_IMAGE_ROOT, TOOLS_MOUNT_PATH,
    TOOLS_VOLUME,
};

/// What the render adds for the editor.
#[derive(Debug, Clone)]
pub(super) struct EditorPlan {
    /// The devfile container the editor runs in (the main one).
    pub container: String,
    pub port: u16,
    pub image: String,
    pub version: String,
}

/// The editor of this workspace, if the agent injects one: in the main container, on the
/// configured port or the next one the devfile leaves free.
pub(super) fn plan(devfile: &Devfile, cfg: &AgentConfig) -> Option<EditorPlan> {
    if !cfg.editor.enabled() {
        return None;
    }
    let main = devfile.containers.iter().find(|c| c.main && !c.init_only)?;
    let used: std::collections::BTreeSet<u16> = devfile
        .containers
        .iter()
        .flat_map(|c| c.endpoints.iter().map(|e| e.target_port))
        .collect();
    let port = (cfg.editor.port..=u16::MAX).find(|p| !used.contains(p))?;
    Some(EditorPlan {
        container: main.name.clone(),
        port,
        image: cfg.editor.tools_image(),
        version: cfg.editor.version.clone(),
    })
}

/// Small and fixed: the copy needs little, and a capped workspace must still fit it.
pub(super) fn tools_resources() -> Res {
    let q = |s: &str, cpu: bool| parse_q(&Some(s.to_owned()), cpu, "editor").ok().flatten();
    Res {
        cpu_req: q("100m", true),
        cpu_lim: q("1", true),
        mem_req: q("64Mi", false),
        mem_lim: q("256Mi", false),
    }
}

/// The init container copying the tools into the volume, as locked down as every other.
pub(super) fn init_container(e: &EditorPlan, security: core::SecurityContext) -> core::Container {
    core::Container {
        name: TOOLS_VOLUME.into(),
        image: Some(e.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            "/bin/sh".into(),
            format!("{TOOLS_IMAGE_ROOT}/install"),
            TOOLS_MOUNT_PATH.into(),
        ]),
        resources: tools_resources().to_k8s(),
        security_context: Some(security),
        volume_mounts: Some(vec![core::VolumeMount {
            name: TOOLS_VOLUME.into(),
            mount_path: TOOLS_MOUNT_PATH.into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

pub(super) fn volume() -> core::Volume {
    core::Volume {
        name: TOOLS_VOLUME.into(),
        empty_dir: Some(core::EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// The main container's read-only view of the tools.
pub(super) fn mount() -> core::VolumeMount {
    core::VolumeMount {
        name: TOOLS_VOLUME.into(),
        mount_path: TOOLS_MOUNT_PATH.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The lines of the main container's background start-up that start the editor (after
/// `postStart`), or say why it cannot run. `say` writes to the start-up log; file descriptor
/// 3 is the container's own output, where `warren ws logs` finds the reason.
pub(super) fn start_lines(e: &EditorPlan, c: &Container) -> String {
    let image = c.image.replace(['\n', '"', '`', '$', '\\'], "_");
    let version = e.version.replace(['\n', '"', '`', '$', '\\'], "_");
    let port = e.port;
    format!(
        r#"  editor_says() {{ say "$*"; echo "warren: $*" >&3; }}
  tools={TOOLS_MOUNT_PATH}/code-server
  if [ ! -x "$tools/bin/node" ]; then
    editor_says "editor not started: its files are missing from $tools (the agent could not prepare the tools image; its log says why)"
  elif [ ! -e /lib64/ld-linux-x86-64.so.2 ] && [ ! -e /lib/ld-linux-aarch64.so.1 ]; then
    editor_says "editor not started: image {image} has no glibc, which code-server needs (musl and static images cannot run it); the terminal and the devfile's endpoints work as usual"
  elif ! editor_err="$("$tools/bin/node" -e 0 2>&1)"; then
    editor_says "editor not started: its Node.js cannot run in image {image}: $(printf %s "$editor_err" | head -c 400)"
  else
    editor_data="${{HOME:-/tmp}}/.local/share/code-server"
    mkdir -p "$editor_data/extensions" 2>/dev/null || editor_data=/tmp/warren-code-server
    editor_folder="${{PROJECT_SOURCE:-$root}}"
    [ -d "$editor_folder" ] || editor_folder="$root"
    editor_says "starting the editor (code-server {version}) on port {port}, opening $editor_folder"
    (
      # Restarted if it ends (a crash, an out-of-memory kill) for as long as the container runs.
      while :; do
        "$tools/bin/node" "$tools/node_modules/code-server/out/node/entry.js" \
          --auth none --bind-addr "${{{EDITOR_ADDRESS_ENV}:-127.0.0.1}}:{port}" \
          --disable-telemetry --disable-update-check --disable-workspace-trust \
          --user-data-dir "$editor_data" --extensions-dir "$editor_data/extensions" \
          "$editor_folder" >>"$logs/editor.log" 2>&1 3>&-
        say "the editor exited with status $?; starting it again in 5 s"
        sleep 5
      done
    ) &
  fi
"#
    )
}

/// The editor's endpoint, as the devfile's own are listed.
pub(super) fn endpoint(e: &EditorPlan) -> super::Endpoint {
    super::Endpoint {
        name: EDITOR_ENDPOINT.into(),
        port: e.port,
        container: e.container.clone(),
        main: false,
        exposure: "public".into(),
        protocol: "http".into(),
        path: None,
    }
}
