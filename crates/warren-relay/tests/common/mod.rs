//! Test harness: a server double on a real socket (authenticate + reconcile per the spec,
//! build contexts; JWT checked), a relay on port 0, an agent (real connection + reconciler + simulated
//! runtime), and helpers to call the relay's internal endpoints.
#![allow(dead_code)]

#[path = "../../../warren-agent/tests/reconciler_model/mod.rs"]
pub mod model;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use model::ServerModel;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use warren_agent::connection::{ConnectionConfig, RelayConnection};
use warren_agent::reconciler::{Reconciler, ReconcilerConfig, ReconcilerStatus};
use warren_agent::runtime::simulated::SimulatedRuntime;
use warren_agent::runtime::WorkspaceKey;
use warren_relay::{Listeners, RelayConfig};
use warren_types::reconcile::{
    ReconcileRequest, ReconcileSettings, AGENT_ID_HEADER, RECONCILE_PATH,
};
use warren_types::relay::{
    AuthenticateRequest, AuthenticateResponse, InternalClaims, AUTHENTICATE_PATH, TUNNEL_PROTOCOL,
};
use warren_types::AgentId;

pub const SECRET: &str = "test-shared-secret-0123456789abcdef";
pub const GOOD_TOKEN: &str = "agent-token-good";
pub const AGENT: AgentId = AgentId(7);

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The server double's state, inspectable by tests.
#[derive(Default)]
pub struct ServerState {
    pub model: ServerModel,
    pub auth_calls: usize,
    /// Token checks being answered now, and the most at once.
    pub auth_in_flight: usize,
    pub auth_in_flight_max: usize,
    /// How long each token check takes (a loaded server).
    pub auth_delay: Duration,
    /// Agent ids of reconcile calls, as named by header and JWT `sub`.
    pub reconcile_agents: Vec<(String, String)>,
    pub rejected_jwts: usize,
    pub tokens: HashMap<String, AuthenticateResponse>,
}

pub struct TestServer {
    pub url: url::Url,
    pub state: Arc<Mutex<ServerState>>,
    shutdown: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn check_relay_jwt(headers: &HeaderMap) -> Result<InternalClaims, ()> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(())?;
    let mut v = Validation::new(Algorithm::HS256);
    v.set_audience(&["warren-server"]);
    v.set_issuer(&["warren-relay"]);
    let claims = jsonwebtoken::decode::<InternalClaims>(
        token,
        &DecodingKey::from_secret(SECRET.as_bytes()),
        &v,
    )
    .map_err(|_| ())?
    .claims;
    if claims.exp - claims.iat > 30 {
        return Err(());
    }
    Ok(claims)
}

