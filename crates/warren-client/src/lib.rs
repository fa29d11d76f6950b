//! A typed async client of Warren's REST API (`/api/v1`), used by the CLI and by tests.
//!
//! Every request body and answer is a type of [`warren_types::api`]; every path comes from
//! [`routes`]. Errors are one [`Error`] enum whose `Display` is a one-line reason: for an API
//! error that is the server's own `message`, which names the offending field or state.

mod accounts;
mod groups;
pub mod routes;
mod tree;
mod usage;
mod workspaces;

pub use workspaces::{CommandRun, LogFollow, PortForward, TerminalSocket};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::time::Duration;
use url::Url;
use warren_types::api::{
    AccessInfo, AddSshKeyRequest, Agent, ApiError, ChangePasswordRequest, CreateAgentRequest,
    CreateOAuthClient, CreateProjectRequest, CreateTokenRequest, CreateUserRequest,
    CreateWorkspaceRequest, CreatedAgent, CreatedOAuthClient, CreatedToken, OAuthClient, Page,
    PasswordLoginRequest, Project, ProxyKeyRotation, RebuildOutcome, RebuildWorkspaceRequest,
    ResizeWorkspaceRequest, SshKey, Token, UpdateAgentRequest, UpdateDesiredStateRequest,
    UpdateUserRequest, User, Workspace, WorkspaceResources, API_PREFIX,
};
use warren_types::api::{
    CreateMountRequest, CreateSpaceRequest, Mount, ProjectMember, ProjectRole, SetDotfilesRequest,
    SetProjectMemberRequest, SetSpaceMemberRequest, Space, SpaceMember, SpaceRole, Tree,
    UpdateProjectRequest, WorkspaceGrant,
};
use warren_types::api::{CreateShareLinkRequest, SetPortRequest, ShareLink, WorkspacePort};
use warren_types::api::{
    SetGitCredentialRequest, SetProfileRequest, SetSecretRequest, UserGitCredential, UserSecret,
};
use warren_types::git::GitCredential;
use warren_types::gitops::{
    AgentGitops, CreateRepositoryRequest, Policy, Repository, SourceStatus, WebhookSecretRequest,
};
use warren_types::prebuild::{Prebuild, RunPrebuildRequest, SetPrebuildsRequest};
use warren_types::sharing::PortVisibility;
use warren_types::state::DesiredState;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error status; `message` is meant for the user.
    #[error("{message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// The request did not complete: connection refused, DNS, TLS, timeout.
    #[error("cannot reach the Warren server at {url}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server answered success with a body that is not what the API documents.
    #[error("unexpected answer from {url} (HTTP {status})")]
    Decode {
        url: String,
        status: u16,
        #[source]
        source: serde_json::Error,
    },
    /// The base URL given to [`Client::new`] cannot address an HTTP server.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// A paginated list handed back a cursor it had already handed back.
    #[error("the server repeated the list cursor {cursor:?}")]
    CursorLoop { cursor: String },
    /// The workspace is starting (woken by this request, or already on its way): retry in
    /// `secs` seconds.
    #[error("{message}")]
    Starting { message: String, secs: u64 },
}

impl Error {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The API error code (`not_found`, `invalid_field`, …) of an API error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Filters of `GET /workspaces` (the server reads the same type); `None` leaves a filter out.
pub use warren_types::api::WorkspaceListQuery as WorkspaceQuery;

/// The query's pairs, in a fixed order, unset filters left out.
fn query_pairs(q: &WorkspaceQuery) -> Vec<(&'static str, String)> {
    let mut pairs = Vec::new();
    let fields = [
        ("state", &q.state),
        ("agent", &q.agent),
        ("project", &q.project),
        ("owner", &q.owner),
        ("space", &q.space),
        ("cursor", &q.cursor),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            pairs.push((k, v.clone()));
        }
    }
    if let Some(recursive) = q.recursive {
        pairs.push(("recursive", recursive.to_string()));
    }
    if let Some(limit) = q.limit {
        pairs.push(("limit", limit.to_string()));
    }
    pairs
}

/// A handle on one Warren server, authenticated with a personal access token (or not, for
/// [`Client::login`]). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// For what stays open (followed logs, forwarded ports): no total timeout.
    streams: reqwest::Client,
    base: Url,
    token: Option<String>,
}

impl fmt::Debug for Client {
    // Hand-written so a token never ends up in a log line or a panic message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (e.g. `https://warren.example.com`), sending `token`.
    pub fn new(base_url: &str, token: impl Into<String>) -> Result<Client> {
        let mut c = Client::anonymous(base_url)?;
        c.token = Some(token.into());
        Ok(c)
    }

