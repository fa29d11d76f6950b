//! A rolling upgrade on one PostgreSQL database: the previous release's `warren server`
//! (built by this test from its commit, named in `fixtures/previous-release`) serves users;
//! this build's server starts beside it on the same database (running any new migrations)
//! while the old one keeps serving; both see and change the same workspaces; an old replica
//! restarting on the migrated schema starts and serves it; then the old one stops and
//! nothing is lost.
//!
//! Needs `WARREN_TEST_DATABASE_URL` and the previous release's commit in the clone (a shallow
//! clone lacks it); skips with a notice otherwise, fails under `WARREN_REQUIRE_TOOLS=1`
//! (CI). The first run builds the old release (several minutes); later runs reuse it from
//! `target/previous-release/<commit>/`.

use crate::support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::Proc;

const RELAY_SECRET: &str = "rolling-upgrade-relay-secret-0123456789";

/// Skips (a notice) or, under `WARREN_REQUIRE_TOOLS`, fails.
fn unavailable(why: &str) {
    if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
        panic!("WARREN_REQUIRE_TOOLS is set but the rolling upgrade test cannot run: {why}");
    }
    eprintln!("skipping the rolling upgrade test: {why}");
}

/// The previous release's `warren`, built once from its commit into the target directory.
fn previous_release() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let pinned = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/previous-release"),
    )
    .map_err(|e| format!("reading fixtures/previous-release: {e}"))?;
    let commit = pinned
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or("fixtures/previous-release names no commit")?
        .to_owned();
    // <target>/debug/deps/<this test>: the cache goes beside the build's own output.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or("no target directory above the test binary")?;
    let cache = target.join("previous-release").join(&commit);
    let bin = cache.join("warren");
    if bin.exists() {
        return Ok(bin);
    }
    let present = Command::new("git")
        .args(["-C", &root.display().to_string(), "cat-file", "-e"])
        .arg(format!("{commit}^{{commit}}"))
        .status()
        .map_err(|e| format!("running git: {e}"))?;
    if !present.success() {
        return Err(format!(
            "commit {commit} is not in this clone (a shallow clone?)"
        ));
    }
    // A build of its own (a unique directory, removed whatever happens): an interrupted or
    // concurrent run leaves nothing half-made behind.
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let work = tempfile::Builder::new()
        .prefix("build-")
        .tempdir_in(&cache)
        .map_err(|e| e.to_string())?;
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    let archive = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git -C '{}' archive --format=tar {commit} | tar -x -C '{}'",
            root.display(),
            src.display()
        ))
        .status()
        .map_err(|e| e.to_string())?;
    if !archive.success() {
        return Err(format!("extracting {commit} failed"));
    }
    eprintln!("building the previous release ({commit}) once; this takes a few minutes");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--locked", "-p", "warren", "--bin", "warren"])
        .arg("--target-dir")
        .arg(work.path().join("target"))
        .current_dir(&src)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        // A binary to run, not to debug: no debug info builds and links much faster.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        // This toolchain's compiler, not whatever `rustc` the PATH finds: rustup's proxy
        // would pick the toolchain a dependency's own `rust-toolchain.toml` names (dashmap's
        // says 1.85), which is not installed, when this binary runs outside `cargo test`.
        .env("RUSTC", this_rustc())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    // The build is the test's setup: if it fails, say why rather than skip.
    assert!(
        out.status.success(),
        "building the previous release {commit} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Into place by a rename: the binary exists whole or not at all.
    let staged = work.path().join("warren");
    std::fs::copy(work.path().join("target/debug/warren"), &staged).map_err(|e| e.to_string())?;
    std::fs::rename(&staged, &bin).map_err(|e| e.to_string())?;
    Ok(bin)
}

struct Server {
    proc: Proc,
    base: String,
}

/// Starts `bin server` on the database and waits for its ready file.
fn start_server(bin: &Path, dir: &Path, name: &str, db_url: &str) -> Server {
    let ready = dir.join(format!("{name}.ready"));
    let args: Vec<String> = [
        "server",
        "--listen",
        "127.0.0.1:0",
        "--home",
        &dir.join(name).display().to_string(),
        "--ready-file",
        &ready.display().to_string(),
        "--secret-key-file",
        &dir.join("secret.key").display().to_string(),
        "--lifecycle-interval-seconds",
        "1",
    ]
    .map(str::to_owned)
    .to_vec();
    let envs = [
        ("WARREN_DATABASE_URL", db_url.to_owned()),
        ("WARREN_RELAY_SECRET", RELAY_SECRET.to_owned()),
    ];
    let mut proc = Proc::spawn_bin(bin, name, &args, &envs, &dir.join(format!("{name}.log")));
    let addr = proc.wait_ready(&ready);
    Server {
        proc,
        base: format!("http://{addr}"),
    }
}

/// SIGTERM, and a clean exit within 20 s (as a rolling update stops a pod).
fn stop_cleanly(proc: &mut Proc) {
    let status = proc.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{}", proc.log_text());
}

