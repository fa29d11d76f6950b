//! The OAuth 2.0 authorization server's rules (RFC 6749 authorization-code grant with
//! RFC 7636 PKCE, S256 only): client registration, the checks of an authorization request
//! in the RFC's order, codes, the token exchange, userinfo, and password sign-in for the
//! login page. The pages, cookies and redirects are `crate::http::oauth`'s.
//!
//! Codes: 256-bit, stored as SHA-256, 60 s, single use; a replay revokes what the code
//! issued. Access tokens: opaque `wrn_oat_…` (256-bit, stored as SHA-256, 10 min).

pub mod signed;

use super::{AppError, AppState, ErrorKind, Principal};
use crate::app::audit;
use crate::crypto;
use crate::store::oauth::{OAuthClientRecord, OAuthClientRow};
use crate::store::users::UserRow;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use warren_types::UserId;

/// How long an authorization code is valid.
pub const CODE_TTL_MS: i64 = 60_000;
/// How long an access token is valid.
pub const ACCESS_TOKEN_TTL_MS: i64 = 600_000;
/// Prefix of OAuth access tokens (opaque, 256 bits).
pub const OAUTH_TOKEN_PREFIX: &str = "wrn_oat_";

// ---- clients ----

/// What registering a client takes.
#[derive(Debug, Clone)]
pub struct NewOAuthClient {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub first_party: bool,
    /// The secret of a confidential client; `None` registers a public client.
    pub secret: Option<String>,
}

pub use warren_types::api::{CreateOAuthClient, CreatedOAuthClient, OAuthClient};

impl From<&OAuthClientRow> for OAuthClient {
    fn from(c: &OAuthClientRow) -> Self {
        OAuthClient {
            client_id: c.client_id.clone(),
            name: c.name.clone(),
            redirect_uris: c.redirect_uris.clone(),
            first_party: c.first_party,
            confidential: c.confidential(),
            created_at: crate::db::from_millis(c.created_at),
        }
    }
}

/// Client ids: 1–100 of `A-Z a-z 0-9 . _ -`.
pub fn validate_client_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 100
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a valid client id (1-100 characters of A-Z, a-z, 0-9, '.', '_', '-')"
        ))
    }
}

/// Redirect URIs: absolute http(s) URLs without a fragment (RFC 6749 §3.1.2).
pub fn validate_redirect_uri(uri: &str) -> Result<(), String> {
    let u = url::Url::parse(uri).map_err(|e| format!("{uri:?} is not an absolute URL: {e}"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(format!("{uri:?} must use http or https"));
    }
    if u.fragment().is_some() {
        return Err(format!("{uri:?} must not contain a fragment"));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("{uri:?} lacks a host"));
    }
    Ok(())
}

async fn write_client(
    state: &AppState,
    c: &NewOAuthClient,
    replace: bool,
) -> Result<OAuthClientRow, AppError> {
    validate_client_id(&c.client_id).map_err(|e| AppError::invalid_field("client_id", e))?;
    if c.name.trim().is_empty() || c.name.len() > 100 {
        return Err(AppError::invalid_field("name", "must be 1-100 characters"));
    }
    if c.redirect_uris.is_empty() || c.redirect_uris.len() > 20 {
        return Err(AppError::invalid_field(
            "redirect_uris",
            "between 1 and 20 redirect URIs are required",
        ));
    }
    for u in &c.redirect_uris {
        validate_redirect_uri(u).map_err(|e| AppError::invalid_field("redirect_uris", e))?;
    }
    if let Some(s) = &c.secret {
        if s.len() < 32 || s.len() > 200 {
            return Err(AppError::invalid_field(
                "client_secret",
                "must be 32-200 characters",
            ));
        }
    }
    let record = OAuthClientRecord {
        client_id: c.client_id.clone(),
        name: c.name.clone(),
        redirect_uris: c.redirect_uris.clone(),
        first_party: c.first_party,
        secret_hash: c.secret.as_deref().map(crypto::token_digest),
    };
    state
        .store
        .write_oauth_client(&record, state.clock.now_ms(), replace)
        .await
        .map_err(super::error::already_exists(|| {
            format!("oauth client {:?} already exists", c.client_id)
        }))
}

/// Registers (or updates, by `client_id`) a client on the operator's behalf, e.g. `warren
/// up`'s proxy with a secret it keeps in its home; idempotent, so it can run on every start.
pub async fn register_client(
    state: &AppState,
    c: &NewOAuthClient,
) -> Result<OAuthClient, AppError> {
    Ok((&write_client(state, c, true).await?).into())
}

