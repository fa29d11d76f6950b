//! The tree of spaces (spec/mounts.md): paths, their members and roles. Rules (who may create
//! what, how roles are inherited) live in `app::spaces`; this module only reads and writes.

use super::error::unique;
use super::members::SPACE_MEMBERS;
use super::{get_i64, get_opt_i64, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::{SpaceMember, SpaceRole};
use warren_types::{SpaceId, UserId};

/// The root of the personal spaces.
pub const USERS_ROOT: &str = "users";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceRow {
    pub id: SpaceId,
    pub path: String,
    pub parent_id: Option<SpaceId>,
    pub created_at: i64,
}

impl SpaceRow {
    pub fn to_api(&self, your_role: Option<SpaceRole>) -> warren_types::api::Space {
        warren_types::api::Space {
            id: self.id,
            path: self.path.clone(),
            your_role,
            created_at: from_millis(self.created_at),
        }
    }
}

const COLS: &str = "id, path, parent_id, created_at";

impl sqlx::FromRow<'_, AnyRow> for SpaceRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(SpaceRow {
            id: SpaceId(get_i64(r, "id")?),
            path: get_str(r, "path")?,
            parent_id: get_opt_i64(r, "parent_id")?.map(SpaceId),
            created_at: get_i64(r, "created_at")?,
        })
    }
}

/// A stored role; anything unknown is the least.
fn role(s: &str) -> SpaceRole {
    SpaceRole::parse(s).unwrap_or(SpaceRole::Viewer)
}

impl Store {
    pub async fn space_by_path(&self, path: &str) -> Result<Option<SpaceRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM spaces WHERE path = $1")).bind(path),
        )
        .await
    }

    pub async fn space_by_id(&self, id: SpaceId) -> Result<Option<SpaceRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM spaces WHERE id = $1")).bind(id.get()),
        )
        .await
    }

    /// Every space, by path.
    pub async fn list_spaces(&self) -> Result<Vec<SpaceRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM spaces ORDER BY path"
        )))
        .await
    }

    /// Inserts a space (its parent checked by the caller); `Conflict` when the path exists.
    /// `owner` becomes its owner in the same transaction.
    pub async fn insert_space(
        &self,
        path: &str,
        parent: Option<SpaceId>,
        created_by: Option<UserId>,
        owner: Option<UserId>,
        now: i64,
    ) -> Result<SpaceRow, StoreError> {
        let mut tx = self.db.begin().await?;
        let r = sqlx::query(&format!(
            "INSERT INTO spaces (path, parent_id, created_by, created_at) VALUES ($1, $2, $3, $4) \
             RETURNING {COLS}"
        ))
        .bind(path)
        .bind(parent.map(|p| p.get()))
        .bind(created_by.map(|u| u.get()))
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(unique("space path"))?;
        let space = SpaceRow::from_row(&r)?;
        if let Some(owner) = owner {
            sqlx::query(
                "INSERT INTO space_members (space_id, user_id, role, created_at) \
                 VALUES ($1, $2, 'owner', $3)",
            )
            .bind(space.id.get())
            .bind(owner.get())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(space)
    }

    /// The personal space `users/<username>` of a user, made (with the user as its owner) on
    /// first use.
    pub async fn personal_space(
        &self,
        user: UserId,
        username: &str,
        now: i64,
    ) -> Result<SpaceRow, StoreError> {
        let path = format!("{USERS_ROOT}/{username}");
        if let Some(s) = self.space_by_path(&path).await? {
            return Ok(s);
        }
        let root = match self.space_by_path(USERS_ROOT).await? {
            Some(r) => r,
            None => match self.insert_space(USERS_ROOT, None, None, None, now).await {
                Ok(r) => r,
                Err(StoreError::Conflict(_)) => self
                    .space_by_path(USERS_ROOT)
                    .await?
                    .ok_or_else(|| StoreError::Conflict("space path"))?,
                Err(e) => return Err(e),
            },
        };
        match self
            .insert_space(&path, Some(root.id), Some(user), Some(user), now)
            .await
        {
            Ok(s) => Ok(s),
            // Made meanwhile by another request.
            Err(StoreError::Conflict(_)) => self
                .space_by_path(&path)
                .await?
                .ok_or_else(|| StoreError::Conflict("space path")),
            Err(e) => Err(e),
        }
    }

    /// Whether anything lives in the space: (spaces directly below, workspaces in it,
    /// mounts in it).
    pub async fn space_contents(&self, id: SpaceId) -> Result<(i64, i64, i64), StoreError> {
        let r = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM spaces WHERE parent_id = $1) AS spaces, \
             (SELECT COUNT(*) FROM workspaces WHERE space_id = $1) AS workspaces, \
             (SELECT COUNT(*) FROM mounts WHERE space_id = $1) AS mounts",
        )
        .bind(id.get())
        .fetch_one(&self.db.pool)
        .await?;
        Ok((
            get_i64(&r, "spaces")?,
            get_i64(&r, "workspaces")?,
            get_i64(&r, "mounts")?,
        ))
    }

    /// Deletes an empty space (its memberships with it); false when it did not exist.
    pub async fn delete_space(&self, id: SpaceId) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM spaces WHERE id = $1")
            .bind(id.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Every role a user holds at `now`, directly or through a group: (space path, role),
    /// a path more than once when roles come from several places.
    pub async fn memberships(
        &self,
        user: UserId,
        now: i64,
    ) -> Result<Vec<(String, SpaceRole)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT s.path, m.role FROM space_members m JOIN spaces s ON s.id = m.space_id \
             WHERE m.user_id = $1 \
             UNION ALL SELECT s.path, r.role FROM group_members gm \
             JOIN space_group_roles r ON r.group_id = gm.group_id \
             JOIN spaces s ON s.id = r.space_id WHERE gm.user_id = $1 AND {}",
            super::groups::counts_at("$2")
        ))
        .bind(user.get())
        .bind(now)
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((get_str(r, "path")?, role(&get_str(r, "role")?))))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    pub async fn space_members(&self, space: SpaceId) -> Result<Vec<SpaceMember>, StoreError> {
        let members = self.members(SPACE_MEMBERS, space.get()).await?;
        Ok(members
            .into_iter()
            .map(|m| SpaceMember {
                user_id: m.user_id,
                username: m.username,
                role: role(&m.role),
                created_at: m.created_at,
            })
            .collect())
    }

    /// Adds a member or changes their role.
    pub async fn set_space_member(
        &self,
        space: SpaceId,
        user: UserId,
        role: SpaceRole,
        now: i64,
    ) -> Result<(), StoreError> {
        self.set_member(SPACE_MEMBERS, space.get(), user, role.as_str(), now)
            .await
    }

    /// Removes a membership; false when there was none.
    pub async fn remove_space_member(
        &self,
        space: SpaceId,
        user: UserId,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM space_members WHERE space_id = $1 AND user_id = $2")
            .bind(space.get())
            .bind(user.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }
}
