//! Groups, their members and the roles they hold on spaces (spec: issue 44). Rules (who may
//! manage a group, what a provider's claim may change) live in `app::groups`; this module
//! only reads and writes. A membership with `expires_at` (an `oidc` group's) counts only
//! before it.

use super::error::unique;
use super::{get_i64, get_opt_i64, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::{GroupMember, GroupSource, SpaceGroupRole, SpaceRole};
use warren_types::{GroupId, SpaceId, UserId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    pub id: GroupId,
    pub name: String,
    pub source: GroupSource,
    pub description: String,
    pub created_at: i64,
}

impl GroupRow {
    pub fn to_api(&self, members: i64) -> warren_types::api::Group {
        warren_types::api::Group {
            id: self.id,
            name: self.name.clone(),
            source: self.source,
            description: self.description.clone(),
            members,
            created_at: from_millis(self.created_at),
        }
    }
}

const COLS: &str = "id, name, source, description, created_at";

/// A stored source; anything unknown is the one whose members are kept by hand.
fn source(s: &str) -> GroupSource {
    GroupSource::parse(s).unwrap_or(GroupSource::Local)
}

impl sqlx::FromRow<'_, AnyRow> for GroupRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(GroupRow {
            id: GroupId(get_i64(r, "id")?),
            name: get_str(r, "name")?,
            source: source(&get_str(r, "source")?),
            description: get_str(r, "description")?,
            created_at: get_i64(r, "created_at")?,
        })
    }
}

/// The condition under which a membership row `gm` counts at `$now`.
pub(super) fn counts_at(now: &str) -> String {
    format!("(gm.expires_at IS NULL OR gm.expires_at > {now})")
}

/// The workspace list's condition (`w` the workspace): owned by the user `$n`, or in or below
/// a space where they hold a role at `$n+1`, directly or through a group. The spaces are one
/// subquery that does not depend on the row, so the database works them out once per list
/// (a hashed set) instead of matching the caller's memberships against every workspace: that
/// made a list cost O(workspaces × spaces), 80 ms at 1,000 workspaces of 200 users.
pub(super) fn visible_sql(n: usize) -> String {
    format!(
        " AND (w.owner_id = ${n} OR w.space_id IN (SELECT vs.id FROM spaces vs JOIN spaces ms \
         ON vs.path = ms.path OR substr(vs.path, 1, length(ms.path) + 1) = ms.path || '/' \
         WHERE ms.id IN (SELECT m.space_id FROM space_members m WHERE m.user_id = ${n} \
          UNION SELECT r.space_id FROM group_members gm JOIN space_group_roles r \
          ON r.group_id = gm.group_id WHERE gm.user_id = ${n} AND {})))",
        counts_at(&format!("${}", n + 1))
    )
}

