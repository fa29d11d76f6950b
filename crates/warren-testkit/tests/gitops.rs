//! GitOps through the whole stack in one process: the real server, relay and agent
//! connection, with the simulated runtime standing in for the cluster (the Kubernetes
//! apply itself is tested against the real API server in `warren-agent`), and real Git
//! servers (`git daemon`, port 0). Pull-based: the relay reads Git, the agent only ever
//! sees objects.

use anyhow::Result;
use reqwest::Method;
use serde_json::{json, Value};
use std::path::Path;
use warren_testkit::git_daemon::GitDaemon;
use warren_testkit::git_http::{bare_repo, commit_files, git, have_git};
use warren_testkit::{wait_for, Stack};

fn bare(root: &Path, name: &str) -> std::path::PathBuf {
    bare_repo(root, name).unwrap()
}

/// Replaces the repository's files with `files` (path → text) in one commit on `main`.
fn commit(bare: &Path, files: &[(&str, &str)]) -> String {
    commit_files(bare, files).unwrap()
}

fn cm(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

const DEPLOYMENT: &str =
    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n";

fn names(objects: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    v.sort();
    v
}

/// Waits until the source reports `commit` (applied, or read with errors).
async fn reported(stack: &Stack, source: &str, commit: &str) -> Result<()> {
    wait_for(
        &format!("commit {commit} of {source} reported"),
        30,
        || async {
            status(stack, source)
                .await
                .is_some_and(|s| s["commit"] == commit)
        },
    )
    .await
}

/// Waits until the source's status has an error containing `needle`.
async fn reported_error(stack: &Stack, source: &str, needle: &str) -> Result<()> {
    wait_for(
        &format!("an error of {source} naming {needle}"),
        30,
        || async {
            status(stack, source)
                .await
                .is_some_and(|s| s["errors"].to_string().contains(needle))
        },
    )
    .await
}

async fn status(stack: &Stack, source: &str) -> Option<Value> {
    let all = stack
        .api(
            Method::GET,
            "/api/v1/agents/local/gitops/status",
            &stack.admin.token,
            None,
        )
        .await
        .ok()?;
    all.as_array()?
        .iter()
        .find(|s| s["source"] == source)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_follows_its_repository_through_the_stack() -> Result<()> {
    if !have_git() {
        return Ok(());
    }
    let stack = Stack::start().await?;
    let root_a = tempfile::tempdir()?;
    let root_b = tempfile::tempdir()?;
    let repo_a = bare(root_a.path(), "platform");
    let repo_b = bare(root_b.path(), "other");
    let first = commit(
        &repo_a,
        &[
            ("deploy/config.yaml", &cm("settings", "1")),
            ("deploy/web.yaml", DEPLOYMENT),
            ("README.md", "not a manifest"),
        ],
    );
    commit(&repo_b, &[("cm.yaml", &cm("other", "x"))]);
    let daemon_a = GitDaemon::start(root_a.path())?;
    let daemon_b = GitDaemon::start(root_b.path())?;
    const SECRET: &str = "webhook-secret-for-the-test";
    stack
        .gitops_repository(
            json!({"name": "platform", "url": daemon_a.url("platform"), "webhook_secret": SECRET}),
        )
        .await?;
    stack
        .gitops_repository(json!({"name": "other", "url": daemon_b.url("other")}))
        .await?;
    // An object no source made, in the source's namespace: never touched.
    stack
        .runtime
        .put_foreign_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "hand-made", "namespace": "team-a"}}));
    let sources = json!({"sources": [
        {"name": "web", "repository": "platform", "paths": ["deploy/**/*.yaml"],
         "namespace": "team-a", "prune": true, "interval": "1s"},
        {"name": "side", "repository": "other", "namespace": "team-b", "interval": "1s"}
    ]});
    stack.gitops_sources("local", sources).await?;

    // First sync: both objects, in the source's namespace, labelled; the status says so.
    let rt = stack.runtime.clone();
    wait_for("the first sync", 30, || {
        let rt = rt.clone();
        async move { names(&rt.gitops_objects("web")) == ["ConfigMap/settings", "Deployment/web"] }
    })
    .await?;
    let objects = stack.runtime.gitops_objects("web");
    assert!(
        objects
            .iter()
            .all(|o| o["metadata"]["namespace"] == "team-a"),
        "{objects:?}"
    );
    assert!(objects
        .iter()
        .all(|o| o["metadata"]["labels"]["warren.dev/gitops-source"] == "web"));
    reported(&stack, "web", &first).await?;
    let s = status(&stack, "web").await.unwrap();
    assert_eq!(
        (s["applied"].as_u64(), s["errors"].as_array().map(Vec::len)),
        (Some(2), Some(0)),
        "{s}"
    );

    // A commit changes one object, adds one and deletes one: the deleted one is pruned.
    let second = commit(
        &repo_a,
        &[
            ("deploy/config.yaml", &cm("settings", "2")),
            (
                "deploy/svc.yaml",
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80}]\n",
            ),
        ],
    );
    reported(&stack, "web", &second).await?;
    let objects = stack.runtime.gitops_objects("web");
    assert_eq!(names(&objects), ["ConfigMap/settings", "Service/web"]);
    let settings = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(settings["data"]["value"], "2");
    let s = status(&stack, "web").await.unwrap();
    assert_eq!(s["pruned"], 1, "{s}");

    // Drift: a hand edit is undone by the next sync of the same commit.
    stack
        .runtime
        .edit_gitops_object("ConfigMap", "settings", |o| {
            o["data"]["value"] = json!("edited by hand");
        });
    wait_for("the hand edit undone", 30, || {
        let rt = rt.clone();
        async move {
            rt.gitops_objects("web")
                .iter()
                .any(|o| o["kind"] == "ConfigMap" && o["data"]["value"] == "2")
        }
    })
    .await?;

    // Objects outside the source's rights, and files that are not manifests, are errors
    // naming them; the rest applies and nothing is deleted because of them.
    let third = commit(
        &repo_a,
        &[
            ("deploy/config.yaml", &cm("settings", "3")),
            (
                "deploy/ns.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: sneaky\n",
            ),
            (
                "deploy/elsewhere.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: kube-system\n",
            ),
            ("deploy/broken.yaml", "apiVersion: v1\nkind: [oops\n"),
            ("deploy/words.yaml", "just words\n"),
        ],
    );
    reported(&stack, "web", &third).await?;
    let s = status(&stack, "web").await.unwrap();
    let errors = s["errors"].to_string();
    for want in [
        "Namespace is cluster-scoped",
        "namespace \\\"kube-system\\\" is outside",
        "deploy/broken.yaml",
        "deploy/words.yaml",
    ] {
        assert!(errors.contains(want), "missing {want} in {errors}");
    }
    let objects = stack.runtime.gitops_objects("web");
    assert_eq!(
        names(&objects),
        ["ConfigMap/settings", "Service/web"],
        "the Service left Git in an erroneous commit and is kept"
    );
    assert!(
        objects.iter().any(|o| o["data"]["value"] == "3"),
        "{objects:?}"
    );
    assert!(
        names(&stack.runtime.gitops_objects("side")).contains(&"ConfigMap/other".to_owned()),
        "the other source synced too"
    );

    // A webhook: a bad signature is refused; a good one makes the relay poll at once.
    let hook = format!("{}/api/v1/gitops/webhooks/platform", stack.api_url);
    let http = reqwest::Client::new();
    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let r = http
        .post(&hook)
        .header("X-Hub-Signature-256", "sha256=0000")
        .body(body.clone())
        .send()
        .await?;
    assert_eq!(r.status(), 401, "{}", r.text().await?);
    let r = http.post(&hook).body(body.clone()).send().await?;
    assert_eq!(r.status(), 401, "no signature: {}", r.text().await?);
    let sig = {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(&body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    let fourth = commit(&repo_a, &[("deploy/config.yaml", &cm("settings", "4"))]);
    let r = http
        .post(&hook)
        .header("X-Hub-Signature-256", sig)
        .body(body.clone())
        .send()
        .await?;
    assert_eq!(r.status(), 202, "{}", r.text().await?);
    reported(&stack, "web", &fourth).await?;
    // The lag from the relay seeing the pushed commit to the agent having applied it.
    let metrics = http
        .get(format!("{}/metrics", stack.api_url))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains("warren_gitops_last_apply_lag_seconds{agent=\"local\",source=\"web\"}")
            && metrics.contains("warren_gitops_apply_lag_seconds"),
        "{metrics}"
    );
    let r = http
        .post(&hook)
        .header("X-Gitlab-Token", SECRET)
        .body(body.clone())
        .send()
        .await?;
    assert_eq!(r.status(), 202, "GitLab's token header");

    // A removed source stops polling: its Git server sees no more connections while the
    // remaining source's server sees several.
    stack
        .gitops_sources(
            "local",
            json!({"sources": [
                {"name": "side", "repository": "other", "namespace": "team-b", "interval": "1s"}
            ]}),
        )
        .await?;
    // The relay may be in the middle of one last poll when the source goes.
    let settle_b = daemon_b.connections();
    wait_for("the remaining source polling", 30, || {
        let b = daemon_b.connections();
        async move { b >= settle_b + 2 }
    })
    .await?;
    let a_after = daemon_a.connections();
    let b_now = daemon_b.connections();
    wait_for("three more polls of the remaining source", 30, || {
        let b = daemon_b.connections();
        async move { b >= b_now + 3 }
    })
    .await?;
    assert_eq!(
        daemon_a.connections(),
        a_after,
        "the removed source is not polled"
    );
    // Its objects stay (removing a source does not delete what it made): the fourth
    // commit's, after a clean commit pruned what had left Git in the third.
    let objects = stack.runtime.gitops_objects("web");
    assert_eq!(names(&objects), ["ConfigMap/settings"]);
    assert_eq!(objects[0]["data"]["value"], "4");
    assert!(
        stack
            .runtime
            .gitops_object("ConfigMap", "hand-made")
            .is_some(),
        "the object no source made is untouched"
    );
    Ok(())
}

