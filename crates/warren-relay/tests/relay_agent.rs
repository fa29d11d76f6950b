//! The relay with a real agent connection (warren-agent's connection, reconciler and simulated
//! runtime) and a server double: forwarding, authentication, signals, tunnels, reconnects.

use crate::common;

use common::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_types::reconcile::{ReconcileSettings, UpdateType};
use warren_types::relay::SignalResponse;
use warren_types::{ActualState, AgentId, DesiredState};

fn slow_timers() -> ReconcileSettings {
    // Timers far away: anything that happens in these tests happens because of an event.
    ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    }
}

async fn signal(relay: &TestRelay, agent: AgentId, jwt: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(relay.internal_url(&format!("/internal/agents/{agent}/signal")))
        .bearer_auth(jwt)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn reconcile_calls_are_forwarded_with_jwt_and_agent_id() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);

    wait_for("the workspace to run", 20, || async {
        server.with(|s| s.model.actual("ws-a")) == Some(ActualState::Running)
    })
    .await;
    server.with(|s| {
        assert_eq!(s.rejected_jwts, 0);
        assert!(!s.reconcile_agents.is_empty());
        for (header, sub) in &s.reconcile_agents {
            assert_eq!(header, "7");
            assert_eq!(sub, "7");
        }
        assert_eq!(s.model.requests[0].update_type, UpdateType::Full);
    });
    let ws = agent.runtime.workspace(&key("ws-a")).expect("applied");
    assert_eq!(ws.replicas, 1);
}

#[tokio::test]
async fn bad_agent_token_is_refused_and_refusals_are_cached() {
    let server = TestServer::start(slow_timers()).await;
    let relay = TestRelay::start(&server.url).await;
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let connect = |token: &'static str| {
        client
            .get(format!("{}v1/agent/connect", relay.agent_url()))
            .bearer_auth(token)
            .header("connection", "upgrade")
            .header("upgrade", "warren-tunnel/1")
            .send()
    };
    let resp = connect("wrong-token").await.unwrap();
    assert_eq!(resp.status(), 401);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_agent_token");
    assert_eq!(connect("wrong-token").await.unwrap().status(), 401);
    assert_eq!(server.with(|s| s.auth_calls), 1, "the refusal is cached");

    // Without the upgrade it is not a tunnel request at all.
    let resp = client
        .get(format!("{}v1/agent/connect", relay.agent_url()))
        .bearer_auth(GOOD_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 426);

    // A real agent with a bad token never gets a session and never reaches the server.
    let agent = TestAgent::start(relay.agent_url(), "wrong-token");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!agent.connection.is_connected());
    assert!(server.with(|s| s.model.requests.is_empty()));
}

/// A fleet reconnecting at once (a relay restart) does not become as many concurrent
/// requests (and connections) to the server: token checks wait for a bounded number of
/// slots, and every agent still gets in.
#[tokio::test]
async fn a_reconnect_storm_reaches_the_server_a_bounded_number_at_a_time() {
    let server = TestServer::start(slow_timers()).await;
    let fleet = 150;
    server.with(|s| {
        s.auth_delay = Duration::from_millis(50);
        for i in 0..fleet {
            s.tokens.insert(
                format!("storm-{i}"),
                warren_types::relay::AuthenticateResponse {
                    agent_id: AgentId(1_000 + i),
                    agent_name: format!("storm-{i}"),
                },
            );
        }
    });
    let relay = TestRelay::start(&server.url).await;
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let dials = (0..fleet).map(|i| {
        client
            .get(format!("{}v1/agent/connect", relay.agent_url()))
            .bearer_auth(format!("storm-{i}"))
            .header("connection", "upgrade")
            .header("upgrade", "warren-tunnel/1")
            .send()
    });
    let answers = futures::future::join_all(dials).await;
    let upgraded = answers
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status() == 101))
        .count();
    assert_eq!(upgraded, fleet as usize, "every agent of the storm gets in");
    let (calls, most) = server.with(|s| (s.auth_calls, s.auth_in_flight_max));
    assert_eq!(calls, fleet as usize, "one check per token");
    assert!(
        (2..=32).contains(&most),
        "{most} token checks at once: the relay must bound them (and still overlap them)"
    );
}

