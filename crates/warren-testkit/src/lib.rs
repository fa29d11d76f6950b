//! Test-only: the whole Warren stack in one process — the real server (SQLite in a temporary
//! home), a real relay, a real agent connection and reconciler on the simulated runtime, and
//! the real proxy — every piece on its own port-0 loopback socket, talking over the same wire
//! protocols as separate processes.
//!
//! Workspaces run on the simulated runtime: they settle to Running on their own, their
//! endpoints are whatever local address a test registers with [`Stack::set_endpoint`], and
//! exec runs local processes. Everything stops when the [`Stack`] is dropped.

pub mod balancer;
pub mod bench;
pub mod browser;
pub mod files_http;
pub mod git_daemon;
pub mod git_http;
pub mod latency;
pub mod process;
mod regional;
pub mod registry;
pub mod tls;
mod using;
pub mod vsix;

pub use regional::{ProxyAt, RegionalProxy};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use warren_agent::connection::{ConnectionConfig, RelayConnection};
use warren_agent::reconciler::{Reconciler, ReconcilerConfig};
use warren_agent::runtime::simulated::SimulatedRuntime;
use warren_agent::runtime::WorkspaceKey;
use warren_server::app::oauth::NewOAuthClient;
use warren_server::{Server, ServerConfig};
use warren_types::config::AgentConfig;

/// Domain of workspace hosts; browsers and curl resolve `*.localhost` to loopback.
pub const DOMAIN: &str = "ws.localhost";
/// Password of every user [`Stack::user`] creates.
pub const PASSWORD: &str = "password-123";
/// The proxy's OAuth client.
pub const OAUTH_CLIENT_ID: &str = "warren-proxy";
/// The secret of the proxy's OAuth client in every stack.
const OAUTH_CLIENT_SECRET: &str = "testkit-oauth-client-secret-0123456789";

/// A devfile whose main container declares public endpoints on 8080 and 3000 and an
/// internal one on 5005.
pub const WEB_DEVFILE: &str = "schemaVersion: 2.2.0
metadata:
  name: web
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      cpuLimit: 500m
      endpoints:
        - name: web
          targetPort: 8080
          exposure: public
        - name: app
          targetPort: 3000
          exposure: public
        - name: debug
          targetPort: 5005
          exposure: internal
";

/// Knobs of [`Stack::start_with`].
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Proxy session cookie lifetime.
    pub session_lifetime_secs: u64,
    /// Proxy authorisation cache.
    pub authorization_cache_secs: u64,
    /// Direct mode template for the proxy (`None`: through the relay).
    pub direct_upstream: Option<String>,
    /// Whether the proxy runs its SSH listener.
    pub ssh: bool,
    /// Proxy replicas (at least 1), each with its own state directory. With more than one,
    /// clients reach them through TCP balancers (HTTP and SSH) that take turns per
    /// connection — no stickiness — and skip a stopped replica ([`Stack::stop_proxy`]).
    pub proxies: usize,
    /// The server's clock moves only when the test says ([`Stack::clock`]), and its lifecycle
    /// timers run every second, so tests can make timers fire (the idle timeout) at once.
    pub manual_clock: bool,
    /// The server's devfile registries (parents by `id`).
    pub devfile_registries: Vec<String>,
    /// Relay instances (at least 1). With more than one, the agent reaches them through a
    /// TCP balancer (first that accepts), the server signals them all, and they share a
    /// routing table in Redis when `redis_url` is set.
    pub relays: usize,
    /// Redis for the relays' shared routing table (a key prefix of the stack's own).
    pub redis_url: Option<String>,
    /// TLS everywhere it is served: the server, the relays' agent listeners and the proxy
    /// present certificates from a CA made for the stack ([`Stack::tls`]); the relays and
    /// the proxy trust it for the server, the agents for the relay.
    pub tls: bool,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            session_lifetime_secs: 3600,
            authorization_cache_secs: 30,
            direct_upstream: None,
            ssh: true,
            proxies: 1,
            manual_clock: false,
            devfile_registries: vec![],
            relays: 1,
            redis_url: None,
            tls: false,
        }
    }
}

/// A user of the stack with a personal access token (scopes `api` and `workspace`).
#[derive(Debug, Clone)]
pub struct TestUser {
    pub id: i64,
    pub username: String,
    pub password: String,
    pub token: String,
}