/// Two agents follow one repository and ref: a push (announced by a webhook) is read from
/// the Git server once — one ref lookup and one fetch — and applied by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_share_one_poll_of_a_repository() -> Result<()> {
    if !have_git() {
        return Ok(());
    }
    let mut stack = Stack::start().await?;
    let admin = stack.admin.token.clone();
    let second_runtime = stack.add_agent("edge").await?;
    let root = tempfile::tempdir()?;
    let repo = bare(root.path(), "shared");
    let first = commit(&repo, &[("app.yaml", &cm("settings", "1"))]);
    let daemon = GitDaemon::start(root.path())?;
    const SECRET: &str = "shared-webhook-secret";
    stack
        .gitops_repository(
            json!({"name": "shared", "url": daemon.url("shared"), "webhook_secret": SECRET}),
        )
        .await?;
    // A long interval: after the first poll, only the webhook makes the relay look again.
    for agent in ["local", "edge"] {
        stack
            .gitops_sources(
                agent,
                json!({"sources": [
                    {"name": "app", "repository": "shared", "namespace": "team", "interval": "1h"}
                ]}),
            )
            .await?;
    }
    let value = |rt: &warren_agent::runtime::simulated::SimulatedRuntime| {
        rt.gitops_objects("app")
            .first()
            .map(|o| o["data"]["value"].clone())
    };
    let (a, b) = (stack.runtime.clone(), second_runtime.clone());
    wait_for("both agents synced the first commit", 30, || {
        let ok = value(&a) == Some(json!("1")) && value(&b) == Some(json!("1"));
        async move { ok }
    })
    .await?;
    // The agent reports its sync to the server after applying it: wait for the report.
    let edge_status = || async {
        stack
            .api(
                Method::GET,
                "/api/v1/agents/edge/gitops/status",
                &admin,
                None,
            )
            .await
            .unwrap_or_default()
    };
    wait_for("the edge agent to report the first commit", 30, || async {
        edge_status().await[0]["commit"] == first.as_str()
    })
    .await?;

    let before = daemon.connections();
    commit(&repo, &[("app.yaml", &cm("settings", "2"))]);
    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/gitops/webhooks/shared", stack.api_url))
        .header("X-Gitlab-Token", SECRET)
        .body(body)
        .send()
        .await?;
    assert_eq!(r.status(), 202);
    wait_for("both agents synced the pushed commit", 30, || {
        let ok = value(&a) == Some(json!("2")) && value(&b) == Some(json!("2"));
        async move { ok }
    })
    .await?;
    assert_eq!(
        daemon.connections() - before,
        2,
        "one ref lookup and one fetch serve both agents"
    );
    Ok(())
}

