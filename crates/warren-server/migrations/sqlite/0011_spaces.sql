-- The tree of spaces (spec/mounts.md): paths like `acme/platform`; every user has the
-- personal space `users/<username>` under the root `users`. Members hold a role
-- (`owner`, `developer`, `viewer`) that holds for everything below the space. Every
-- workspace lives in one space: existing workspaces move to their owner's personal space.
-- `parent_id` is RESTRICT: a space with spaces under it cannot be removed.
CREATE TABLE spaces (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    path       TEXT NOT NULL UNIQUE,
    parent_id  INTEGER REFERENCES spaces(id) ON DELETE RESTRICT,
    created_by INTEGER REFERENCES users(id) ON DELETE SET NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX spaces_parent ON spaces(parent_id);

CREATE TABLE space_members (
    space_id   INTEGER NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (space_id, user_id)
);
CREATE INDEX space_members_user ON space_members(user_id);

INSERT INTO spaces (path, created_at)
    SELECT 'users', COALESCE(MIN(created_at), 0) FROM users;
INSERT INTO spaces (path, parent_id, created_by, created_at)
    SELECT 'users/' || u.username, r.id, u.id, u.created_at
    FROM users u, spaces r WHERE r.path = 'users';
INSERT INTO space_members (space_id, user_id, role, created_at)
    SELECT s.id, u.id, 'owner', u.created_at
    FROM users u JOIN spaces s ON s.path = 'users/' || u.username;

-- Nullable in the table (SQLite cannot add a referencing column with a default); every
-- workspace gets one here, and the server always sets it.
ALTER TABLE workspaces ADD COLUMN space_id INTEGER REFERENCES spaces(id);
UPDATE workspaces SET space_id = (
    SELECT s.id FROM spaces s JOIN users u ON s.path = 'users/' || u.username
    WHERE u.id = workspaces.owner_id
);
CREATE INDEX workspaces_space ON workspaces(space_id);
