-- A workspace opened from a repository without a project (`ws create --repo URL`): the
-- repository's URL (never with credentials in it), cloned into the workspace and read again
-- by a rebuild. NULL for a project's workspace and for one made from a devfile alone.
ALTER TABLE workspaces ADD COLUMN repository TEXT;
