//! GitOps on Podman through the whole stack, as an operator runs it: `warren server`,
//! `warren relay` and `warren agent` as separate processes, a repository on this machine
//! (`file://`), a source given with the CLI. Commits make the objects appear, change and
//! disappear; relay and agent restarts resume without re-creating anything; an agent whose
//! token was reset stops syncing until it runs with the new one.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::*;

/// Removes what the test's source made on the engine, even when the test fails.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let filter = format!("label=warren.dev/gitops-source={}", self.0);
        for kind in [
            &["ps", "-a", "-q"][..],
            &["volume", "ls", "-q"],
            &["network", "ls", "-q"],
        ] {
            let mut args = kind.to_vec();
            args.extend(["--filter", &filter]);
            for id in podman(&args).lines().filter(|l| !l.is_empty()) {
                let rm: &[&str] = match kind[0] {
                    "ps" => &["rm", "-f", "-t", "0"],
                    "volume" => &["volume", "rm", "-f"],
                    _ => &["network", "rm", "-f"],
                };
                let mut rm = rm.to_vec();
                rm.push(id);
                let _ = podman(&rm);
            }
        }
    }
}

/// Commits the work tree and pushes; the new head.
fn commit(work: &Path, message: &str) -> String {
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", message]);
    git(work, &["push", "-q", "origin", "HEAD:main"]);
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(work)
        .output()
        .expect("git rev-parse");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn web_yaml(content: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: web-content
data:
  index.html: "{content}"
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
"#
    )
}

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: httpd
          image: localhost/warren-test:latest
          imagePullPolicy: Never
          command: ["/bin/sh", "-c", "exec httpd -f -p 8080 -h /www"]
          ports: [{containerPort: 8080}]
          volumeMounts: [{name: content, mountPath: /www}]
      volumes:
        - name: content
          configMap: {name: web-content}
"#;

