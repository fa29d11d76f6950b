-- GitOps: repositories the relays read on the agents' behalf, each agent's sources, and the
-- admin's policy. `credential` (JSON GitCredential) and `webhook_secret` are sealed by the
-- server and never returned; `spec` is the source's JSON as configured (validated before it
-- is stored); `position` keeps the operator's order. A repository a source uses cannot be
-- removed (RESTRICT), so no source is left pointing at nothing.
CREATE TABLE gitops_repositories (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT NOT NULL UNIQUE,
    url            TEXT NOT NULL,
    credential     TEXT,
    webhook_secret TEXT,
    created_by     INTEGER REFERENCES users(id) ON DELETE SET NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE gitops_sources (
    agent_id      INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    repository_id INTEGER NOT NULL REFERENCES gitops_repositories(id) ON DELETE RESTRICT,
    position      INTEGER NOT NULL,
    spec          TEXT NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (agent_id, name)
);
CREATE INDEX gitops_sources_repository ON gitops_sources(repository_id);

CREATE TABLE gitops_policy (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    spec       TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

-- What each agent last reported for each source (JSON SourceStatus); kept when a source is
-- removed and set again, shown only while the source exists.
CREATE TABLE gitops_status (
    agent_id   INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    source     TEXT NOT NULL,
    status     TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, source)
);
