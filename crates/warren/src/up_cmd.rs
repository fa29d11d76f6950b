//! `warren up`: server, relay, an agent and the proxy in one process, on embedded defaults.
//! The agent runs workspaces on Docker or Podman, or with `--runtime kubernetes` on the
//! cluster of KUBECONFIG (pods must then be reachable from this machine, as from a node).
//! Workspace hosts are `http://{port}-{workspace}.ws.localhost:<proxy port>` (browsers
//! resolve `*.localhost` to loopback), SSH is `ssh -p <ssh port> <workspace>@localhost`.
//!
//! State lives under `WARREN_HOME`: the SQLite database and keys (the server's), the default
//! agent's token (`keys/agent-local.token`), the engine runtime's files (`agent/`), and the
//! CLI's credentials, written so that `warren ws create --devfile FILE --wait` works right
//! after. The relay and the agent talk over real loopback sockets exactly as separate
//! processes would, so `warren up` exercises the same code paths as a production deployment.

use crate::relay_cmd::shutdown_on_signals;
use crate::settings::read_secret;
use anyhow::{bail, Context};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpListener;
use url::Url;
use warren_agent::connection::ConnectionConfig;
use warren_agent::reconciler::ReconcilerConfig;
use warren_agent::runtime::engine::{EngineConfig, EngineRuntime};
use warren_agent::runtime::kubernetes::{ImageBuilder, KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::WorkspaceRuntime;
use warren_cli::credentials::{self, Credentials};
use warren_proxy::{ProxyConfig, ProxyListeners};
use warren_server::app::oauth::NewOAuthClient;
use warren_server::{Server, ServerConfig};
use warren_types::config::AgentConfig;
use warren_types::AgentId;

/// The agent `warren up` creates and runs.
const DEFAULT_AGENT: &str = "local";
/// The OAuth client id of the built-in proxy.
const PROXY_CLIENT_ID: &str = crate::proxy_cmd::DEFAULT_OAUTH_CLIENT_ID;

/// A fresh random secret (the proxy's OAuth client secret lives only in this process).
fn random_secret() -> String {
    use std::fmt::Write;
    let mut bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bytes);
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// State directory [default: the user's data directory, e.g. ~/.local/share/warren].
    #[arg(long, env = "WARREN_HOME")]
    home: Option<PathBuf>,
    /// Address of the REST API.
    #[arg(long, env = "WARREN_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Address of the proxy (workspace hosts in the browser).
    #[arg(long, env = "WARREN_PROXY_LISTEN", default_value = "127.0.0.1:7080")]
    proxy_listen: SocketAddr,
    /// Address of the proxy's SSH server.
    #[arg(long, env = "WARREN_SSH_LISTEN", default_value = "127.0.0.1:2222")]
    ssh_listen: SocketAddr,
    /// How often agents and connectors check in when nothing happens, in seconds; a
    /// connector silent for three of these makes its mount `Unknown`.
    #[arg(
        long,
        env = "WARREN_PARTIAL_RECONCILIATION_INTERVAL_SECONDS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    partial_reconciliation_interval_seconds: u64,
    /// Seconds between reads of the refs of projects with prebuilds (a new commit starts one).
    #[arg(
        long,
        env = "WARREN_PREBUILD_POLL_SECONDS",
        default_value_t = 60,
        value_parser = clap::value_parser!(u64).range(1..=86400)
    )]
    prebuild_poll_seconds: u64,
    /// Address of the relay's listener for agents and connectors (`warren connect`); the
    /// default is a free loopback port, printed at start.
    #[arg(long, env = "WARREN_RELAY_LISTEN", default_value = "127.0.0.1:0")]
    relay_listen: SocketAddr,
    /// Domain of workspace hosts (`{port}-{workspace}.{domain}`); `*.localhost` needs no DNS.
    #[arg(long, env = "WARREN_WORKSPACE_DOMAIN", default_value = "ws.localhost")]
    workspace_domain: String,
    /// A Docker-compatible engine socket (`unix:///…` or `tcp://…`) [default: auto-detect].
    #[arg(long, env = "DOCKER_HOST")]
    engine: Option<String>,
    /// Which runtime runs the workspaces: `engine` (Docker or Podman) or `kubernetes` (the
    /// cluster of KUBECONFIG or the in-cluster configuration; this machine must reach its
    /// pods' IPs, as a node does).
    #[arg(long, env = "WARREN_UP_RUNTIME", value_enum, default_value = "engine")]
    runtime: crate::agent_cmd::RuntimeKind,
    /// With `--runtime kubernetes`: where images built at a workspace's start are pushed for
    /// the cluster to pull, `host[:port][/path]`; the engine (`--engine`) builds them
    /// [default: none, such workspaces are refused].
    #[arg(long, env = "WARREN_UP_BUILD_REGISTRY", value_name = "REGISTRY")]
    build_registry: Option<String>,
    /// With `--build-registry`: `namespace/name` of a kubernetes.io/dockerconfigjson Secret
    /// with the credentials for pushing there [default: push anonymously].
    #[arg(long, env = "WARREN_UP_BUILD_PUSH_SECRET", value_name = "SECRET")]
    build_push_secret: Option<String>,
    /// A devfile registry searched for parents named by `id` (repeat, or comma-separate).
    #[arg(
        long = "devfile-registry",
        env = "WARREN_DEVFILE_REGISTRIES",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub devfile_registries: Vec<String>,
    /// A special-purpose address range (loopback, private, …) the server may fetch devfile
    /// parents and Git remotes from on a user's behalf, and the agent a dev container's
    /// Features (repeat, or comma-separate); none: public addresses only, so a local
    /// registry or forge must be named here.
    #[arg(
        long = "outbound-allow",
        env = "WARREN_OUTBOUND_ALLOW",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub outbound_allow: Vec<ipnet::IpNet>,
    /// Write the API's bound address to this file once everything is serving (for scripts).
    #[arg(long, env = "WARREN_READY_FILE")]
    ready_file: Option<PathBuf>,
    /// Do not build the editor's tools image when it is missing (workspaces then run without
    /// the editor and say why; `warren tools build` builds it later).
    #[arg(long, env = "WARREN_NO_EDITOR_BUILD")]
    no_editor_build: bool,
}