/// Workspace name → desired state, as server `base` lists them.
async fn listed(http: &reqwest::Client, base: &str, token: &str) -> Vec<(String, String)> {
    let page = support::api(
        http,
        base,
        Some(token),
        reqwest::Method::GET,
        "/workspaces?limit=500",
        None,
    )
    .await;
    let items = page["items"].as_array().cloned();
    let mut out: Vec<(String, String)> = items
        .unwrap_or_default()
        .iter()
        .map(|w: &Value| {
            (
                w["name"].as_str().unwrap_or_default().to_owned(),
                w["desired_state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_and_this_one_serve_one_database_side_by_side() {
    let Ok(base_db) = std::env::var("WARREN_TEST_DATABASE_URL") else {
        eprintln!("skipping the rolling upgrade test: WARREN_TEST_DATABASE_URL is not set");
        return;
    };
    let old_bin = match tokio::task::spawn_blocking(previous_release).await.unwrap() {
        Ok(b) => b,
        Err(why) => return unavailable(&why),
    };
    let schema = support::PgSchema::create(&base_db).await;
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();

    // The old release alone: it makes the schema, the admin and some workspaces.
    let mut old = start_server(&old_bin, dir.path(), "old", &schema.url());
    let password = old.proc.bootstrap_password();
    let token = support::admin_session(&http, &old.base, &password).await;
    support::api(
        &http,
        &old.base,
        Some(&token),
        reqwest::Method::POST,
        "/agents",
        Some(json!({"name": "cluster"})),
    )
    .await;
    let create = |base: String, name: &'static str| {
        let (http, token) = (http.clone(), token.clone());
        async move {
            support::api(
                &http,
                &base,
                Some(&token),
                reqwest::Method::POST,
                "/workspaces",
                Some(json!({"name": name})),
            )
            .await
        }
    };
    let stop = |base: String, name: &'static str| {
        let (http, token) = (http.clone(), token.clone());
        async move {
            support::api(
                &http,
                &base,
                Some(&token),
                reqwest::Method::PUT,
                &format!("/workspaces/{name}/desired_state"),
                Some(json!({"desired_state": "Stopped"})),
            )
            .await
        }
    };
    create(old.base.clone(), "before-a").await;
    create(old.base.clone(), "before-b").await;
    stop(old.base.clone(), "before-b").await;

    // The new build starts beside it (migrating the schema forward) while the old one serves.
    let new = start_server(&support::warren_bin(), dir.path(), "new", &schema.url());
    assert!(
        !new.proc.log_text().contains("password: "),
        "the new server finds the admin the old one made"
    );
    let expected = vec![
        ("before-a".to_owned(), "Running".to_owned()),
        ("before-b".to_owned(), "Stopped".to_owned()),
    ];
    assert_eq!(listed(&http, &new.base, &token).await, expected);

    // Both serve the same users: writes through either are seen by the other.
    create(new.base.clone(), "during-new").await;
    create(old.base.clone(), "during-old").await;
    stop(old.base.clone(), "during-new").await;
    stop(new.base.clone(), "before-a").await;
    let expected = vec![
        ("before-a".to_owned(), "Stopped".to_owned()),
        ("before-b".to_owned(), "Stopped".to_owned()),
        ("during-new".to_owned(), "Stopped".to_owned()),
        ("during-old".to_owned(), "Running".to_owned()),
    ];
    assert_eq!(listed(&http, &old.base, &token).await, expected);
    assert_eq!(listed(&http, &new.base, &token).await, expected);

    // An old replica restarting mid-rollout (a crash, a node drained) starts on the schema
    // the new one migrated, and serves it. Its migrations are all the new one's here, so one
    // more it cannot know is recorded, as a newer release's would be.
    stop_cleanly(&mut old.proc);
    let first_old_log = old.proc.log_text();
    {
        sqlx::any::install_default_drivers();
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&schema.url())
            .await
            .expect("connect to PostgreSQL");
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
             execution_time) VALUES (99990101000000, 'from a newer release', TRUE, '\\x00', 0)",
        )
        .execute(&mut conn)
        .await
        .expect("record a migration no release here knows");
    }
    let mut old = start_server(&old_bin, dir.path(), "old-restarted", &schema.url());
    assert!(
        old.proc
            .log_text()
            .contains("the database was migrated by a newer release"),
        "the old replica says it runs on a newer schema:\n{}",
        old.proc.log_text()
    );
    assert_eq!(listed(&http, &old.base, &token).await, expected);

    // The old one goes (as a rolling update stops it); the new one has everything.
    stop_cleanly(&mut old.proc);
    create(new.base.clone(), "after").await;
    let mut expected = expected;
    expected.push(("after".to_owned(), "Running".to_owned()));
    expected.sort();
    assert_eq!(listed(&http, &new.base, &token).await, expected);
    for (name, log) in [
        ("old", first_old_log),
        ("old-restarted", old.proc.log_text()),
        ("new", new.proc.log_text()),
    ] {
        assert!(!log.contains("panicked"), "{name} server:\n{log}");
    }
}

/// The compiler beside the `cargo` that built these tests (rustup's toolchain directory),
/// or `rustc` from the PATH when there is none there.
fn this_rustc() -> PathBuf {
    let beside = Path::new(env!("CARGO")).with_file_name("rustc");
    if beside.exists() {
        beside
    } else {
        PathBuf::from("rustc")
    }
}
