//! Three relay instances sharing a Redis routing table (`WARREN_TEST_REDIS_URL`): requests
//! for an agent reach it through whichever instance holds its connection, failover, Redis
//! restarts, stale entries, waiting for an agent, and no loops between instances.

use crate::common;
use crate::redis_support;

use common::*;
use redis::AsyncCommands;
use redis_support::*;
use std::time::Duration;
use warren_types::reconcile::ReconcileSettings;
use warren_types::relay::SignalResponse;
use warren_types::AgentId;
use warren_types::{ActualState, DesiredState};

fn slow_timers() -> ReconcileSettings {
    ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    }
}

/// A server with workspace `ws-a`, three relay instances sharing Redis under a fresh prefix,
/// and an agent with an echo endpoint connected to instance 0, its entry in Redis.
struct Fleet {
    prefix: Prefix,
    server: TestServer,
    relays: Vec<Instance>,
    agent: TestAgent,
}

impl Fleet {
    /// The server and the three instances, no agent yet.
    async fn relays(redis: &str) -> (Prefix, TestServer, Vec<Instance>) {
        let prefix = Prefix::new(redis);
        let server = TestServer::start(slow_timers()).await;
        server.with(|s| s.model.create("ws-a"));
        let mut relays = Vec::new();
        for _ in 0..3 {
            relays.push(Instance::start(&server.url, redis, &prefix.prefix, |_| {}).await);
        }
        (prefix, server, relays)
    }

    async fn start(redis: &str) -> Fleet {
        let (prefix, server, relays) = Fleet::relays(redis).await;
        let agent = agent_with_echo(&server, relays[0].agent_url()).await;
        wait_for("the agent's entry in redis", 20, || {
            registered_on(&prefix, relays[0].instance)
        })
        .await;
        Fleet {
            prefix,
            server,
            relays,
            agent,
        }
    }
}

/// A workspace `ws-a` with an echo endpoint on port 8080, served by an agent dialling `url`.
async fn agent_with_echo(server: &TestServer, url: url::Url) -> TestAgent {
    let agent = TestAgent::start(url, GOOD_TOKEN);
    agent.echoing("ws-a").await;
    let _ = server;
    agent
}

async fn registered_on(prefix: &Prefix, instance: uuid::Uuid) -> bool {
    let mut conn = prefix.conn().await;
    let fields: Vec<String> = conn.hkeys(prefix.agent_key(AGENT)).await.unwrap();
    fields.iter().any(|f| f.starts_with(&instance.to_string()))
}

async fn signal(internal: std::net::SocketAddr, agent: AgentId) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{internal}/internal/agents/{agent}/signal"))
        .bearer_auth(internal_jwt("warren-server"))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn tunnel_and_signal_reach_an_agent_on_another_instance() {
    let Some(redis) = redis_url() else { return };
    let Fleet {
        prefix,
        server,
        relays,
        agent,
    } = Fleet::start(&redis).await;

    // Proxy traffic through instances 1 and 2, which hold no connection of the agent.
    echo_once(relays[1].internal_addr, AGENT, b"routed through one")
        .await
        .unwrap();
    echo_once(relays[2].internal_addr, AGENT, b"routed through two")
        .await
        .unwrap();

    // A failed dial on the gateway comes back to the client as the gateway's answer.
    let (status, body) = open_routed_tunnel(relays[1].internal_addr, AGENT, "nope", 8080)
        .await
        .unwrap_err();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("workspace_not_found"), "{body}");

    // A reconcile signal through instance 2 reaches the agent on instance 0.
    wait_for("the workspace to run", 20, || async {
        server.with(|s| s.model.actual("ws-a")) == Some(ActualState::Running)
    })
    .await;
    server.with(|s| s.model.set_desired("ws-a", DesiredState::Stopped));
    let resp = signal(relays[2].internal_addr, AGENT).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<SignalResponse>().await.unwrap().connections, 1);
    wait_for("the stop, triggered by the routed signal", 20, || async {
        server.with(|s| s.model.actual("ws-a")) == Some(ActualState::Stopped)
    })
    .await;
    assert_eq!(agent.runtime.workspace(&key("ws-a")).unwrap().replicas, 0);

    // Clean shutdown removes the instance's entries and metadata.
    let gone = relays[0].instance;
    let mut it = relays.into_iter();
    it.next().unwrap().stop().await;
    let mut conn = prefix.conn().await;
    let meta: Option<String> = conn.get(prefix.instance_key(gone)).await.unwrap();
    assert!(
        meta.is_none(),
        "instance metadata removed on clean shutdown"
    );
    drop(agent);
}