/// The source's running web container: (id, what it serves), once it serves.
fn serving(source: &str) -> Option<(String, String)> {
    let filter = format!("label=warren.dev/gitops-source={source}");
    let ids = podman(&[
        "ps",
        "-q",
        "--filter",
        &filter,
        "--filter",
        "label=warren.dev/role=container",
    ]);
    let id = ids.lines().next()?.to_owned();
    let out = Command::new("podman")
        .args([
            "exec",
            &id,
            "wget",
            "-q",
            "-O",
            "-",
            "http://127.0.0.1:8080/index.html",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| (id, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn status(stack: &Stack, source: &str) -> Option<Value> {
    let text = stack.cli_ok(&["agent", "gitops", "status", "faulty", "-o", "json"]);
    let all: Value = serde_json::from_str(&text).ok()?;
    all.as_array()?
        .iter()
        .find(|s| s["source"] == source)
        .cloned()
}

/// Waits until the source reports `commit` applied and `check` holds.
fn synced<T>(
    stack: &Stack,
    source: &str,
    commit: &str,
    mut check: impl FnMut(&Value) -> Option<T>,
) -> T {
    wait_for(
        &format!("commit {commit} of {source} applied"),
        CONVERGE,
        || {
            let s = status(stack, source)?;
            (s["commit"] == commit).then_some(())?;
            check(&s)
        },
        || format!("{:#?}\n{}", status(stack, source), stack.logs()),
    )
}

#[test]
fn gitops_on_podman_through_the_stack() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let mut stack = Stack::start(true);
    let source = format!("web-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let _cleanup = Cleanup(source.clone());

    // A repository on this machine, with a ConfigMap, a Service and a Deployment.
    let bare = stack.dir.path().join("infra.git");
    std::fs::create_dir(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let work = stack.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
    std::fs::create_dir(work.join("deploy")).unwrap();
    std::fs::write(work.join("deploy/web.yaml"), web_yaml("v1")).unwrap();
    std::fs::write(work.join("deploy/deployment.yaml"), DEPLOYMENT).unwrap();
    std::fs::write(work.join("README.md"), "not a manifest").unwrap();
    let first = commit(&work, "web v1");

    stack.cli_ok(&[
        "gitops",
        "repo",
        "add",
        "infra",
        "--url",
        &format!("file://{}", bare.display()),
    ]);
    let sources = stack.dir.path().join("sources.yaml");
    std::fs::write(
        &sources,
        format!(
            "sources:\n  - name: {source}\n    repository: infra\n    paths: [\"deploy/*.yaml\"]\n    \
             namespace: shop\n    prune: true\n    interval: 1s\n"
        ),
    )
    .unwrap();
    stack.cli_ok(&[
        "agent",
        "gitops",
        "set",
        "faulty",
        "-f",
        sources.to_str().unwrap(),
    ]);

    // First sync: the objects appear and the workload is reported healthy.
    synced(&stack, &source, &first, |s| {
        (s["applied"] == 3 && s["errors"].as_array()?.is_empty()).then_some(())
    });
    let (_, body) = wait_for(
        "web serving v1",
        CONVERGE,
        || serving(&source),
        || stack.logs(),
    );
    assert_eq!(body, "v1");
    synced(&stack, &source, &first, |s| {
        (s["health"][0]["ready"] == true).then_some(())
    });
    let table = stack.cli_ok(&["agent", "gitops", "status", "faulty"]);
    assert!(
        table.contains(&source) && table.contains(&first[..12]),
        "{table}"
    );

    // A commit changes the content: the pod is recreated with it.
    std::fs::write(work.join("deploy/web.yaml"), web_yaml("v2")).unwrap();
    let second = commit(&work, "web v2");
    synced(&stack, &source, &second, |_| Some(()));
    wait_for(
        "web serving v2",
        CONVERGE,
        || serving(&source).filter(|(_, b)| b == "v2"),
        || stack.logs(),
    );

    // Relay and agent restarts: the sync resumes from the applied commit and re-creates
    // nothing.
    let (before, _) = serving(&source).expect("web serving");
    let restarted = chrono::Utc::now();
    Stack::kill(&mut stack.relay);
    Stack::kill(&mut stack.agent);
    stack.start_relay();
    stack.start_agent();
    synced(&stack, &source, &second, |s| {
        let at: chrono::DateTime<chrono::Utc> = s["synced_at"].as_str()?.parse().ok()?;
        (at > restarted).then_some(())
    });
    let s = status(&stack, &source).unwrap();
    assert_eq!(
        (s["applied"].as_u64(), s["unchanged"].as_u64()),
        (Some(0), Some(3)),
        "{s:#}"
    );
    let (after, body) = serving(&source).expect("web still serving");
    assert_eq!((after.as_str(), body.as_str()), (before.as_str(), "v2"));

    // A commit deletes the Deployment and the Service: both pruned, the container gone.
    std::fs::remove_file(work.join("deploy/deployment.yaml")).unwrap();
    std::fs::write(
        work.join("deploy/web.yaml"),
        web_yaml("v2").split("---").next().unwrap(),
    )
    .unwrap();
    let third = commit(&work, "web removed");
    synced(&stack, &source, &third, |s| {
        (s["pruned"] == 2).then_some(())
    });
    let filter = format!("label=warren.dev/gitops-source={source}");
    assert!(podman(&["ps", "-a", "-q", "--filter", &filter])
        .trim()
        .is_empty());

    // Back again; then the agent's token is reset: its sync stops at the next poll.
    std::fs::write(work.join("deploy/web.yaml"), web_yaml("v3")).unwrap();
    std::fs::write(work.join("deploy/deployment.yaml"), DEPLOYMENT).unwrap();
    let fourth = commit(&work, "web v3");
    synced(&stack, &source, &fourth, |_| Some(()));
    wait_for(
        "web serving v3",
        CONVERGE,
        || serving(&source).filter(|(_, b)| b == "v3"),
        || stack.logs(),
    );
    let reset: Value =
        serde_json::from_str(&stack.cli_ok(&["agent", "reset-token", "faulty", "-o", "json"]))
            .unwrap();
    let token = reset["token"].as_str().expect("the new token").to_owned();
    let relay_log = stack.dir.path().join("relay.log");
    wait_for(
        "the relay to end the source's stream",
        CONVERGE,
        || {
            std::fs::read_to_string(&relay_log)
                .ok()
                .filter(|l| l.contains("no longer valid"))
        },
        || stack.logs(),
    );
    std::fs::write(work.join("deploy/web.yaml"), web_yaml("v4")).unwrap();
    let fifth = commit(&work, "web v4");
    // The old token can no longer bring a commit in: a restarted agent is refused by the
    // relay (whose cache forgot the token when the server refused it).
    Stack::kill(&mut stack.agent);
    let agent_log = stack.dir.path().join("agent.log");
    let seen = std::fs::read_to_string(&agent_log)
        .unwrap_or_default()
        .len();
    stack.start_agent();
    // Refused, and refused again on its retry: by then a sync would have had its chance.
    wait_for(
        "the agent with the old token to be refused twice",
        CONVERGE,
        || {
            let l = std::fs::read_to_string(&agent_log).ok()?;
            (l.get(seen..)?.matches("refused the agent token").count() >= 2).then_some(())
        },
        || stack.logs(),
    );
    assert_eq!(status(&stack, &source).unwrap()["commit"], fourth.as_str());
    assert_eq!(serving(&source).map(|(_, b)| b).as_deref(), Some("v3"));
    // With the new token it catches up.
    Stack::kill(&mut stack.agent);
    stack.set_agent_token(&token);
    stack.start_agent();
    synced(&stack, &source, &fifth, |_| Some(()));
    wait_for(
        "web serving v4",
        CONVERGE,
        || serving(&source).filter(|(_, b)| b == "v4"),
        || stack.logs(),
    );
}
