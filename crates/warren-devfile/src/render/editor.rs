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
use super::scripts::sh_quote;
use crate::model::{Container, Devfile, EditorCustomizations};
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
    /// The devfile's extensions and settings for it.
    pub customizations: Option<EditorCustomizations>,
    /// The agent's extension gallery.
    pub gallery: Option<String>,
    /// The devfile has commands to run when a session attaches (the editor starting is one).
    pub post_attach: bool,
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
        customizations: devfile.editor.clone(),
        gallery: cfg.editor.extensions_gallery.clone(),
        post_attach: !devfile.post_attach.is_empty(),
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
/// `postStart`), or say why it cannot run. `tell` writes to the start-up log and the
/// container's own output, where `warren ws logs` finds the reason.
pub(super) fn start_lines(e: &EditorPlan, c: &Container) -> String {
    let image = c.image.replace(['\n', '"', '`', '$', '\\'], "_");
    let version = e.version.replace(['\n', '"', '`', '$', '\\'], "_");
    let port = e.port;
    format!(
        r#"  editor_says() {{ tell "$*"; }}
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
{customize}{post_attach}    editor_says "starting the editor (code-server {version}) on port {port}, opening $editor_folder"
    (
{install}      # Restarted if it ends (a crash, an out-of-memory kill) for as long as the container runs.
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
"#,
        customize = settings_lines(e),
        post_attach = if e.post_attach {
            // The editor starting is a session attaching.
            format!("    /bin/sh {} &\n", crate::POST_ATTACH_SCRIPT)
        } else {
            String::new()
        },
        install = install_lines(e),
    )
}

/// The settings, written as the machine's (under the user's own, which the user's changes in
/// the editor go to), and the extension gallery, when there are any.
fn settings_lines(e: &EditorPlan) -> String {
    let mut s = String::new();
    if let Some(g) = &e.gallery {
        let gallery = serde_json::json!({"serviceUrl": g}).to_string();
        s.push_str(&format!(
            "    export EXTENSIONS_GALLERY={}\n",
            sh_quote(&gallery)
        ));
    }
    let Some(c) = e.customizations.as_ref().filter(|c| !c.settings.is_empty()) else {
        return s;
    };
    let settings = serde_json::to_string_pretty(&c.settings).unwrap_or_default();
    s.push_str(&format!(
        "    mkdir -p \"$editor_data/Machine\" && printf '%s\\n' {} >\"$editor_data/Machine/settings.json\"\n",
        sh_quote(&settings)
    ));
    s
}

/// The installs of the extensions, before the editor starts (in its background, so the
/// workspace is not held): once per list, a marker in the extensions' folder saying it was
/// done; a failure or a missing gallery is said in the log and the editor starts anyway.
fn install_lines(e: &EditorPlan) -> String {
    use sha2::Digest;
    let Some(c) = e
        .customizations
        .as_ref()
        .filter(|c| !c.extensions.is_empty() || !c.vsix.is_empty())
    else {
        return String::new();
    };
    let key = hex::encode(&sha2::Sha256::digest(format!("{:?}{:?}", c.extensions, c.vsix))[..8]);
    let mut s = format!(
        r#"      installed="$editor_data/extensions/.warren-installed-{key}"
      if [ ! -e "$installed" ]; then
        all=1
        install_extension() {{
          if "$tools/bin/node" "$tools/node_modules/code-server/out/node/entry.js" \
            --user-data-dir "$editor_data" --extensions-dir "$editor_data/extensions" \
            --install-extension "$2" >>"$logs/editor.log" 2>&1 </dev/null 3>&-; then
            say "installed the editor extension $1"
          else
            all=
            editor_says "installing the editor extension $1 failed: its output is in $logs/editor.log"
          fi
        }}
"#
    );
    if !c.extensions.is_empty() {
        if e.gallery.is_some() {
            let ids: Vec<String> = c.extensions.iter().map(|i| sh_quote(i)).collect();
            s.push_str(&format!(
                "        for id in {}; do install_extension \"$id\" \"$id\"; done\n",
                ids.join(" ")
            ));
        } else {
            let why = format!(
                "editor extensions not installed: {} (the agent's configuration names no extension gallery, editor.extensions_gallery)",
                c.extensions.join(", ")
            );
            s.push_str(&format!("        all=; editor_says {}\n", sh_quote(&why)));
        }
    }
    for v in &c.vsix {
        let q = sh_quote(v);
        let missing = sh_quote(&format!("the editor extension {v} is not in the sources"));
        s.push_str(&format!(
            "        if [ -f \"$PROJECT_SOURCE\"/{q} ]; then install_extension {q} \"$PROJECT_SOURCE\"/{q}; else all=; editor_says {missing}; fi\n"
        ));
    }
    s.push_str("        if [ -n \"$all\" ]; then : >\"$installed\"; fi\n      fi\n");
    s
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
