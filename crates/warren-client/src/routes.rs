//! Every REST path the client calls, in one place so it can be checked against the server's router.
//!
//! Each function returns the path segments below `/api/v1` unencoded; the client percent-encodes
//! them, so a name with a `/` or `?` can never address another route.

/// `POST /session`: password → personal access token (no bearer).
pub fn session() -> Vec<String> {
    segs(&["session"])
}

/// `GET /users/me`.
pub fn me() -> Vec<String> {
    segs(&["users", "me"])
}

/// `GET /access`: the proxy's SSH address and the like.
pub fn access() -> Vec<String> {
    segs(&["access"])
}

/// `GET /proxies` (admin).
pub fn proxies() -> Vec<String> {
    segs(&["proxies"])
}

/// `GET /regions` (admin).
pub fn regions() -> Vec<String> {
    segs(&["regions"])
}

/// `PUT|DELETE /regions/{name}` (admin).
pub fn region(name: &str) -> Vec<String> {
    segs(&["regions", name])
}

/// `POST /proxy/cookie-keys/rotate` (admin).
pub fn rotate_proxy_cookie_key() -> Vec<String> {
    segs(&["proxy", "cookie-keys", "rotate"])
}

/// `GET|POST /users` (admin).
pub fn users() -> Vec<String> {
    segs(&["users"])
}

pub fn user(key: &str) -> Vec<String> {
    segs(&["users", key])
}

pub fn oauth_clients() -> Vec<String> {
    segs(&["oauth", "clients"])
}

pub fn oauth_client(id: &str) -> Vec<String> {
    segs(&["oauth", "clients", id])
}

pub fn password() -> Vec<String> {
    segs(&["users", "me", "password"])
}

/// `GET|POST /users/me/tokens`.
pub fn tokens() -> Vec<String> {
    segs(&["users", "me", "tokens"])
}

/// `DELETE /users/me/tokens/{id}`.
pub fn token(id: &str) -> Vec<String> {
    segs(&["users", "me", "tokens", id])
}

/// `GET|POST /users/me/ssh-keys`.
pub fn ssh_keys() -> Vec<String> {
    segs(&["users", "me", "ssh-keys"])
}

/// `DELETE /users/me/ssh-keys/{id}`.
pub fn ssh_key(id: &str) -> Vec<String> {
    segs(&["users", "me", "ssh-keys", id])
}

/// `GET|POST /agents`.
pub fn agents() -> Vec<String> {
    segs(&["agents"])
}

/// `GET|PUT|DELETE /agents/{name-or-id}`.
pub fn agent(name: &str) -> Vec<String> {
    segs(&["agents", name])
}

/// `GET|POST /projects`.
pub fn projects() -> Vec<String> {
    segs(&["projects"])
}

/// `GET|DELETE /projects/{name-or-id}`.
pub fn project(name: &str) -> Vec<String> {
    segs(&["projects", name])
}

/// `GET|POST /workspaces` (the list takes `state, agent, project, owner, limit, cursor`).
pub fn workspaces() -> Vec<String> {
    segs(&["workspaces"])
}

/// `GET|DELETE /workspaces/{name-or-id}`.
pub fn workspace(name: &str) -> Vec<String> {
    segs(&["workspaces", name])
}

/// `PUT /workspaces/{name-or-id}/desired_state`.
pub fn workspace_desired_state(name: &str) -> Vec<String> {
    segs(&["workspaces", name, "desired_state"])
}

/// `PUT /workspaces/{name-or-id}/resources`.
pub fn workspace_resources(name: &str) -> Vec<String> {
    segs(&["workspaces", name, "resources"])
}

pub fn workspace_rebuild(name: &str) -> Vec<String> {
    segs(&["workspaces", name, "rebuild"])
}

pub fn workspace_logs(name: &str) -> Vec<String> {
    segs(&["workspaces", name, "logs"])
}

pub fn workspace_startup(name: &str) -> Vec<String> {
    segs(&["workspaces", name, "startup"])
}

pub fn workspace_command_run(name: &str, command: &str) -> Vec<String> {
    segs(&["workspaces", name, "commands", command, "run"])
}

fn segs(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

pub fn project_credential(name: &str) -> Vec<String> {
    segs(&["projects", name, "credential"])
}

pub fn project_prebuilds(name: &str) -> Vec<String> {
    segs(&["projects", name, "prebuilds"])
}

pub fn project_prebuild_settings(name: &str) -> Vec<String> {
    segs(&["projects", name, "prebuilds", "settings"])
}

pub fn project_prebuild_webhook(name: &str) -> Vec<String> {
    segs(&["projects", name, "prebuilds", "webhook"])
}

pub fn project_members(name: &str) -> Vec<String> {
    segs(&["projects", name, "members"])
}

pub fn project_member(name: &str, user: &str) -> Vec<String> {
    segs(&["projects", name, "members", user])
}

pub fn dotfiles() -> Vec<String> {
    segs(&["users", "me", "dotfiles"])
}

/// `GET /users/me/secrets`.
pub fn secrets() -> Vec<String> {
    segs(&["users", "me", "secrets"])
}

/// `PUT|DELETE /users/me/secrets/{name}`.
pub fn secret(name: &str) -> Vec<String> {
    segs(&["users", "me", "secrets", name])
}

/// `GET|POST /users/me/git-credentials`.
pub fn git_credentials() -> Vec<String> {
    segs(&["users", "me", "git-credentials"])
}

/// `DELETE /users/me/git-credentials/{id}`.
pub fn git_credential(id: i64) -> Vec<String> {
    segs(&["users", "me", "git-credentials", &id.to_string()])
}

/// `PUT /users/me/profile`.
pub fn profile() -> Vec<String> {
    segs(&["users", "me", "profile"])
}

/// `PUT|DELETE /users/me/working-hours`.
pub fn working_hours() -> Vec<String> {
    segs(&["users", "me", "working-hours"])
}

/// `GET|PUT /agents/{name-or-id}/gitops`.
pub fn agent_gitops(agent: &str) -> Vec<String> {
    segs(&["agents", agent, "gitops"])
}

/// `GET /agents/{name-or-id}/gitops/status`.
pub fn agent_gitops_status(agent: &str) -> Vec<String> {
    segs(&["agents", agent, "gitops", "status"])
}

/// `GET|POST /gitops/repositories`.
pub fn gitops_repositories() -> Vec<String> {
    segs(&["gitops", "repositories"])
}

/// `GET|DELETE /gitops/repositories/{name}`.
pub fn gitops_repository(name: &str) -> Vec<String> {
    segs(&["gitops", "repositories", name])
}

/// `PUT|DELETE /gitops/repositories/{name}/credential`.
pub fn gitops_repository_credential(name: &str) -> Vec<String> {
    segs(&["gitops", "repositories", name, "credential"])
}

/// `PUT|DELETE /gitops/repositories/{name}/webhook_secret`.
pub fn gitops_webhook_secret(name: &str) -> Vec<String> {
    segs(&["gitops", "repositories", name, "webhook_secret"])
}

/// `GET|PUT /gitops/policy`.
pub fn gitops_policy() -> Vec<String> {
    segs(&["gitops", "policy"])
}

pub fn audit() -> Vec<String> {
    segs(&["audit"])
}

pub fn audit_verify() -> Vec<String> {
    segs(&["audit", "verify"])
}