/// Faults on the Git side, through the stack: a symbolic link out of the repository, a ref
/// that does not exist and a repository that vanished each become a status error naming
/// it, and nothing already applied is deleted because of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_faults_are_reported_and_delete_nothing() -> Result<()> {
    if !have_git() {
        return Ok(());
    }
    let stack = Stack::start().await?;
    let root = tempfile::tempdir()?;
    let repo = bare(root.path(), "apps");
    let first = commit(
        &repo,
        &[("a.yaml", &cm("alpha", "1")), ("b.yaml", &cm("beta", "1"))],
    );
    stack
        .gitops_repository(json!({"name": "apps", "url": format!("file://{}", repo.display())}))
        .await?;
    let set_ref = |git_ref: &str| {
        json!({"sources": [{"name": "apps", "repository": "apps", "ref": git_ref,
                            "namespace": "team", "prune": true, "interval": "1s"}]})
    };
    stack.gitops_sources("local", set_ref("main")).await?;
    reported(&stack, "apps", &first).await?;
    let all = ["ConfigMap/alpha", "ConfigMap/beta"];
    assert_eq!(names(&stack.runtime.gitops_objects("apps")), all);

    // A commit where b.yaml became a link leaving the repository: named, and beta (which
    // "left" only because its file could not be read) is kept.
    let work = tempfile::tempdir()?;
    git(
        work.path(),
        &["clone", "--quiet", repo.to_str().unwrap(), "."],
    )?;
    std::fs::remove_file(work.path().join("b.yaml"))?;
    std::os::unix::fs::symlink("../../../etc/passwd", work.path().join("b.yaml"))?;
    git(work.path(), &["add", "--all"])?;
    git(
        work.path(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.test",
            "commit",
            "--quiet",
            "-m",
            "link",
        ],
    )?;
    git(work.path(), &["push", "--quiet", "origin", "main"])?;
    let linked = git(work.path(), &["rev-parse", "HEAD"])?.trim().to_owned();
    reported(&stack, "apps", &linked).await?;
    let s = status(&stack, "apps").await.unwrap();
    let errors = s["errors"].to_string();
    assert!(
        errors.contains("b.yaml") && errors.contains("outside the repository"),
        "{errors}"
    );
    assert_eq!(s["pruned"], 0, "{s}");
    assert_eq!(names(&stack.runtime.gitops_objects("apps")), all);

    // A ref that does not exist.
    stack.gitops_sources("local", set_ref("release-9")).await?;
    reported_error(&stack, "apps", "release-9").await?;
    assert_eq!(names(&stack.runtime.gitops_objects("apps")), all);

    // The repository vanishes.
    stack.gitops_sources("local", set_ref("main")).await?;
    reported_error(&stack, "apps", "outside the repository").await?;
    std::fs::remove_dir_all(&repo)?;
    wait_for("the vanished repository reported", 30, || async {
        status(&stack, "apps").await.is_some_and(|s| {
            let e = s["errors"].to_string();
            e.contains(repo.to_str().unwrap()) && !e.contains("outside the repository")
        })
    })
    .await?;
    let s = status(&stack, "apps").await.unwrap();
    assert_eq!(
        s["commit"],
        linked.as_str(),
        "the last applied commit stays: {s}"
    );
    assert_eq!(names(&stack.runtime.gitops_objects("apps")), all);
    Ok(())
}