/// What `warren up` listens on, bound before anything starts.
struct Bound {
    api: TcpListener,
    api_addr: SocketAddr,
    api_url: String,
    proxy_http: TcpListener,
    proxy_port: u16,
    proxy_ssh: TcpListener,
    ssh_addr: SocketAddr,
    relay_agents: TcpListener,
    relay_agent_url: String,
    relay_internal: TcpListener,
    relay_internal_url: String,
}

/// Binds every listener; an address in use names the flag that moves it.
async fn bind(args: &UpArgs) -> anyhow::Result<Bound> {
    let taken = |what: &str, addr: SocketAddr, flag: &str| {
        format!("binding {what} to {addr} (is another Warren running? pass {flag})")
    };
    let api = TcpListener::bind(args.listen)
        .await
        .with_context(|| taken("the API", args.listen, "--listen"))?;
    let proxy_http = TcpListener::bind(args.proxy_listen)
        .await
        .with_context(|| taken("the proxy", args.proxy_listen, "--proxy-listen"))?;
    let proxy_ssh = TcpListener::bind(args.ssh_listen)
        .await
        .with_context(|| taken("the SSH server", args.ssh_listen, "--ssh-listen"))?;
    let relay_agents = TcpListener::bind(args.relay_listen)
        .await
        .with_context(|| {
            format!(
                "binding the relay's agent listener on {}",
                args.relay_listen
            )
        })?;
    let relay_internal = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the relay's internal listener")?;
    let api_addr = api.local_addr().context("reading the API address")?;
    Ok(Bound {
        api_addr,
        api_url: format!("http://{api_addr}"),
        proxy_port: proxy_http.local_addr()?.port(),
        ssh_addr: proxy_ssh.local_addr()?,
        relay_agent_url: format!("http://{}", relay_agents.local_addr()?),
        relay_internal_url: format!("http://{}", relay_internal.local_addr()?),
        api,
        proxy_http,
        proxy_ssh,
        relay_agents,
        relay_internal,
    })
}

