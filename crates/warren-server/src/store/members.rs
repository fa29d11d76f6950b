//! Membership tables (`project_members`, `space_members`): who belongs to a project or a
//! space, in which role, since when. One home for their reads and writes; each owner maps
//! the stored role word to its own role type.

use super::{get_i64, get_str, Store, StoreError};
use crate::db::from_millis;
use chrono::{DateTime, Utc};
use warren_types::UserId;

/// A membership table and the column naming what its rows are memberships of.
#[derive(Debug, Clone, Copy)]
pub(super) struct Members {
    pub table: &'static str,
    pub of: &'static str,
}

pub(super) const PROJECT_MEMBERS: Members = Members {
    table: "project_members",
    of: "project_id",
};

pub(super) const SPACE_MEMBERS: Members = Members {
    table: "space_members",
    of: "space_id",
};

/// One member as stored, the role as its word.
pub(super) struct Member {
    pub user_id: UserId,
    pub username: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// The members of `id`, by username.
    pub(super) async fn members(&self, t: Members, id: i64) -> Result<Vec<Member>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT m.user_id, u.username, m.role, m.created_at FROM {} m \
             JOIN users u ON u.id = m.user_id WHERE m.{} = $1 ORDER BY u.username",
            t.table, t.of
        ))
        .bind(id)
        .fetch_all(&self.db.pool)
        .await?;
        let member = |r: &sqlx::any::AnyRow| -> Result<Member, sqlx::Error> {
            Ok(Member {
                user_id: UserId(get_i64(r, "user_id")?),
                username: get_str(r, "username")?,
                role: get_str(r, "role")?,
                created_at: from_millis(get_i64(r, "created_at")?),
            })
        };
        Ok(rows.iter().map(member).collect::<Result<_, _>>()?)
    }

    /// Adds a member of `id`, or changes their role.
    pub(super) async fn set_member(
        &self,
        t: Members,
        id: i64,
        user: UserId,
        role: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO {table} ({of}, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT ({of}, user_id) DO UPDATE SET role = excluded.role",
            table = t.table,
            of = t.of
        ))
        .bind(id)
        .bind(user.get())
        .bind(role)
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }
}
