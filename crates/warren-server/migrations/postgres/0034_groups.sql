-- Groups: a role on a space held by a group holds for each of its members, as a role held
-- by the user directly does. A `local` group's members are kept by hand; an `oidc` group's
-- are what the OpenID provider's groups claim said at each member's last sign-in, and count
-- only until `expires_at` (so a removal at the provider takes effect within a bounded time
-- even for sessions that never sign in again).
CREATE TABLE groups (
    id          BIGSERIAL PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    source      TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_by  BIGINT REFERENCES users(id) ON DELETE SET NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE group_members (
    group_id   BIGINT NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
    user_id    BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    -- NULL for a local group; the end of the last sign-in's word for an oidc group.
    expires_at BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members(user_id);

CREATE TABLE space_group_roles (
    space_id   BIGINT NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
    group_id   BIGINT NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (space_id, group_id)
);
CREATE INDEX space_group_roles_group ON space_group_roles(group_id);
