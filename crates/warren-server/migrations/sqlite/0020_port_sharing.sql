-- Sharing a workspace's ports (issue 41, item 4). A port's visibility as its users set it
-- (without a row: its devfile's, else its agent's default), and share links: a secret (kept
-- as its SHA-256 only) that opens one port of one workspace until it expires or is revoked.
CREATE TABLE workspace_ports (
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    port         INTEGER NOT NULL,
    visibility   TEXT NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, port)
);

CREATE TABLE share_links (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    port         INTEGER NOT NULL,
    token_digest TEXT NOT NULL UNIQUE,
    created_by   INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
CREATE INDEX share_links_workspace ON share_links(workspace_id);
