-- Prebuilds (issue 43): a project's clone and create-time steps run ahead of time on an agent,
-- in a workspace of their own (workspaces.prebuild_id) that no user lists, whose stopped
-- volumes new workspaces of the project's ref on that agent start as copies of
-- (workspaces.seed). A project has prebuilds while prebuild_agent_id is set; they run as the
-- maintainer who turned them on (prebuild_by), with the project's credential and nobody's
-- secrets. Times are unix milliseconds.
ALTER TABLE projects ADD COLUMN prebuild_agent_id INTEGER REFERENCES agents(id) ON DELETE SET NULL;
ALTER TABLE projects ADD COLUMN prebuild_by INTEGER REFERENCES users(id) ON DELETE SET NULL;

CREATE TABLE prebuilds (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id   INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    agent_id     INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    git_ref      TEXT NOT NULL,
    commit_sha   TEXT NOT NULL,
    -- Its own workspace (no key: a prebuild row gone with its project leaves the workspace
    -- for the collector to terminate).
    workspace_id INTEGER,
    state        TEXT NOT NULL,
    cause        TEXT NOT NULL,
    reason       TEXT,
    log          TEXT,
    -- Workspaces created from it, and when the last was (a prebuild just chosen is not
    -- collected before the agent copied it).
    used         INTEGER NOT NULL DEFAULT 0,
    last_used_at INTEGER,
    created_at   INTEGER NOT NULL,
    finished_at  INTEGER
);
CREATE INDEX prebuilds_by_ref ON prebuilds (project_id, agent_id, git_ref, state);

-- The prebuild a workspace is the run of.
ALTER TABLE workspaces ADD COLUMN prebuild_id INTEGER;
-- The prebuild a workspace's volumes started from (JSON: prebuild, workspace, workspace_id,
-- commit), rendered on its claims for as long as it lives; the agent copies only into new
-- volumes.
ALTER TABLE workspaces ADD COLUMN seed TEXT;

-- One running prebuild per ref and agent, however many servers poll and maintainers ask.
CREATE UNIQUE INDEX prebuilds_one_running ON prebuilds (project_id, agent_id, git_ref) WHERE state = 'running';
-- The collector looks for prebuilds' workspaces every few seconds.
CREATE INDEX workspaces_by_prebuild ON workspaces (prebuild_id) WHERE prebuild_id IS NOT NULL;