#[tokio::test]
async fn killing_the_gateway_moves_the_agent_and_traffic_resumes() {
    let Some(redis) = redis_url() else { return };
    let (prefix, server, mut relays) = Fleet::relays(&redis).await;
    let lb = Balancer::start(relays.iter().map(|r| r.agent_addr).collect()).await;
    let _agent = agent_with_echo(&server, lb.url()).await;
    wait_for("the agent on instance 0", 20, || {
        registered_on(&prefix, relays[0].instance)
    })
    .await;
    echo_once(relays[2].internal_addr, AGENT, b"before")
        .await
        .unwrap();

    let first = relays.remove(0);
    let dead = first.instance;
    first.stop().await;
    wait_for("the agent on another instance", 20, || async {
        registered_on(&prefix, relays[0].instance).await
            || registered_on(&prefix, relays[1].instance).await
    })
    .await;
    assert!(!registered_on(&prefix, dead).await);
    // Traffic resumes through either remaining instance, whichever holds the agent.
    echo_once(relays[1].internal_addr, AGENT, b"after one")
        .await
        .unwrap();
    echo_once(relays[0].internal_addr, AGENT, b"after zero")
        .await
        .unwrap();
}

#[tokio::test]
async fn routing_recovers_after_redis_restarts() {
    if redis_url().is_none() {
        return;
    }
    let Some(mut private) = PrivateRedis::start().await else {
        return;
    };
    let redis = private.url();
    let Fleet {
        prefix,
        server: _server,
        relays,
        agent: _agent,
    } = Fleet::start(&redis).await;
    echo_once(relays[1].internal_addr, AGENT, b"before")
        .await
        .unwrap();

    private.restart().await;
    // Redis came back empty; the instances re-register without being restarted.
    wait_for("the entry to be written again", 30, || {
        registered_on(&prefix, relays[0].instance)
    })
    .await;
    wait_for("routed traffic to work again", 30, || async {
        echo_once(relays[1].internal_addr, AGENT, b"after")
            .await
            .is_ok()
    })
    .await;
    // A local request never needed Redis.
    echo_once(relays[0].internal_addr, AGENT, b"local")
        .await
        .unwrap();
}

#[tokio::test]
async fn an_agent_connecting_while_redis_is_down_is_routable_once_it_is_back() {
    if redis_url().is_none() {
        return;
    }
    let Some(mut private) = PrivateRedis::start().await else {
        return;
    };
    let redis = private.url();
    let (prefix, server, relays) = Fleet::relays(&redis).await;
    private.kill();
    // Redis is down: the agent still connects and is served by its own instance.
    let _agent = agent_with_echo(&server, relays[0].agent_url()).await;
    wait_for("a local tunnel without redis", 30, || async {
        echo_once(relays[0].internal_addr, AGENT, b"local")
            .await
            .is_ok()
    })
    .await;
    private.start_again().await;
    wait_for("the entry written once redis is back", 30, || {
        registered_on(&prefix, relays[0].instance)
    })
    .await;
    wait_for("routed traffic", 30, || async {
        echo_once(relays[2].internal_addr, AGENT, b"routed")
            .await
            .is_ok()
    })
    .await;
}

#[tokio::test]
async fn stale_entries_are_skipped_and_collected() {
    let Some(redis) = redis_url() else { return };
    let Fleet {
        prefix,
        server: _server,
        relays,
        agent: _agent,
    } = Fleet::start(&redis).await;

    // By hand: an entry naming instance 2 (alive, but holding no connection: it must answer
    // "agent not here"), sorted before every real one (nil uuid); an entry of a crashed
    // instance whose expiry passed; and one of an instance whose metadata is gone.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let nil = uuid::Uuid::nil();
    let expired = uuid::Uuid::from_u128(1);
    let vanished = uuid::Uuid::from_u128(2);
    let conn_id = uuid::Uuid::new_v4();
    let mut conn = prefix.conn().await;
    let key = prefix.agent_key(AGENT);
    let _: () = conn
        .hset(&key, format!("{nil}/{conn_id}"), now_ms + 60_000)
        .await
        .unwrap();
    let _: () = conn
        .set(
            prefix.instance_key(nil),
            format!("http://{}", relays[2].peer_addr),
        )
        .await
        .unwrap();
    let _: () = conn
        .hset(&key, format!("{expired}/{conn_id}"), now_ms - 1_000)
        .await
        .unwrap();
    let _: () = conn
        .set(
            prefix.instance_key(expired),
            format!("http://{}", relays[2].peer_addr),
        )
        .await
        .unwrap();
    let _: () = conn
        .hset(&key, format!("{vanished}/{conn_id}"), now_ms + 60_000)
        .await
        .unwrap();

    echo_once(relays[1].internal_addr, AGENT, b"past the stale ones")
        .await
        .unwrap();
    let fields: Vec<String> = conn.hkeys(&key).await.unwrap();
    assert!(
        !fields.iter().any(|f| f.starts_with(&expired.to_string())),
        "expired entry garbage-collected: {fields:?}"
    );
}