async fn authenticate(
    State(state): State<Arc<Mutex<ServerState>>>,
    headers: HeaderMap,
    Json(body): Json<AuthenticateRequest>,
) -> Response {
    let delay = {
        let mut st = state.lock().unwrap();
        if check_relay_jwt(&headers).is_err() {
            st.rejected_jwts += 1;
            return StatusCode::UNAUTHORIZED.into_response();
        }
        st.auth_calls += 1;
        st.auth_in_flight += 1;
        st.auth_in_flight_max = st.auth_in_flight_max.max(st.auth_in_flight);
        st.auth_delay
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut st = state.lock().unwrap();
    st.auth_in_flight -= 1;
    match st.tokens.get(&body.token) {
        Some(a) => Json(a.clone()).into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn reconcile(
    State(state): State<Arc<Mutex<ServerState>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut st = state.lock().unwrap();
    let claims = match check_relay_jwt(&headers) {
        Ok(c) => c,
        Err(()) => {
            st.rejected_jwts += 1;
            return StatusCode::UNAUTHORIZED.into_response();
        }
    };
    let header = headers
        .get(AGENT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let sub = claims.sub.unwrap_or_default();
    if header != sub {
        st.rejected_jwts += 1;
        return StatusCode::UNAUTHORIZED.into_response();
    }
    st.reconcile_agents.push((header, sub));
    let request: ReconcileRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let response = st.model.handle(request);
    (StatusCode::CREATED, Json(response)).into_response()
}

/// Breaks the connection of the double's `broken` build context.
pub static BREAK_CONTEXT: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Bytes of the build context the double serves for workspace `whole`.
pub const CONTEXT_BYTES: usize = 300 * 1024;

/// The double's build contexts: `whole` gets [`CONTEXT_BYTES`] bytes, `broken` half of them
/// and then a broken connection ([`BREAK_CONTEXT`]), any other workspace a 404 naming it.
async fn build_context(
    headers: HeaderMap,
    Json(req): Json<warren_types::relay::BuildContextRequest>,
) -> Response {
    let Ok(claims) = check_relay_jwt(&headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let body = |n: usize| (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
    match req.workspace.as_str() {
        "whole" => (
            [(warren_types::relay::BUILD_COMMIT_HEADER, "c0ffee")],
            body(CONTEXT_BYTES),
        )
            .into_response(),
        "broken" => {
            // Half, then the connection breaks once the test says so: by then the relay has
            // passed on the answer, so only the archive can be cut short.
            let half = bytes::Bytes::from(body(CONTEXT_BYTES / 2));
            let chunks = futures::stream::once(async move { Ok(half) }).chain(
                futures::stream::once(async {
                    BREAK_CONTEXT.notified().await;
                    Err(std::io::Error::other("the repository went away"))
                }),
            );
            (
                [(warren_types::relay::BUILD_COMMIT_HEADER, "c0ffee")],
                axum::body::Body::from_stream(chunks),
            )
                .into_response()
        }
        other => (
            StatusCode::NOT_FOUND,
            Json(
                serde_json::json!({"error": {"code": "not_found", "message": format!(
                    "workspace {other:?} of agent {}", claims.sub.unwrap_or_default()
                )}}),
            ),
        )
            .into_response(),
    }
}

impl TestServer {
    pub async fn start(settings: ReconcileSettings) -> TestServer {
        Self::start_on("127.0.0.1:0".parse().unwrap(), settings).await
    }

    /// Starts the double on `addr` (port 0, or the port of a server that went away).
    pub async fn start_on(addr: SocketAddr, settings: ReconcileSettings) -> TestServer {
        let mut st = ServerState {
            model: ServerModel::new(settings),
            ..Default::default()
        };
        st.tokens.insert(
            GOOD_TOKEN.into(),
            AuthenticateResponse {
                agent_id: AGENT,
                agent_name: "agent-seven".into(),
            },
        );
        let state = Arc::new(Mutex::new(st));
        let app = Router::new()
            .route(AUTHENTICATE_PATH, post(authenticate))
            .route(RECONCILE_PATH, post(reconcile))
            .route(warren_types::relay::BUILD_CONTEXT_PATH, post(build_context))
            .with_state(state.clone());
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(s.cancelled_owned())
                .await
                .unwrap();
        });
        TestServer {
            url: format!("http://{addr}").parse().unwrap(),
            state,
            shutdown,
        }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut ServerState) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }
}

pub struct TestRelay {
    pub agent_addr: SocketAddr,
    pub internal_addr: SocketAddr,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestRelay {
    pub async fn start(server: &url::Url) -> TestRelay {
        Self::start_on(server, "127.0.0.1:0".parse().unwrap(), |_| {}).await
    }

    /// Starts a relay whose agent listener binds `agent_addr` (port 0, or the port of a
    /// relay that stopped: a restart).
    pub async fn start_on(
        server: &url::Url,
        agent_addr: SocketAddr,
        tweak: impl FnOnce(&mut RelayConfig),
    ) -> TestRelay {
        Self::start_with_internal(server, agent_addr, "127.0.0.1:0".parse().unwrap(), tweak).await
    }

    /// As [`TestRelay::start_on`], with the internal (proxy-facing) listener on `internal_addr`.
    pub async fn start_with_internal(
        server: &url::Url,
        agent_addr: SocketAddr,
        internal_addr: SocketAddr,
        tweak: impl FnOnce(&mut RelayConfig),
    ) -> TestRelay {
        let mut config = RelayConfig::new(server.clone(), SECRET.into());
        config.agent_wait_seconds = 2;
        tweak(&mut config);
        let agents = TcpListener::bind(agent_addr).await.unwrap();
        let internal = TcpListener::bind(internal_addr).await.unwrap();
        let agent_addr = agents.local_addr().unwrap();
        let internal_addr = internal.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        let task = tokio::spawn(async move {
            warren_relay::run(config, Listeners { agents, internal }, s)
                .await
                .unwrap();
        });
        TestRelay {
            agent_addr,
            internal_addr,
            shutdown,
            task: Some(task),
        }
    }

    pub fn agent_url(&self) -> url::Url {
        format!("http://{}", self.agent_addr).parse().unwrap()
    }

    pub fn internal_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.internal_addr)
    }

    /// Stops the relay and waits until it has let go of everything.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("relay stops within 10 s")
                .unwrap();
        }
    }
}

