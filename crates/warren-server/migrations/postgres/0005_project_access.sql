-- Project credentials and who may use a project. `credential` holds the sealed JSON of a
-- GitCredential (never returned by the API); credentials found in existing `git_url`s are
-- moved there by the server at start (it holds the sealing key, SQL does not).
-- `visibility`: `internal` (every signed-in user may see and use it, as before this
-- migration) or `private` (its members and admins only).
ALTER TABLE projects ADD COLUMN visibility TEXT NOT NULL DEFAULT 'internal';
ALTER TABLE projects ADD COLUMN credential TEXT;

CREATE TABLE project_members (
    project_id BIGINT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    user_id    BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX project_members_user ON project_members(user_id);

INSERT INTO project_members (project_id, user_id, role, created_at)
    SELECT id, created_by, 'maintainer', created_at FROM projects WHERE created_by IS NOT NULL;
