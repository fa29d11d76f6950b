//! The web terminal against a real relay and agent connection whose simulated runtime runs
//! commands as local processes; the page side is tokio-tungstenite.

use super::*;
use crate::activity::Activity;
use crate::config::ProxyConfig;
use axum::routing::post;
use axum::Router;
use futures::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;
use warren_agent::connection::{ConnectionConfig, RelayConnection};
use warren_agent::runtime::simulated::SimulatedRuntime;
use warren_agent::runtime::{WorkspaceKey, WorkspaceRuntime};
use warren_types::ids::{AgentId, WorkspaceId};
use warren_types::internal::PlannedStop;
use warren_types::relay::{AuthenticateResponse, AUTHENTICATE_PATH};

const SECRET: &str = "terminal-test-secret-0123456789abcdef";
const AGENT: AgentId = AgentId(7);
const NAMESPACE: &str = "warren-ws";

struct Env {
    runtime: Arc<SimulatedRuntime>,
    shared: Arc<Shared>,
    /// The terminal host as the test serves it (`127.0.0.1:port`).
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn access(workspace: &str, planned_stop: Option<PlannedStop>) -> WorkspaceAccess {
    WorkspaceAccess {
        workspace_id: WorkspaceId(42),
        agent_id: AGENT,
        namespace: NAMESPACE.into(),
        port: None,
        planned_stop,
        ..crate::http::authz::tests::sample(workspace)
    }
}

async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
    });
}

/// A server double that accepts any agent token, a relay, an agent with workspace `ws-a`,
/// and an HTTP listener that hands every request to `handle` for `workspace`.
async fn start(workspace: &str) -> Env {
    start_planned(workspace, None).await
}

