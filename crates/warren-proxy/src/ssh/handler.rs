//! One SSH connection: authentication against the server, then channel requests.
//!
//! Requests that need an answer (`pty-req`, `env`, `shell`, …) are answered right here, in
//! order: russh tracks one pending reply per channel, so answering from a spawned task
//! could pair a reply with the wrong request. Work that takes time (opening an exec or a
//! tunnel through the relay) runs in a task per channel, which owns the russh channel.
//!
//! `env`: every variable with a POSIX name is accepted (bounded in count and size). The
//! user owns the workspace and can set anything from their shell, so an allow-list would
//! protect nothing while breaking tools that pass their own variables.

use super::{forward, session, MAX_AUTH_ATTEMPTS};
use crate::Shared;
use russh::keys::{HashAlg, PublicKey};
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use warren_types::internal::{SshAuthorization, SshAuthorizeQuery};
use warren_types::relay::{EnvVar, TerminalSize};

/// A positive authorisation is reused this long before the server is asked again (for new
/// channels on a long-lived connection), within access.md's 60 s bound.
const AUTH_REFRESH: Duration = Duration::from_secs(30);
const MAX_ENV_VARS: usize = 64;
const MAX_ENV_NAME: usize = 256;
const MAX_ENV_VALUE: usize = 8 * 1024;
/// Session channels waiting for `shell`/`exec`/`subsystem`, per connection.
const MAX_PENDING_CHANNELS: usize = 32;
/// Open channels (sessions and forwards) per connection; more are refused.
const MAX_CHANNELS: usize = 256;

/// How the user proved who they are; kept to ask the server again later.
#[derive(Clone)]
enum Credential {
    Key { fingerprint: String },
    Token { token: String },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Key { fingerprint } => write!(f, "Key({fingerprint})"),
            Credential::Token { .. } => f.write_str("Token(…)"),
        }
    }
}

/// The server refused (or could not be asked); what the user sees is the same either way.
#[derive(Debug, thiserror::Error)]
#[error("access to the workspace was refused")]
pub(crate) struct Refused;

/// An authenticated connection's authorisation, refreshed from the server when it is old.
#[derive(Debug)]
pub(crate) struct Authorized {
    username: String,
    credential: Credential,
    /// The client's address.
    source: std::net::IpAddr,
    snapshot: std::sync::Mutex<(SshAuthorization, Instant)>,
    /// One refresh at a time; the others wait for its answer.
    refreshing: tokio::sync::Mutex<()>,
}

impl Authorized {
    fn fresh_snapshot(&self) -> Option<SshAuthorization> {
        let s = self.snapshot.lock().expect("authorisation lock poisoned");
        (s.1.elapsed() < AUTH_REFRESH).then(|| s.0.clone())
    }

    /// The authorisation as the server sees it now (at most [`AUTH_REFRESH`] old).
    pub(crate) async fn current(&self, shared: &Shared) -> Result<SshAuthorization, Refused> {
        if let Some(a) = self.fresh_snapshot() {
            return Ok(a);
        }
        let _one = self.refreshing.lock().await;
        if let Some(a) = self.fresh_snapshot() {
            return Ok(a);
        }
        let fresh = authorize(shared, &self.username, &self.credential, Some(self.source)).await?;
        *self.snapshot.lock().expect("authorisation lock poisoned") =
            (fresh.clone(), Instant::now());
        Ok(fresh)
    }

    /// The authorisation as the server sees it this moment (a workspace being woken).
    pub(crate) async fn refreshed(&self, shared: &Shared) -> Result<SshAuthorization, Refused> {
        let _one = self.refreshing.lock().await;
        let fresh = authorize(shared, &self.username, &self.credential, Some(self.source)).await?;
        *self.snapshot.lock().expect("authorisation lock poisoned") =
            (fresh.clone(), Instant::now());
        Ok(fresh)
    }

    /// The answer from authentication or the last refresh, without a server call.
    fn cached(&self) -> SshAuthorization {
        self.snapshot
            .lock()
            .expect("authorisation lock poisoned")
            .0
            .clone()
    }
}

async fn authorize(
    shared: &Shared,
    username: &str,
    credential: &Credential,
    source: Option<std::net::IpAddr>,
) -> Result<SshAuthorization, Refused> {
    let mut query = SshAuthorizeQuery {
        username: username.to_owned(),
        public_key_fingerprint: None,
        token: None,
        source: source.map(|a| a.to_canonical()),
    };
    match credential {
        Credential::Key { fingerprint } => query.public_key_fingerprint = Some(fingerprint.clone()),
        Credential::Token { token } => query.token = Some(token.clone()),
    }
    match shared.server.ssh_authorize(&query).await {
        Ok(a) => Ok(a),
        Err(crate::server_api::ServerApiError::Denied) => Err(Refused),
        Err(crate::server_api::ServerApiError::Status {
            status: 403,
            message,
        }) => {
            tracing::info!(username, reason = %message, "ssh token refused");
            Err(Refused)
        }
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "ssh authorisation could not be checked");
            Err(Refused)
        }
    }
}