#[tokio::test]
async fn accepted_tokens_are_cached() {
    let server = TestServer::start(slow_timers()).await;
    let relay = TestRelay::start(&server.url).await;
    let a = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    let b = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("both replicas to connect", 20, || async {
        a.connection.is_connected() && b.connection.is_connected()
    })
    .await;
    // Two connections (replicas of one agent), and at most one authentication call each
    // racing; after that the cache answers.
    let first = server.with(|s| s.auth_calls);
    assert!((1..=2).contains(&first), "{first} auth calls");
    let c = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("a third connection", 20, || async {
        c.connection.is_connected()
    })
    .await;
    assert_eq!(server.with(|s| s.auth_calls), first);

    // A signal reaches every replica.
    let resp = signal(&relay, AGENT, &internal_jwt("warren-server")).await;
    assert_eq!(resp.status(), 200);
    let body: SignalResponse = resp.json().await.unwrap();
    assert_eq!(body.connections, 3);
}

#[tokio::test]
async fn signal_reaches_the_agent_and_triggers_a_partial_reconcile() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("the workspace to run", 20, || async {
        server.with(|s| s.model.actual("ws-a")) == Some(ActualState::Running)
    })
    .await;
    // Let the follow-ups settle, then change the desired state and signal.
    wait_for("the loop to go quiet", 20, || async {
        let before = server.with(|s| s.model.requests.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
        before == server.with(|s| s.model.requests.len())
    })
    .await;
    let partials = server.with(|s| s.model.count(UpdateType::Partial));
    server.with(|s| s.model.set_desired("ws-a", DesiredState::Stopped));

    // Refused without a valid JWT.
    assert_eq!(signal(&relay, AGENT, "nonsense").await.status(), 401);
    let resp = signal(&relay, AGENT, &internal_jwt("warren-server")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<SignalResponse>().await.unwrap().connections, 1);

    wait_for("a partial reconcile and the stop", 20, || async {
        server.with(|s| s.model.actual("ws-a")) == Some(ActualState::Stopped)
    })
    .await;
    assert!(server.with(|s| s.model.count(UpdateType::Partial)) > partials);
    assert_eq!(agent.runtime.workspace(&key("ws-a")).unwrap().replicas, 0);
    // The agent never reconnected for this: the signal came over the open connection.
    assert_eq!(server.with(|s| s.model.count(UpdateType::Full)), 1);

    // An agent that is not connected: nothing to signal, not an error.
    let resp = signal(&relay, AgentId(99), &internal_jwt("warren-server")).await;
    assert_eq!(resp.json::<SignalResponse>().await.unwrap().connections, 0);
}

#[tokio::test]
async fn tunnel_reaches_the_workspace_endpoint() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    agent.echoing("ws-a").await;

    let jwt = internal_jwt("warren-proxy");
    let mut tunnel = open_tunnel(&relay, AGENT, "ws-a", 8080, &jwt)
        .await
        .unwrap();
    tunnel.write_all(b"hello through the relay").await.unwrap();
    let mut buf = [0u8; 23];
    tunnel.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello through the relay");
    tunnel.shutdown().await.unwrap();
    let mut rest = vec![];
    tunnel.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the echo closes after our close");

    // Errors name the problem.
    let (status, body) = open_tunnel(&relay, AGENT, "nope", 8080, &jwt)
        .await
        .err()
        .unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("workspace_not_found"), "{body}");
    let (status, body) = open_tunnel(&relay, AGENT, "ws-a", 9999, &jwt)
        .await
        .err()
        .unwrap();
    assert_eq!(status, 502);
    assert!(body.contains("workspace_unreachable"), "{body}");
    let (status, body) = open_tunnel(&relay, AgentId(99), "ws-a", 8080, &jwt)
        .await
        .err()
        .unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("agent_not_connected"), "{body}");
    let (status, _) = open_tunnel(&relay, AGENT, "ws-a", 8080, "bad")
        .await
        .err()
        .unwrap();
    assert_eq!(status, 401);
}

#[tokio::test]
async fn tunnel_waits_for_an_agent_that_connects_late() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start_on(&server.url, "127.0.0.1:0".parse().unwrap(), |c| {
        c.agent_wait_seconds = 20
    })
    .await;
    let jwt = internal_jwt("warren-proxy");
    let relay = Arc::new(relay);
    let r = relay.clone();
    let pending = tokio::spawn(async move {
        open_tunnel(&r, AGENT, "ws-a", 8080, &jwt)
            .await
            .err()
            .map(|(_, body)| body)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished(), "the request waits for the agent");
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    let echo = echo_server().await;
    agent.has_workspace("ws-a").await;
    agent.runtime.set_endpoint(&key("ws-a"), 8080, echo);
    // The waiting request reached the agent once it connected: it either got through or was
    // answered by the agent (the workspace may not have been applied yet), never "not connected".
    if let Some(body) = pending.await.unwrap() {
        assert!(!body.contains("agent_not_connected"), "{body}");
    }
    let jwt = internal_jwt("warren-proxy");
    assert!(open_tunnel(&relay, AGENT, "ws-a", 8080, &jwt).await.is_ok());
}