#[tokio::test]
async fn a_request_waits_for_an_agent_that_connects_later() {
    let Some(redis) = redis_url() else { return };
    let prefix = Prefix::new(&redis);
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let mut relays = Vec::new();
    for _ in 0..3 {
        relays.push(
            Instance::start(&server.url, &redis, &prefix.prefix, |c| {
                c.agent_wait_seconds = 15
            })
            .await,
        );
    }
    let internal = relays[1].internal_addr;
    let started = tokio::time::Instant::now();
    let request =
        tokio::spawn(async move { open_routed_tunnel(internal, AGENT, "ws-a", 8080).await });
    // The agent arrives 2 s later, on another instance; its workspace has no endpoint yet, so
    // the answer proves the request reached it (the dial itself fails cleanly).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _agent = TestAgent::start(relays[0].agent_url(), GOOD_TOKEN);
    let result = tokio::time::timeout(Duration::from_secs(20), request)
        .await
        .expect("the request ends")
        .unwrap();
    let waited = started.elapsed();
    match result {
        Ok(_) => {}
        Err((status, body)) => {
            assert!(
                !body.contains("agent_not_connected"),
                "the request found the agent: {status} {body}"
            );
        }
    }
    assert!(waited >= Duration::from_secs(2));
}

#[tokio::test]
async fn the_peer_endpoint_never_forwards() {
    let Some(redis) = redis_url() else { return };
    let Fleet {
        prefix: _prefix,
        server: _server,
        relays,
        agent: _agent,
    } = Fleet::start(&redis).await;
    let peer_jwt = {
        let keys = warren_relay::jwt::PeerKeys::new(PEER_SECRET.as_bytes());
        keys.mint(AGENT).unwrap()
    };
    let http = reqwest::Client::builder().http1_only().build().unwrap();
    // Instance 1 knows (through Redis) that instance 0 holds the agent, yet asked directly on
    // its relay↔relay endpoint it answers "agent not here" instead of forwarding.
    let resp = http
        .get(format!(
            "http://{}/peer/agents/{AGENT}/tunnel?workspace=ws-a&namespace={}&port=8080",
            relays[1].peer_addr,
            model::NAMESPACE
        ))
        .bearer_auth(&peer_jwt)
        .header("connection", "upgrade")
        .header("upgrade", "warren-tunnel/1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "agent_not_here");
    let resp = http
        .post(format!(
            "http://{}/peer/agents/{AGENT}/signal",
            relays[1].peer_addr
        ))
        .bearer_auth(&peer_jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // The gateway itself serves it.
    let resp = http
        .post(format!(
            "http://{}/peer/agents/{AGENT}/signal",
            relays[0].peer_addr
        ))
        .bearer_auth(&peer_jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Server and proxy tokens, and tokens for another agent, are refused there.
    for token in [
        internal_jwt("warren-server"),
        warren_relay::jwt::PeerKeys::new(PEER_SECRET.as_bytes())
            .mint(AgentId(99))
            .unwrap(),
    ] {
        let resp = http
            .post(format!(
                "http://{}/peer/agents/{AGENT}/signal",
                relays[0].peer_addr
            ))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }
}

#[tokio::test]
async fn entries_of_a_crashed_instance_expire() {
    use warren_relay::redis_registry::RedisRegistry;
    use warren_relay::registry::{AgentRegistry, ConnectionEntry, ConnectionId, InstanceId};
    let Some(redis) = redis_url() else { return };
    let prefix = Prefix::new(&redis);
    let mut config = registry_config(&redis, &prefix.prefix, "127.0.0.1:9".parse().unwrap());
    config.entry_ttl = Duration::from_secs(2);
    config.refresh_interval = Duration::from_secs(1);
    let reg = RedisRegistry::connect(config).await.unwrap();
    let mut events = reg.subscribe();
    let entry = ConnectionEntry {
        agent: AgentId(41),
        instance: reg.local_instance().unwrap(),
        connection: ConnectionId(uuid::Uuid::new_v4()),
    };
    reg.register(entry).await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .unwrap()
            .unwrap(),
        AgentId(41)
    );
    assert_eq!(reg.lookup(AgentId(41)).await.unwrap(), vec![entry]);
    // Refreshed while alive: still there after more than one TTL.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(reg.lookup(AgentId(41)).await.unwrap(), vec![entry]);
    reg.unregister(entry).await.unwrap();
    assert!(reg.lookup(AgentId(41)).await.unwrap().is_empty());
    reg.register(entry).await.unwrap();
    // A crash: no refresh, no clean removal.
    drop(reg);
    let mut c2 = registry_config(&redis, &prefix.prefix, "127.0.0.1:9".parse().unwrap());
    c2.instance = InstanceId(uuid::Uuid::new_v4());
    let other = RedisRegistry::connect(c2).await.unwrap();
    wait_for("the crashed instance's entry to expire", 10, || async {
        other.lookup(AgentId(41)).await.unwrap().is_empty()
    })
    .await;
    other.close().await;
}

#[tokio::test]
async fn exec_reaches_an_agent_on_another_instance() {
    use warren_types::relay::{ExecFrame, ExecQuery, ExecTarget, TUNNEL_PROTOCOL};
    let Some(redis) = redis_url() else { return };
    let Fleet {
        prefix: _prefix,
        server: _server,
        relays,
        agent,
    } = Fleet::start(&redis).await;
    let dir = tempfile::tempdir().unwrap();
    agent.runtime.enable_exec(dir.path());

    let open = |command: Vec<String>| {
        let target = ExecTarget {
            workspace: "ws-a".into(),
            namespace: common::model::NAMESPACE.into(),
            container: None,
            command,
            env: vec![],
            tty: false,
            size: None,
            task: None,
        };
        let internal = relays[1].internal_addr;
        async move {
            reqwest::Client::builder()
                .http1_only()
                .build()
                .unwrap()
                .get(format!("http://{internal}/internal/agents/{AGENT}/exec"))
                .query(&ExecQuery {
                    request: serde_json::to_string(&target).unwrap(),
                })
                .bearer_auth(internal_jwt("warren-proxy"))
                .header("connection", "upgrade")
                .header("upgrade", TUNNEL_PROTOCOL)
                .send()
                .await
                .unwrap()
        }
    };
    // Through instance 1, which holds no connection of the agent.
    let resp = open(vec!["/bin/sh".into(), "-c".into(), "cat; exit 4".into()]).await;
    assert_eq!(resp.status(), 101);
    let mut io = resp.upgrade().await.unwrap();
    warren_tunnel::write_exec_frame(&mut io, &ExecFrame::Stdin(b"routed".to_vec()))
        .await
        .unwrap();
    warren_tunnel::write_exec_frame(&mut io, &ExecFrame::StdinEof)
        .await
        .unwrap();
    let (mut out, mut code) = (Vec::new(), None);
    while let Some(frame) = warren_tunnel::read_exec_frame(&mut io).await.unwrap() {
        match frame {
            ExecFrame::Stdout(b) => out.extend(b),
            ExecFrame::Exit(e) => code = e.code,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(out, b"routed");
    assert_eq!(code, Some(4));

    // The gateway's definite answer comes back as is.
    let resp = open(vec!["/definitely/not/here".into()]).await;
    assert_eq!(resp.status(), 502);
    assert!(resp.text().await.unwrap().contains("exec_failed"));
}

#[tokio::test]
async fn logs_reach_an_agent_on_another_instance() {
    use tokio::io::AsyncReadExt;
    use warren_types::relay::TUNNEL_PROTOCOL;
    let Some(redis) = redis_url() else { return };
    let Fleet {
        prefix: _prefix,
        server: _server,
        relays,
        agent,
    } = Fleet::start(&redis).await;
    agent
        .runtime
        .set_logs(&key("ws-a"), None, "first\nsecond\nthird\n");
    let internal = relays[1].internal_addr;
    let open = |workspace: &'static str| async move {
        reqwest::Client::builder()
            .http1_only()
            .build()
            .unwrap()
            .get(format!("http://{internal}/internal/agents/{AGENT}/logs"))
            .query(&[
                ("workspace", workspace),
                ("namespace", common::model::NAMESPACE),
                ("tail", "2"),
            ])
            .bearer_auth(internal_jwt("warren-server"))
            .header("connection", "upgrade")
            .header("upgrade", TUNNEL_PROTOCOL)
            .send()
            .await
            .unwrap()
    };
    // Through instance 1, which holds no connection of the agent.
    let resp = open("ws-a").await;
    assert_eq!(resp.status(), 101);
    let mut text = String::new();
    resp.upgrade()
        .await
        .unwrap()
        .read_to_string(&mut text)
        .await
        .unwrap();
    assert_eq!(text, "second\nthird\n");
    // The gateway's definite answer comes back as is.
    let resp = open("ws-unknown").await;
    assert_eq!(resp.status(), 404);
    assert!(resp.text().await.unwrap().contains("workspace_not_found"));
}
