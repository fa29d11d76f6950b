//! Single sign-on through an OpenID Connect provider: discovery, the authorization code flow
//! with PKCE and a nonce, the ID token's checks (issuer, audience, expiry, nonce, signature
//! against the provider's JWKS, fetched again when a token names a key it does not hold),
//! and the account it signs in — linked by subject, created or linked by a configured claim
//! on first sign-in, made admin or not by a group claim.
//!
//! The sign-in in progress lives in a signed cookie of the browser that started it (state,
//! nonce, PKCE verifier, where to return), so any server sharing the database can finish
//! it; the state of every finished sign-in is recorded until it expires, so a replayed
//! callback is refused even with the cookie.

use super::oauth::signed;
use super::{AppError, AppState, ErrorKind};
use crate::config::OidcConfig;
use crate::crypto;
use crate::store::users::{Guarded, UserRow};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreIdTokenVerifier, CoreProviderMetadata,
};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope, SignatureVerificationError,
    TokenResponse,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio::time::{Duration, Instant};

/// How long a sign-in may take at the provider.
pub const SIGN_IN_TTL_MS: i64 = 10 * 60_000;
/// How long the provider's metadata and keys are used before being read again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// A token naming an unknown key makes the keys be read again, at most this often.
const KEY_REFRESH_MIN: Duration = Duration::from_secs(10);
/// The password hash of accounts made by single sign-on: no password matches it.
const NO_PASSWORD: &str = "!sso";

/// A client made from discovered metadata: the authorization endpoint is known, the token
/// and userinfo endpoints may be.
type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// The provider's metadata (with its keys), read once and kept.
struct Cached {
    metadata: Arc<CoreProviderMetadata>,
    fetched: Instant,
    /// When a token naming an unknown key last made it be read again.
    forced: Option<Instant>,
}

/// The configured provider and what is known of it.
pub struct Sso {
    config: OidcConfig,
    http: reqwest::Client,
    cache: Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Sso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sso").field("config", &self.config).finish()
    }
}

/// A sign-in in progress, as its cookie carries it.
#[derive(Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    /// The path on this server to go back to (an authorization request, a web UI page).
    return_to: String,
    expires_ms: i64,
}

/// What the provider sent the browser back with.
#[derive(Debug, Default, Deserialize)]
pub struct Callback {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_description: Option<String>,
    /// RFC 9207: the issuer that answered, when the provider says.
    #[serde(default)]
    pub iss: Option<String>,
}

/// A finished single sign-on.
#[derive(Debug)]
pub struct SignedIn {
    pub user: UserRow,
    /// The server session cookie's value.
    pub session: String,
    /// Where the browser goes next.
    pub return_to: String,
}

fn failed(code: &'static str, message: impl Into<String>) -> AppError {
    AppError::new(ErrorKind::Unauthenticated, code, message)
}

fn provider_down(what: &str, e: &dyn std::error::Error) -> AppError {
    tracing::warn!(error = %warren_types::error_chain(e), "single sign-on: {what}");
    AppError::new(
        ErrorKind::Unavailable,
        "sso_unavailable",
        format!("the identity provider cannot be reached ({what}); try again later"),
    )
}

impl Sso {
    pub fn new(config: OidcConfig) -> Result<Sso, reqwest::Error> {
        // No redirects: a provider's endpoints are where its metadata says.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(15))
            .build()?;
        Ok(Sso {
            config,
            http,
            cache: Mutex::new(None),
        })
    }

    /// The login page's button label.
    pub fn display_name(&self) -> &str {
        &self.config.display_name
    }