impl Store {
    /// Inserts a group; `Conflict` when the name is taken.
    pub async fn insert_group(
        &self,
        name: &str,
        src: GroupSource,
        description: &str,
        by: UserId,
        now: i64,
    ) -> Result<GroupRow, StoreError> {
        let r = sqlx::query(&format!(
            "INSERT INTO groups (name, source, description, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {COLS}"
        ))
        .bind(name)
        .bind(src.as_str())
        .bind(description)
        .bind(by.get())
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("group name"))?;
        Ok(GroupRow::from_row(&r)?)
    }

    pub async fn group_by_name(&self, name: &str) -> Result<Option<GroupRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM groups WHERE name = $1")).bind(name),
        )
        .await
    }

    /// Every group by name, with how many members count at `now`.
    pub async fn list_groups(&self, now: i64) -> Result<Vec<(GroupRow, i64)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS}, (SELECT COUNT(*) FROM group_members gm \
             WHERE gm.group_id = groups.id AND {}) AS members FROM groups ORDER BY name",
            counts_at("$1")
        ))
        .bind(now)
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((GroupRow::from_row(r)?, get_i64(r, "members")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Deletes a group, its memberships and the roles it held; false when it did not exist.
    pub async fn delete_group(&self, id: GroupId) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM groups WHERE id = $1")
            .bind(id.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// The members of a group that count at `now`, by username.
    pub async fn group_members(
        &self,
        id: GroupId,
        now: i64,
    ) -> Result<Vec<GroupMember>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT gm.user_id, u.username, gm.expires_at, gm.created_at FROM group_members gm \
             JOIN users u ON u.id = gm.user_id WHERE gm.group_id = $1 AND {} \
             ORDER BY u.username",
            counts_at("$2")
        ))
        .bind(id.get())
        .bind(now)
        .fetch_all(&self.db.pool)
        .await?;
        let member = |r: &AnyRow| -> Result<GroupMember, sqlx::Error> {
            Ok(GroupMember {
                user_id: UserId(get_i64(r, "user_id")?),
                username: get_str(r, "username")?,
                expires_at: get_opt_i64(r, "expires_at")?.map(from_millis),
                created_at: from_millis(get_i64(r, "created_at")?),
            })
        };
        Ok(rows.iter().map(member).collect::<Result<_, _>>()?)
    }

    /// Adds a member to a group kept by hand (an existing member stays as is).
    pub async fn add_group_member(
        &self,
        id: GroupId,
        user: UserId,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO group_members (group_id, user_id, expires_at, created_at) \
             VALUES ($1, $2, NULL, $3) ON CONFLICT (group_id, user_id) DO NOTHING",
        )
        .bind(id.get())
        .bind(user.get())
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Removes a membership; false when there was none.
    pub async fn remove_group_member(&self, id: GroupId, user: UserId) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM group_members WHERE group_id = $1 AND user_id = $2")
            .bind(id.get())
            .bind(user.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Makes `user`'s memberships of `oidc` groups exactly those of `claimed` (names the
    /// provider's claim gave at a sign-in; names of no `oidc` group are ignored), each
    /// counting until `expires_at`. Returns the groups (joined, left) by name.
    pub async fn sync_oidc_groups(
        &self,
        user: UserId,
        claimed: &[String],
        expires_at: i64,
        now: i64,
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let mut tx = self.db.begin().await?;
        let known = sqlx::query(
            "SELECT g.id, g.name, gm.user_id AS member, gm.expires_at FROM groups g \
             LEFT JOIN group_members gm ON gm.group_id = g.id AND gm.user_id = $1 \
             WHERE g.source = 'oidc'",
        )
        .bind(user.get())
        .fetch_all(&mut *tx)
        .await?;
        let (mut joined, mut left) = (vec![], vec![]);
        for r in &known {
            let (id, name) = (get_i64(r, "id")?, get_str(r, "name")?);
            let was = get_opt_i64(r, "member")?.is_some()
                && get_opt_i64(r, "expires_at")?.is_none_or(|e| e > now);
            if claimed.contains(&name) {
                sqlx::query(
                    "INSERT INTO group_members (group_id, user_id, expires_at, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (group_id, user_id) \
                     DO UPDATE SET expires_at = excluded.expires_at",
                )
                .bind(id)
                .bind(user.get())
                .bind(expires_at)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                if !was {
                    joined.push(name);
                }
            } else if get_opt_i64(r, "member")?.is_some() {
                sqlx::query("DELETE FROM group_members WHERE group_id = $1 AND user_id = $2")
                    .bind(id)
                    .bind(user.get())
                    .execute(&mut *tx)
                    .await?;
                if was {
                    left.push(name);
                }
            }
        }
        tx.commit().await?;
        Ok((joined, left))
    }

    /// The roles groups hold on a space (directly), by group name.
    pub async fn space_group_roles(
        &self,
        space: SpaceId,
    ) -> Result<Vec<SpaceGroupRole>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.group_id, g.name, g.source, r.role, r.created_at FROM space_group_roles r \
             JOIN groups g ON g.id = r.group_id WHERE r.space_id = $1 ORDER BY g.name",
        )
        .bind(space.get())
        .fetch_all(&self.db.pool)
        .await?;
        let role = |r: &AnyRow| -> Result<SpaceGroupRole, sqlx::Error> {
            Ok(SpaceGroupRole {
                group_id: GroupId(get_i64(r, "group_id")?),
                group: get_str(r, "name")?,
                source: source(&get_str(r, "source")?),
                role: SpaceRole::parse(&get_str(r, "role")?).unwrap_or(SpaceRole::Viewer),
                created_at: from_millis(get_i64(r, "created_at")?),
            })
        };
        Ok(rows.iter().map(role).collect::<Result<_, _>>()?)
    }

    /// The roles one group holds: (space path, role), by path.
    pub async fn roles_of_group(
        &self,
        group: GroupId,
    ) -> Result<Vec<(String, SpaceRole)>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.path, r.role FROM space_group_roles r JOIN spaces s ON s.id = r.space_id \
             WHERE r.group_id = $1 ORDER BY s.path",
        )
        .bind(group.get())
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let role = SpaceRole::parse(&get_str(r, "role")?).unwrap_or(SpaceRole::Viewer);
                Ok((get_str(r, "path")?, role))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Gives a group a role on a space, or changes it.
    pub async fn set_space_group_role(
        &self,
        space: SpaceId,
        group: GroupId,
        role: SpaceRole,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO space_group_roles (space_id, group_id, role, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (space_id, group_id) \
             DO UPDATE SET role = excluded.role",
        )
        .bind(space.get())
        .bind(group.get())
        .bind(role.as_str())
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Takes a group's role on a space away; false when it held none there.
    pub async fn remove_space_group_role(
        &self,
        space: SpaceId,
        group: GroupId,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM space_group_roles WHERE space_id = $1 AND group_id = $2")
            .bind(space.get())
            .bind(group.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }
}