/// The workspace runtime, checked before anything serves so that a missing one is a clear,
/// early error; the engine's handle too, for what only the engine does.
async fn connect_runtime(
    args: &UpArgs,
    agent_id: AgentId,
    home: &Path,
) -> anyhow::Result<(Arc<dyn WorkspaceRuntime>, Option<EngineRuntime>)> {
    Ok(match args.runtime {
        crate::agent_cmd::RuntimeKind::Engine => {
            let mut engine = EngineConfig::new(agent_id, home.join("agent"));
            engine.host = args.engine.clone();
            // The agent's own fetches (a dev container's Features) are held to the same
            // ranges as the server's.
            engine.outbound_allow = args.outbound_allow.clone();
            let runtime = EngineRuntime::connect(engine).await.context(
                "warren up runs workspaces on Docker or Podman; install one \
                 (e.g. `apt-get install podman`) or point DOCKER_HOST at an engine",
            )?;
            (Arc::new(runtime.clone()), Some(runtime))
        }
        crate::agent_cmd::RuntimeKind::Kubernetes => {
            let client = kube::Client::try_default().await.context(
                "--runtime kubernetes runs workspaces on the cluster of KUBECONFIG (or the \
                 in-cluster configuration), and none could be loaded",
            )?;
            let mut runtime =
                KubernetesRuntime::new(client, agent_id, KubernetesOptions::default());
            let builds = crate::agent_cmd::build_settings(
                args.build_registry.clone(),
                args.build_registry.as_ref().and(args.engine.clone()),
                args.build_push_secret.clone(),
                home.join("agent").join("builder"),
                vec![],
                args.outbound_allow.clone(),
            )?;
            if let Some(settings) = builds {
                let builder = ImageBuilder::connect(agent_id, settings)
                    .await
                    .context("connecting the engine that builds images for the cluster")?;
                runtime = runtime.with_builder(builder);
            }
            (Arc::new(runtime), None)
        }
    })
}

/// The proxy's configuration: its OAuth client is first-party (no consent screen), with a
/// fresh secret each run.
fn proxy_config(
    args: &UpArgs,
    home: &Path,
    bound: &Bound,
    shared_secret: &str,
) -> anyhow::Result<ProxyConfig> {
    let api = Url::parse(&bound.api_url).context("the API address is not a URL")?;
    let relay = Url::parse(&bound.relay_internal_url).context("the relay address is not a URL")?;
    let config = ProxyConfig {
        public_port: Some(bound.proxy_port),
        shared_secret: shared_secret.to_owned(),
        oauth_client_id: PROXY_CLIENT_ID.into(),
        oauth_client_secret: random_secret(),
        ..ProxyConfig::new(home.join("proxy"), &args.workspace_domain, api, relay)
    };
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid proxy configuration: {e}"))?;
    Ok(config)
}

