//! The REST API under property-based fuzzing: schemathesis (PyPI, installed by
//! `.ci/setup-tools.sh`) generates requests from `/api/v1/openapi.json` — valid ones and
//! ones the document forbids — against a running server, as an admin and as a plain user.
//! No answer may be a 5xx, every answer must match the document (status, content type,
//! headers, body schema), and requests the document forbids must be refused.
//!
//! Left out: `positive_data_acceptance` (the domain refuses documented-valid input for its
//! own reasons: a name already taken, an agent that does not exist), token revocation (the
//! fuzzer would revoke the very token it runs with), changes to accounts as the admin (it
//! would demote, disable or reset the password of the accounts it runs as; as a plain user
//! they are fuzzed, and refused), and a workspace's logs (read through a
//! relay and an agent, which a server alone has not: its documented 502/503 would count as
//! server errors). Skips with a notice without
//! schemathesis, unless `WARREN_REQUIRE_TOOLS=1`.

use crate::common;

use common::*;
use serde_json::json;
use std::process::Stdio;

/// Examples per operation and phase; bounded so the run takes well under a minute.
const EXAMPLES: &str = "25";

fn schemathesis() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("schemathesis"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let notice = "schemathesis is not installed (run .ci/setup-tools.sh)";
        if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("WARREN_REQUIRE_TOOLS=1 but {notice}");
        }
        eprintln!("skipping: {notice}");
    }
    found
}

async fn fuzz(st: &std::path::Path, base: &str, token: &str, label: &str, exclude_names: &str) {
    // Schemathesis keeps a cache of its findings in the working directory: not in the tree.
    let cwd = tempfile::tempdir().expect("temporary directory");
    let out = tokio::process::Command::new(st)
        .current_dir(cwd.path())
        .args([
            "--no-color",
            "run",
            &format!("{base}/api/v1/openapi.json"),
            "--header",
            &format!("Authorization: Bearer {token}"),
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--exclude-path-regex",
            r"tokens/\{id\}|/logs$",
            "--exclude-name-regex",
            exclude_names,
            "--max-examples",
            EXAMPLES,
            "--seed",
            "20261125",
            "--workers",
            "2",
            "--request-timeout",
            "20",
        ])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run schemathesis");
    let text = String::from_utf8_lossy(&out.stdout);
    let tail: Vec<&str> = text.lines().collect();
    let tail = tail[tail.len().saturating_sub(120)..].join("\n");
    assert!(
        out.status.success(),
        "[{label}] schemathesis found problems:\n{tail}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "[{label}] {}",
        text.lines()
            .find(|l| l.contains("generated"))
            .unwrap_or("")
            .trim()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_every_generated_request_as_documented() {
    let Some(st) = schemathesis() else { return };
    let s = TestServer::start(&DbChoice::Sqlite).await;
    s.agent("a1", json!({})).await;
    let user = s.user("fuzzer", &["api", "workspace"]).await;
    let account_changes = r"^(PATCH|DELETE) /api/v1/users/\{user\}$";
    fuzz(&st, &s.base, &s.admin_token, "admin", account_changes).await;
    fuzz(&st, &s.base, &user, "user", "^$").await;
    s.stop().await;
}