/// Registers a new client (admins only); a confidential client's secret is generated here
/// and shown once.
pub async fn create_client(
    state: &AppState,
    who: &Principal,
    req: CreateOAuthClient,
) -> Result<CreatedOAuthClient, AppError> {
    let name = req.name.clone();
    let r: Result<CreatedOAuthClient, AppError> = async move {
        who.require_admin()?;
        let secret = req
            .confidential
            .then(|| format!("wrn_cs_{}", crypto::random_secret(32)));
        let new = NewOAuthClient {
            client_id: req
                .client_id
                .unwrap_or_else(|| format!("wrn_client_{}", crypto::random_secret(9))),
            name: req.name,
            redirect_uris: req.redirect_uris,
            first_party: req.first_party,
            secret: secret.clone(),
        };
        let row = write_client(state, &new, false).await?;
        Ok(CreatedOAuthClient {
            client: (&row).into(),
            client_secret: secret,
        })
    }
    .await;
    audit::audited(
        state,
        who,
        "oauth_client.create",
        audit::Target::named("oauth_client", &name),
        r,
    )
    .await
}

/// Every registered client (admins only).
pub async fn list_clients(state: &AppState, who: &Principal) -> Result<Vec<OAuthClient>, AppError> {
    who.require_admin()?;
    let rows = state.store.list_oauth_clients().await?;
    Ok(rows.iter().map(OAuthClient::from).collect())
}

/// Deletes a client (admins only): its codes and tokens go with it, so whatever signed in
/// through it must sign in again through another.
pub async fn delete_client(
    state: &AppState,
    who: &Principal,
    client_id: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        if state.store.delete_oauth_client(client_id).await? {
            tracing::info!(client_id, by = %who.user.username, "oauth client deleted");
            Ok(())
        } else {
            Err(AppError::not_found(format!("oauth client {client_id:?}")))
        }
    }
    .await;
    audit::audited(
        state,
        who,
        "oauth_client.remove",
        audit::Target::named("oauth_client", client_id),
        r,
    )
    .await
}

// ---- authorization requests ----

/// The parameters of an authorization request, as the query or as hidden form fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuthorizeParams {
    pub response_type: Option<String>,
    pub client_id: Option<String>,
    pub redirect_uri: Option<String>,
    pub state: Option<String>,
    pub code_challenge: Option<String>,
    pub code_challenge_method: Option<String>,
    pub scope: Option<String>,
}

impl AuthorizeParams {
    /// The parameters given, in a fixed order (to carry them through a form).
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("response_type", &self.response_type),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("state", &self.state),
            ("code_challenge", &self.code_challenge),
            ("code_challenge_method", &self.code_challenge_method),
            ("scope", &self.scope),
        ]
        .into_iter()
        .filter_map(|(k, f)| f.as_deref().map(|x| (k, x)))
        .collect()
    }

    /// `/oauth/authorize?…` with these parameters (a path on this server only).
    pub fn authorize_path(&self) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.pairs() {
            s.append_pair(k, v);
        }
        format!("/oauth/authorize?{}", s.finish())
    }
}

/// An authorization request whose client and redirect URI are known good.
#[derive(Debug, Clone)]
pub struct Authorization {
    pub client: OAuthClientRow,
    pub redirect_uri: String,
    pub state: Option<String>,
    pub code_challenge: String,
    pub scope: String,
}

