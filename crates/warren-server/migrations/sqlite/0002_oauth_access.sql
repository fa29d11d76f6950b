-- OAuth 2.0 authorization server (access.md) and workspace activity for the idle policy.
-- Client secrets, codes and access tokens are high-entropy random values stored as
-- SHA-256 hex digests; the signing key of login forms and session cookies is sealed.

CREATE TABLE oauth_clients (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id     TEXT NOT NULL UNIQUE,
    secret_hash   TEXT,
    name          TEXT NOT NULL,
    redirect_uris TEXT NOT NULL,
    first_party   INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

CREATE TABLE oauth_codes (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    code_hash      TEXT NOT NULL UNIQUE,
    client_id      TEXT NOT NULL,
    user_id        INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    redirect_uri   TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    scope          TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    used_at        INTEGER
);
CREATE INDEX oauth_codes_expiry ON oauth_codes(expires_at);

CREATE TABLE oauth_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash  TEXT NOT NULL UNIQUE,
    client_id   TEXT NOT NULL,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    code_id     INTEGER,
    scope       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE INDEX oauth_tokens_code ON oauth_tokens(code_id);

CREATE TABLE oauth_keys (
    id         INTEGER PRIMARY KEY,
    sealed_key TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE workspace_activity (
    workspace_id     INTEGER PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
    last_activity_at INTEGER NOT NULL
);
