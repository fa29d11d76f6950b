//! The relay's calls to the server: agent-token checks (cached) and reconcile forwarding.

use crate::jwt::{JwtError, JwtKeys};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use url::Url;
use warren_types::reconcile::{AGENT_ID_HEADER, RECONCILE_PATH};
use warren_types::relay::{AuthenticateRequest, AuthenticateResponse, AUTHENTICATE_PATH};
use warren_types::AgentId;

/// At most this many cached acceptances; beyond it expired ones are purged, then all. Only a
/// valid agent token is accepted, so this bounds nothing an outsider controls: it is sized
/// above any one relay's agents (about 100 bytes each; a smaller cache would be wiped by
/// every reconnect of a large fleet and send each agent's next connection to the server).
const ACCEPTED_CAPACITY: usize = 1_000_000;
/// At most this many cached refusals: anyone can send tokens, so they are kept apart and few.
const REFUSED_CAPACITY: usize = 10_000;
/// Token checks in flight to the server at once. When a relay restarts, every agent dials
/// again within seconds; beyond this they wait here instead of each opening a connection
/// (a descriptor on both sides) and a request to the server, which has a bounded database
/// pool behind it anyway.
const AUTHENTICATE_CONCURRENCY: usize = 32;
/// Idle connections to the server kept for reuse.
const POOL_IDLE: usize = 64;
/// Time allowed for one call to the server.
const SERVER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("the agent token was refused")]
    Refused,
    #[error("calling the server at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the server answered {status} to {url}")]
    Status { url: String, status: u16 },
    #[error("the server's answer to {url} is malformed")]
    Malformed {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(transparent)]
    Jwt(#[from] JwtError),
}

#[derive(Clone)]
enum Cached {
    Accepted(AuthenticateResponse),
    Refused,
}

/// Token answers by the token's SHA-256, each with when it expires.
type AnswerCache<V> = HashMap<[u8; 32], (V, Instant)>;

/// Inserts into a cache of at most `capacity` answers: when full, expired ones are purged,
/// then all.
fn insert_bounded<V>(
    cache: &mut AnswerCache<V>,
    capacity: usize,
    key: [u8; 32],
    value: V,
    now: Instant,
    ttl: Duration,
) {
    if cache.len() >= capacity {
        cache.retain(|_, (_, expires)| *expires > now);
        if cache.len() >= capacity {
            cache.clear();
        }
    }
    cache.insert(key, (value, now + ttl));
}

/// A forwarded response: the server's status and body, unchanged.
#[derive(Debug)]
pub struct Forwarded {
    pub status: u16,
    pub body: Vec<u8>,
}

pub struct ServerClient {
    http: reqwest::Client,
    base: Url,
    keys: JwtKeys,
    accepted_ttl: Duration,
    refused_ttl: Duration,
    accepted: Mutex<AnswerCache<AuthenticateResponse>>,
    refused: Mutex<AnswerCache<()>>,
    authenticating: tokio::sync::Semaphore,
}

impl std::fmt::Debug for ServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClient")
            .field("base", &self.base.as_str())
            .finish()
    }
}