/// Why an authorization request is refused, and where the answer goes.
#[derive(Debug, Clone)]
pub enum AuthorizeRefusal {
    /// Shown to the user: the redirect target cannot be trusted.
    Page(&'static str),
    /// Sent back to the client's redirect URI (RFC 6749 §4.1.2.1); [`redirect_url`].
    Redirect {
        redirect_uri: String,
        state: Option<String>,
        error: &'static str,
        description: &'static str,
    },
    /// Warren could not check the request.
    Failed(AppError),
}

/// `uri` with `params` added to its query, if it is a URL.
pub fn redirect_url(uri: &str, params: &[(&str, &str)]) -> Option<String> {
    let mut u = url::Url::parse(uri).ok()?;
    {
        let mut q = u.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
    }
    Some(u.to_string())
}

/// RFC 7636 §4.1: 43–128 characters of `[A-Z a-z 0-9 - . _ ~]`.
pub fn valid_pkce_string(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// BASE64URL(SHA256(verifier)), the S256 challenge of a verifier.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Checks in RFC 6749's order: client and redirect URI first (a page), then the rest (a
/// redirect back to the client).
pub async fn check_authorization(
    state: &AppState,
    p: &AuthorizeParams,
) -> Result<Authorization, AuthorizeRefusal> {
    let Some(client_id) = p.client_id.as_deref().filter(|c| !c.is_empty()) else {
        return Err(AuthorizeRefusal::Page("The request lacks a client_id."));
    };
    let client = match state.store.oauth_client(client_id).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(AuthorizeRefusal::Page(
                "Unknown client: this application is not registered with Warren.",
            ))
        }
        Err(e) => {
            return Err(AuthorizeRefusal::Failed(AppError::internal(
                "looking up the oauth client",
                &e,
            )))
        }
    };
    let Some(redirect_uri) = p.redirect_uri.as_deref() else {
        return Err(AuthorizeRefusal::Page("The request lacks a redirect_uri."));
    };
    // Exact, byte-for-byte match against the registered URIs.
    if !client.redirect_uris.iter().any(|r| r == redirect_uri) {
        return Err(AuthorizeRefusal::Page(
            "The redirect_uri is not registered for this client.",
        ));
    }
    let back = |state: Option<&str>, error, description| AuthorizeRefusal::Redirect {
        redirect_uri: redirect_uri.to_owned(),
        state: state.map(str::to_owned),
        error,
        description,
    };
    let st = p.state.as_deref();
    if st.is_some_and(|s| s.len() > 1024) {
        return Err(back(
            None,
            "invalid_request",
            "state is longer than 1024 bytes",
        ));
    }
    if p.response_type.as_deref() != Some("code") {
        return Err(back(
            st,
            "unsupported_response_type",
            "response_type must be code",
        ));
    }
    let Some(challenge) = p.code_challenge.as_deref() else {
        return Err(back(
            st,
            "invalid_request",
            "code_challenge is required (PKCE with S256)",
        ));
    };
    if p.code_challenge_method.as_deref() != Some("S256") {
        return Err(back(
            st,
            "invalid_request",
            "code_challenge_method must be S256 (plain is not accepted)",
        ));
    }
    if !valid_pkce_string(challenge) {
        return Err(back(
            st,
            "invalid_request",
            "code_challenge must be 43-128 characters of A-Z a-z 0-9 - . _ ~",
        ));
    }
    let scope = p.scope.clone().unwrap_or_default();
    if scope.len() > 200 {
        return Err(back(st, "invalid_scope", "scope is too long"));
    }
    Ok(Authorization {
        redirect_uri: redirect_uri.to_owned(),
        state: p.state.clone(),
        code_challenge: challenge.to_owned(),
        scope,
        client,
    })
}

/// Issues a code for `user`; the answer is the client's redirect URI with the code (and
/// the request's `state`).
pub async fn grant(state: &AppState, v: &Authorization, user: UserId) -> Result<String, AppError> {
    let code = crypto::random_secret(32);
    state
        .store
        .insert_oauth_code(
            &crypto::token_digest(&code),
            &v.client.client_id,
            user,
            &v.redirect_uri,
            &v.code_challenge,
            &v.scope,
            state.clock.now_ms(),
            CODE_TTL_MS,
        )
        .await?;
    let mut p = vec![("code", code.as_str())];
    if let Some(s) = &v.state {
        p.push(("state", s.as_str()));
    }
    redirect_url(&v.redirect_uri, &p).ok_or_else(|| {
        AppError::new(
            ErrorKind::Invalid,
            "invalid_request",
            "the redirect URI is not valid",
        )
    })
}

/// The HMAC key of login forms and session cookies, shared by every server of the database.
pub async fn signing_key(state: &AppState) -> Result<Vec<u8>, AppError> {
    let fresh = crypto::random_secret(32);
    Ok(state
        .store
        .oauth_signing_key(state.clock.now_ms(), fresh.as_bytes())
        .await?)
}

/// The signed-in user of a session cookie value, if it is valid, the account is active and
/// no password change revoked the sessions issued before it.
pub async fn session_user(
    state: &AppState,
    key: &[u8],
    cookie: Option<&str>,
) -> Result<Option<UserRow>, AppError> {
    let Some((uid, issued)) =
        cookie.and_then(|c| signed::check_session(key, c, state.clock.now_ms()))
    else {
        return Ok(None);
    };
    Ok(state
        .store
        .user_by_id(uid)
        .await?
        .filter(|u| u.is_active() && issued >= u.sessions_valid_from))
}

/// The outcome of a password sign-in on the login page.
#[derive(Debug)]
pub enum SignIn {
    /// Signed in; the session cookie's value, valid for [`signed::SESSION_TTL_MS`].
    Ok { user: Box<UserRow>, session: String },
    /// Held back by the throttle for this many seconds.
    Throttled(u64),
    /// Wrong or malformed credentials (one answer for all, no user enumeration).
    Failed,
    /// Right credentials of a disabled account.
    Disabled,
}