/// What a session channel asked for before its `shell`/`exec`/`subsystem`.
struct PendingSession {
    channel: Channel<Msg>,
    /// Held for as long as the channel lives.
    permit: tokio::sync::OwnedSemaphorePermit,
    pty: Option<(String, TerminalSize)>,
    env: Vec<EnvVar>,
}

pub(crate) struct Handler {
    shared: Arc<Shared>,
    stop: CancellationToken,
    _stop_on_drop: DropGuard,
    authenticated: Arc<AtomicBool>,
    peer: SocketAddr,
    auth: Option<Arc<Authorized>>,
    failed_attempts: u32,
    pending: HashMap<ChannelId, PendingSession>,
    channels: Arc<tokio::sync::Semaphore>,
}

impl Handler {
    pub(crate) fn new(
        shared: Arc<Shared>,
        stop: CancellationToken,
        authenticated: Arc<AtomicBool>,
        peer: SocketAddr,
    ) -> Self {
        Self {
            shared,
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
            authenticated,
            peer,
            auth: None,
            failed_attempts: 0,
            pending: HashMap::new(),
            channels: Arc::new(tokio::sync::Semaphore::new(MAX_CHANNELS)),
        }
    }

    async fn check(&mut self, user: &str, credential: Credential) -> Auth {
        if self.failed_attempts >= MAX_AUTH_ATTEMPTS {
            return no_more_attempts();
        }
        match authorize(&self.shared, user, &credential, Some(self.peer.ip())).await {
            Ok(a) => {
                tracing::info!(
                    peer = %self.peer,
                    workspace = %a.workspace_name,
                    user = %a.username,
                    method = match credential { Credential::Key { .. } => "publickey", Credential::Token { .. } => "password" },
                    "ssh login"
                );
                self.auth = Some(Arc::new(Authorized {
                    username: user.to_owned(),
                    credential,
                    source: self.peer.ip(),
                    snapshot: std::sync::Mutex::new((a, Instant::now())),
                    refreshing: tokio::sync::Mutex::new(()),
                }));
                self.authenticated.store(true, Ordering::Release);
                Auth::Accept
            }
            Err(Refused) => {
                self.failed_attempts += 1;
                tracing::info!(peer = %self.peer, credential = ?credential, "ssh login refused");
                if self.failed_attempts >= MAX_AUTH_ATTEMPTS {
                    no_more_attempts()
                } else {
                    Auth::reject()
                }
            }
        }
    }

    fn session_for(&mut self, channel: ChannelId) -> Option<PendingSession> {
        self.pending.remove(&channel)
    }

    /// Starts `kind` on a pending session channel and answers the request.
    fn start(
        &mut self,
        id: ChannelId,
        kind: session::Kind,
        s: &mut Session,
    ) -> Result<(), russh::Error> {
        let (Some(pending), Some(auth)) = (self.session_for(id), self.auth.clone()) else {
            // Already started (a second `exec` on one channel) or unknown.
            return s.channel_failure(id);
        };
        s.channel_success(id)?;
        let mut env = Vec::new();
        if let Some((term, _)) = &pending.pty {
            if !term.is_empty() {
                env.push(EnvVar {
                    name: "TERM".into(),
                    value: term.clone(),
                });
            }
        }
        for v in pending.env {
            env.retain(|e: &EnvVar| e.name != v.name);
            env.push(v);
        }
        let request = session::Request {
            kind,
            tty: pending.pty.as_ref().map(|(_, size)| *size),
            env,
            peer: Some(self.peer.ip()),
        };
        let run = session::run(
            self.shared.clone(),
            auth,
            pending.channel,
            request,
            self.stop.clone(),
        );
        let permit = pending.permit;
        tokio::spawn(async move {
            run.await;
            drop(permit);
        });
        Ok(())
    }
}

fn no_more_attempts() -> Auth {
    Auth::Reject {
        proceed_with_methods: Some(russh::MethodSet::empty()),
        partial_success: false,
    }
}

/// `SHA256:<base64 without padding>`, exactly as `ssh-keygen -l` prints it.
pub(crate) fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

