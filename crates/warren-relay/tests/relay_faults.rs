//! Connection faults between agent and relay: a relay that stops answering without closing the
//! socket, and the agent's identity handshake.

use crate::common;

use common::*;
use std::time::Duration;
use warren_agent::connection::{identify, ConnectionConfig};
use warren_types::reconcile::{ReconcileSettings, UpdateType};

fn slow_timers() -> ReconcileSettings {
    ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    }
}

#[tokio::test]
async fn agent_leaves_a_silent_relay_connection_and_reconnects() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let proxy = FreezingProxy::start(relay.agent_addr).await;
    let agent = TestAgent::start_with(
        format!("http://{}", proxy.addr).parse().unwrap(),
        GOOD_TOKEN,
        |c| {
            c.heartbeat_interval = Duration::from_millis(200);
            c.heartbeat_timeout = Duration::from_millis(300);
        },
    );
    wait_for("the first full reconcile", 20, || async {
        server.with(|s| s.model.count(UpdateType::Full)) == 1
    })
    .await;
    let before = proxy.accepted();
    proxy.freeze_existing();
    // The heartbeat goes unanswered: the agent drops the connection, dials again (a new
    // proxied connection, not frozen) and reconciles fully.
    wait_for("a new connection", 20, || async {
        proxy.accepted() > before
    })
    .await;
    wait_for("a full reconcile on the new connection", 20, || async {
        server.with(|s| s.model.count(UpdateType::Full)) >= 2
    })
    .await;
    assert!(agent.connection.is_connected());
}

#[tokio::test]
async fn identify_names_the_agent_and_refuses_bad_tokens() {
    let server = TestServer::start(slow_timers()).await;
    let relay = TestRelay::start(&server.url).await;
    let config = ConnectionConfig::new(relay.agent_url(), GOOD_TOKEN.into());
    assert_eq!(identify(&config).await.unwrap(), AGENT);
    let bad = ConnectionConfig::new(relay.agent_url(), "nope".into());
    let err = identify(&bad).await.unwrap_err();
    assert!(err.is_auth(), "{err}");
    assert!(err.to_string().contains("refused"), "{err}");
}

#[tokio::test]
async fn server_outage_is_reported_not_cached_and_the_agent_recovers() {
    // A port with nothing behind it yet: the server is down when the agent arrives.
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_addr = probe.local_addr().unwrap();
    drop(probe);
    let server_url: url::Url = format!("http://{server_addr}").parse().unwrap();
    let relay = TestRelay::start(&server_url).await;

    let resp = reqwest::Client::builder()
        .http1_only()
        .build()
        .unwrap()
        .get(format!("{}v1/agent/connect", relay.agent_url()))
        .bearer_auth(GOOD_TOKEN)
        .header("connection", "upgrade")
        .header("upgrade", "warren-tunnel/1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_unavailable");

    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    // The server comes up: the outage was not cached, the agent connects and reconciles.
    let server = TestServer::start_on(server_addr, slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    wait_for(
        "the agent to reconcile once the server is back",
        20,
        || async { server.with(|s| s.model.count(UpdateType::Full)) >= 1 },
    )
    .await;
    assert!(agent.connection.is_connected());
}

#[tokio::test]
async fn relay_closes_and_unregisters_a_silent_agent_connection() {
    let server = TestServer::start(slow_timers()).await;
    let relay = TestRelay::start_on(&server.url, "127.0.0.1:0".parse().unwrap(), |c| {
        c.agent_idle_timeout_seconds = 1
    })
    .await;
    // An agent that authenticates and then goes silent (no heartbeat, no streams).
    let resp = reqwest::Client::builder()
        .http1_only()
        .build()
        .unwrap()
        .get(format!("{}v1/agent/connect", relay.agent_url()))
        .bearer_auth(GOOD_TOKEN)
        .header("connection", "upgrade")
        .header("upgrade", "warren-tunnel/1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    let mut silent = resp.upgrade().await.unwrap();
    let connections = || async {
        reqwest::Client::new()
            .post(relay.internal_url(&format!("/internal/agents/{AGENT}/signal")))
            .bearer_auth(internal_jwt("warren-server"))
            .send()
            .await
            .unwrap()
            .json::<warren_types::relay::SignalResponse>()
            .await
            .unwrap()
            .connections
    };
    // Registered while fresh (the signal itself opens a stream; it is not agent activity).
    assert_eq!(connections().await, 1);
    wait_for("the relay to drop the silent connection", 20, || async {
        connections().await == 0
    })
    .await;
    // And it closed the socket: reading ends (after yamux's go-away frame, if any).
    use tokio::io::AsyncReadExt;
    let mut sink = vec![];
    tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut sink))
        .await
        .expect("the relay closes the connection")
        .ok();
}
