//! Machine classes on Podman (issue 41, item 3): a class's size and its devices — a harmless
//! device (`/dev/null` under a vendor's name) given by a Container Device Interface
//! specification — reach the workspace's container; a class whose devices the host lacks
//! fails the workspace naming them; a device whose specification runs hooks is applied whole
//! by an engine that can, and refused naming the engine by one that cannot; a resize moves
//! between classes.

use crate::support;

use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use support::{
    ensure_image, podman_available, podman_sh as sh, running, unique_name, wait_for, Up,
};

const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: classes
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
"#;

/// A CDI specification in the engine's directory, removed when dropped.
struct Spec(PathBuf);

impl Drop for Spec {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes a specification of kind `kind` with one device, `one`: `/dev/null` as
/// `/dev/warren-dongle`, and a variable; `None` where this user may not write there.
fn dongle_spec(kind: &str) -> Option<Spec> {
    let dir = PathBuf::from("/var/run/cdi");
    let path = dir.join(format!("{}.yaml", kind.replace(['/', '.'], "-")));
    let text = format!(
        "cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n  - name: one\n    containerEdits:\n      deviceNodes:\n        - {{path: /dev/warren-dongle, hostPath: /dev/null}}\n      env: [DONGLE_READY=yes]\n"
    );
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(&path, text).ok()?;
    Some(Spec(path))
}

/// A specification of kind `kind` whose one device runs a hook on the host when a container
/// is created (as NVIDIA's generated ones run `nvidia-ctk hook …`): it writes `marker`.
fn hooked_spec(kind: &str, marker: &std::path::Path) -> Option<Spec> {
    let path =
        PathBuf::from("/var/run/cdi").join(format!("{}.yaml", kind.replace(['/', '.'], "-")));
    let text = format!(
        "cdiVersion: 0.6.0\nkind: {kind}\ndevices:\n  - name: one\n    containerEdits:\n      deviceNodes:\n        - {{path: /dev/warren-hooked, hostPath: /dev/null}}\n      hooks:\n        - {{hookName: createRuntime, path: /bin/sh, args: [sh, -c, 'echo ran > {}']}}\n",
        marker.display()
    );
    std::fs::write(&path, text).ok()?;
    Some(Spec(path))
}

/// Whether this Podman applies a CDI device requested by name through its
/// Docker-compatible API (5.4 and later).
fn podman_applies_cdi_requests() -> bool {
    let version = support::podman(&["version", "--format", "{{.Server.Version}}"]);
    let mut parts = version
        .trim()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (5, 4)
}

fn out(o: std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn container_of(ws: &str) -> String {
    let live = running(ws);
    assert_eq!(live.len(), 1, "{live:#?}");
    live[0]["Id"].as_str().expect("container id").to_owned()
}

#[test]
fn a_class_gives_its_size_and_the_hosts_devices() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let suffix = unique_name("d").replace('-', "");
    let kind = format!("warren.test/dongle{suffix}");
    let Some(_spec) = dongle_spec(&kind) else {
        assert!(
            std::env::var_os("WARREN_REQUIRE_ENGINE").is_none(),
            "cannot write a CDI specification in /var/run/cdi"
        );
        eprintln!("notice: skipped, /var/run/cdi is not writable here");
        return;
    };
    let hooked_kind = format!("warren.test/hooked{suffix}");
    let marker_dir = tempfile::tempdir().expect("a directory");
    let marker = marker_dir.path().join("hook-ran");
    let _hooked = hooked_spec(&hooked_kind, &marker).expect("a specification beside the first");
    let mut up = Up::start();
    let devices = |kind: String| {
        let mut m = serde_json::Map::new();
        m.insert(kind, json!(1));
        serde_json::Value::Object(m)
    };
    up.update_agent_config(|config| {
        config["machine_classes"] = json!([
            {"name": "small", "description": "the smallest", "memory": "192Mi"},
            {"name": "dongle", "description": "with a dongle", "memory": "256Mi",
             "devices": devices(kind.clone())},
            {"name": "absent", "memory": "256Mi",
             "devices": devices(format!("warren.test/absent{suffix}"))},
            {"name": "hooked", "memory": "256Mi", "devices": devices(hooked_kind.clone())}
        ]);
        config["default_machine_class"] = json!("small");
    });
    let classes = up.cli_ok(&["ws", "classes"]);
    assert!(
        classes.contains("small (default)") && classes.contains("with a dongle"),
        "{classes}"
    );
    let devfile = up.home.path().join("devfile.yaml");
    std::fs::write(&devfile, DEVFILE).expect("devfile");
    let devfile = devfile.to_str().expect("utf-8");
    // `ws create` of workspace `name` in class `class`, waited for; its output, whatever it is.
    let create_in_class = |name: &str, class: &str| {
        support::cli(
            up.home.path(),
            &[
                "ws",
                "create",
                "--devfile",
                devfile,
                "--name",
                name,
                "--class",
                class,
                "--wait",
                "--timeout",
                "2m",
            ],
            None,
        )
    };

    let ws = unique_name("classes");
    up.workspace = Some(ws.clone());
    up.cli_ok(&[
        "ws",
        "create",
        "--devfile",
        devfile,
        "--name",
        &ws,
        "--class",
        "dongle",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let id = container_of(&ws);
    assert_eq!(
        out(sh(
            &id,
            "test -c /dev/warren-dongle && echo \"$DONGLE_READY\""
        )),
        "yes",
        "the device node and the specification's variable"
    );
    let memory = support::podman(&["inspect", "--format", "{{.HostConfig.Memory}}", &id]);
    assert_eq!(
        memory.trim(),
        (256u64 << 20).to_string(),
        "the class's memory"
    );

    // A class whose devices this host lacks: the workspace fails, naming them.
    let absent = unique_name("absent");
    let made = create_in_class(&absent, "absent");
    assert!(!made.status.success(), "it cannot run");
    let said = String::from_utf8_lossy(&made.stderr);
    assert!(
        said.contains(&format!(
            "this host has no warren.test/absent{suffix} devices"
        )),
        "{said}"
    );

    // A device whose specification runs a hook: the agent cannot give a container hooks
    // through the Docker-compatible API, so an engine that applies CDI requests by name
    // gets the device by name (and runs the hook); an older one refuses, naming itself.
    let hooked = unique_name("hooked");
    let made = create_in_class(&hooked, "hooked");
    let said = String::from_utf8_lossy(&made.stderr);
    if podman_applies_cdi_requests() {
        assert!(made.status.success(), "{said}");
        let id = container_of(&hooked);
        assert!(
            sh(&id, "test -c /dev/warren-hooked").status.success(),
            "the engine applied the device"
        );
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap_or_default().trim(),
            "ran",
            "the engine ran the specification's hook"
        );
    } else {
        assert!(!made.status.success(), "it cannot run here");
        assert!(
            said.contains(&format!("{hooked_kind}=one runs hooks"))
                && said.contains("which Podman ")
                && said.contains("Podman 5.4 or later"),
            "{said}"
        );
        assert!(!marker.exists(), "no hook ran");
        assert!(
            running(&hooked).is_empty(),
            "no container runs without its hook"
        );
    }
    up.cli_ok(&["ws", "rm", &hooked, "--wait", "--timeout", "2m"]);

    // Resized to the small class: restarted without the device, with the smaller size.
    up.cli_ok(&[
        "ws",
        "resize",
        &ws,
        "--class",
        "small",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let id = wait_for(
        "the resized container",
        Duration::from_secs(120),
        || {
            let live = running(&ws);
            (live.len() == 1)
                .then(|| live[0]["Id"].as_str().map(str::to_owned))
                .flatten()
                .filter(|new| *new != id)
        },
        || up.log(),
    );
    assert!(
        !sh(&id, "test -e /dev/warren-dongle").status.success(),
        "the device is gone"
    );
    let memory = support::podman(&["inspect", "--format", "{{.HostConfig.Memory}}", &id]);
    assert_eq!(memory.trim(), (192u64 << 20).to_string());

    up.cli_ok(&["ws", "rm", &absent, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}
