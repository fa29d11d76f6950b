//! A workspace container's recent output through a real relay and a real agent connection
//! (simulated runtime): the tail asked for, another container, errors named, bad queries.

use crate::common;

use common::*;
use tokio::io::AsyncReadExt;

/// The logs stream the server asks for with `query`, or `Err((status, body))` when refused.
async fn logs_upgrade(
    relay: &TestRelay,
    query: &[(&str, &str)],
) -> Result<reqwest::Upgraded, (u16, String)> {
    let req = http1()
        .get(relay.internal_url(&format!("/internal/agents/{AGENT}/logs")))
        .query(query)
        .bearer_auth(internal_jwt("warren-server"));
    upgrade(req).await
}

/// The text, or `Err((status, body))` when refused.
async fn logs(relay: &TestRelay, query: &[(&str, &str)]) -> Result<String, (u16, String)> {
    let mut io = logs_upgrade(relay, query).await?;
    let mut text = String::new();
    io.read_to_string(&mut text).await.unwrap();
    Ok(text)
}

#[tokio::test]
async fn logs_come_back_as_text_with_the_tail_asked_for() {
    let (_server, relay, agent) = one_workspace().await;
    let ns = common::model::NAMESPACE;
    agent
        .runtime
        .set_logs(&key("ws-a"), None, "one\ntwo\nthree\nfour\n");
    agent
        .runtime
        .set_logs(&key("ws-a"), Some("sidecar"), "side 1\nside 2\n");
    let q = |tail: &'static str| vec![("workspace", "ws-a"), ("namespace", ns), ("tail", tail)];
    assert_eq!(logs(&relay, &q("2")).await.unwrap(), "three\nfour\n");
    assert_eq!(
        logs(&relay, &q("100")).await.unwrap(),
        "one\ntwo\nthree\nfour\n"
    );
    let mut side = q("1");
    side.push(("container", "sidecar"));
    assert_eq!(logs(&relay, &side).await.unwrap(), "side 2\n");

    // Errors name the problem.
    let mut missing = q("1");
    missing.push(("container", "db"));
    let (status, body) = logs(&relay, &missing).await.unwrap_err();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("container db"), "{body}");
    let (status, body) = logs(
        &relay,
        &[("workspace", "nope"), ("namespace", ns), ("tail", "5")],
    )
    .await
    .unwrap_err();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("workspace_not_found"), "{body}");
    let (status, body) = logs(&relay, &[("workspace", "ws-a"), ("tail", "x")])
        .await
        .unwrap_err();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_query"), "{body}");
}

/// Following: the tail at once, then each later write as it happens; the client leaving ends
/// it on the agent's side too (a new follower still works).
#[tokio::test]
async fn followed_logs_stream_later_output() {
    let (_server, relay, agent) = one_workspace().await;
    let ns = common::model::NAMESPACE;
    agent.runtime.set_logs(&key("ws-a"), None, "one\ntwo\n");
    let open = || async {
        let query = [
            ("workspace", "ws-a"),
            ("namespace", ns),
            ("tail", "1"),
            ("follow", "true"),
        ];
        let upgraded = logs_upgrade(&relay, &query).await;
        upgraded.unwrap_or_else(|(status, body)| panic!("refused: {status} {body}"))
    };
    let mut io = open().await;
    assert_eq!(read_until(&mut io, "two\n").await, "two\n");
    agent.runtime.append_logs(&key("ws-a"), None, "three\n");
    assert_eq!(read_until(&mut io, "three\n").await, "three\n");
    drop(io);
    let mut again = open().await;
    assert_eq!(read_until(&mut again, "three\n").await, "three\n");
}

/// Reads from `io` until `want` came; everything read.
async fn read_until(io: &mut reqwest::Upgraded, want: &str) -> String {
    let mut got = String::new();
    let mut buf = vec![0u8; 1024];
    while !got.contains(want) {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), io.read(&mut buf))
            .await
            .expect("the output came")
            .unwrap();
        assert!(n > 0, "ended early: {got:?}");
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    got
}
