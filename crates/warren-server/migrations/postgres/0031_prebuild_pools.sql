-- Warm pools (issue 43): a project may keep N workspaces made from its newest prebuild of the
-- default ref, started once (their volumes copied from the prebuild, the commits since
-- fetched) and stopped, owned by the maintainer who turned prebuilds on (their quotas) and
-- shown to no one, until a user's new workspace of that ref takes one. projects.prebuild_pool
-- is N (NULL: no pool); workspaces.pool_of the prebuild a pooled workspace was made from,
-- while it waits in the pool (NULL once a user took it, and for every other workspace).
ALTER TABLE projects ADD COLUMN prebuild_pool INTEGER;
ALTER TABLE workspaces ADD COLUMN pool_of INTEGER;
CREATE INDEX workspaces_by_pool ON workspaces (pool_of) WHERE pool_of IS NOT NULL;
