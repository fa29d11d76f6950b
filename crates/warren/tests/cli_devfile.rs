//! `warren devfile validate|render` on every registry devfile and on broken ones.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn warren(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(args)
        .env_remove("WARREN_URL")
        .env_remove("WARREN_TOKEN")
        .output()
        .unwrap()
}

fn registry() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/devfiles/registry");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {} (in the repository): {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn cli_devfile_every_registry_devfile_validates_and_renders_or_is_refused_with_paths() {
    let files = registry();
    assert!(!files.is_empty(), "registry devfiles in testdata/devfiles");
    let (mut accepted, mut refused) = (0, 0);
    for f in &files {
        let path = f.to_str().unwrap();
        let v = warren(&["devfile", "validate", path]);
        let r = warren(&["devfile", "render", path, "--name", "reg-test", "--json"]);
        if v.status.success() {
            accepted += 1;
            assert!(
                text(&v.stdout).contains("Warren can run this devfile"),
                "{path}"
            );
            assert!(
                r.status.success(),
                "{path}: validates but does not render: {}",
                text(&r.stderr)
            );
            let json = text(&r.stdout);
            let objects: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
            let mut kinds = vec![];
            for v in &objects {
                kinds.push(v["kind"].as_str().unwrap_or("").to_owned());
                let name = v["metadata"]["name"].as_str().unwrap_or("");
                assert!(!name.is_empty(), "{path}: an object without a name");
            }
            assert!(kinds.iter().any(|k| k == "Deployment"), "{path}: {kinds:?}");
            assert!(json.contains("reg-test"), "{path}: --name not used");
        } else {
            refused += 1;
            assert_eq!(v.status.code(), Some(1), "{path}");
            let err = text(&v.stderr);
            let lines: Vec<&str> = err.lines().collect();
            assert!(lines.len() >= 2, "{path}: {err}");
            let last = lines.last().unwrap();
            assert!(
                last.starts_with("error: ") && last.contains("error"),
                "{path}: {err}"
            );
            // Every error line names the file and a message; most name a path in the devfile.
            for l in &lines[..lines.len() - 1] {
                assert!(l.starts_with(&format!("{path}: ")), "{path}: {l}");
                assert!(l.len() > path.len() + 2, "{path}: empty message");
            }
            assert_eq!(r.status.code(), Some(1), "{path}: refused but rendered");
        }
    }
    eprintln!("{accepted} accepted, {refused} refused of {}", files.len());
    assert!(accepted > 0);
}