#[tokio::test]
async fn agent_reconnects_after_relay_restart_and_reconciles_fully() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent_addr = relay.agent_addr;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("the first full reconcile", 20, || async {
        server.with(|s| s.model.count(UpdateType::Full)) == 1 && agent.connection.is_connected()
    })
    .await;
    relay.stop().await;
    wait_for("the agent to notice", 20, || async {
        !agent.connection.is_connected()
    })
    .await;

    let relay = TestRelay::start_on(&server.url, agent_addr, |_| {}).await;
    wait_for("a full reconcile after reconnecting", 20, || async {
        server.with(|s| s.model.count(UpdateType::Full)) >= 2
    })
    .await;
    assert!(agent.connection.is_connected());
    // And the new relay routes to it.
    let resp = signal(&relay, AGENT, &internal_jwt("warren-server")).await;
    assert_eq!(resp.json::<SignalResponse>().await.unwrap().connections, 1);
}

#[tokio::test]
async fn dropped_agent_connection_unregisters_at_once() {
    let server = TestServer::start(slow_timers()).await;
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("the agent to connect", 20, || async {
        agent.connection.is_connected()
    })
    .await;
    drop(agent);
    wait_for("the relay to forget the agent", 20, || async {
        let resp = signal(&relay, AGENT, &internal_jwt("warren-server")).await;
        resp.json::<SignalResponse>().await.unwrap().connections == 0
    })
    .await;
}

#[tokio::test]
async fn concurrent_streams_are_independent() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = Arc::new(TestRelay::start(&server.url).await);
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    agent.echoing("ws-a").await;

    let mut tasks = vec![];
    for i in 0..16u8 {
        let relay = relay.clone();
        tasks.push(tokio::spawn(async move {
            let jwt = internal_jwt("warren-proxy");
            let mut t = open_tunnel(&relay, AGENT, "ws-a", 8080, &jwt)
                .await
                .unwrap();
            let payload: Vec<u8> = (0..200_000u32).map(|n| (n as u8) ^ i).collect();
            let (mut r, mut w) = tokio::io::split(&mut t);
            let expected = payload.clone();
            let write = async move {
                w.write_all(&payload).await.unwrap();
            };
            let read = async move {
                let mut got = vec![0u8; expected.len()];
                r.read_exact(&mut got).await.unwrap();
                assert!(got == expected, "stream {i} got someone else's bytes");
            };
            tokio::join!(write, read);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn a_slow_reader_does_not_stall_other_streams() {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    agent.has_workspace("ws-a").await;
    // Port 1: a firehose that writes as fast as it is allowed to; port 2: an echo.
    let firehose = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let firehose_addr = firehose.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    tokio::spawn(async move {
        let (mut sock, _) = firehose.accept().await.unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while sock.write_all(&chunk).await.is_ok() {
            w.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    });
    agent.runtime.set_endpoint(&key("ws-a"), 1, firehose_addr);
    agent
        .runtime
        .set_endpoint(&key("ws-a"), 2, echo_server().await);

    let jwt = internal_jwt("warren-proxy");
    // Opened and never read.
    let _stalled = open_tunnel(&relay, AGENT, "ws-a", 1, &jwt).await.unwrap();
    wait_for("the firehose to fill the pipes", 20, || async {
        written.load(Ordering::Relaxed) > 0
    })
    .await;

    // Meanwhile 8 MB go through another stream of the same agent connection.
    let mut echo = open_tunnel(&relay, AGENT, "ws-a", 2, &jwt).await.unwrap();
    let payload = vec![42u8; 8 * 1024 * 1024];
    let (mut r, mut w) = tokio::io::split(&mut echo);
    let expected = payload.len();
    let transfer = async {
        tokio::join!(async { w.write_all(&payload).await.unwrap() }, async {
            let mut got = vec![0u8; expected];
            r.read_exact(&mut got).await.unwrap();
        })
    };
    tokio::time::timeout(Duration::from_secs(60), transfer)
        .await
        .expect("the echo stream is not stalled by the unread one");

    // Back-pressure held the firehose: what it wrote is bounded by windows and socket
    // buffers, not by how long it has been running.
    let buffered = written.load(Ordering::Relaxed);
    assert!(
        buffered < 48 * 1024 * 1024,
        "{buffered} bytes buffered for an unread stream"
    );
}
