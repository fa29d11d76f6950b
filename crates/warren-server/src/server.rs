//! Start-up (configuration, keys, database, bootstrap admin) and serving.

use crate::app::oauth::{NewOAuthClient, OAuthClient};
use crate::app::users::BootstrapAdmin;
use crate::app::{self, AppError, AppState};
use crate::clock::{Clock, SystemClock};
use crate::config::ServerConfig;
use crate::crypto::{self, SecretBox};
use crate::db::Db;
use crate::error::ServerError;
use crate::relay::signal::{self, SignalHub};
use crate::store::Store;
use axum::Router;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use warren_types::api::{Agent, CreatedAgent, CreatedToken};
use warren_types::config::AgentConfig;
use warren_types::reconcile::ReconcileSettings;
use warren_types::AgentId;

/// A prepared server: database open and migrated, keys loaded, first admin bootstrapped.
/// `warren up` uses it to run the server in-process and read what it needs.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    state: AppState,
    /// The adapters' state: `state` and what only HTTP needs.
    http: crate::http::HttpState,
    bootstrap_admin: Option<BootstrapAdmin>,
    /// The shared lock on a SQLite database, held while the server lives, so `warren admin
    /// restore` cannot replace the file under it.
    _database_hold: Option<std::fs::File>,
    /// The HTTPS certificate, when the server serves TLS.
    tls: Option<warren_tls::ServerCert>,
}

impl Server {
    /// Validates `config`, opens everything; binds nothing.
    pub async fn prepare(config: ServerConfig) -> Result<Server, ServerError> {
        Self::prepare_with_clock(config, Arc::new(SystemClock)).await
    }