#[test]
fn cli_devfile_errors_carry_their_paths_and_render_takes_an_agent_config() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "schemaVersion: 2.2.0\nmetadata:\n  name: bad\ncomponents:\n  - name: dev\n    container:\n      image: x\n      memoryLimit: lots\n",
    )
    .unwrap();
    let out = warren(&["devfile", "validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("components[0].container.memoryLimit"),
        "{}",
        text(&out.stderr)
    );

    let good = tmp.path().join("good.yaml");
    std::fs::write(
        &good,
        "schemaVersion: 2.2.0\nmetadata:\n  name: good\ncomponents:\n  - name: dev\n    container:\n      image: busybox\n      memoryLimit: 1Gi\n",
    )
    .unwrap();
    let out = warren(&["devfile", "validate", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Says who the containers run as: images built for root are the usual surprise.
    assert!(
        text(&out.stdout).contains("runs as: uid 5001, gid 0"),
        "{}",
        text(&out.stdout)
    );

    let cfg = tmp.path().join("agent.toml");
    std::fs::write(
        &cfg,
        "workspace_domain = \"ws.example.com\"\n[labels]\nteam = \"blue\"\n",
    )
    .unwrap();
    let out = warren(&[
        "devfile",
        "render",
        good.to_str().unwrap(),
        "--name",
        "mine",
        "--agent-config",
        cfg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    assert!(yaml.contains("team: blue"), "{yaml}");

    let typo = tmp.path().join("typo.toml");
    std::fs::write(&typo, "workspace_domian = \"x\"\n").unwrap();
    let out = warren(&[
        "devfile",
        "render",
        good.to_str().unwrap(),
        "--agent-config",
        typo.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("workspace_domian"),
        "{}",
        text(&out.stderr)
    );

    let out = warren(&["devfile", "validate", "/no/such/file.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).lines().count(), 1);
}

#[test]
fn cli_completions_and_help() {
    let out = warren(&["completions", "bash"]);
    assert!(out.status.success());
    let script = text(&out.stdout);
    assert!(
        script.contains("warren") && script.contains("ssh-key"),
        "bash script lacks commands"
    );
    let out = warren(&["--help"]);
    assert!(
        text(&out.stdout).contains("Exit codes:"),
        "{}",
        text(&out.stdout)
    );
    let out = warren(&["ws", "create", "--var", "NOEQUALS"]);
    assert_eq!(out.status.code(), Some(2));
}

/// The devfile the README's quick start tells a new user to save is one Warren runs.
#[test]
fn the_readme_devfile_is_valid() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme
        .find("```yaml\n")
        .expect("a YAML block in the README")
        + 8;
    let len = readme[start..].find("```").expect("its end");
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("devfile.yaml");
    std::fs::write(&path, &readme[start..start + len]).unwrap();
    let out = warren(&["devfile", "validate", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("endpoints: web (8080/http in dev, public)"),
        "{}",
        text(&out.stdout)
    );
}

/// `warren devcontainer validate|render` on a repository's configuration: the project is the
/// folder holding `.devcontainer`, notices go to stderr, the devfile to stdout, and a
/// configuration Warren cannot run exits non-zero naming each property.
#[test]
fn cli_devcontainer_validates_renders_and_refuses_by_name() {
    let repo = tempfile::Builder::new().prefix("shop-").tempdir().unwrap();
    let dir = repo.path().join(".devcontainer");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("devcontainer.json");
    std::fs::write(
        &file,
        r#"{ "image": "localhost/warren-test:latest", // comment
             "forwardPorts": [3000], "remoteUser": "root",
             "containerEnv": { "WHO": "${localEnv:WHO}" }, }"#,
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let v = warren(&["devcontainer", "validate", path]);
    assert!(v.status.success(), "{}", text(&v.stderr));
    assert!(text(&v.stdout).contains("Warren can run this dev container"));
    assert!(
        text(&v.stderr).contains("note: remoteUser: root never runs a workspace"),
        "{}",
        text(&v.stderr)
    );
    let r = warren(&["devcontainer", "render", path, "--var", "WHO=ann"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let devfile = text(&r.stdout);
    let base = repo.path().file_name().unwrap().to_str().unwrap();
    assert!(devfile.contains("sourceMapping: /workspaces"), "{devfile}");
    assert!(
        devfile.contains("targetPort: 3000") && devfile.contains("value: ann"),
        "{devfile}"
    );
    // The devfile it prints is one `warren devfile validate` accepts.
    let printed = repo.path().join("devfile.yaml");
    std::fs::write(&printed, &devfile).unwrap();
    let d = warren(&["devfile", "validate", printed.to_str().unwrap()]);
    assert!(d.status.success(), "{}", text(&d.stderr));
    assert!(
        text(&d.stdout).contains("devcontainer"),
        "the main container of {base}: {}",
        text(&d.stdout)
    );

    // A build: said, with where it comes from.
    std::fs::write(
        &file,
        r#"{ "build": { "dockerfile": "Dockerfile", "context": ".." } }"#,
    )
    .unwrap();
    let v = warren(&["devcontainer", "validate", path]);
    assert!(v.status.success(), "{}", text(&v.stderr));
    assert!(
        text(&v.stdout).contains(
            "built when the workspace starts: \
             localhost/warren/devcontainer:latest (from .devcontainer/Dockerfile, context .)"
        ),
        "{}",
        text(&v.stdout)
    );
    // Features: on the configuration's image.
    std::fs::write(
        &file,
        r#"{ "image": "busybox", "features": { "ghcr.io/devcontainers/features/node:1": "lts" } }"#,
    )
    .unwrap();
    let v = warren(&["devcontainer", "validate", path]);
    assert!(v.status.success(), "{}", text(&v.stderr));
    assert!(
        text(&v.stdout).contains(
            "localhost/warren/devcontainer:latest (on busybox, with the Features \
             ghcr.io/devcontainers/features/node:1)"
        ),
        "{}",
        text(&v.stdout)
    );

    // A capability is the agent's admin's to allow (said); a privileged container never is.
    std::fs::write(&file, r#"{ "image": "busybox", "capAdd": ["NET_ADMIN"] }"#).unwrap();
    let v = warren(&["devcontainer", "validate", path]);
    assert!(v.status.success(), "{}", text(&v.stderr));
    let said = format!("{}{}", text(&v.stdout), text(&v.stderr));
    assert!(
        said.contains("the capability NET_ADMIN is given only when the agent's admin allows"),
        "{said}"
    );
    std::fs::write(
        &file,
        r#"{ "image": "busybox", "privileged": true, "capAdd": ["ALL"] }"#,
    )
    .unwrap();
    let v = warren(&["devcontainer", "validate", path]);
    assert!(!v.status.success());
    let err = text(&v.stderr);
    assert!(
        err.contains("capAdd[0]: `ALL` is every capability"),
        "{err}"
    );
    assert!(
        err.contains("privileged: a privileged container is not supported by Warren"),
        "{err}"
    );
    assert!(err.contains("2 problems"), "{err}");
}