impl ServerClient {
    pub fn new(
        base: Url,
        keys: JwtKeys,
        accepted_ttl: Duration,
        refused_ttl: Duration,
        extra_roots: Option<&warren_tls::CaBundle>,
    ) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .timeout(SERVER_TIMEOUT)
            .pool_max_idle_per_host(POOL_IDLE);
        if let Some(roots) = extra_roots {
            builder = roots.apply(builder);
        }
        let http = builder.build()?;
        Ok(ServerClient {
            http,
            base,
            keys,
            accepted_ttl,
            refused_ttl,
            accepted: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            authenticating: tokio::sync::Semaphore::new(AUTHENTICATE_CONCURRENCY),
        })
    }

    fn url(&self, path: &str) -> String {
        let mut url = self.base.clone();
        let prefix = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{prefix}{path}"));
        url.to_string()
    }

    /// Checks an agent token with the server; answers (acceptance and refusal) are cached,
    /// keyed by the token's SHA-256 so the cache holds no token. Server failures are not cached.
    pub async fn authenticate(&self, token: &str) -> Result<AuthenticateResponse, ServerError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(hit) = self.cached(&key) {
            return hit;
        }
        // Never closed, so acquiring only waits; held until the answer is read.
        let _permit = self.authenticating.acquire().await;
        // Answered while this call waited (the same agent dialling twice).
        if let Some(hit) = self.cached(&key) {
            return hit;
        }
        let request = AuthenticateRequest {
            token: token.to_owned(),
        };
        let (resp, url) = self
            .post_with(None, AUTHENTICATE_PATH, |r| r.json(&request))
            .await?;
        let status = resp.status();
        let answer = if status == reqwest::StatusCode::UNAUTHORIZED
            || status == reqwest::StatusCode::FORBIDDEN
        {
            Cached::Refused
        } else if status.is_success() {
            let body: AuthenticateResponse =
                resp.json().await.map_err(|source| ServerError::Malformed {
                    url: url.clone(),
                    source,
                })?;
            Cached::Accepted(body)
        } else {
            return Err(ServerError::Status {
                url,
                status: status.as_u16(),
            });
        };
        self.store(key, answer.clone());
        match answer {
            Cached::Accepted(a) => Ok(a),
            Cached::Refused => Err(ServerError::Refused),
        }
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Result<AuthenticateResponse, ServerError>> {
        let now = Instant::now();
        let accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((a, _)) = accepted.get(key).filter(|(_, expires)| *expires > now) {
            return Some(Ok(a.clone()));
        }
        drop(accepted);
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused
            .get(key)
            .filter(|(_, expires)| *expires > now)
            .map(|_| Err(ServerError::Refused))
    }

    /// Drops a cached acceptance of the token with this digest (hex SHA-256), once the
    /// server said it is no longer the agent's: the next connection with it is checked
    /// afresh, and refused, instead of riding out the cache.
    pub fn forget(&self, token_digest: &str) {
        let Ok(bytes) = hex::decode(token_digest) else {
            return;
        };
        let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            return;
        };
        let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        accepted.remove(&key);
    }

    fn store(&self, key: [u8; 32], answer: Cached) {
        let now = Instant::now();
        match answer {
            Cached::Accepted(a) => {
                let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
                insert_bounded(
                    &mut accepted,
                    ACCEPTED_CAPACITY,
                    key,
                    a,
                    now,
                    self.accepted_ttl,
                );
            }
            Cached::Refused => {
                let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
                insert_bounded(
                    &mut refused,
                    REFUSED_CAPACITY,
                    key,
                    (),
                    now,
                    self.refused_ttl,
                );
            }
        }
    }

    /// Forwards a reconcile body to the server unchanged, naming the authenticated agent.
    pub async fn reconcile(&self, agent: AgentId, body: Vec<u8>) -> Result<Forwarded, ServerError> {
        let (resp, url) = self
            .post_with(Some(agent), RECONCILE_PATH, |r| {
                r.header(AGENT_ID_HEADER, agent.to_string())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body)
            })
            .await?;
        let status = resp.status().as_u16();
        let body = resp
            .bytes()
            .await
            .map_err(|source| ServerError::Unreachable { url, source })?;
        Ok(Forwarded {
            status,
            body: body.to_vec(),
        })
    }
}

/// The server's answer to an agent's request for a build context.
#[derive(Debug)]
pub enum BuildContextAnswer {
    /// The archive follows in `response`'s body.
    Archive {
        commit: String,
        /// The build's key, when the server gave one.
        key: Option<String>,
        response: reqwest::Response,
    },
    /// No archive: the server's status and message (a workspace that is not the agent's, a
    /// repository that cannot be read, a context too large).
    Refused { status: u16, message: String },
}

/// Time allowed for a build context to arrive whole: a large repository over a slow link.
const BUILD_CONTEXT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The server's answer to a relay's question about a source.
#[derive(Debug)]
pub enum SourceAnswer {
    Granted(Box<warren_types::gitops::SourceGrant>),
    /// The agent may no longer sync it (token reset, source removed): the server's status
    /// and message.
    Denied {
        status: u16,
        message: String,
    },
}