/// Three relay instances (sharing their routing table in Redis when
/// `WARREN_TEST_REDIS_URL` is set): a webhook reaches them all, yet only the one holding the
/// agent's connection reads Git; when that relay stops, the agent's sources move with the
/// agent to another, which resumes from the applied commit without re-creating anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_move_with_the_agent_across_relays() -> Result<()> {
    if !have_git() {
        return Ok(());
    }
    let redis_url = std::env::var("WARREN_TEST_REDIS_URL").ok();
    if redis_url.is_none() {
        eprintln!("notice: WARREN_TEST_REDIS_URL is not set; the three relays run without Redis");
    }
    let stack = Stack::start_with(warren_testkit::StackOptions {
        relays: 3,
        redis_url,
        ..Default::default()
    })
    .await?;
    let root = tempfile::tempdir()?;
    let repo = bare(root.path(), "fleet");
    let first = commit(&repo, &[("app.yaml", &cm("settings", "1"))]);
    let daemon = GitDaemon::start(root.path())?;
    const SECRET: &str = "fleet-webhook-secret";
    stack
        .gitops_repository(
            json!({"name": "fleet", "url": daemon.url("fleet"), "webhook_secret": SECRET}),
        )
        .await?;
    stack
        .gitops_sources(
            "local",
            json!({"sources": [
                {"name": "app", "repository": "fleet", "namespace": "team", "interval": "1h"}
            ]}),
        )
        .await?;
    reported(&stack, "app", &first).await?;
    let push = |value: &'static str| {
        let repo = repo.clone();
        let url = format!("{}/api/v1/gitops/webhooks/fleet", stack.api_url);
        async move {
            let id = commit(&repo, &[("app.yaml", &cm("settings", value))]);
            let r = reqwest::Client::new()
                .post(url)
                .header("X-Gitlab-Token", SECRET)
                .body(r#"{"ref":"refs/heads/main"}"#)
                .send()
                .await?;
            anyhow::ensure!(r.status() == 202, "webhook answered {}", r.status());
            anyhow::Ok(id)
        }
    };

    // All three relays are poked; one reads Git.
    let before = daemon.connections();
    let second = push("2").await?;
    wait_for("the second commit applied", 30, || async {
        status(&stack, "app")
            .await
            .is_some_and(|s| s["commit"] == second.as_str() && s["applied"] == 1)
    })
    .await?;
    assert_eq!(
        daemon.connections() - before,
        2,
        "one ref lookup and one fetch, by the relay holding the agent"
    );

    // The relay holding the agent stops: the agent and its source move to another relay,
    // which sends the applied commit again — unchanged, nothing re-created.
    let stopped_at = chrono::Utc::now();
    stack.stop_relay(0);
    wait_for("the source resumed on another relay", 30, || async {
        status(&stack, "app").await.is_some_and(|s| {
            s["synced_at"]
                .as_str()
                .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
                .is_some_and(|t| t > stopped_at)
        })
    })
    .await?;
    let s = status(&stack, "app").await.unwrap();
    assert_eq!(s["commit"], second.as_str(), "{s}");
    assert_eq!(
        (s["applied"].as_u64(), s["unchanged"].as_u64()),
        (Some(0), Some(1)),
        "{s}"
    );

    // And pushes keep arriving through it.
    let third = push("3").await?;
    wait_for(
        "the third commit applied through the new relay",
        30,
        || async {
            status(&stack, "app")
                .await
                .is_some_and(|s| s["commit"] == third.as_str() && s["applied"] == 1)
        },
    )
    .await?;
    let objects = stack.runtime.gitops_objects("app");
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["data"]["value"], "3");
    Ok(())
}