/// [`start`], with a workspace a timer stops as `planned` says (the server double answers
/// the proxy's questions with it too).
async fn start_planned(workspace: &str, planned: Option<PlannedStop>) -> Env {
    let shutdown = CancellationToken::new();
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_url: url::Url = format!("http://{}", server.local_addr().unwrap())
        .parse()
        .unwrap();
    let answer = access(workspace, planned.clone());
    let app = Router::new()
        .route(
            AUTHENTICATE_PATH,
            post(|| async {
                axum::Json(AuthenticateResponse {
                    agent_id: AGENT,
                    agent_name: "agent-seven".into(),
                })
            }),
        )
        .route(
            warren_types::internal::WORKSPACE_ACCESS_PATH,
            axum::routing::get(move || {
                let a = answer.clone();
                async move { axum::Json(a) }
            }),
        );
    serve(server, app, shutdown.clone()).await;

    let agents = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let internal = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent_url: url::Url = format!("http://{}", agents.local_addr().unwrap())
        .parse()
        .unwrap();
    let relay_url: url::Url = format!("http://{}", internal.local_addr().unwrap())
        .parse()
        .unwrap();
    let mut relay_config = warren_relay::RelayConfig::new(server_url.clone(), SECRET.into());
    relay_config.agent_wait_seconds = 10;
    let s = shutdown.clone();
    tokio::spawn(async move {
        let _ = warren_relay::run(
            relay_config,
            warren_relay::Listeners { agents, internal },
            s,
        )
        .await;
    });

    let runtime = Arc::new(SimulatedRuntime::new());
    let key = WorkspaceKey {
        name: "ws-a".into(),
        namespace: NAMESPACE.into(),
    };
    runtime
        .apply(
            &key,
            &[serde_json::json!({"kind": "Deployment", "metadata": {"name": "ws-a"}, "spec": {"replicas": 1}})],
        )
        .await
        .unwrap();
    runtime.settle(&key);
    let dir = tempfile::tempdir().unwrap();
    runtime.enable_exec(dir.path());
    let mut config = ConnectionConfig::new(agent_url, "agent-token".into());
    config.initial_backoff = Duration::from_millis(50);
    let connection = RelayConnection::new(config, runtime.clone()).unwrap();
    let (c, s) = (connection.clone(), shutdown.clone());
    tokio::spawn(async move { c.run(s).await });

    let proxy_config = ProxyConfig {
        shared_secret: SECRET.into(),
        oauth_client_id: "proxy".into(),
        oauth_client_secret: "proxy-secret".into(),
        session_lifetime_secs: 3600,
        ..ProxyConfig::new(
            dir.path().join("state"),
            "ws.localhost",
            server_url.clone(),
            relay_url.clone(),
        )
    };
    std::fs::create_dir_all(&proxy_config.state_dir).unwrap();
    let shared = Arc::new(Shared {
        front: crate::http::Front::new(
            &proxy_config,
            crate::http::keys::CookieKeys::new(
                &[warren_types::internal::ProxyCookieKey {
                    generation: 1,
                    secret: crate::http::keys::offer(&proxy_config.state_dir).unwrap(),
                    signing_from: 0,
                }],
                3600,
            )
            .unwrap(),
        ),
        server: crate::server_api::ServerApi::new(server_url, SECRET.as_bytes(), None).unwrap(),
        relay: crate::relay::RelayClient::new(relay_url, SECRET.as_bytes()),
        activity: Activity::default(),
        sessions: crate::sessions::Sessions::default(),
        config: proxy_config,
        closing: shutdown.clone(),
    });
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = http.local_addr().unwrap();
    let (sh, ws) = (shared.clone(), workspace.to_owned());
    let app = Router::new().fallback(move |req: axum::extract::Request| {
        let (sh, ws) = (sh.clone(), ws.clone());
        let planned = planned.clone();
        async move {
            handle(
                sh,
                Arc::new(access(&ws, planned)),
                req,
                Some([127, 0, 0, 1].into()),
            )
            .await
        }
    });
    serve(http, app, shutdown.clone()).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !connection.is_connected() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent did not connect"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Env {
        runtime,
        shared,
        addr,
        shutdown,
        _dir: dir,
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(env: &Env, query: &str, origin: Option<&str>) -> Result<Ws, u16> {
    let mut req = format!("ws://{}/ws{query}", env.addr)
        .into_client_request()
        .unwrap();
    if let Some(origin) = origin {
        req.headers_mut()
            .insert("origin", HeaderValue::from_str(origin).unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("websocket connect failed: {e}"),
    }
}

/// Everything the page receives until the close: (terminal bytes, JSON messages).
async fn until_close(ws: &mut Ws) -> (String, Vec<serde_json::Value>) {
    let (mut out, mut texts) = (vec![], vec![]);
    let deadline = Duration::from_secs(20);
    loop {
        let msg = tokio::time::timeout(deadline, ws.next())
            .await
            .expect("the terminal closes in time");
        match msg {
            Some(Ok(WsMessage::Binary(b))) => out.extend_from_slice(&b),
            Some(Ok(WsMessage::Text(t))) => texts.push(serde_json::from_str(&t).unwrap()),
            Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => {}
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), texts)
}

#[tokio::test]
async fn the_terminal_runs_a_login_shell_with_size_resize_and_exit_code() {
    let env = start("ws-a").await;
    let origin = format!("http://{}", env.addr);
    let mut ws = connect(&env, "?cols=100&rows=30", Some(&origin))
        .await
        .unwrap();
    ws.send(WsMessage::Text(
        r#"{"type":"resize","cols":132,"rows":43}"#.into(),
    ))
    .await
    .unwrap();
    ws.send(WsMessage::Text(r#"{"type":"something-new"}"#.into()))
        .await
        .unwrap();
    ws.send(WsMessage::Binary(
        b"echo \"cols=$COLUMNS term=$TERM\"; exit 5\r"
            .to_vec()
            .into(),
    ))
    .await
    .unwrap();
    let (out, texts) = until_close(&mut ws).await;
    assert!(out.contains("cols=100 term=xterm-256color\r\n"), "{out}");
    assert_eq!(
        texts,
        vec![serde_json::json!({"type": "exit", "code": 5})],
        "{out}"
    );
    // Recorded asynchronously by the simulated runtime.
    let want = vec![
        TerminalSize {
            cols: 100,
            rows: 30,
        },
        TerminalSize {
            cols: 132,
            rows: 43,
        },
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while env.runtime.exec_resizes() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sizes: {:?}",
            env.runtime.exec_resizes()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(env.shared.activity.pending(), vec![WorkspaceId(42)]);
    // For the audit log: the session opened, and closed once the shell ended.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while env.shared.sessions.pending().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sessions: {:?}",
            env.shared.sessions.pending()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events = env.shared.sessions.pending();
    assert_eq!(events[0].closed_at_ms, None, "{events:?}");
    assert!(events[1].closed_at_ms.is_some(), "{events:?}");
    assert!(events.iter().all(|e| e.workspace_id == WorkspaceId(42)
        && e.source.as_deref() == Some("127.0.0.1")
        && e.kind == warren_types::internal::SessionKind::Terminal));
}

#[tokio::test]
async fn a_planned_stop_is_told_in_the_terminal_ten_minutes_before() {
    let planned = PlannedStop {
        at_ms: warren_types::unix_millis() + 5 * 60_000,
        terminated: false,
        reason: "it will then have been unused for 30 minutes".into(),
    };
    let env = start_planned("ws-a", Some(planned)).await;
    let mut ws = connect(&env, "", None).await.unwrap();
    let mut out = Vec::new();
    let deadline = Duration::from_secs(20);
    while !String::from_utf8_lossy(&out).contains("[warren] This workspace stops in 5 min") {
        match tokio::time::timeout(deadline, ws.next())
            .await
            .expect("the warning in time")
        {
            Some(Ok(WsMessage::Binary(b))) => out.extend_from_slice(&b),
            Some(Ok(_)) => {}
            other => panic!(
                "the terminal ended first: {other:?}; {}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.contains("unused for 30 minutes"), "{text}");
    // Once only, and the shell goes on.
    ws.send(WsMessage::Binary(
        b"echo still-here; exit 0\r".to_vec().into(),
    ))
    .await
    .unwrap();
    let (rest, _) = until_close(&mut ws).await;
    assert!(rest.contains("still-here"), "{rest}");
    assert!(!rest.contains("[warren]"), "warned once: {rest}");
}

#[tokio::test]
async fn closing_the_page_ends_the_shell() {
    let env = start("ws-a").await;
    let mut ws = connect(&env, "", None).await.unwrap();
    ws.send(WsMessage::Binary(
        b"echo pid=$$; exec sleep 1000\n".to_vec().into(),
    ))
    .await
    .unwrap();
    let mut out = String::new();
    let pid = loop {
        match tokio::time::timeout(Duration::from_secs(20), ws.next()).await {
            Ok(Some(Ok(WsMessage::Binary(b)))) => out.push_str(&String::from_utf8_lossy(&b)),
            other => panic!("expected output, got {other:?} after {out:?}"),
        }
        if let Some(rest) = out.split("pid=").nth(1) {
            if let Some((pid, _)) = rest.split_once('\n') {
                break pid.trim().to_owned();
            }
        }
    };
    let stat = format!("/proc/{pid}/stat");
    assert!(std::path::Path::new(&stat).exists(), "{stat}");
    drop(ws);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        // Gone, or a zombie waiting to be reaped (state `Z` after the command name).
        let ended = match std::fs::read_to_string(&stat) {
            Err(_) => true,
            Ok(s) => s
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z')),
        };
        if ended {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shell outlived its page"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_foreign_origin_is_refused() {
    let env = start("ws-a").await;
    assert_eq!(
        connect(&env, "", Some("http://evil.example")).await.err(),
        Some(403)
    );
    let other_port = format!("http://127.0.0.1:{}", env.addr.port() + 1);
    assert_eq!(connect(&env, "", Some(&other_port)).await.err(), Some(403));
    assert_eq!(connect(&env, "", Some("null")).await.err(), Some(403));
}

#[tokio::test]
async fn a_shell_that_cannot_start_is_reported_on_the_socket() {
    let env = start("ws-gone").await;
    let mut ws = connect(&env, "", None).await.unwrap();
    let (out, texts) = until_close(&mut ws).await;
    assert_eq!(out, "");
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert_eq!(texts[0]["type"], "error");
    let message = texts[0]["message"].as_str().unwrap();
    assert!(
        message.contains("ws-gone") && message.contains("not found"),
        "{message}"
    );
}

#[tokio::test]
async fn the_page_and_its_assets_are_served() {
    let env = start("ws-a").await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", env.addr);
    let page = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains(&format!("ws://{}", env.addr)), "{csp}");
    let html = page.text().await.unwrap();
    assert!(html.contains("<title>ws-a · terminal</title>"), "{html}");
    for (path, content_type, immutable) in [
        (
            "/assets/xterm-6.0.0/xterm.js",
            "text/javascript; charset=utf-8",
            true,
        ),
        (
            "/assets/xterm-6.0.0/xterm.css",
            "text/css; charset=utf-8",
            true,
        ),
        (
            "/assets/addon-fit-0.11.0/addon-fit.js",
            "text/javascript; charset=utf-8",
            true,
        ),
        (
            "/assets/terminal.js",
            "text/javascript; charset=utf-8",
            false,
        ),
        ("/assets/terminal.css", "text/css; charset=utf-8", false),
    ] {
        assert!(html.contains(path), "the page links {path}");
        let resp = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["content-type"], content_type, "{path}");
        let cache = resp.headers()["cache-control"].to_str().unwrap();
        assert_eq!(cache.contains("immutable"), immutable, "{path}: {cache}");
        assert!(!resp.bytes().await.unwrap().is_empty());
    }
    let missing = client
        .get(format!("{base}/assets/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let post = client.post(format!("{base}/")).send().await.unwrap();
    assert_eq!(post.status(), 405);
    // A plain GET of the WebSocket path is not an upgrade.
    let plain = client.get(format!("{base}/ws")).send().await.unwrap();
    assert!(plain.status().is_client_error(), "{}", plain.status());
}

#[test]
fn origins_must_name_this_host() {
    let with = |origin: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        h
    };
    let host = Some("terminal-ws.ws.localhost:7080");
    assert!(same_origin(
        &with("http://terminal-ws.ws.localhost:7080"),
        host
    ));
    assert!(same_origin(
        &with("http://TERMINAL-ws.ws.localhost:7080"),
        host
    ));
    assert!(!same_origin(
        &with("http://terminal-ws.ws.localhost:7081"),
        host
    ));
    assert!(!same_origin(
        &with("http://8080-ws.ws.localhost:7080"),
        host
    ));
    assert!(same_origin(&with("https://t.example"), Some("t.example")));
    assert!(same_origin(
        &with("https://t.example"),
        Some("t.example:443")
    ));
    assert!(!same_origin(
        &with("http://t.example"),
        Some("t.example:443")
    ));
    assert!(same_origin(&HeaderMap::new(), host));
    assert!(!same_origin(&with("http://t.example"), None));
    assert_eq!(
        initial_size(Some("cols=0&rows=5000")),
        TerminalSize {
            cols: 1,
            rows: 1000
        }
    );
    assert_eq!(initial_size(Some("cols=x")), DEFAULT_SIZE);
    assert_eq!(initial_size(None), DEFAULT_SIZE);
}
