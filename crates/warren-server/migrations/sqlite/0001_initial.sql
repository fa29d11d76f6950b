-- Warren's initial schema (SQLite). Timestamps are unix milliseconds; JSON is TEXT;
-- flags are 0/1 integers so one code path (sqlx::Any) reads both databases alike.
-- workspaces.needs_response materialises reconcile.md's partial rule
-- (desired_state_updated_at >= responded_to_agent_at, or never responded, or forced) so a
-- partial reconcile is an index lookup; config_running/config_stopped hold the sealed YAML
-- the agent gets for replicas 1 and 0, rendered once instead of on every full reconcile.

CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    is_admin      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);

CREATE TABLE tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    secret_hash  TEXT NOT NULL UNIQUE,
    scopes       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER,
    last_used_at INTEGER
);
CREATE INDEX tokens_user ON tokens(user_id);

CREATE TABLE ssh_keys (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    fingerprint TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);
CREATE INDEX ssh_keys_user ON ssh_keys(user_id);

CREATE TABLE agents (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL UNIQUE,
    token_hash   TEXT NOT NULL UNIQUE,
    config       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    last_seen_at INTEGER
);

CREATE TABLE projects (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL UNIQUE,
    git_url      TEXT NOT NULL,
    default_ref  TEXT NOT NULL,
    devfile_path TEXT NOT NULL,
    devfile      TEXT,
    created_by   INTEGER REFERENCES users(id) ON DELETE SET NULL,
    created_at   INTEGER NOT NULL
);

CREATE TABLE workspaces (
    id                          INTEGER PRIMARY KEY AUTOINCREMENT,
    name                        TEXT NOT NULL UNIQUE,
    namespace                   TEXT NOT NULL,
    owner_id                    INTEGER NOT NULL REFERENCES users(id),
    agent_id                    INTEGER NOT NULL REFERENCES agents(id),
    project_id                  INTEGER REFERENCES projects(id) ON DELETE SET NULL,
    git_ref                     TEXT,
    desired_state               TEXT NOT NULL,
    actual_state                TEXT NOT NULL,
    desired_state_updated_at    INTEGER NOT NULL,
    actual_state_updated_at     INTEGER NOT NULL,
    responded_to_agent_at       INTEGER,
    deployment_resource_version TEXT,
    force_include_all_resources INTEGER NOT NULL DEFAULT 0,
    needs_response              INTEGER NOT NULL DEFAULT 1,
    devfile                     TEXT NOT NULL,
    rendered_objects            TEXT NOT NULL,
    config_running              TEXT NOT NULL DEFAULT '',
    config_stopped              TEXT NOT NULL DEFAULT '',
    resources                   TEXT NOT NULL,
    variables                   TEXT NOT NULL,
    endpoints                   TEXT NOT NULL,
    url                         TEXT,
    failure_reason              TEXT,
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL,
    version                     INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX workspaces_agent ON workspaces(agent_id, desired_state_updated_at);
CREATE INDEX workspaces_owner ON workspaces(owner_id, id);
-- Partial reconciles look up only what changed since the last response.
CREATE INDEX workspaces_pending ON workspaces(agent_id, needs_response);