/// Checks the login form's credentials, throttled like the API's password session.
pub async fn sign_in(
    state: &AppState,
    key: &[u8],
    username: &str,
    password: &str,
    client: Option<IpAddr>,
) -> Result<SignIn, AppError> {
    let r = sign_in_unaudited(state, key, username, password, client).await;
    let (user, result) = match &r {
        Ok(SignIn::Ok { user, .. }) => (Some(&**user), Ok(())),
        Ok(SignIn::Throttled(secs)) => (
            None,
            Err(AppError::new(
                ErrorKind::TooManyRequests,
                "too_many_attempts",
                format!("too many failed attempts; held back for {secs} s"),
            )),
        ),
        Ok(SignIn::Failed) => (
            None,
            Err(AppError::unauthenticated("wrong username or password")),
        ),
        Ok(SignIn::Disabled) => (None, Err(AppError::forbidden("the account is disabled"))),
        Err(e) => (None, Err(e.clone())),
    };
    super::audit::sign_in(state, username, "password", user, &result).await;
    r
}

async fn sign_in_unaudited(
    state: &AppState,
    key: &[u8],
    username: &str,
    password: &str,
    client: Option<IpAddr>,
) -> Result<SignIn, AppError> {
    super::users::password_login_allowed(state)?;
    let now = state.clock.now_ms();
    if let Err(t) = state.login_throttle.check(username, client, now) {
        tracing::info!("oauth sign-in refused: too many failures");
        return Ok(SignIn::Throttled(t.retry_after_secs));
    }
    let user = if username.is_empty()
        || username.len() > 64
        || password.is_empty()
        || password.len() > 1024
    {
        None
    } else {
        super::users::check_password(state, username, password).await?
    };
    let Some(user) = user else {
        state.login_throttle.failed(username, client, now);
        tracing::info!("oauth sign-in failed");
        return Ok(SignIn::Failed);
    };
    state.login_throttle.succeeded(username);
    if !user.is_active() {
        tracing::info!("oauth sign-in refused: the account is disabled");
        return Ok(SignIn::Disabled);
    }
    let session = signed::session_value(key, user.id, now + signed::SESSION_TTL_MS);
    Ok(SignIn::Ok {
        user: Box::new(user),
        session,
    })
}

// ---- token endpoint and userinfo ----

/// How a refused token request asks the client to authenticate (`WWW-Authenticate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    /// RFC 6749 §5.2: when the client tried Basic.
    Basic,
    /// RFC 6750 §3: an invalid bearer token.
    InvalidBearer,
}

/// An RFC 6749 §5.2 error (`error`, `error_description`).
#[derive(Debug, Clone)]
pub struct TokenError {
    pub kind: ErrorKind,
    pub error: &'static str,
    pub description: String,
    pub challenge: Option<Challenge>,
}

impl TokenError {
    fn new(kind: ErrorKind, error: &'static str, description: impl Into<String>) -> Self {
        TokenError {
            kind,
            error,
            description: description.into(),
            challenge: None,
        }
    }
    pub fn request(d: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "invalid_request", d)
    }
    fn grant(d: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "invalid_grant", d)
    }
    /// Client authentication failed; `basic` when the client tried Basic.
    pub fn client(basic: bool) -> Self {
        TokenError {
            challenge: basic.then_some(Challenge::Basic),
            ..Self::new(
                ErrorKind::Unauthenticated,
                "invalid_client",
                "client authentication failed",
            )
        }
    }
    fn invalid_token() -> Self {
        TokenError {
            challenge: Some(Challenge::InvalidBearer),
            ..Self::new(
                ErrorKind::Unauthenticated,
                "invalid_token",
                "the access token is missing, expired or revoked",
            )
        }
    }
}

impl From<crate::store::StoreError> for TokenError {
    fn from(e: crate::store::StoreError) -> Self {
        let a = AppError::from(e);
        Self::new(a.kind, "server_error", a.message)
    }
}

/// The token endpoint's form.
#[derive(Debug, Deserialize)]
pub struct TokenRequest {
    pub grant_type: Option<String>,
    pub code: Option<String>,
    pub redirect_uri: Option<String>,
    pub code_verifier: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
}

/// The successful answer of the token endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: i64,
    pub scope: String,
    /// The signed-in user's id, so a client need not call userinfo just for it.
    pub user_id: warren_types::UserId,
}

/// The answer of `GET /oauth/userinfo`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UserInfo {
    /// The user id as a string (OpenID Connect's `sub`).
    pub sub: String,
    pub user_id: warren_types::UserId,
    pub username: String,
    pub client_id: String,
    pub scope: String,
    /// Unix seconds when the access token expires.
    pub exp: i64,
}

