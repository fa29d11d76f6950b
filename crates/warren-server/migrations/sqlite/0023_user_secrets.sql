-- A user's own secrets and identity (issue 41, item 5): environment variables and files
-- given to their workspaces (the value sealed with the server's key, never shown again), and
-- the name and email address their commits are made with.
ALTER TABLE users ADD COLUMN full_name TEXT;
ALTER TABLE users ADD COLUMN email TEXT;

CREATE TABLE user_secrets (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    value       TEXT NOT NULL,
    projects    TEXT,
    shared_workspaces INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (user_id, name)
);

-- A user's own credentials for Git forges: a token or password for an HTTP(S) origin, or a
-- private key for an SSH host (sealed JSON), used for that user's workspaces' repositories
-- on that host instead of a project's.
CREATE TABLE user_git_credentials (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    host        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    credential  TEXT NOT NULL,
    shared_workspaces INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (user_id, host)
);
