//! The proxy's calls to the server's internal endpoints (access.md): authorisation, SSH
//! authorisation, activity reports, the stopped page's start button, share links, and the
//! keys and hand-offs every replica shares, and its presence (which region it serves).

use crate::jwt::InternalKeys;
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use std::time::Duration;
use warren_types::api::ApiError;
use warren_types::internal::{
    ActivityReport, EntryRedirect, HandoffUse, ProxyKeyOffer, ProxyKeys, ProxyLeaving,
    ProxyPresence, ShareRedeemRequest, ShareRedemption, SshAuthorization, SshAuthorizeQuery,
    WorkspaceAccess, WorkspaceAccessQuery, WorkspaceStartRequest, ENTRY_REDIRECT_PATH,
    PROXY_HANDOFF_PATH, PROXY_KEYS_PATH, PROXY_PRESENCE_PATH, SHARE_REDEEM_PATH,
    SSH_AUTHORIZE_PATH, WORKSPACE_ACCESS_PATH, WORKSPACE_ACTIVITY_PATH, WORKSPACE_START_PATH,
};
use warren_types::reconcile::SERVER_JWT_AUDIENCE;

/// A server call that hangs must not hang a user's request forever.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServerApiError {
    /// The server refused (404 for every "no": unknown, not the owner, undeclared port).
    #[error("the server refused access")]
    Denied,
    /// The server answered with another error.
    #[error("the server answered {status}: {message}")]
    Status { status: u16, message: String },
    /// The proxy could not sign its token for the server.
    #[error("signing the internal token")]
    Sign(#[source] warren_jwt::JwtError),
    /// The server could not be reached or its answer was unreadable.
    #[error("calling the server at {url}")]
    Unavailable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

/// Client of the server's internal endpoints; cheap to clone.
#[derive(Debug, Clone)]
pub struct ServerApi {
    base: url::Url,
    http: reqwest::Client,
    keys: InternalKeys,
}

impl ServerApi {
    /// A client of the server at `base`, trusting `roots` besides the public roots.
    pub fn new(
        base: url::Url,
        shared_secret: &[u8],
        roots: Option<&warren_tls::CaBundle>,
    ) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .tcp_nodelay(true);
        if let Some(roots) = roots {
            builder = roots.apply(builder);
        }
        Ok(Self {
            base,
            http: builder.build()?,
            keys: InternalKeys::new(shared_secret),
        })
    }

    /// The server's base URL (for the OAuth token and userinfo endpoints).
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    /// A shared HTTP client for other calls to the server.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base.as_str().trim_end_matches('/'), path)
    }

    async fn answer<T: DeserializeOwned>(
        url: String,
        resp: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<T, ServerApiError> {
        let resp = resp.map_err(|source| ServerApiError::Unavailable {
            url: url.clone(),
            source,
        })?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Err(ServerApiError::Denied);
        }
        if !status.is_success() {
            let body = resp.bytes().await.unwrap_or_default();
            let message = serde_json::from_slice::<ApiError>(&body)
                .map(|e| e.error.message)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(200).collect());
            return Err(ServerApiError::Status {
                status: status.as_u16(),
                message,
            });
        }
        resp.json::<T>()
            .await
            .map_err(|source| ServerApiError::Unavailable { url, source })
    }

    /// Sends `req` with a fresh internal JWT and reads the answer.
    async fn call<T: DeserializeOwned>(
        &self,
        url: String,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ServerApiError> {
        let token = self
            .keys
            .mint(SERVER_JWT_AUDIENCE)
            .map_err(ServerApiError::Sign)?;
        let resp = req.bearer_auth(token).send().await;
        Self::answer(url, resp).await
    }

    /// May this user (or token) reach this port of this workspace?
    pub async fn access(
        &self,
        query: &WorkspaceAccessQuery,
    ) -> Result<WorkspaceAccess, ServerApiError> {
        let url = self.url(WORKSPACE_ACCESS_PATH);
        self.call(url.clone(), self.http.get(&url).query(query))
            .await
    }

    /// Where the redirect mount `query.host` leads, for this caller.
    pub async fn redirect(
        &self,
        query: &WorkspaceAccessQuery,
    ) -> Result<EntryRedirect, ServerApiError> {
        let url = self.url(ENTRY_REDIRECT_PATH);
        self.call(url.clone(), self.http.get(&url).query(query))
            .await
    }

    /// May this SSH key or token open this workspace?
    pub async fn ssh_authorize(
        &self,
        query: &SshAuthorizeQuery,
    ) -> Result<SshAuthorization, ServerApiError> {
        let url = self.url(SSH_AUTHORIZE_PATH);
        self.call(url.clone(), self.http.get(&url).query(query))
            .await
    }

    /// Asks the server to start a stopped workspace on its owner's behalf.
    pub async fn start(
        &self,
        request: &WorkspaceStartRequest,
    ) -> Result<WorkspaceAccess, ServerApiError> {
        let url = self.url(WORKSPACE_START_PATH);
        self.call(url.clone(), self.http.post(&url).json(request))
            .await
    }

    /// A share link's secret, brought to the workspace host it opens.
    pub async fn redeem_share(
        &self,
        request: &ShareRedeemRequest,
    ) -> Result<ShareRedemption, ServerApiError> {
        let url = self.url(SHARE_REDEEM_PATH);
        self.call(url.clone(), self.http.post(&url).json(request))
            .await
    }

    /// Offers this proxy's keys; the keys every replica shares.
    pub async fn adopt_keys(&self, offer: &ProxyKeyOffer) -> Result<ProxyKeys, ServerApiError> {
        let url = self.url(PROXY_KEYS_PATH);
        self.call(url.clone(), self.http.post(&url).json(offer))
            .await
    }

    /// The shared cookie keys (polled).
    pub async fn cookie_keys(&self) -> Result<ProxyKeys, ServerApiError> {
        let url = self.url(PROXY_KEYS_PATH);
        self.call(url.clone(), self.http.get(&url)).await
    }

    /// Whether this is the first use of sign-in hand-off `jti` on any replica.
    pub async fn first_handoff_use(
        &self,
        jti: &str,
        expires_at: i64,
    ) -> Result<bool, ServerApiError> {
        let body = HandoffUse {
            jti: jti.to_owned(),
            expires_at,
        };
        let resp = self.post_raw(PROXY_HANDOFF_PATH, &body).await?;
        match resp.status() {
            StatusCode::NO_CONTENT => Ok(true),
            StatusCode::CONFLICT => Ok(false),
            _ => Err(Self::refusal(resp).await),
        }
    }

    /// `POST`s `body` with a fresh internal JWT; the answer, whatever its status.
    async fn post_raw<B: serde::Serialize>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<reqwest::Response, ServerApiError> {
        let url = self.url(path);
        let req = self.http.post(&url).json(body);
        self.send_raw(url, req).await
    }

    /// Sends `req` to `url` with a fresh internal JWT; the answer, whatever its status.
    async fn send_raw(
        &self,
        url: String,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ServerApiError> {
        let token = self
            .keys
            .mint(SERVER_JWT_AUDIENCE)
            .map_err(ServerApiError::Sign)?;
        req.bearer_auth(token)
            .send()
            .await
            .map_err(|source| ServerApiError::Unavailable { url, source })
    }

    /// An answer with no body expected: `Ok` on success, else the refusal.
    async fn done(resp: reqwest::Response) -> Result<(), ServerApiError> {
        if resp.status().is_success() {
            return Ok(());
        }
        Err(Self::refusal(resp).await)
    }

    /// Says this proxy serves, and where (its region's workspace URLs point here while it does).
    pub async fn present(&self, presence: &ProxyPresence) -> Result<(), ServerApiError> {
        let url = self.url(PROXY_PRESENCE_PATH);
        let req = self.http.put(&url).json(presence);
        Self::done(self.send_raw(url, req).await?).await
    }

    /// Says this proxy stops serving (its region's URLs move on at once).
    pub async fn leaving(&self, instance: &str) -> Result<(), ServerApiError> {
        let url = self.url(PROXY_PRESENCE_PATH);
        let query = ProxyLeaving {
            instance: instance.to_owned(),
        };
        let req = self.http.delete(&url).query(&query);
        Self::done(self.send_raw(url, req).await?).await
    }

    /// An answer that is not what the call expects, with the start of its body.
    async fn refusal(resp: reqwest::Response) -> ServerApiError {
        ServerApiError::Status {
            status: resp.status().as_u16(),
            message: resp
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect(),
        }
    }

    /// Reports terminals and SSH sessions opened and closed, for the audit log.
    pub async fn report_sessions(
        &self,
        report: &warren_types::internal::SessionReport,
    ) -> Result<(), ServerApiError> {
        Self::done(
            self.post_raw(warren_types::internal::SESSIONS_PATH, report)
                .await?,
        )
        .await
    }

    /// Reports the last activity of workspaces.
    pub async fn report_activity(&self, report: &ActivityReport) -> Result<(), ServerApiError> {
        Self::done(self.post_raw(WORKSPACE_ACTIVITY_PATH, report).await?).await
    }
}