/// The server's configuration: `warren up`'s defaults, what its flags set, and where the
/// other components listen.
fn server_config(args: &UpArgs, home: &Path, bound: &Bound) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::new(home);
    config.partial_reconciliation_interval_seconds = args.partial_reconciliation_interval_seconds;
    config.prebuild_poll_seconds = args.prebuild_poll_seconds;
    config.ssh_public_address = Some(bound.ssh_addr.to_string());
    // The proxy's host key, made now if new, is published so `warren ws ssh` pins it.
    let host_key = warren_proxy::ssh::host_public_key(
        &home
            .join("proxy")
            .join(warren_proxy::config::SSH_HOST_KEY_FILE),
    )
    .context("preparing the proxy's SSH host key")?;
    config.ssh_host_keys = vec![host_key];
    config.relay_urls = vec![bound.relay_internal_url.clone()];
    config.devfile_registries = args.devfile_registries.clone();
    config.outbound_allow = args.outbound_allow.clone();
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    Ok(config)
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let home = match args.home.clone() {
        Some(h) => h,
        None => credentials::warren_home(None).context("finding WARREN_HOME")?,
    };
    std::fs::create_dir_all(&home)
        .with_context(|| format!("creating the state directory {}", home.display()))?;
    ServerConfig::new(&home)
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    if args.workspace_domain.trim().is_empty() {
        bail!("--workspace-domain must not be empty");
    }
    if args.build_registry.is_some() && args.runtime != crate::agent_cmd::RuntimeKind::Kubernetes {
        bail!("--build-registry is for --runtime kubernetes (the engine runtime builds on its own engine)");
    }
    crate::agent_cmd::build_settings(
        args.build_registry.clone(),
        None,
        args.build_push_secret.clone(),
        home.join("agent").join("builder"),
        vec![],
        vec![],
    )?;

    // Configuration is valid: bind. The relay's listeners are private to this process.
    let bound = bind(&args).await?;
    // Endpoint URLs carry the proxy's port unless it is the default one.
    let url_domain = if bound.proxy_port == 80 {
        args.workspace_domain.clone()
    } else {
        format!("{}:{}", args.workspace_domain, bound.proxy_port)
    };
    let server = Server::prepare(server_config(&args, &home, &bound)?)
        .await
        .context("starting the server")?;
    if let Some(admin) = server.bootstrap_admin() {
        println!(
            "Created the admin account {:?} with password {:?} (shown only now).",
            admin.username, admin.password
        );
    }
    let (agent_id, agent_token, agent_config) = ensure_agent(&server, &home, &url_domain).await?;
    let cred_path = ensure_cli_credentials(&server, &home, &bound.api_url).await?;
    let (runtime, engine_runtime) = connect_runtime(&args, agent_id, &home).await?;
    let shared_secret = String::from_utf8(server.relay_secret().to_vec())
        .context("the relay secret is not text")?;
    let proxy_config = proxy_config(&args, &home, &bound, &shared_secret)?;
    server
        .register_oauth_client(&NewOAuthClient {
            client_id: PROXY_CLIENT_ID.into(),
            name: "Warren".into(),
            redirect_uris: vec![proxy_config.callback_url()],
            first_party: true,
            secret: Some(proxy_config.oauth_client_secret.clone()),
        })
        .await
        .map_err(|e| anyhow::anyhow!("registering the proxy's OAuth client: {e}"))?;

    let Bound {
        api,
        api_addr,
        api_url,
        proxy_http,
        proxy_ssh,
        ssh_addr,
        relay_agents,
        relay_agent_url,
        relay_internal,
        ..
    } = bound;
    let shutdown = shutdown_on_signals();
    let relay_config = warren_relay::RelayConfig::new(
        Url::parse(&api_url).context("the API address is not a URL")?,
        shared_secret,
    );
    let relay = tokio::spawn(warren_relay::run(
        relay_config,
        warren_relay::Listeners {
            agents: relay_agents,
            internal: relay_internal,
        },
        shutdown.clone(),
    ));
    let server_task = tokio::spawn(server.serve(api, shutdown.clone()));
    let proxy_task = tokio::spawn(warren_proxy::run(
        proxy_config,
        ProxyListeners {
            http: proxy_http,
            ssh: Some(proxy_ssh),
            // The server's /metrics shows every service's metrics: they share the process.
            metrics: None,
        },
        shutdown.clone(),
    ));
    let agent_task = tokio::spawn(warren_agent::serve(
        ConnectionConfig::new(
            Url::parse(&relay_agent_url).context("the relay address is not a URL")?,
            agent_token,
        ),
        runtime,
        ReconcilerConfig::default(),
        agent_id,
        shutdown.clone(),
    ));

    if let Some(path) = &args.ready_file {
        std::fs::write(path, api_addr.to_string())
            .with_context(|| format!("writing the ready file {}", path.display()))?;
    }
    announce(
        &api_url,
        &url_domain,
        ssh_addr,
        &relay_agent_url,
        &home,
        &cred_path,
    );
    let no_build = args.no_editor_build;
    let editor = agent_config.editor.clone();
    prepare_editor(engine_runtime.as_ref(), &home, editor, no_build, &shutdown).await;

    let (server_res, relay_res, proxy_res, agent_res) =
        tokio::join!(server_task, relay, proxy_task, agent_task);
    let stopped = shutdown.is_cancelled();
    shutdown.cancel();
    // Stops a Podman service the runtime started itself; workspaces keep running.
    if let Some(engine_runtime) = engine_runtime {
        engine_runtime.shutdown().await;
    }
    server_res
        .context("the server task panicked")?
        .context("the server stopped")?;
    relay_res
        .context("the relay task panicked")?
        .context("the relay stopped")?;
    proxy_res
        .context("the proxy task panicked")?
        .context("the proxy stopped")?;
    agent_res
        .context("the agent task panicked")?
        .context("the agent stopped")?;
    if !stopped {
        bail!("a component stopped on its own");
    }
    println!("Warren stopped.");
    Ok(())
}