/// Exchanges a code for an access token. `basic` is the client's `Authorization: Basic`
/// credentials, when it sent them (never together with a form secret).
pub async fn exchange_code(
    state: &AppState,
    basic: Option<(String, String)>,
    f: &TokenRequest,
) -> Result<TokenResponse, TokenError> {
    let used_basic = basic.is_some();
    let (client_id, secret) = match (basic, &f.client_secret) {
        (Some(_), Some(_)) => {
            return Err(TokenError::request(
                "use one client authentication method, not both",
            ))
        }
        (Some((id, s)), None) => {
            if f.client_id.as_ref().is_some_and(|c| *c != id) {
                return Err(TokenError::client(true));
            }
            (id, Some(s))
        }
        (None, s) => (
            f.client_id
                .clone()
                .ok_or_else(|| TokenError::request("client_id is required"))?,
            s.clone(),
        ),
    };
    let client = state
        .store
        .oauth_client(&client_id)
        .await?
        .ok_or_else(|| TokenError::client(used_basic))?;
    let authenticated = match (&secret, client.confidential()) {
        (Some(s), true) => client.check_secret(s),
        (None, false) => true,
        _ => false,
    };
    if !authenticated {
        return Err(TokenError::client(used_basic));
    }
    if f.grant_type.as_deref() != Some("authorization_code") {
        return Err(TokenError::new(
            ErrorKind::Invalid,
            "unsupported_grant_type",
            "grant_type must be authorization_code",
        ));
    }
    let code = f
        .code
        .as_deref()
        .ok_or_else(|| TokenError::request("code is required"))?;
    let redirect_uri = f
        .redirect_uri
        .as_deref()
        .ok_or_else(|| TokenError::request("redirect_uri is required"))?;
    let verifier = f
        .code_verifier
        .as_deref()
        .ok_or_else(|| TokenError::request("code_verifier is required (PKCE)"))?;
    let now = state.clock.now_ms();
    let c = if code.is_empty() || code.len() > 200 {
        None
    } else {
        state
            .store
            .consume_oauth_code(&crypto::token_digest(code), now)
            .await?
    };
    let c = c.ok_or_else(|| TokenError::grant("the code is not valid"))?;
    if c.used_at.is_some() {
        return Err(TokenError::grant(
            "the code was already used; tokens issued from it are revoked",
        ));
    }
    if c.client_id != client.client_id {
        return Err(TokenError::grant("the code was issued to another client"));
    }
    if c.expires_at <= now {
        return Err(TokenError::grant("the code has expired"));
    }
    if c.redirect_uri != redirect_uri {
        return Err(TokenError::grant(
            "redirect_uri differs from the one of the authorization request",
        ));
    }
    if !valid_pkce_string(verifier) || !crypto::ct_eq(&s256(verifier), &c.code_challenge) {
        return Err(TokenError::grant(
            "code_verifier does not match the code_challenge",
        ));
    }
    let access_token = format!("{OAUTH_TOKEN_PREFIX}{}", crypto::random_secret(32));
    state
        .store
        .insert_oauth_token(
            &crypto::token_digest(&access_token),
            &c,
            now,
            ACCESS_TOKEN_TTL_MS,
        )
        .await?;
    Ok(TokenResponse {
        access_token,
        token_type: "Bearer".into(),
        expires_in: ACCESS_TOKEN_TTL_MS / 1000,
        scope: c.scope,
        user_id: c.user_id,
    })
}

/// Who an access token stands for, if it is valid now.
pub async fn userinfo(state: &AppState, bearer: Option<&str>) -> Result<UserInfo, TokenError> {
    let token = bearer.ok_or_else(TokenError::invalid_token)?;
    if !token.starts_with(OAUTH_TOKEN_PREFIX) || token.len() > 200 {
        return Err(TokenError::invalid_token());
    }
    let digest = crypto::token_digest(token);
    let t = state
        .store
        .oauth_token_by_digest(&digest)
        .await?
        .filter(|t| {
            crypto::ct_eq(&t.token_hash, &digest)
                && t.revoked_at.is_none()
                && t.expires_at > state.clock.now_ms()
        })
        .ok_or_else(TokenError::invalid_token)?;
    let user = state
        .store
        .user_by_id(t.user_id)
        .await?
        .filter(UserRow::is_active)
        .ok_or_else(TokenError::invalid_token)?;
    Ok(UserInfo {
        sub: user.id.get().to_string(),
        user_id: user.id,
        username: user.username,
        client_id: t.client_id,
        scope: t.scope,
        exp: t.expires_at / 1000,
    })
}