pub struct TestAgent {
    pub runtime: Arc<SimulatedRuntime>,
    pub connection: RelayConnection,
    pub status: tokio::sync::watch::Receiver<ReconcilerStatus>,
    shutdown: CancellationToken,
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestAgent {
    pub fn start(relay: url::Url, token: &str) -> TestAgent {
        Self::start_with(relay, token, |_| {})
    }

    pub fn start_with(
        relay: url::Url,
        token: &str,
        tweak: impl FnOnce(&mut ConnectionConfig),
    ) -> TestAgent {
        let runtime = Arc::new(SimulatedRuntime::new());
        runtime.set_auto_settle(true);
        runtime.set_auto_delete(true);
        let mut config = ConnectionConfig::new(relay, token.into());
        config.initial_backoff = Duration::from_millis(50);
        config.max_backoff = Duration::from_millis(500);
        tweak(&mut config);
        let connection = RelayConnection::new(config, runtime.clone()).unwrap();
        let reconciler = Reconciler::new(
            Arc::new(connection.clone()),
            runtime.clone(),
            ReconcilerConfig {
                initial_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_millis(500),
                apply_concurrency: 4,
            },
        );
        let status = reconciler.status();
        let shutdown = CancellationToken::new();
        let c = connection.clone();
        let s = shutdown.clone();
        tokio::spawn(async move { c.run(s).await });
        tokio::spawn(reconciler.run(shutdown.clone()));
        TestAgent {
            runtime,
            connection,
            status,
            shutdown,
        }
    }
}

impl TestAgent {
    /// Waits until the agent runs workspace `name` (the server double wants it).
    pub async fn has_workspace(&self, name: &str) {
        wait_for(&format!("workspace {name} to exist"), 20, || async {
            self.runtime.workspace(&key(name)).is_some()
        })
        .await;
    }

    /// Waits for workspace `name`, then answers its port 8080 with an echo server.
    pub async fn echoing(&self, name: &str) {
        self.has_workspace(name).await;
        self.runtime
            .set_endpoint(&key(name), 8080, echo_server().await);
    }
}

/// Runs `body` (a benchmark's) to its end on a multi-threaded runtime.
pub fn block_on<F: Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(body)
}

pub fn key(name: &str) -> WorkspaceKey {
    WorkspaceKey {
        name: name.into(),
        namespace: model::NAMESPACE.into(),
    }
}

/// A JWT as the server (or a proxy) presents it to the relay's internal listener.
pub fn internal_jwt(iss: &str) -> String {
    let iat = now();
    let claims = InternalClaims {
        iss: iss.into(),
        aud: "warren-relay".into(),
        sub: None,
        iat,
        nbf: iat,
        exp: iat + 30,
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// Polls `cond` until it holds, failing after `secs` seconds (a hang guard, not a timing check).
pub async fn wait_for<F, Fut>(what: &str, secs: u64, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if cond().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Opens a tunnel through the internal listener; `Err((status, body))` when refused.
pub async fn open_tunnel(
    relay: &TestRelay,
    agent: AgentId,
    workspace: &str,
    port: u16,
    jwt: &str,
) -> Result<reqwest::Upgraded, (u16, String)> {
    let url = relay.internal_url(&format!(
        "/internal/agents/{agent}/tunnel?workspace={workspace}&namespace={}&port={port}",
        model::NAMESPACE
    ));
    upgrade(http1().get(url).bearer_auth(jwt)).await
}

/// An HTTP/1.1 client: tunnels are HTTP/1.1 upgrades.
pub fn http1() -> reqwest::Client {
    reqwest::Client::builder().http1_only().build().unwrap()
}

/// Sends `req` as a tunnel upgrade: the upgraded connection, or the refusal's status and body.
pub async fn upgrade(req: reqwest::RequestBuilder) -> Result<reqwest::Upgraded, (u16, String)> {
    let resp = req
        .header("connection", "upgrade")
        .header("upgrade", TUNNEL_PROTOCOL)
        .send()
        .await
        .unwrap();
    if resp.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status().as_u16();
        return Err((status, resp.text().await.unwrap_or_default()));
    }
    Ok(resp.upgrade().await.unwrap())
}

/// A TCP echo server on port 0; returns its address.
pub async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock.set_nodelay(true);
            tokio::spawn(async move {
                let (mut r, mut w) = sock.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A TCP proxy whose existing connections can be frozen: bytes stop flowing but the sockets
/// stay open, as when a host vanishes without sending a reset.
pub struct FreezingProxy {
    pub addr: SocketAddr,
    freeze_below: Arc<std::sync::atomic::AtomicU64>,
    accepted: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FreezingProxy {
    pub async fn start(upstream: SocketAddr) -> FreezingProxy {
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let freeze_below = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let (fb, acc) = (freeze_below.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let id = acc.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let fb = fb.clone();
                conns.spawn(async move {
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let frozen = move || fb.load(Ordering::SeqCst) > id;
                    let f2 = frozen.clone();
                    let _ = tokio::join!(pump(cr, sw, frozen), pump(sr, cw, f2));
                });
            }
        });
        FreezingProxy {
            addr,
            freeze_below,
            accepted,
            task,
        }
    }

    /// Every connection accepted so far stops forwarding.
    pub fn freeze_existing(&self) {
        use std::sync::atomic::Ordering;
        self.freeze_below
            .store(self.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    frozen: impl Fn() -> bool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen() {
            // Hold the bytes and the sockets forever.
            std::future::pending::<()>().await;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The server double wanting workspace `ws-a`, a relay, and an agent running it (reconciles
/// an hour apart: only what a test asks for happens).
pub async fn one_workspace() -> (TestServer, TestRelay, TestAgent) {
    let server = TestServer::start(ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    })
    .await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    agent.has_workspace("ws-a").await;
    (server, relay, agent)
}