/// Says where everything is.
fn announce(
    api_url: &str,
    url_domain: &str,
    ssh_addr: SocketAddr,
    relay_agent_url: &str,
    home: &Path,
    cred_path: &Path,
) {
    println!("Warren is up.");
    println!("  web UI:          {api_url}/    (sign in as \"admin\")");
    println!("  REST API:        {api_url}/api/v1");
    println!("  workspace hosts: http://{{port}}-{{workspace}}.{url_domain}/");
    println!("  web terminal:    http://terminal-{{workspace}}.{url_domain}/");
    println!(
        "  SSH:             ssh -p {} {{workspace}}@{}",
        ssh_addr.port(),
        ssh_addr.ip()
    );
    println!("  connectors:      warren connect --relay-url {relay_agent_url} --mount {{mount}} --port {{port}}");
    println!("  state:           {}", home.display());
    println!(
        "  CLI signed in:   {} (credentials in {})",
        api_url,
        cred_path.display()
    );
    println!("Open the web UI, or try: warren ws create --devfile devfile.yaml --wait    (Ctrl-C stops Warren; workspaces keep running)");
}

/// The default tools image is built here on first use, for the engine, in the background:
/// workspaces started meanwhile run without the editor and say why; those started after get
/// it. One the configuration names comes from its registry (a cluster always pulls it from
/// there, so without one a cluster's workspaces cannot start their editor).
async fn prepare_editor(
    engine_runtime: Option<&EngineRuntime>,
    home: &Path,
    editor: warren_types::config::EditorConfig,
    no_build: bool,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    if !editor.enabled() || editor.image.is_some() {
        return;
    }
    let Some(engine_runtime) = engine_runtime else {
        println!(
            "editor: the default tools image {} is made locally for Docker or Podman; a cluster \
             cannot pull it. Build one with `warren tools build --image REGISTRY/warren-tools:TAG`, \
             push it and set the agent's editor image (`warren agent update`), or workspaces \
             cannot start their editor's init container.",
            editor.tools_image()
        );
        return;
    };
    if no_build {
        return;
    }
    let image = editor.tools_image();
    if engine_runtime.image_present(&image).await {
        return;
    }
    println!(
        "Preparing the editor ({image}) on first use, about two minutes; workspaces \
         started meanwhile run without it and say why."
    );
    let home = home.to_owned();
    let runtime = engine_runtime.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let build = crate::tools_cmd::build(&home, &editor.version, &image, None, None, |l| {
            println!("editor tools: {l}")
        });
        tokio::select! {
            // Cancel-safe: dropping the build kills the script (kill_on_drop).
            _ = shutdown.cancelled() => {}
            r = build => match r {
                Ok(()) => {
                    runtime.retry_tools_now().await;
                    println!("editor tools: {image} is ready; workspaces started from now on get the editor");
                }
                Err(e) => {
                    tracing::warn!(error = format!("{e:#}"), "the editor's tools image could not be built");
                    println!("editor tools: not built ({e:#}); workspaces run without the editor until `warren tools build` succeeds");
                }
            },
        }
    });
}