    /// [`Server::prepare`] with a chosen clock (tests move time by hand).
    pub async fn prepare_with_clock(
        config: ServerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Server, ServerError> {
        config.validate().map_err(ServerError::Config)?;
        std::fs::create_dir_all(&config.home).map_err(|e| {
            ServerError::Config(format!(
                "home: cannot create {}: {e}",
                config.home.display()
            ))
        })?;
        let key = crypto::load_or_create_key(&config.secret_key_path())?;
        let relay_secret = match &config.relay_secret {
            Some(s) => s.as_bytes().to_vec(),
            None => hex::encode(crypto::load_or_create_key(
                &config.home.join("keys/relay-secret.key"),
            )?)
            .into_bytes(),
        };
        let outbound = warren_netguard::Guard::new(config.outbound_allow.clone());
        let default_devfile = match &config.default_devfile_file {
            Some(path) => {
                std::fs::read_to_string(path).map_err(|source| ServerError::DefaultDevfile {
                    path: path.clone(),
                    source,
                })?
            }
            None => app::render::builtin_default_devfile().to_owned(),
        };
        app::render::parse(&default_devfile, "default devfile")
            .map_err(|e| ServerError::Config(format!("default_devfile_file: {}", e.message)))?;
        let tls = warren_tls::ServerCert::from_options(
            config.tls_cert_file.clone(),
            config.tls_key_file.clone(),
        )?;
        let url = config.effective_database_url();
        tracing::info!(database = %crate::db::redact(&url), "opening database");
        // Before opening: a restore in progress holds it exclusively.
        let database_hold =
            crate::backup::hold_database(&config).map_err(ServerError::DatabaseHeld)?;
        let db = Db::connect(&url, config.max_db_connections).await?;
        let store = Store::new(db, SecretBox::new(key));
        let sso = match config.oidc.clone() {
            Some(c) => Some(Arc::new(crate::app::sso::Sso::new(c).map_err(|e| {
                ServerError::Config(format!("oidc: building its HTTP client: {e}"))
            })?)),
            None => None,
        };
        let access = Arc::new(warren_types::api::AccessInfo {
            ssh: config
                .ssh_public_address
                .as_deref()
                .and_then(|a| warren_types::api::SshEndpoint::parse(a).ok())
                .map(|mut e| {
                    e.host_keys = config
                        .ssh_host_keys
                        .iter()
                        .filter_map(|k| warren_types::api::SshEndpoint::parse_host_key(k).ok())
                        .collect();
                    e
                }),
        });
        let audit = match &config.audit_file {
            Some(path) => app::audit::Stream::to_file(path.clone())
                .await
                .map_err(|e| ServerError::AuditFile {
                    path: path.clone(),
                    source: e,
                })?,
            None => app::audit::Stream::default(),
        };
        let audit = match &config.audit_syslog {
            Some(target) => {
                audit
                    .with_syslog(target)
                    .await
                    .map_err(|e| ServerError::AuditSyslog {
                        target: target.clone(),
                        source: e,
                    })?
            }
            None => audit,
        };
        let state = AppState {
            audit: Arc::new(app::audit::Log::start(store.clone(), audit)),
            sso,
            password_login: config.password_login,
            // Three missed rounds before another replica takes the jobs over.
            housekeeping: Arc::new(app::leases::Lease::new(
                app::leases::HOUSEKEEPING,
                app::leases::instance_name(&config.home),
                Duration::from_secs(config.lifecycle_interval_seconds.saturating_mul(3)),
            )),
            closing: CancellationToken::new(),
            store,
            clock,
            relay_secret: Arc::new(relay_secret),
            relay_urls: Arc::new(config.relay_urls.clone()),
            signals: SignalHub::default(),
            settings: ReconcileSettings {
                full_reconciliation_interval_seconds: config.full_reconciliation_interval_seconds,
                partial_reconciliation_interval_seconds: config
                    .partial_reconciliation_interval_seconds,
            },
            default_devfile: Arc::new(default_devfile),
            login_throttle: Arc::default(),
            changes: Arc::new(tokio::sync::watch::channel(0).0),
            git: warren_git::GitReader::new(
                config.home.join("git-cache"),
                warren_git::Options {
                    guard: outbound.clone(),
                    ..Default::default()
                },
            ),
            parents: crate::devfile_fetch::DevfileFetcher::new(
                config.devfile_registries.clone(),
                &outbound,
            ),
        };
        let bootstrap_admin =
            app::users::bootstrap_admin(&state, &config.bootstrap_admin_username).await?;
        app::projects::move_url_credentials(&state).await?;
        crate::http::metrics::handle();
        Ok(Server {
            http: crate::http::HttpState {
                app: state.clone(),
                trusted_proxies: Arc::new(config.trusted_proxies.clone()),
                access,
            },
            config,
            state,
            bootstrap_admin,
            _database_hold: database_hold,
            tls,
        })
    }

    /// The admin created on this start (only when the database was empty); shown once.
    pub fn bootstrap_admin(&self) -> Option<&BootstrapAdmin> {
        self.bootstrap_admin.as_ref()
    }

    /// Prints the bootstrap admin's credentials to stdout, when this start created it.
    pub fn announce_bootstrap_admin(&self) {
        if let Some(admin) = &self.bootstrap_admin {
            println!(
                "Created the first admin account (shown only this once):\n  username: {}\n  password: {}",
                admin.username, admin.password
            );
            tracing::warn!(username = %admin.username, "bootstrapped the first admin; its password was printed to stdout once");
            if !self.state.password_login {
                println!(
                    "  (password sign-in is off: this password signs nobody in; admins are the \
                     members of oidc.admin_group, or an account linked by oidc.link_existing_users)"
                );
            }
        }
    }

    /// The HS256 secret relays must share with this server.
    pub fn relay_secret(&self) -> &[u8] {
        &self.state.relay_secret
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Creates an agent directly (for `warren up`'s default agent); its token is returned once.
    pub async fn create_agent(
        &self,
        name: &str,
        config: &AgentConfig,
    ) -> Result<CreatedAgent, AppError> {
        app::agents::register(&self.state, name, config).await
    }

    /// The agent named `name`, if it exists (for `warren up`'s default agent).
    pub async fn agent_by_name(&self, name: &str) -> Result<Option<Agent>, AppError> {
        Ok(self
            .state
            .store
            .agent_by_key(name)
            .await?
            .map(|a| a.to_api()))
    }

    /// Gives an existing agent a new token (the old one stops working); shown once.
    pub async fn reset_agent_token(&self, agent: AgentId) -> Result<String, AppError> {
        app::agents::reset_token(&self.state, agent).await
    }

    /// The CLI token `warren up` keeps for `username` (see [`app::tokens::renew_cli_token`]).
    pub async fn renew_cli_token(
        &self,
        username: &str,
        name: &str,
        previous: Option<&str>,
    ) -> Result<Option<CreatedToken>, AppError> {
        app::tokens::renew_cli_token(&self.state, username, name, previous).await
    }

    /// Issues a personal access token (scopes `api` and `workspace`, valid `days`) for an
    /// existing user, e.g. so `warren up` can log its CLI in as the bootstrap admin.
    pub async fn issue_token(
        &self,
        username: &str,
        name: &str,
        days: u32,
    ) -> Result<CreatedToken, AppError> {
        app::tokens::issue_for(&self.state, username, name, days).await
    }

    /// Registers (or updates, by `client_id`) an OAuth client, e.g. `warren up`'s proxy with
    /// a secret it keeps in its home; idempotent, so it can run on every start.
    pub async fn register_oauth_client(
        &self,
        client: &NewOAuthClient,
    ) -> Result<OAuthClient, AppError> {
        app::oauth::register_client(&self.state, client).await
    }

    /// The whole HTTP application.
    pub fn router(&self) -> Router {
        crate::http::router(self.http.clone())
    }

    /// Serves on `listener` until `shutdown`, with the lifecycle timers and relay signals.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), ServerError> {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, tls = self.tls.is_some(), "warren server listening");
        }
        let listener = match &self.tls {
            None => Bound::Plain(listener),
            Some(cert) => Bound::Tls(
                warren_tls::TlsListener::new(listener, cert, &[b"h2", b"http/1.1"])
                    .map_err(ServerError::Serve)?,
            ),
        };
        let tasks = shutdown.child_token();
        let interval = Duration::from_secs(self.config.lifecycle_interval_seconds);
        let prebuild_poll = Duration::from_secs(self.config.prebuild_poll_seconds);
        let retention_days = self.config.audit_retention_days;
        let usage_days = self.config.usage_retention_days;
        let housekeeping = tokio::spawn({
            let state = self.state.clone();
            let tasks = tasks.clone();
            async move {
                let timers = tokio::spawn(app::lifecycle::timer_task(
                    state.clone(),
                    interval,
                    tasks.clone(),
                ));
                let prebuilds = tokio::spawn(app::prebuilds::prebuild_task(
                    state.clone(),
                    prebuild_poll,
                    tasks.clone(),
                ));
                let retention = tokio::spawn(app::audit::retention_task(
                    state.clone(),
                    retention_days,
                    tasks.clone(),
                ));
                let usage = tokio::spawn(app::usage::usage_task(
                    state.clone(),
                    usage_days,
                    tasks.clone(),
                ));
                let deletions =
                    tokio::spawn(app::users::deletion_task(state.clone(), interval, tasks));
                let _ = timers.await;
                let _ = prebuilds.await;
                let _ = deletions.await;
                let _ = retention.await;
                let _ = usage.await;
                // The jobs stopped at the start of shutdown: another replica may take them
                // now, without waiting for open connections to drain.
                state.housekeeping.release(&state).await;
            }
        });
        let signals = tokio::spawn(signal::deliver_task(
            self.state.signals.clone(),
            self.config.relay_urls.clone(),
            self.state.relay_secret.clone(),
            tasks.clone(),
        ));
        let closing = self.state.closing.clone();
        let closing_on = shutdown.clone();
        tokio::spawn(async move {
            closing_on.cancelled().await;
            closing.cancel();
        });
        let mut app = self.router();
        if self.tls.is_some() {
            // Every request on this listener came over TLS, whatever its headers say.
            app = app.layer(axum::Extension(crate::http::oauth::cookies::ServedOverTls));
        }
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        if let Some(cert) = &self.tls {
            tokio::spawn(
                cert.clone()
                    .watch(warren_tls::RELOAD_INTERVAL, tasks.clone()),
            );
        }
        let result = match listener {
            Bound::Plain(l) => {
                axum::serve(l, app)
                    .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                    .await
            }
            Bound::Tls(l) => {
                // Through `tap_io`, for which axum provides the peer address (`ConnectInfo`).
                use axum::serve::ListenerExt;
                axum::serve(l.tap_io(|_| {}), app)
                    .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                    .await
            }
        };
        tasks.cancel();
        let _ = housekeeping.await;
        let _ = signals.await;
        // What was recorded up to the end is written before the process may exit.
        if tokio::time::timeout(Duration::from_secs(10), self.state.audit.flush())
            .await
            .is_err()
        {
            tracing::error!("the audit log's last entries were not written within 10 s");
        }
        result.map_err(ServerError::Serve)
    }
}

/// The listening socket, as it is served.
enum Bound {
    Plain(TcpListener),
    Tls(warren_tls::TlsListener),
}

/// Prepares and serves; prints the bootstrap admin's credentials once, on the start that
/// created it.
pub async fn run(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let server = Server::prepare(config).await?;
    server.announce_bootstrap_admin();
    server.serve(listener, shutdown).await
}

/// Checks the audit log's hash chain straight in the database `config` names (`warren admin
/// audit verify`): no server has to run, nor be trusted to answer truly.
pub async fn verify_audit(
    config: &ServerConfig,
) -> Result<warren_types::api::AuditVerification, ServerError> {
    config.validate().map_err(ServerError::Config)?;
    let db = Db::connect(&config.effective_database_url(), 1).await?;
    // The log holds no sealed secret: a key that opens nothing is enough.
    let store = Store::new(db.clone(), SecretBox::new([0; 32]));
    let result = app::audit::verify(&store).await;
    db.pool.close().await;
    result.map_err(ServerError::AuditLog)
}