fn size(cols: u32, rows: u32) -> TerminalSize {
    TerminalSize {
        cols: u16::try_from(cols).unwrap_or(u16::MAX),
        rows: u16::try_from(rows).unwrap_or(u16::MAX),
    }
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_ENV_NAME
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Hosts a `direct-tcpip` channel may name: the workspace itself, however it is spelled.
fn local_host(host: &str, workspace: &str) -> bool {
    matches!(
        host,
        "localhost" | "127.0.0.1" | "::1" | "[::1]" | "0.0.0.0"
    ) || host.eq_ignore_ascii_case(workspace)
}

impl russh::server::Handler for Handler {
    type Error = russh::Error;

    async fn auth_none(&mut self, _user: &str) -> Result<Auth, Self::Error> {
        Ok(Auth::reject())
    }

    async fn auth_publickey_offered(
        &mut self,
        _user: &str,
        _offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        // Any key may be tried; whether it opens the workspace is asked of the server once
        // russh has verified the signature (`auth_publickey`), so an offered key costs no
        // server call and reveals nothing.
        if self.failed_attempts >= MAX_AUTH_ATTEMPTS {
            return Ok(no_more_attempts());
        }
        Ok(Auth::Accept)
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        let fingerprint = fingerprint(key.public_key);
        Ok(self.check(user, Credential::Key { fingerprint }).await)
    }

    async fn auth_password(&mut self, user: &str, password: &str) -> Result<Auth, Self::Error> {
        if password.is_empty() || password.len() > 4096 {
            self.failed_attempts += 1;
            return Ok(Auth::reject());
        }
        Ok(self
            .check(
                user,
                Credential::Token {
                    token: password.to_owned(),
                },
            )
            .await)
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        // A handle dropped unanswered refuses the channel (administratively prohibited).
        if self.auth.is_none() || self.pending.len() >= MAX_PENDING_CHANNELS {
            return Ok(());
        }
        let Ok(permit) = self.channels.clone().try_acquire_owned() else {
            return Ok(());
        };
        self.pending.insert(
            channel.id(),
            PendingSession {
                channel,
                permit,
                pty: None,
                env: Vec::new(),
            },
        );
        reply.accept().await;
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        // A handle dropped unanswered refuses the channel (administratively prohibited).
        let Some(auth) = self.auth.clone() else {
            return Ok(());
        };
        let cached = auth.cached();
        let port = match u16::try_from(port_to_connect) {
            Ok(p) if p != 0 => p,
            _ => return Ok(()),
        };
        if !local_host(host_to_connect, &cached.workspace_name) {
            tracing::debug!(
                host = host_to_connect,
                "direct-tcpip to a foreign host refused"
            );
            return Ok(());
        }
        if cached.actual_state != warren_types::ActualState::Running {
            return Ok(());
        }
        let Ok(permit) = self.channels.clone().try_acquire_owned() else {
            return Ok(());
        };
        let run = forward::run(self.shared.clone(), auth, channel, port, self.stop.clone());
        reply.accept().await;
        tokio::spawn(async move {
            run.await;
            drop(permit);
        });
        Ok(())
    }

    async fn channel_close(
        &mut self,
        channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.pending.remove(&channel);
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        term: &str,
        col_width: u32,
        row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        match self.pending.get_mut(&channel) {
            Some(p) if term.len() <= MAX_ENV_VALUE => {
                p.pty = Some((term.to_owned(), size(col_width, row_height)));
                session.channel_success(channel)
            }
            _ => session.channel_failure(channel),
        }
    }

    async fn x11_request(
        &mut self,
        channel: ChannelId,
        _single_connection: bool,
        _x11_auth_protocol: &str,
        _x11_auth_cookie: &str,
        _x11_screen_number: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // No X11 forwarding; say so (an unanswered request would shift the replies to the
        // client's later requests).
        session.channel_failure(channel)
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        match self.pending.get_mut(&channel) {
            Some(p)
                if valid_env_name(name)
                    && value.len() <= MAX_ENV_VALUE
                    && p.env.len() < MAX_ENV_VARS =>
            {
                p.env.retain(|e| e.name != name);
                p.env.push(EnvVar {
                    name: name.to_owned(),
                    value: value.to_owned(),
                });
                session.channel_success(channel)
            }
            _ => session.channel_failure(channel),
        }
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.start(channel, session::Kind::Shell, session)
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let command = String::from_utf8_lossy(data).into_owned();
        self.start(channel, session::Kind::Exec(command), session)
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name != "sftp" {
            return session.channel_failure(channel);
        }
        self.start(channel, session::Kind::Sftp, session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_sha256_of_the_blob_unpadded() {
        use base64::Engine;
        use sha2::Digest;
        let key = crate::ssh::host_key::generate_ed25519();
        let blob = key.public_key().to_bytes().unwrap();
        let want = format!(
            "SHA256:{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(&blob))
        );
        assert_eq!(fingerprint(key.public_key()), want);
    }

    #[test]
    fn env_names_and_forward_hosts() {
        assert!(valid_env_name("LANG"));
        assert!(valid_env_name("LC_ALL"));
        assert!(valid_env_name("_x1"));
        assert!(!valid_env_name("1X"));
        assert!(!valid_env_name("A=B"));
        assert!(!valid_env_name(""));
        assert!(local_host("localhost", "ws"));
        assert!(local_host("::1", "ws"));
        assert!(local_host("WS", "ws"));
        assert!(!local_host("example.com", "ws"));
        assert!(!local_host("10.0.0.1", "ws"));
    }
}