/// Makes sure the default agent exists and that its token is on disk; returns both, with its
/// configuration.
async fn ensure_agent(
    server: &Server,
    home: &Path,
    workspace_domain: &str,
) -> anyhow::Result<(AgentId, String, AgentConfig)> {
    let token_path = home.join("keys").join("agent-local.token");
    if let Some(agent) = server
        .agent_by_name(DEFAULT_AGENT)
        .await
        .map_err(|e| anyhow::anyhow!("looking up the default agent: {e}"))?
    {
        let mut current = agent.config.clone();
        if agent.config.workspace_domain != workspace_domain {
            // The proxy moved to another port: new endpoint URLs must name it.
            let config = AgentConfig {
                workspace_domain: workspace_domain.to_owned(),
                ..agent.config.clone()
            };
            let state = server.state();
            state
                .store
                .update_agent_config(agent.id, &config, state.clock.now_ms())
                .await
                .map_err(|e| {
                    anyhow::anyhow!("updating the default agent's workspace domain: {e}")
                })?;
            current = config;
        }
        if token_path.exists() {
            return Ok((agent.id, read_secret(&token_path, "agent token")?, current));
        }
        // The token is stored hashed only; a lost file means a new token.
        let token = server
            .reset_agent_token(agent.id)
            .await
            .map_err(|e| anyhow::anyhow!("renewing the default agent's token: {e}"))?;
        write_private(&token_path, &token)?;
        return Ok((agent.id, token, current));
    }
    let config = AgentConfig {
        workspace_domain: workspace_domain.to_owned(),
        workspace_scheme: "http".into(),
        ..AgentConfig::default()
    };
    let created = server
        .create_agent(DEFAULT_AGENT, &config)
        .await
        .map_err(|e| anyhow::anyhow!("creating the default agent: {e}"))?;
    write_private(&token_path, &created.token)?;
    Ok((created.agent.id, created.token, config))
}

/// Signs the CLI in as the admin unless it already points at this server.
async fn ensure_cli_credentials(
    server: &Server,
    home: &Path,
    api_url: &str,
) -> anyhow::Result<PathBuf> {
    let path = home.join(credentials::FILE_NAME);
    let existing = credentials::load(&path).ok().flatten();
    let username = "admin";
    // The saved token stays while it is valid (the URL may change between runs: a new
    // port); a new one replaces and revokes it otherwise.
    let renewed = server
        .renew_cli_token(
            username,
            "warren up",
            existing.as_ref().map(|c| c.token.as_str()),
        )
        .await
        .map_err(|e| anyhow::anyhow!("issuing a token for the CLI: {e}"))?;
    let credentials = match (renewed, existing) {
        (Some(created), _) => Credentials {
            url: api_url.to_owned(),
            token: created.secret,
            username: Some(username.to_owned()),
            token_id: Some(created.token.id),
        },
        (None, Some(kept)) if kept.url == api_url => return Ok(path),
        (None, Some(kept)) => Credentials {
            url: api_url.to_owned(),
            ..kept
        },
        (None, None) => anyhow::bail!("the server kept a CLI token that was never given"),
    };
    credentials::save(&path, &credentials)
        .with_context(|| format!("writing the CLI credentials {}", path.display()))?;
    Ok(path)
}

/// Writes a secret readable by its owner only.
fn write_private(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(f, "{secret}").with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
