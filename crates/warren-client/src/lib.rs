//! A typed async client of Warren's REST API (`/api/v1`), used by the CLI and by tests.
//!
//! Every request body and answer is a type of [`warren_types::api`]; every path comes from
//! [`routes`]. Errors are one [`Error`] enum whose `Display` is a one-line reason: for an API
//! error that is the server's own `message`, which names the offending field or state.

pub mod routes;

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
    PasswordLoginRequest, Project, ResizeWorkspaceRequest, SshKey, Token, UpdateAgentRequest,
    UpdateDesiredStateRequest, UpdateUserRequest, User, Workspace, WorkspaceResources, API_PREFIX,
};
use warren_types::api::{
    CreateMountRequest, CreateSpaceRequest, Mount, ProjectMember, ProjectRole, SetDotfilesRequest,
    SetProjectMemberRequest, SetSpaceMemberRequest, Space, SpaceMember, SpaceRole, Tree,
    UpdateProjectRequest, WorkspaceGrant,
};
use warren_types::git::GitCredential;
use warren_types::gitops::{
    AgentGitops, CreateRepositoryRequest, Policy, Repository, SourceStatus, WebhookSecretRequest,
};
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

    // ---- session, users ----

    /// `POST /session`: exchanges a username and password for a new token.
    pub async fn login(&self, req: &PasswordLoginRequest) -> Result<CreatedToken> {
        self.with_body(Method::POST, &routes::session(), req).await
    }

    pub async fn me(&self) -> Result<User> {
        self.get(&routes::me()).await
    }

    /// How workspaces are reached besides the API (the proxy's SSH address).
    pub async fn access(&self) -> Result<AccessInfo> {
        self.get(&routes::access()).await
    }

    pub async fn list_users(&self) -> Result<Vec<User>> {
        self.get(&routes::users()).await
    }

    pub async fn create_user(&self, req: &CreateUserRequest) -> Result<User> {
        self.with_body(Method::POST, &routes::users(), req).await
    }

    pub async fn get_user(&self, key: &str) -> Result<User> {
        self.get(&routes::user(key)).await
    }

    /// `PATCH /users/{user}`: admin rights, disabled, password reset.
    pub async fn update_user(&self, key: &str, req: &UpdateUserRequest) -> Result<User> {
        self.with_body(Method::PATCH, &routes::user(key), req).await
    }

    /// `DELETE /users/{user}`: `None` once the account is gone, the account while its
    /// workspaces are terminating.
    pub async fn delete_user(&self, key: &str, terminate_workspaces: bool) -> Result<Option<User>> {
        let url = self.url(&routes::user(key));
        let query = [("terminate_workspaces", terminate_workspaces.to_string())];
        let (status, bytes) = self
            .send(Method::DELETE, url.clone(), &query, None::<&()>)
            .await?;
        if status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| Error::Decode {
                url: url.to_string(),
                status: status.as_u16(),
                source,
            })
    }

    /// `PUT /users/me/dotfiles` (or `DELETE` with `None`).
    pub async fn set_dotfiles(&self, url: Option<&str>) -> Result<User> {
        match url {
            Some(url) => {
                self.call(
                    Method::PUT,
                    &routes::dotfiles(),
                    &[],
                    Some(&SetDotfilesRequest {
                        url: url.to_owned(),
                    }),
                )
                .await
            }
            None => {
                self.call(Method::DELETE, &routes::dotfiles(), &[], None::<&()>)
                    .await
            }
        }
    }

    /// `POST /users/me/password`.
    pub async fn change_password(&self, req: &ChangePasswordRequest) -> Result<()> {
        let url = self.url(&routes::password());
        self.send(Method::POST, url, &[], Some(req))
            .await
            .map(|_| ())
    }

    // ---- OAuth clients ----

    pub async fn create_oauth_client(&self, req: &CreateOAuthClient) -> Result<CreatedOAuthClient> {
        self.with_body(Method::POST, &routes::oauth_clients(), req)
            .await
    }

    pub async fn list_oauth_clients(&self) -> Result<Vec<OAuthClient>> {
        self.get(&routes::oauth_clients()).await
    }

    pub async fn delete_oauth_client(&self, client_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::oauth_client(client_id))
            .await
    }

    // ---- tokens ----

    pub async fn list_tokens(&self) -> Result<Vec<Token>> {
        self.get(&routes::tokens()).await
    }

    pub async fn create_token(&self, req: &CreateTokenRequest) -> Result<CreatedToken> {
        self.with_body(Method::POST, &routes::tokens(), req).await
    }

    pub async fn revoke_token(&self, id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::token(id)).await
    }

    // ---- SSH keys ----

    pub async fn list_ssh_keys(&self) -> Result<Vec<SshKey>> {
        self.get(&routes::ssh_keys()).await
    }

    pub async fn add_ssh_key(&self, req: &AddSshKeyRequest) -> Result<SshKey> {
        self.with_body(Method::POST, &routes::ssh_keys(), req).await
    }

    pub async fn delete_ssh_key(&self, id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::ssh_key(id)).await
    }

    // ---- agents ----

    pub async fn list_agents(&self) -> Result<Vec<Agent>> {
        self.get(&routes::agents()).await
    }

    pub async fn create_agent(&self, req: &CreateAgentRequest) -> Result<CreatedAgent> {
        self.with_body(Method::POST, &routes::agents(), req).await
    }

    pub async fn get_agent(&self, name_or_id: &str) -> Result<Agent> {
        self.get(&routes::agent(name_or_id)).await
    }

    pub async fn update_agent(&self, name_or_id: &str, req: &UpdateAgentRequest) -> Result<Agent> {
        self.with_body(Method::PUT, &routes::agent(name_or_id), req)
            .await
    }

    /// A new token for the agent (admins only); the old one stops working.
    pub async fn reset_agent_token(&self, name_or_id: &str) -> Result<CreatedAgent> {
        let mut route = routes::agent(name_or_id);
        route.push("token".into());
        self.call(Method::POST, &route, &[], None::<&()>).await
    }

    // ---- GitOps ----

    pub async fn list_repositories(&self) -> Result<Vec<Repository>> {
        self.get(&routes::gitops_repositories()).await
    }

    pub async fn create_repository(&self, req: &CreateRepositoryRequest) -> Result<Repository> {
        self.with_body(Method::POST, &routes::gitops_repositories(), req)
            .await
    }

    pub async fn get_repository(&self, name: &str) -> Result<Repository> {
        self.get(&routes::gitops_repository(name)).await
    }

    pub async fn delete_repository(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::gitops_repository(name))
            .await
    }

    /// `PUT` (Some) or `DELETE` (None) `/gitops/repositories/{name}/credential`.
    pub async fn set_repository_credential(
        &self,
        name: &str,
        c: Option<&GitCredential>,
    ) -> Result<Repository> {
        let route = routes::gitops_repository_credential(name);
        match c {
            Some(c) => self.with_body(Method::PUT, &route, c).await,
            None => self.call(Method::DELETE, &route, &[], None::<&()>).await,
        }
    }

    /// `PUT` (Some) or `DELETE` (None) `/gitops/repositories/{name}/webhook_secret`.
    pub async fn set_webhook_secret(&self, name: &str, secret: Option<&str>) -> Result<Repository> {
        let route = routes::gitops_webhook_secret(name);
        match secret {
            Some(s) => {
                let req = WebhookSecretRequest {
                    secret: s.to_owned(),
                };
                self.with_body(Method::PUT, &route, &req).await
            }
            None => self.call(Method::DELETE, &route, &[], None::<&()>).await,
        }
    }

    pub async fn agent_gitops(&self, agent: &str) -> Result<AgentGitops> {
        self.get(&routes::agent_gitops(agent)).await
    }

    pub async fn set_agent_gitops(&self, agent: &str, config: &AgentGitops) -> Result<AgentGitops> {
        self.with_body(Method::PUT, &routes::agent_gitops(agent), config)
            .await
    }

    pub async fn gitops_status(&self, agent: &str) -> Result<Vec<SourceStatus>> {
        self.get(&routes::agent_gitops_status(agent)).await
    }

    pub async fn gitops_policy(&self) -> Result<Policy> {
        self.get(&routes::gitops_policy()).await
    }

    pub async fn set_gitops_policy(&self, policy: &Policy) -> Result<Policy> {
        self.with_body(Method::PUT, &routes::gitops_policy(), policy)
            .await
    }

    // ---- projects ----

    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        self.get(&routes::projects()).await
    }

    pub async fn create_project(&self, req: &CreateProjectRequest) -> Result<Project> {
        self.with_body(Method::POST, &routes::projects(), req).await
    }

    pub async fn get_project(&self, name_or_id: &str) -> Result<Project> {
        self.get(&routes::project(name_or_id)).await
    }

    pub async fn update_project(&self, name: &str, req: &UpdateProjectRequest) -> Result<Project> {
        self.with_body(Method::PATCH, &routes::project(name), req)
            .await
    }

    /// `PUT /projects/{name}/credential`.
    pub async fn set_project_credential(&self, name: &str, c: &GitCredential) -> Result<Project> {
        self.with_body(Method::PUT, &routes::project_credential(name), c)
            .await
    }

    /// `DELETE /projects/{name}/credential`.
    pub async fn delete_project_credential(&self, name: &str) -> Result<Project> {
        self.call(
            Method::DELETE,
            &routes::project_credential(name),
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn list_project_members(&self, name: &str) -> Result<Vec<ProjectMember>> {
        self.get(&routes::project_members(name)).await
    }

    pub async fn set_project_member(
        &self,
        name: &str,
        user: &str,
        role: ProjectRole,
    ) -> Result<Vec<ProjectMember>> {
        self.call(
            Method::PUT,
            &routes::project_member(name, user),
            &[],
            Some(&SetProjectMemberRequest { role }),
        )
        .await
    }

    pub async fn remove_project_member(&self, name: &str, user: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::project_member(name, user))
            .await
    }

    pub async fn delete_project(&self, name_or_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::project(name_or_id))
            .await
    }

    // ---- spaces ----

    /// The tree the caller sees, at or below `space` when given.
    pub async fn tree(&self, space: Option<&str>) -> Result<Tree> {
        let query: Vec<(&str, String)> =
            space.map(|s| ("space", s.to_owned())).into_iter().collect();
        self.call(Method::GET, &["tree".to_owned()], &query, None::<&()>)
            .await
    }

    pub async fn list_spaces(&self) -> Result<Vec<Space>> {
        self.get(&["spaces".to_owned()]).await
    }

    pub async fn create_space(&self, path: &str) -> Result<Space> {
        self.call(
            Method::POST,
            &["spaces".to_owned()],
            &[],
            Some(&CreateSpaceRequest {
                path: path.to_owned(),
            }),
        )
        .await
    }

    /// A space by path (its slashes travel encoded in one URL segment).
    pub async fn get_space(&self, path: &str) -> Result<Space> {
        self.call(
            Method::GET,
            &["spaces".to_owned(), path.to_owned()],
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn list_mounts(&self) -> Result<Vec<Mount>> {
        self.get(&["mounts".to_owned()]).await
    }

    pub async fn create_mount(&self, req: &CreateMountRequest) -> Result<Mount> {
        self.with_body(Method::POST, &["mounts".to_owned()], req)
            .await
    }

    pub async fn get_mount(&self, name: &str) -> Result<Mount> {
        self.call(
            Method::GET,
            &["mounts".to_owned(), name.to_owned()],
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn workspace_grants(&self, ws: &str) -> Result<Vec<WorkspaceGrant>> {
        let mut seg = routes::workspace(ws);
        seg.push("grants".to_owned());
        self.get(&seg).await
    }

    pub async fn grant_workspace(&self, ws: &str, user: &str) -> Result<Vec<WorkspaceGrant>> {
        let mut seg = routes::workspace(ws);
        seg.extend(["grants".to_owned(), user.to_owned()]);
        self.call(Method::PUT, &seg, &[], None::<&()>).await
    }

    pub async fn revoke_workspace_grant(&self, ws: &str, user: &str) -> Result<()> {
        let mut seg = routes::workspace(ws);
        seg.extend(["grants".to_owned(), user.to_owned()]);
        self.call_empty(Method::DELETE, &seg).await
    }

    pub async fn delete_mount(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &["mounts".to_owned(), name.to_owned()])
            .await
    }

    pub async fn delete_space(&self, path: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &["spaces".to_owned(), path.to_owned()])
            .await
    }

    pub async fn space_members(&self, path: &str) -> Result<Vec<SpaceMember>> {
        self.call(
            Method::GET,
            &["spaces".to_owned(), path.to_owned(), "members".to_owned()],
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn set_space_member(
        &self,
        path: &str,
        user: &str,
        role: SpaceRole,
    ) -> Result<SpaceMember> {
        self.call(
            Method::PUT,
            &[
                "spaces".to_owned(),
                path.to_owned(),
                "members".to_owned(),
                user.to_owned(),
            ],
            &[],
            Some(&SetSpaceMemberRequest { role }),
        )
        .await
    }

    pub async fn remove_space_member(&self, path: &str, user: &str) -> Result<()> {
        self.call_empty(
            Method::DELETE,
            &[
                "spaces".to_owned(),
                path.to_owned(),
                "members".to_owned(),
                user.to_owned(),
            ],
        )
        .await
    }

    // ---- workspaces ----

    /// One page of `GET /workspaces`.
    pub async fn list_workspaces(&self, query: &WorkspaceQuery) -> Result<Page<Workspace>> {
        self.call(
            Method::GET,
            &routes::workspaces(),
            &query_pairs(query),
            None::<&()>,
        )
        .await
    }

    /// Every page of `GET /workspaces`, following `next_cursor` until the end.
    pub async fn list_all_workspaces(&self, query: &WorkspaceQuery) -> Result<Vec<Workspace>> {
        let mut query = query.clone();
        let mut items = Vec::new();
        let mut seen = std::collections::HashSet::new();
        loop {
            let page = self.list_workspaces(&query).await?;
            items.extend(page.items);
            match page.next_cursor {
                Some(cursor) => {
                    if !seen.insert(cursor.clone()) {
                        return Err(Error::CursorLoop { cursor });
                    }
                    query.cursor = Some(cursor);
                }
                None => return Ok(items),
            }
        }
    }

    /// `POST /workspaces`; a devfile the server refuses comes back as a 422 [`Error::Api`]
    /// whose message lists the devfile's errors with their paths.
    pub async fn create_workspace(&self, req: &CreateWorkspaceRequest) -> Result<Workspace> {
        self.with_body(Method::POST, &routes::workspaces(), req)
            .await
    }

    pub async fn get_workspace(&self, name_or_id: &str) -> Result<Workspace> {
        self.get(&routes::workspace(name_or_id)).await
    }

    /// The workspace once its `version` differs from `version`, or as it is after
    /// `timeout_secs` (1–60): the server answers on the change instead of being polled.
    pub async fn watch_workspace(
        &self,
        name_or_id: &str,
        version: i64,
        timeout_secs: u64,
    ) -> Result<Workspace> {
        self.call(
            Method::GET,
            &routes::workspace(name_or_id),
            &[
                ("watch_version", version.to_string()),
                ("timeout_seconds", timeout_secs.to_string()),
            ],
            None::<&()>,
        )
        .await
    }

    pub async fn set_desired_state(
        &self,
        name_or_id: &str,
        desired_state: DesiredState,
    ) -> Result<Workspace> {
        let req = UpdateDesiredStateRequest { desired_state };
        self.with_body(
            Method::PUT,
            &routes::workspace_desired_state(name_or_id),
            &req,
        )
        .await
    }

    pub async fn resize_workspace(
        &self,
        name_or_id: &str,
        resources: WorkspaceResources,
    ) -> Result<Workspace> {
        let req = ResizeWorkspaceRequest { resources };
        self.with_body(Method::PUT, &routes::workspace_resources(name_or_id), &req)
            .await
    }

    /// `GET /workspaces/{name}/logs`: the last `tail` lines a container wrote (`None`: the
    /// main container), as bytes (the workspace's own text, not necessarily UTF-8).
    pub async fn workspace_logs(
        &self,
        name_or_id: &str,
        tail: Option<u32>,
        container: Option<&str>,
    ) -> Result<Vec<u8>> {
        let mut query = Vec::new();
        if let Some(t) = tail {
            query.push(("tail", t.to_string()));
        }
        if let Some(c) = container {
            query.push(("container", c.to_owned()));
        }
        let url = self.url(&routes::workspace_logs(name_or_id));
        self.send(Method::GET, url, &query, None::<&()>)
            .await
            .map(|(_, bytes)| bytes)
    }

    /// `GET /workspaces/{name}/logs?follow=true`: the tail, then what the container writes
    /// next, chunk by chunk, until it stops.
    pub async fn follow_workspace_logs(
        &self,
        name_or_id: &str,
        tail: Option<u32>,
        container: Option<&str>,
    ) -> Result<LogFollow> {
        let url = self.url(&routes::workspace_logs(name_or_id));
        let mut req = self.streams.get(url.clone()).query(&[("follow", "true")]);
        if let Some(t) = tail {
            req = req.query(&[("tail", t.to_string())]);
        }
        if let Some(c) = container {
            req = req.query(&[("container", c)]);
        }
        Ok(LogFollow {
            resp: self.open_stream(req, &url).await?,
            url: url.to_string(),
        })
    }

    /// Sends a request whose answer is read as it comes (no whole-answer timeout): the
    /// answer once it is a success, else the API error it carries.
    async fn open_stream(
        &self,
        mut req: reqwest::RequestBuilder,
        url: &Url,
    ) -> Result<reqwest::Response> {
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let transport = |source| Error::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        if !status.is_success() {
            let bytes = resp.bytes().await.map_err(transport)?;
            return Err(api_error(status, &bytes));
        }
        Ok(resp)
    }

    /// `POST /workspaces/{name}/commands/{command}/run`: runs a devfile command; its events
    /// follow as they happen (dropping the run stops the command).
    pub async fn run_workspace_command(
        &self,
        name_or_id: &str,
        command: &str,
    ) -> Result<CommandRun> {
        let url = self.url(&routes::workspace_command_run(name_or_id, command));
        let req = self.streams.post(url.clone());
        Ok(CommandRun {
            resp: self.open_stream(req, &url).await?,
            url: url.to_string(),
            buf: Vec::new(),
        })
    }

    /// `DELETE /workspaces/{name}`: asks for `Terminated`; answers the workspace.
    pub async fn delete_workspace(&self, name_or_id: &str) -> Result<Workspace> {
        self.call(
            Method::DELETE,
            &routes::workspace(name_or_id),
            &[],
            None::<&()>,
        )
        .await
    }

    // ---- port-forward ----

    /// Opens one TCP connection to `port` of the workspace whose terminal is at
    /// `terminal_url` (`Workspace::terminal_url`): a WebSocket through the proxy carrying the
    /// bytes as binary messages. The token must have the `workspace` scope.
    pub async fn open_port_forward(&self, terminal_url: &str, port: u16) -> Result<PortForward> {
        use base64::Engine;
        let url = Url::parse(terminal_url)
            .and_then(|u| u.join(&format!(".warren/port-forward/{port}")))
            .map_err(|e| Error::InvalidUrl {
                url: terminal_url.to_owned(),
                reason: e.to_string(),
            })?;
        let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
        // `*.localhost` is loopback (RFC 6761) even where the system resolver does not say
        // so (`warren up`'s default workspace domain is `ws.localhost`).
        let http = match url.host_str() {
            Some(h) if h == "localhost" || h.ends_with(".localhost") => {
                let port = url.port_or_known_default().unwrap_or(80);
                reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .resolve(h, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
                    .build()
                    .map_err(|e| Error::InvalidUrl {
                        url: url.to_string(),
                        reason: format!("cannot build an HTTP client ({e})"),
                    })?
            }
            _ => self.streams.clone(),
        };
        let mut req = http
            .get(url.clone())
            .header(reqwest::header::CONNECTION, "Upgrade")
            .header(reqwest::header::UPGRADE, "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", key);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let transport = |source| Error::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let bytes = resp.bytes().await.map_err(transport)?;
            return Err(match (api_error(status, &bytes), retry_after) {
                (Error::Api { code, message, .. }, Some(secs)) if code == "workspace_starting" => {
                    Error::Starting { message, secs }
                }
                (e, _) => e,
            });
        }
        let io = resp.upgrade().await.map_err(transport)?;
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            io,
            tokio_tungstenite::tungstenite::protocol::Role::Client,
            None,
        )
        .await;
        Ok(PortForward { ws })
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

/// One forwarded connection ([`Client::open_port_forward`]).
pub struct PortForward {
    ws: tokio_tungstenite::WebSocketStream<reqwest::Upgraded>,
}

impl std::fmt::Debug for PortForward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortForward").finish_non_exhaustive()
    }
}

impl PortForward {
    /// Copies between `local` and the workspace's port until either side closes; the
    /// message is why the workspace side ended, when it says.
    pub async fn pipe<S>(self, local: S) -> std::result::Result<(), String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        use futures::{SinkExt, StreamExt};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_tungstenite::tungstenite::Message;
        let (mut sink, mut stream) = self.ws.split();
        let (mut rd, mut wr) = tokio::io::split(local);
        let up = async {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if sink.send(Message::binary(buf[..n].to_vec())).await.is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = sink.send(Message::Close(None)).await;
            Ok(())
        };
        let down = async {
            while let Some(msg) = stream.next().await {
                match msg {
                    Ok(Message::Binary(b)) => {
                        if wr.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                    Ok(Message::Close(Some(frame))) if frame.code != 1000.into() => {
                        return Err(frame.reason.to_string());
                    }
                    Ok(Message::Close(_)) => break,
                    Err(e) => return Err(e.to_string()),
                    Ok(_) => {}
                }
            }
            let _ = wr.shutdown().await;
            Ok(())
        };
        // Either side ending ends the connection.
        tokio::select! {
            r = up => r,
            r = down => r,
        }
    }
}

/// A followed workspace output ([`Client::follow_workspace_logs`]).
#[derive(Debug)]
pub struct LogFollow {
    resp: reqwest::Response,
    url: String,
}

impl LogFollow {
    /// The next chunk; `None` once the container stopped.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        let url = &self.url;
        self.resp
            .chunk()
            .await
            .map(|c| c.map(|b| b.to_vec()))
            .map_err(|source| Error::Transport {
                url: url.clone(),
                source,
            })
    }
}

/// The events of a running devfile command (newline-delimited JSON).
pub struct CommandRun {
    resp: reqwest::Response,
    url: String,
    buf: Vec<u8>,
}

/// Longest event line accepted (output comes in chunks of at most a tunnel frame).
const MAX_EVENT_LINE: usize = 4 << 20;

impl CommandRun {
    /// The next event; `None` once the answer ended.
    pub async fn next(&mut self) -> Result<Option<warren_types::api::CommandRunEvent>> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return serde_json::from_slice(&line[..i])
                    .map(Some)
                    .map_err(|source| Error::Decode {
                        url: self.url.clone(),
                        status: 200,
                        source,
                    });
            }
            if self.buf.len() > MAX_EVENT_LINE {
                return Err(Error::Decode {
                    url: self.url.clone(),
                    status: 200,
                    source: serde::de::Error::custom("an event line longer than 4 MiB"),
                });
            }
            let chunk = self.resp.chunk().await.map_err(|source| Error::Transport {
                url: self.url.clone(),
                source,
            })?;
            match chunk {
                Some(c) => self.buf.extend_from_slice(&c),
                None => return Ok(None),
            }
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