    /// A client without credentials: only [`Client::login`] works with it.
    pub fn anonymous(base_url: &str) -> Result<Client> {
        let base = parse_base_url(base_url)?;
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .user_agent(concat!("warren-cli/", env!("CARGO_PKG_VERSION")))
        };
        let built = |r: reqwest::Result<reqwest::Client>| {
            r.map_err(|e| Error::InvalidUrl {
                url: base_url.to_owned(),
                reason: format!("cannot build an HTTP client ({e})"),
            })
        };
        Ok(Client {
            http: built(builder().timeout(Duration::from_secs(120)).build())?,
            streams: built(builder().build())?,
            base,
            token: None,
        })
    }

    /// A client using the given HTTP client for everything (tests that resolve names
    /// themselves, say).
    pub fn with_http(
        http: reqwest::Client,
        base_url: &str,
        token: Option<String>,
    ) -> Result<Client> {
        Ok(Client {
            streams: http.clone(),
            http,
            base: parse_base_url(base_url)?,
            token,
        })
    }

    /// The server's base URL, normalised (no trailing slash).
    pub fn base_url(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// The full URL of a route, e.g. for messages.
    pub fn url(&self, segments: &[String]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(API_PREFIX.split('/').filter(|s| !s.is_empty()));
            path.extend(segments);
        }
        url
    }

    // ---- plumbing ----

    async fn call<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[String],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<T> {
        let url = self.url(segments);
        let (status, bytes) = self.send(method, url.clone(), query, body).await?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Decode {
            url: url.to_string(),
            status: status.as_u16(),
            source,
        })
    }

    /// `GET`, no query: a JSON answer.
    async fn get<T: DeserializeOwned>(&self, segments: &[String]) -> Result<T> {
        self.call(Method::GET, segments, &[], None::<&()>).await
    }

    /// `method` with a JSON body, no query: a JSON answer.
    async fn with_body<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[String],
        body: &B,
    ) -> Result<T> {
        self.call(method, segments, &[], Some(body)).await
    }

    async fn call_empty(&self, method: Method, segments: &[String]) -> Result<()> {
        let url = self.url(segments);
        self.send(method, url, &[], None::<&()>).await.map(|_| ())
    }

    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let mut req = self.http.request(method, url.clone());
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let transport = |source| Error::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(transport)?.to_vec();
        if status.is_success() {
            Ok((status, bytes))
        } else {
            Err(api_error(status, &bytes))
        }
    }
}

/// Builds the error of a non-success answer: the documented `{"error": {...}}` body when there
/// is one, otherwise the status and the start of whatever the body was (a proxy's HTML page,
/// an empty 404 from a server that is not Warren).
fn api_error(status: StatusCode, body: &[u8]) -> Error {
    if let Ok(ApiError { error }) = serde_json::from_slice::<ApiError>(body) {
        return Error::Api {
            status: status.as_u16(),
            code: error.code,
            message: error.message,
        };
    }
    let text = String::from_utf8_lossy(body);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut message = format!(
        "HTTP {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .trim_end()
    .to_owned();
    if !text.is_empty() {
        let snippet: String = text.chars().take(200).collect();
        message.push_str(": ");
        message.push_str(&snippet);
    }
    let code = match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        _ => "http_error",
    };
    Error::Api {
        status: status.as_u16(),
        code: code.to_owned(),
        message,
    }
}

fn parse_base_url(base_url: &str) -> Result<Url> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: base_url.to_owned(),
        reason: reason.to_owned(),
    };
    let url = Url::parse(base_url.trim()).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(invalid("it has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it must not carry a query or fragment"));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_names_and_keep_a_path_prefix() {
        let c = Client::new("http://h:8080/warren/", "t").unwrap();
        assert_eq!(
            c.url(&routes::workspace("a/b?c")).as_str(),
            "http://h:8080/warren/api/v1/workspaces/a%2Fb%3Fc"
        );
        let c = Client::new("https://h", "t").unwrap();
        assert_eq!(
            c.url(&routes::workspace_desired_state("w")).as_str(),
            "https://h/api/v1/workspaces/w/desired_state"
        );
        assert_eq!(c.base_url(), "https://h");
    }

    #[test]
    fn bad_base_urls_are_refused_with_a_reason() {
        for bad in ["ftp://h", "not a url", "http://h/?x=1", "mailto:a@b"] {
            let err = Client::anonymous(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidUrl { .. }), "{bad}: {err}");
            assert!(err.to_string().contains(bad.trim()), "{err}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let c = Client::new("http://h", "secret-token").unwrap();
        let s = format!("{c:?}");
        assert!(!s.contains("secret-token"), "{s}");
    }

    #[test]
    fn error_bodies_become_one_line_messages() {
        let e = api_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            br#"{"error":{"code":"invalid_devfile","message":"components[0].name: required"}}"#,
        );
        assert_eq!(e.to_string(), "components[0].name: required");
        assert_eq!(e.code(), Some("invalid_devfile"));
        assert_eq!(e.status(), Some(422));

        let e = api_error(
            StatusCode::BAD_GATEWAY,
            b"<html>\n<h1>Bad\ngateway</h1></html>",
        );
        assert_eq!(
            e.to_string(),
            "HTTP 502 Bad Gateway: <html> <h1>Bad gateway</h1></html>"
        );
        let e = api_error(StatusCode::NOT_FOUND, b"");
        assert_eq!(e.to_string(), "HTTP 404 Not Found");
        assert!(e.is_not_found());
    }

    #[test]
    fn workspace_query_leaves_out_unset_filters() {
        let q = WorkspaceQuery {
            state: Some("Running".into()),
            limit: Some(10),
            ..Default::default()
        };
        assert_eq!(
            query_pairs(&q),
            vec![("state", "Running".to_owned()), ("limit", "10".to_owned())]
        );
    }
}
