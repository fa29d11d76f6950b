-- Mounts (spec/mounts.md): entries of the tree that Warren does not run as containers. A
-- mount lives in one space like a workspace, and its name is a host name too, so it is
-- unique among workspaces and mounts alike (the server checks both tables). `kind` is
-- `redirect` (to another entry, `target`, or to an external URL, `url`); the other kinds
-- of the spec (`proxy`, `workspace`) are refused by the server until it serves them.
-- A space holding a mount cannot be removed (RESTRICT); a mount goes with its owner.
CREATE TABLE mounts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL UNIQUE,
    space_id   INTEGER NOT NULL REFERENCES spaces(id) ON DELETE RESTRICT,
    owner_id   INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    target     TEXT,
    url        TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX mounts_space ON mounts(space_id);
CREATE INDEX mounts_target ON mounts(target);