    /// The provider's metadata: cached, or read again when stale or (`refresh`) when a
    /// token named a key the cached set lacks.
    async fn metadata(&self, refresh: bool) -> Result<Arc<CoreProviderMetadata>, AppError> {
        let mut cache = self.cache.lock().await;
        let mut forced = None;
        if let Some(c) = cache.as_ref() {
            // Forced reads are spaced out, so tokens naming made-up keys cannot make the
            // server hammer the provider.
            let may_force = c.forced.is_none_or(|f| f.elapsed() >= KEY_REFRESH_MIN);
            if c.fetched.elapsed() < METADATA_TTL && !(refresh && may_force) {
                return Ok(c.metadata.clone());
            }
            forced = if refresh {
                Some(Instant::now())
            } else {
                c.forced
            };
        }
        let issuer = IssuerUrl::new(self.config.issuer_url.clone())
            .map_err(|e| provider_down("its issuer URL", &e))?;
        let md = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|e| provider_down("reading its discovery document and keys", &e))?;
        let md = Arc::new(md);
        *cache = Some(Cached {
            metadata: md.clone(),
            fetched: Instant::now(),
            forced,
        });
        Ok(md)
    }

    fn redirect_url(&self) -> Result<RedirectUrl, AppError> {
        RedirectUrl::new(self.config.redirect_url.clone())
            .map_err(|e| AppError::internal("parsing oidc.redirect_url", &e))
    }

    /// The OAuth client of the provider's current metadata.
    async fn client(&self) -> Result<Client, AppError> {
        let md = self.metadata(false).await?;
        Ok(CoreClient::from_provider_metadata(
            (*md).clone(),
            ClientId::new(self.config.client_id.clone()),
            self.client_secret(),
        )
        .set_redirect_uri(self.redirect_url()?))
    }

    fn client_secret(&self) -> Option<ClientSecret> {
        self.config.client_secret.clone().map(ClientSecret::new)
    }

    /// Starts a sign-in that returns to `return_to`: the provider's URL to send the browser
    /// to, and the value of the cookie that must come back with it.
    pub async fn begin(
        &self,
        state: &AppState,
        key: &[u8],
        return_to: &str,
    ) -> Result<(String, String), AppError> {
        if !local_path(return_to) {
            return Err(AppError::invalid_field(
                "next",
                "must be a path on this server",
            ));
        }
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for s in &self.config.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, csrf, nonce) = req.url();
        let pending = Pending {
            state: csrf.secret().clone(),
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
            return_to: return_to.to_owned(),
            expires_ms: state.clock.now_ms() + SIGN_IN_TTL_MS,
        };
        let payload = serde_json::to_vec(&pending)
            .map_err(|e| AppError::internal("encoding the sign-in", &e))?;
        Ok((url.to_string(), signed::sso_value(key, &payload)))
    }

    /// Finishes a sign-in: checks the callback against the browser's cookie, exchanges the
    /// code, checks the ID token and signs its account in.
    pub async fn finish(
        &self,
        state: &AppState,
        key: &[u8],
        cookie: Option<&str>,
        cb: &Callback,
    ) -> Result<SignedIn, AppError> {
        let r = self.finish_unaudited(state, key, cookie, cb).await;
        let user = r.as_ref().ok().map(|s| &s.user);
        super::audit::sign_in(state, "", "sso", user, &r).await;
        r
    }

    async fn finish_unaudited(
        &self,
        state: &AppState,
        key: &[u8],
        cookie: Option<&str>,
        cb: &Callback,
    ) -> Result<SignedIn, AppError> {
        let now = state.clock.now_ms();
        let pending: Pending = cookie
            .and_then(|c| signed::check_sso(key, c))
            .and_then(|p| serde_json::from_slice(&p).ok())
            .filter(|p: &Pending| p.expires_ms > now)
            .ok_or_else(|| {
                failed(
                    "sso_no_sign_in",
                    "no sign-in is in progress in this browser, or it took longer than 10 \
                     minutes; start the sign-in again",
                )
            })?;
        if let Some(e) = &cb.error {
            // Only for this browser's own sign-in, and only the error code: the description
            // is anyone's text, not to be shown on this site.
            if !cb
                .state
                .as_deref()
                .is_some_and(|s| crypto::ct_eq(s, &pending.state))
            {
                return Err(failed(
                    "sso_state_mismatch",
                    "the sign-in's state does not match the one this browser started; start \
                     the sign-in again",
                ));
            }
            let code: String = e
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                .take(64)
                .collect();
            tracing::info!(error = %code, description = ?cb.error_description, "single sign-on refused by the provider");
            return Err(AppError::new(
                ErrorKind::Forbidden,
                "sso_refused",
                format!("the identity provider refused the sign-in ({code})"),
            ));
        }
        let issuer = self.config.issuer_url.trim_end_matches('/');
        if cb
            .iss
            .as_deref()
            .is_some_and(|i| i.trim_end_matches('/') != issuer)
        {
            return Err(failed(
                "sso_wrong_issuer",
                "the answer comes from another identity provider than this server's; start the \
                 sign-in again",
            ));
        }
        let (Some(code), Some(got_state)) = (&cb.code, &cb.state) else {
            return Err(AppError::new(
                ErrorKind::Invalid,
                "invalid_request",
                "the identity provider's answer has no code or no state",
            ));
        };
        if !crypto::ct_eq(got_state, &pending.state) {
            tracing::info!("single sign-on refused: the state does not match the browser's");
            return Err(failed(
                "sso_state_mismatch",
                "the sign-in's state does not match the one this browser started; start the \
                 sign-in again",
            ));
        }
        let fresh = state
            .store
            .consume_sso_state(&crypto::token_digest(got_state), pending.expires_ms, now)
            .await?;
        if !fresh {
            tracing::info!("single sign-on refused: the callback was replayed");
            return Err(failed(
                "sso_replayed",
                "this sign-in was already finished once; start the sign-in again",
            ));
        }
        let claims = self.exchange(code, &pending).await?;
        let user = self.account(state, &claims).await?;
        let session = signed::session_value(key, user.id, now + signed::SESSION_TTL_MS);
        tracing::info!(user = %user.username, "signed in through single sign-on");
        Ok(SignedIn {
            user,
            session,
            return_to: pending.return_to,
        })
    }

    /// The code for tokens, and the ID token's checked claims (as JSON).
    async fn exchange(
        &self,
        code: &str,
        pending: &Pending,
    ) -> Result<serde_json::Map<String, serde_json::Value>, AppError> {
        let client = self.client().await?;
        let request = client.exchange_code(AuthorizationCode::new(code.to_owned()));
        let request = request.map_err(|e| {
            AppError::new(
                ErrorKind::Upstream,
                "sso_provider",
                format!("the identity provider's metadata has no token endpoint ({e})"),
            )
        })?;
        let tokens = request
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => {
                    let detail = r
                        .error_description()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default();
                    tracing::info!(error = %r.error(), "single sign-on: the code was refused");
                    failed(
                        "sso_code_refused",
                        format!(
                            "the identity provider refused the sign-in's code ({}{detail}); \
                             start the sign-in again",
                            r.error()
                        ),
                    )
                }
                e => provider_down("exchanging the code", &e),
            })?;
        // Only the ID token says who signed in; the access token is not kept.
        let id_token = tokens.id_token().ok_or_else(|| {
            AppError::new(
                ErrorKind::Upstream,
                "sso_provider",
                "the identity provider sent no ID token (is `openid` among the client's scopes?)",
            )
        })?;
        let nonce = Nonce::new(pending.nonce.clone());
        let verify = |md: &CoreProviderMetadata| -> Result<(), ClaimsVerificationError> {
            let verifier: CoreIdTokenVerifier = match self.client_secret() {
                Some(secret) => CoreIdTokenVerifier::new_confidential_client(
                    ClientId::new(self.config.client_id.clone()),
                    secret,
                    md.issuer().clone(),
                    md.jwks().clone(),
                ),
                None => CoreIdTokenVerifier::new_public_client(
                    ClientId::new(self.config.client_id.clone()),
                    md.issuer().clone(),
                    md.jwks().clone(),
                ),
            };
            id_token.claims(&verifier, &nonce).map(|_| ())
        };
        let mut checked = verify(&*self.metadata(false).await?);
        if let Err(ClaimsVerificationError::SignatureVerification(
            SignatureVerificationError::NoMatchingKey,
        )) = checked
        {
            // The provider may have rotated its keys since they were read.
            let md = self.metadata(true).await?;
            checked = verify(&md);
        }
        checked.map_err(|e| {
            tracing::info!(error = %e, "single sign-on: the ID token was refused");
            failed("sso_bad_id_token", id_token_problem(&e))
        })?;
        // Checked: its payload is what the provider signed.
        let jwt = id_token.to_string();
        jwt.split('.')
            .nth(1)
            .and_then(|p| URL_SAFE_NO_PAD.decode(p).ok())
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or_else(|| failed("sso_bad_id_token", "the ID token's claims are not JSON"))
    }

    /// The account of checked claims: the one linked to the subject, else (first sign-in)
    /// one created or linked by the username claim.
    async fn account(
        &self,
        state: &AppState,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<UserRow, AppError> {
        let c = &self.config;
        let sub = claims
            .get("sub")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| failed("sso_bad_id_token", "the ID token has no subject (sub)"))?;
        let subject = format!("{} {sub}", c.issuer_url);
        let groups: Vec<&str> = match claims.get(&c.groups_claim) {
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
            Some(serde_json::Value::String(s)) => vec![s.as_str()],
            _ => vec![],
        };
        if !c.allowed_groups.is_empty()
            && !c
                .allowed_groups
                .iter()
                .any(|g| groups.contains(&g.as_str()))
        {
            tracing::info!("single sign-on refused: in none of oidc.allowed_groups");
            return Err(AppError::forbidden(format!(
                "your identity is in none of the groups allowed to use this server ({}); ask \
                 an administrator",
                c.allowed_groups.join(", ")
            )));
        }
        let admin = c.admin_group.as_ref().map(|g| groups.contains(&g.as_str()));
        let user = match state.store.user_by_sso_subject(&subject).await? {
            Some(u) => u,
            None => self.first_sign_in(state, claims, &subject, admin).await?,
        };
        if !user.is_active() {
            tracing::info!(user = %user.username, "single sign-on refused: the account is disabled");
            return Err(AppError::forbidden(
                "this account is disabled; ask an administrator",
            ));
        }
        let ttl_ms = i64::from(c.group_ttl_hours) * 3_600_000;
        super::groups::synced(state, &user, &groups, ttl_ms).await?;
        match admin {
            Some(admin) if admin != user.is_admin => {
                match state
                    .store
                    .update_user_access(user.id, admin, user.disabled_at)
                    .await?
                {
                    Guarded::Done(u) => Ok(u),
                    Guarded::LastAdmin => {
                        tracing::warn!(user = %user.username, "the identity provider no longer lists the last active admin in the admin group; kept as admin");
                        Ok(user)
                    }
                    Guarded::NotFound => Err(failed("sso_no_account", "the account was deleted")),
                }
            }
            _ => Ok(user),
        }
    }

    async fn first_sign_in(
        &self,
        state: &AppState,
        claims: &serde_json::Map<String, serde_json::Value>,
        subject: &str,
        admin: Option<bool>,
    ) -> Result<UserRow, AppError> {
        let c = &self.config;
        let raw = claims
            .get(&c.username_claim)
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                failed(
                    "sso_no_username",
                    format!(
                        "the ID token has no {:?} claim to name the account by (see oidc.username_claim)",
                        c.username_claim
                    ),
                )
            })?;
        let username = raw.to_lowercase();
        super::users::validate_username(&username).map_err(|e| {
            failed(
                "sso_no_username",
                format!("the {:?} claim: {e}", c.username_claim),
            )
        })?;
        if let Some(existing) = state.store.user_by_name(&username).await? {
            if !c.link_existing_users {
                return Err(failed(
                    "sso_account_exists",
                    format!(
                        "an account named {username:?} exists and is not linked to this identity \
                         (oidc.link_existing_users is off); ask an administrator"
                    ),
                ));
            }
            if !existing.is_active() {
                return Err(AppError::forbidden(
                    "this account is disabled; ask an administrator",
                ));
            }
            if !state.store.link_sso_subject(existing.id, subject).await? {
                return Err(failed(
                    "sso_account_exists",
                    format!("the account {username:?} is linked to another identity"),
                ));
            }
            tracing::info!(user = %username, "linked an existing account to its single sign-on identity");
            return Ok(existing);
        }
        if !c.sign_up {
            return Err(failed(
                "sso_no_account",
                format!(
                    "there is no account for {username:?} and sign-up through single sign-on is \
                     off; ask an administrator to create it"
                ),
            ));
        }
        let user = state
            .store
            .insert_sso_user(
                &username,
                NO_PASSWORD,
                admin.unwrap_or(false),
                subject,
                state.clock.now_ms(),
            )
            .await
            .map_err(super::error::already_exists(|| {
                format!("username {username:?} was taken at the same moment; sign in again")
            }))?;
        tracing::info!(user = %username, "created an account at its first single sign-on");
        Ok(user)
    }
}

/// A path on this server: not another site (`//host`, `https:`), no backslash tricks.
pub fn local_path(p: &str) -> bool {
    p.starts_with('/')
        && !p.starts_with("//")
        && !p.contains('\\')
        && !p.chars().any(char::is_control)
        && p.len() <= 4000
}

/// What was wrong with an ID token, for the user.
fn id_token_problem(e: &ClaimsVerificationError) -> String {
    let what = match e {
        ClaimsVerificationError::Expired(_) => "it has expired",
        ClaimsVerificationError::InvalidAudience(_) => "it is not meant for this server (audience)",
        ClaimsVerificationError::InvalidIssuer(_) => "another issuer made it",
        ClaimsVerificationError::InvalidNonce(_) => {
            "its nonce is not this sign-in's (a replayed token?)"
        }
        ClaimsVerificationError::SignatureVerification(
            SignatureVerificationError::NoMatchingKey,
        ) => "it is signed with a key the provider does not publish",
        ClaimsVerificationError::SignatureVerification(_) => "its signature does not verify",
        _ => "its claims are not valid",
    };
    format!("the identity provider's ID token was refused: {what}; start the sign-in again")
}
