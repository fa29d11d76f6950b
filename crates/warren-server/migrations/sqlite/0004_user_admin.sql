-- User administration: an admin disables an account (it can no longer sign in, use tokens or
-- reach workspaces; re-enabling restores everything), asks for its deletion (done once its
-- workspaces are terminated), and a password change may end every session issued before it.
ALTER TABLE users ADD COLUMN disabled_at BIGINT;
ALTER TABLE users ADD COLUMN delete_requested_at BIGINT;
ALTER TABLE users ADD COLUMN sessions_valid_from BIGINT NOT NULL DEFAULT 0;