/// A workspace created through the API.
#[derive(Debug, Clone)]
pub struct TestWorkspace {
    pub id: i64,
    pub name: String,
    pub namespace: String,
    pub agent_id: i64,
}

impl TestWorkspace {
    pub fn key(&self) -> WorkspaceKey {
        WorkspaceKey {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

/// The running stack. Dropping it stops everything.
pub struct Stack {
    pub home: tempfile::TempDir,
    /// The server's REST API and OAuth endpoints, e.g. `http://127.0.0.1:41234`.
    pub api_url: String,
    /// The relay's internal listener.
    pub relay_internal_url: String,
    /// The proxy's HTTP listener (the balancer's, with several replicas).
    pub proxy_addr: SocketAddr,
    /// The proxy's SSH listener (when enabled; the balancer's, with several replicas).
    pub ssh_addr: Option<SocketAddr>,
    /// Each proxy replica's own HTTP and SSH listeners.
    pub proxy_replicas: Vec<(SocketAddr, Option<SocketAddr>)>,
    /// Steers the HTTP and SSH balancers, with several replicas.
    pub proxy_balancers: Option<(balancer::Balancer, Option<balancer::Balancer>)>,
    /// The proxy's metrics listener: `{proxy_metrics_url}/metrics`.
    pub proxy_metrics_url: String,
    pub runtime: Arc<SimulatedRuntime>,
    pub admin: TestUser,
    /// The shared secret of internal JWTs (server ⇄ relay ⇄ proxy).
    pub shared_secret: String,
    pub oauth_client_secret: String,
    pub options: StackOptions,
    /// The server's clock, when `StackOptions::manual_clock`.
    pub clock: Option<warren_server::clock::ManualClock>,
    /// The stack's CA and where each service's certificate files are, when
    /// `StackOptions::tls` (issue a new certificate there to renew one).
    pub tls: Option<StackTls>,
    http: reqwest::Client,
    /// The relay's listener for agents.
    relay_agents_url: String,
    /// Each relay's stop switch (see [`Stack::stop_relay`]).
    relay_stops: Vec<CancellationToken>,
    /// Each proxy replica's stop switch and task (see [`Stack::stop_proxy`]).
    proxy_stops: Vec<(CancellationToken, tokio::task::AbortHandle)>,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The PKI of a stack started with `StackOptions::tls`.
#[derive(Debug)]
pub struct StackTls {
    pub ca: tls::TestCa,
    /// Each holds `tls.crt` and `tls.key`.
    pub server_dir: std::path::PathBuf,
    pub relay_dir: std::path::PathBuf,
    pub proxy_dir: std::path::PathBuf,
}

/// The names each service's certificate covers.
const LOCAL_NAMES: &[&str] = &["localhost", "127.0.0.1"];

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A simulated runtime whose workspaces settle and go on their own.
fn simulated() -> Arc<SimulatedRuntime> {
    let runtime = Arc::new(SimulatedRuntime::new());
    runtime.set_auto_settle(true);
    runtime.set_auto_delete(true);
    runtime
}

/// One agent on `runtime`, connected to the relay at `relay_agents_url`: its connection,
/// reconciler and GitOps follower, stopped with `shutdown`.
fn spawn_agent(
    relay_agents_url: &str,
    token: String,
    agent_id: String,
    runtime: Arc<dyn warren_agent::runtime::WorkspaceRuntime>,
    relay_ca_file: Option<std::path::PathBuf>,
    shutdown: &CancellationToken,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut conn_config = ConnectionConfig::new(relay_agents_url.parse()?, token);
    conn_config.relay_ca_file = relay_ca_file;
    conn_config.initial_backoff = Duration::from_millis(50);
    conn_config.max_backoff = Duration::from_millis(500);
    let connection = RelayConnection::new(conn_config, runtime.clone())
        .context("creating the agent connection")?;
    let reconciler = Reconciler::new(
        Arc::new(connection.clone()),
        runtime.clone(),
        ReconcilerConfig {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
            apply_concurrency: 4,
        },
    )
    .with_url_mounts(connection.url_mounts());
    let tasks = vec![
        tokio::spawn(connection.url_mounts().run(shutdown.clone())),
        tokio::spawn(warren_agent::gitops::run(
            agent_id,
            connection.clone(),
            runtime.clone(),
            reconciler.status(),
            shutdown.clone(),
        )),
        tokio::spawn({
            let s = shutdown.clone();
            async move { connection.run(s).await }
        }),
        tokio::spawn(reconciler.run(shutdown.clone())),
    ];
    Ok(tasks)
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

async fn bind() -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a port-0 listener")?;
    let a = l.local_addr()?;
    Ok((l, a))
}

impl Stack {
    pub async fn start() -> Result<Stack> {
        Self::start_with(StackOptions::default()).await
    }

    pub async fn start_with(options: StackOptions) -> Result<Stack> {
        let home = tempfile::tempdir().context("creating a temporary home")?;
        let shutdown = CancellationToken::new();
        let mut tasks = vec![];

        let (api, api_addr) = bind().await?;
        let mut relay_listeners = Vec::new();
        for _ in 0..options.relays.max(1) {
            let (agents, agents_addr) = bind().await?;
            let (internal, internal_addr) = bind().await?;
            relay_listeners.push((agents, agents_addr, internal, internal_addr));
        }
        let relay_internal_addr = relay_listeners[0].3;
        let relay_agents_addrs: Vec<SocketAddr> = relay_listeners.iter().map(|r| r.1).collect();
        let proxies = ProxyReplicas::bind(&options, &mut tasks).await?;
        let (proxy_addr, ssh_addr) = (proxies.http_addr, proxies.ssh_addr);
        let scheme = if options.tls { "https" } else { "http" };
        let api_url = format!("{scheme}://{api_addr}");
        let relay_internal_url = format!("http://{relay_internal_addr}");
        let pki = match options.tls {
            false => None,
            true => Some(StackTls::issue(&home.path().join("pki"))?),
        };
        let ca_file = pki.as_ref().map(|p| p.ca.ca_file.clone());

        let mut config = server_config(home.path(), &options, pki.as_ref())?;
        config.relay_urls = relay_listeners
            .iter()
            .map(|r| format!("http://{}", r.3))
            .collect();
        config.ssh_public_address = ssh_addr.map(|a| a.to_string());
        let clock = options
            .manual_clock
            .then(|| warren_server::clock::ManualClock::new(chrono_now_ms()));
        let (server, admin) = prepare_server(config, clock.as_ref()).await?;
        let shared_secret =
            String::from_utf8(server.relay_secret().to_vec()).context("relay secret as text")?;

        // The proxy's OAuth client: its redirect URI is fixed on the sign-in host.
        let oauth_client_secret = OAUTH_CLIENT_SECRET.to_owned();
        let urls = [api_url.as_str(), relay_internal_url.as_str()];
        let proxy_config = proxy_config(
            home.path(),
            &options,
            pki.as_ref(),
            proxy_addr.port(),
            urls,
            &shared_secret,
        )?;
        server
            .register_oauth_client(&NewOAuthClient {
                client_id: OAUTH_CLIENT_ID.into(),
                name: "Warren proxy".into(),
                redirect_uris: vec![proxy_config.callback_url()],
                first_party: true,
                secret: Some(oauth_client_secret.clone()),
            })
            .await
            .map_err(|e| anyhow::anyhow!("registering the proxy's OAuth client: {e}"))?;
        let agent_config = AgentConfig {
            workspace_domain: format!("{DOMAIN}:{}", proxy_addr.port()),
            workspace_scheme: scheme.into(),
            ..AgentConfig::default()
        };
        let agent = server
            .create_agent("local", &agent_config)
            .await
            .map_err(|e| anyhow::anyhow!("creating the agent: {e}"))?;

        tasks.push(spawn_service("server", server.serve(api, shutdown.clone())));
        let mut relay_stops = Vec::new();
        let prefix = format!("warren:testkit:{:016x}:", rand::random::<u64>());
        for (agents, _, internal, _) in relay_listeners {
            let stop = shutdown.child_token();
            relay_stops.push(stop.clone());
            let config = relay_config(&api_url, &shared_secret, pki.as_ref())?;
            let listeners = warren_relay::Listeners { agents, internal };
            let redis = options.redis_url.as_deref();
            tasks.push(spawn_relay(config, listeners, redis, &prefix, stop).await?);
        }
        let relay_agents_url = if relay_agents_addrs.len() > 1 {
            let (balancer, addr) = balancer::start(relay_agents_addrs).await?;
            tasks.push(balancer);
            format!("{scheme}://{addr}")
        } else {
            format!("{scheme}://{}", relay_agents_addrs[0])
        };
        let runtime = simulated();
        let agent_tasks = spawn_agent(
            &relay_agents_url,
            agent.token,
            agent.agent.id.to_string(),
            runtime.clone(),
            ca_file.clone(),
            &shutdown,
        )?;
        tasks.extend(agent_tasks);

        let (proxy_replicas, proxy_balancers) = (proxies.addrs(), proxies.balancers.clone());
        let proxy_metrics_addr = proxies.metrics_addr;
        let proxy_stops = proxies.spawn(&proxy_config, home.path(), &shutdown, &mut tasks);

        let http = http_client(pki.as_ref())?;
        let mut stack = Stack {
            home,
            api_url,
            relay_internal_url,
            proxy_addr,
            ssh_addr,
            proxy_replicas,
            proxy_balancers,
            proxy_metrics_url: format!("http://{proxy_metrics_addr}"),
            runtime,
            admin,
            shared_secret,
            oauth_client_secret,
            options,
            clock,
            tls: pki,
            http,
            relay_agents_url,
            relay_stops,
            proxy_stops,
            shutdown,
            tasks,
        };
        let me = stack
            .api(
                reqwest::Method::GET,
                "/api/v1/users/me",
                &stack.admin.token.clone(),
                None,
            )
            .await?;
        stack.admin.id = me["id"].as_i64().context("users/me has an id")?;
        Ok(stack)
    }
}

impl StackTls {
    /// A CA in `dir` and certificates it issued for the server, the relays and the proxy.
    fn issue(dir: &Path) -> Result<StackTls> {
        let ca = tls::TestCa::new(dir, "warren testkit CA")?;
        let pki = StackTls {
            server_dir: dir.join("server"),
            relay_dir: dir.join("relay"),
            proxy_dir: dir.join("proxy"),
            ca,
        };
        pki.ca.issue(&pki.server_dir, LOCAL_NAMES)?;
        pki.ca.issue(&pki.relay_dir, LOCAL_NAMES)?;
        pki.ca
            .issue(&pki.proxy_dir, &[&format!("*.{DOMAIN}"), "localhost"])?;
        Ok(pki)
    }
}

/// The server's configuration in a stack: its files under `home`, its certificate, the
/// options' registries, and the proxy's SSH host key published when SSH is on.
fn server_config(
    home: &Path,
    options: &StackOptions,
    pki: Option<&StackTls>,
) -> Result<ServerConfig> {
    let mut config = ServerConfig::new(home.join("server"));
    if let Some(p) = pki {
        config.tls_cert_file = Some(p.server_dir.join("tls.crt"));
        config.tls_key_file = Some(p.server_dir.join("tls.key"));
    }
    config.devfile_registries = options.devfile_registries.clone();
    // The tests' registries and Git servers listen on 127.0.0.1.
    config.outbound_allow = vec!["127.0.0.1/32".parse().expect("cidr")];
    if options.ssh {
        let key = warren_proxy::ssh::host_public_key(
            &home
                .join("proxy")
                .join(warren_proxy::config::SSH_HOST_KEY_FILE),
        )
        .context("preparing the proxy's SSH host key")?;
        config.ssh_host_keys = vec![key];
    }
    Ok(config)
}

/// Runs one relay until `stop`: alone, or with `redis` one of several sharing a routing table
/// under `prefix` (short lifetimes, so tests see failovers quickly).
async fn spawn_relay(
    mut config: warren_relay::RelayConfig,
    listeners: warren_relay::Listeners,
    redis: Option<&str>,
    prefix: &str,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>> {
    let Some(redis) = redis else {
        return Ok(spawn_service(
            "relay",
            warren_relay::run(config, listeners, stop),
        ));
    };
    config.peer_secret = Some("testkit-relay-peer-secret-0123456789abcdef".into());
    let (peers, peer_addr) = bind().await?;
    let mut rc = warren_relay::redis_registry::RedisRegistryConfig::new(
        redis.to_owned(),
        format!("http://{peer_addr}").parse()?,
    );
    rc.key_prefix = prefix.to_owned();
    rc.entry_ttl = Duration::from_secs(10);
    rc.refresh_interval = Duration::from_secs(5);
    rc.health_interval = Duration::from_millis(200);
    let registry = warren_relay::redis_registry::RedisRegistry::connect(rc)
        .await
        .context("connecting the relay to Redis")?;
    let registry = Arc::new(registry);
    let relay = warren_relay::run_with_peers(config, listeners, Some(peers), registry, stop);
    Ok(spawn_service("relay", relay))
}

/// A relay of a stack: calling the server at `api_url`, quick to give up on an agent, serving
/// the stack's certificate.
fn relay_config(
    api_url: &str,
    shared_secret: &str,
    pki: Option<&StackTls>,
) -> Result<warren_relay::RelayConfig> {
    let mut config = warren_relay::RelayConfig::new(api_url.parse()?, shared_secret.to_owned());
    config.agent_wait_seconds = 5;
    if let Some(p) = pki {
        config.tls_cert_file = Some(p.relay_dir.join("tls.crt"));
        config.tls_key_file = Some(p.relay_dir.join("tls.key"));
        config.server_ca_file = Some(p.ca.ca_file.clone());
    }
    Ok(config)
}

/// The stack's server, prepared on `clock` when the test keeps the time (its lifecycle timers
/// then run every second), and its bootstrapped admin with a token (the id is the caller's
/// to look up).
async fn prepare_server(
    mut config: ServerConfig,
    clock: Option<&warren_server::clock::ManualClock>,
) -> Result<(Server, TestUser)> {
    let server = match clock {
        Some(c) => {
            config.lifecycle_interval_seconds = 1;
            Server::prepare_with_clock(config, Arc::new(c.clone())).await
        }
        None => Server::prepare(config).await,
    }
    .context("preparing the server")?;
    let password = server
        .bootstrap_admin()
        .map(|a| a.password.clone())
        .context("a fresh server bootstraps its admin")?;
    let token = server
        .issue_token("admin", "testkit", 30)
        .await
        .map_err(|e| anyhow::anyhow!("issuing the admin token: {e}"))?
        .secret;
    let admin = TestUser {
        id: 0,
        username: "admin".into(),
        password,
        token,
    };
    Ok((server, admin))
}

/// The tests' HTTP client, trusting the stack's CA.
fn http_client(pki: Option<&StackTls>) -> Result<reqwest::Client> {
    let mut http = reqwest::Client::builder().timeout(Duration::from_secs(30));
    if let Some(p) = pki {
        http = p.ca.bundle()?.apply(http);
    }
    Ok(http.build()?)
}

/// Runs a service of the stack until it stops, saying why when it failed.
fn spawn_service<E: std::fmt::Display>(
    what: &'static str,
    service: impl std::future::Future<Output = Result<(), E>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = service.await {
            eprintln!("testkit: {what} stopped: {e}");
        }
    })
}

/// The proxy replicas' listeners, bound before anything starts (their public port is in
/// every other piece's configuration), and the balancers in front when there are several.
struct ProxyReplicas {
    /// Per replica: HTTP, its address, SSH and its address.
    listeners: Vec<(
        TcpListener,
        SocketAddr,
        Option<TcpListener>,
        Option<SocketAddr>,
    )>,
    metrics: TcpListener,
    metrics_addr: SocketAddr,
    /// Where clients connect: the only replica's, or the balancers'.
    http_addr: SocketAddr,
    ssh_addr: Option<SocketAddr>,
    balancers: Option<(balancer::Balancer, Option<balancer::Balancer>)>,
}

impl ProxyReplicas {
    async fn bind(
        options: &StackOptions,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> Result<ProxyReplicas> {
        let mut listeners = Vec::new();
        for _ in 0..options.proxies.max(1) {
            let (http, http_addr) = bind().await?;
            let (ssh, ssh_addr) = if options.ssh {
                let (l, a) = bind().await?;
                (Some(l), Some(a))
            } else {
                (None, None)
            };
            listeners.push((http, http_addr, ssh, ssh_addr));
        }
        let (metrics, metrics_addr) = bind().await?;
        let (http_addr, ssh_addr, balancers) = if listeners.len() == 1 {
            (listeners[0].1, listeners[0].3, None)
        } else {
            // Taking turns per connection: no stickiness, as the replicas must not need it.
            let mode = balancer::Mode::RoundRobin;
            let https: Vec<SocketAddr> = listeners.iter().map(|r| r.1).collect();
            let (task, http_addr, http_steer) = balancer::start_with(https, mode).await?;
            tasks.push(task);
            let (ssh_addr, ssh_steer) = if options.ssh {
                let sshs: Vec<SocketAddr> = listeners.iter().filter_map(|r| r.3).collect();
                let (task, addr, steer) = balancer::start_with(sshs, mode).await?;
                tasks.push(task);
                (Some(addr), Some(steer))
            } else {
                (None, None)
            };
            (http_addr, ssh_addr, Some((http_steer, ssh_steer)))
        };
        Ok(ProxyReplicas {
            listeners,
            metrics,
            metrics_addr,
            http_addr,
            ssh_addr,
            balancers,
        })
    }

    fn addrs(&self) -> Vec<(SocketAddr, Option<SocketAddr>)> {
        self.listeners.iter().map(|l| (l.1, l.3)).collect()
    }

    /// Runs every replica with `config` (each but the first in a state directory of its own
    /// under `home`; the first serves metrics); their stop switches and tasks.
    fn spawn(
        self,
        config: &warren_proxy::ProxyConfig,
        home: &Path,
        shutdown: &CancellationToken,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> Vec<(CancellationToken, tokio::task::AbortHandle)> {
        let mut stops = Vec::new();
        let mut metrics = Some(self.metrics);
        for (i, (http, _, ssh, _)) in self.listeners.into_iter().enumerate() {
            let listeners = warren_proxy::ProxyListeners {
                http,
                ssh,
                metrics: metrics.take(),
            };
            let mut config = config.clone();
            if i > 0 {
                // Replicas share nothing on disk: what they share, the server holds.
                config.state_dir = home.join(format!("proxy-{i}"));
            }
            let stop = shutdown.child_token();
            let proxy = spawn_service("proxy", warren_proxy::run(config, listeners, stop.clone()));
            stops.push((stop, proxy.abort_handle()));
            tasks.push(proxy);
        }
        stops
    }
}

/// The proxy of a stack: its state under `home`, reached on `port` of the workspace domain,
/// calling the server and the relay at `urls`, with the options' timings and upstream and
/// the stack's certificate.
fn proxy_config(
    home: &Path,
    options: &StackOptions,
    pki: Option<&StackTls>,
    port: u16,
    [api_url, relay_url]: [&str; 2],
    shared_secret: &str,
) -> Result<warren_proxy::ProxyConfig> {
    Ok(warren_proxy::ProxyConfig {
        public_scheme: if options.tls { "https" } else { "http" }.into(),
        public_port: Some(port),
        shared_secret: shared_secret.to_owned(),
        oauth_client_id: OAUTH_CLIENT_ID.into(),
        oauth_client_secret: OAUTH_CLIENT_SECRET.into(),
        session_lifetime_secs: options.session_lifetime_secs,
        authorization_cache_secs: options.authorization_cache_secs,
        activity_report_secs: 1,
        direct_upstream: options.direct_upstream.clone(),
        tls_cert_file: pki.map(|p| p.proxy_dir.join("tls.crt")),
        tls_key_file: pki.map(|p| p.proxy_dir.join("tls.key")),
        server_ca_file: pki.map(|p| p.ca.ca_file.clone()),
        ..warren_proxy::ProxyConfig::new(
            home.join("proxy"),
            DOMAIN,
            api_url.parse()?,
            relay_url.parse()?,
        )
    })
}

/// A plain HTTP/1.1 server on a free local port answering `body` to every request, for the
/// end of a tunnel ([`Stack::set_endpoint`]); it lives as long as the test's runtime.
pub async fn text_upstream(body: &'static str) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let svc = hyper::service::service_fn(move |_req| async move {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(body.as_bytes()),
                )))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc),
            );
        }
    });
    Ok(addr)
}

/// Polls `cond` until it holds; fails after `secs` seconds (a hang guard, not a timing check).
pub async fn wait_for<F, Fut>(what: &str, secs: u64, mut cond: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if cond().await {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
