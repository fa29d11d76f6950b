-- Grants (spec/mounts.md): a workspace's owner (or an owner of its space) allows a user to
-- make softlinks (`workspace` mounts) to it. A softlink serves only while its owner holds
-- such a grant (or manages the target); revoking one turns its softlinks away.
CREATE TABLE workspace_grants (
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    user_id      INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX workspace_grants_user ON workspace_grants(user_id);