impl ServerClient {
    /// POSTs `body` as JSON to `path` with a JWT naming `agent`; the answer and its URL.
    async fn post_for(
        &self,
        agent: AgentId,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<(reqwest::Response, String), ServerError> {
        self.post_with(Some(agent), path, |r| r.json(body)).await
    }

    /// POSTs to `path` with a JWT naming `agent` (none: the relay itself), `body` adding the
    /// rest; the answer and its URL.
    async fn post_with(
        &self,
        agent: Option<AgentId>,
        path: &str,
        body: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<(reqwest::Response, String), ServerError> {
        let url = self.url(path);
        let jwt = self.keys.mint_for_server(agent)?;
        let resp = body(self.http.post(&url).bearer_auth(jwt))
            .send()
            .await
            .map_err(|source| ServerError::Unreachable {
                url: url.clone(),
                source,
            })?;
        Ok((resp, url))
    }

    /// Asks whether `agent` (connected with the token whose digest is given) may sync
    /// `source` now, and with what.
    pub async fn authorize_source(
        &self,
        agent: AgentId,
        source: &str,
        token_digest: &str,
    ) -> Result<SourceAnswer, ServerError> {
        let request = warren_types::gitops::AuthorizeSourceRequest {
            source: source.to_owned(),
            token_digest: token_digest.to_owned(),
        };
        let (resp, url) = self
            .post_for(agent, warren_types::gitops::AUTHORIZE_SOURCE_PATH, &request)
            .await?;
        let status = resp.status();
        if status.is_success() {
            let grant = resp.json().await.map_err(|source| ServerError::Malformed {
                url: url.clone(),
                source,
            })?;
            return Ok(SourceAnswer::Granted(Box::new(grant)));
        }
        if matches!(status.as_u16(), 401 | 403 | 404) {
            let message = resp
                .json::<warren_types::api::ApiError>()
                .await
                .map(|e| e.error.message)
                .unwrap_or_else(|_| status.to_string());
            return Ok(SourceAnswer::Denied {
                status: status.as_u16(),
                message,
            });
        }
        Err(ServerError::Status {
            url,
            status: status.as_u16(),
        })
    }

    /// Asks for the build context of an image of `agent`'s workspace; the archive is read
    /// from the answer as it comes.
    pub async fn build_context(
        &self,
        agent: AgentId,
        req: &warren_types::relay::BuildContextRequest,
    ) -> Result<BuildContextAnswer, ServerError> {
        let (resp, url) = self
            .post_with(Some(agent), warren_types::relay::BUILD_CONTEXT_PATH, |r| {
                r.json(req).timeout(BUILD_CONTEXT_TIMEOUT)
            })
            .await?;
        let status = resp.status();
        if status.is_success() {
            let header = |name: &str| {
                resp.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let commit = header(warren_types::relay::BUILD_COMMIT_HEADER).unwrap_or_default();
            let key = header(warren_types::relay::BUILD_KEY_HEADER);
            return Ok(BuildContextAnswer::Archive {
                commit,
                key,
                response: resp,
            });
        }
        // Every refusal goes back to the agent whole: it ends up on the workspace.
        let message = resp
            .json::<warren_types::api::ApiError>()
            .await
            .map(|e| e.error.message)
            .unwrap_or_else(|_| format!("the server answered {status} to {url}"));
        Ok(BuildContextAnswer::Refused {
            status: status.as_u16(),
            message,
        })
    }

    /// Forwards an agent's report of a sync.
    pub async fn report_status(
        &self,
        agent: AgentId,
        status: &warren_types::gitops::SourceStatus,
    ) -> Result<(), ServerError> {
        let (resp, url) = self
            .post_for(agent, warren_types::gitops::SOURCE_STATUS_PATH, status)
            .await?;
        if !resp.status().is_success() {
            return Err(ServerError::Status {
                url,
                status: resp.status().as_u16(),
            });
        }
        Ok(())
    }
}

/// The digest the server keeps of an agent token.
pub use warren_types::token_digest;

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ServerClient {
        ServerClient::new(
            "http://127.0.0.1:9/".parse().unwrap(),
            JwtKeys::new(b"a shared secret of sufficient length"),
            Duration::from_secs(60),
            Duration::from_secs(60),
            None,
        )
        .unwrap()
    }

    fn key(n: usize) -> [u8; 32] {
        Sha256::digest(n.to_le_bytes()).into()
    }

    #[test]
    fn a_flood_of_refused_tokens_never_evicts_an_accepted_one() {
        let client = client();
        let answer = AuthenticateResponse {
            agent_id: AgentId(7),
            agent_name: "builder".into(),
        };
        client.store(key(0), Cached::Accepted(answer.clone()));
        // Three times what the refusals may hold: their cache is wiped more than once.
        for n in 1..=3 * REFUSED_CAPACITY {
            client.store(key(n), Cached::Refused);
        }
        match client.cached(&key(0)) {
            Some(Ok(hit)) => assert_eq!(hit, answer),
            other => panic!("the accepted token's answer is gone: {other:?}"),
        }
        assert!(client.refused.lock().unwrap().len() <= REFUSED_CAPACITY);
        assert!(matches!(
            client.cached(&key(3 * REFUSED_CAPACITY)),
            Some(Err(ServerError::Refused))
        ));
    }
}
