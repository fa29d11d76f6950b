//! Agents: created by an admin, authenticated by a hashed token, configured per agent.

use super::{corrupt, get_i64, get_opt_i64, get_opt_str, get_str, is_unique_violation, Store};
use crate::crypto;
use crate::db::from_millis;
use crate::error::HttpError;
use sqlx::any::AnyRow;
use warren_types::api::Agent;
use warren_types::config::{AgentConfig, ResourceList};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};
use warren_types::reconcile::HostCapacity;
use warren_types::AgentId;

#[derive(Debug, Clone)]
pub struct AgentRow {
    pub id: AgentId,
    pub name: String,
    pub config: AgentConfig,
    pub created_at: i64,
    pub last_seen_at: Option<i64>,
    /// What one workspace can get at most, as the agent last reported it.
    pub capacity: Option<HostCapacity>,
    /// Why the agent cannot see its runtime, since when.
    pub runtime_fault: Option<(String, i64)>,
}

impl AgentRow {
    pub fn to_api(&self) -> Agent {
        Agent {
            id: self.id,
            name: self.name.clone(),
            config: self.config.clone(),
            created_at: from_millis(self.created_at),
            last_seen_at: self.last_seen_at.map(from_millis),
            runtime_fault: self.runtime_fault.as_ref().map(|(f, _)| f.clone()),
            runtime_fault_since: self.runtime_fault.as_ref().map(|(_, t)| from_millis(*t)),
        }
    }
}

const COLS: &str =
    "id, name, config, created_at, last_seen_at, capacity, runtime_fault, runtime_fault_since";

fn row(r: &AnyRow) -> Result<AgentRow, sqlx::Error> {
    Ok(AgentRow {
        id: AgentId(get_i64(r, "id")?),
        name: get_str(r, "name")?,
        config: serde_json::from_str(&get_str(r, "config")?)
            .map_err(|e| corrupt("agent config", e))?,
        created_at: get_i64(r, "created_at")?,
        last_seen_at: get_opt_i64(r, "last_seen_at")?,
        capacity: get_opt_str(r, "capacity")?
            .map(|c| serde_json::from_str(&c).map_err(|e| corrupt("agent capacity", e)))
            .transpose()?,
        runtime_fault: match (
            get_opt_str(r, "runtime_fault")?,
            get_opt_i64(r, "runtime_fault_since")?,
        ) {
            (Some(f), Some(t)) => Some((f, t)),
            _ => None,
        },
    })
}

/// Names of agents and projects: DNS-label-like, 1–63 characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'"
        ))
    }
}

fn check_resource_list(field: &str, l: &ResourceList) -> Result<(), HttpError> {
    if let Some(c) = &l.cpu {
        parse_cpu_millis(c).map_err(|e| HttpError::invalid_field(&format!("{field}.cpu"), e))?;
    }
    if let Some(m) = &l.memory {
        parse_memory_bytes(m)
            .map_err(|e| HttpError::invalid_field(&format!("{field}.memory"), e))?;
    }
    Ok(())
}

/// Checks what serde cannot: value ranges, quantities, host names.
pub fn validate_agent_config(c: &AgentConfig) -> Result<(), HttpError> {
    let host = c.workspace_domain.split(':').next().unwrap_or_default();
    let host_ok = !host.is_empty()
        && host.len() <= 200
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-'));
    if !host_ok {
        return Err(HttpError::invalid_field(
            "config.workspace_domain",
            format!("{:?} is not a host name", c.workspace_domain),
        ));
    }
    if let Some(port) = c.workspace_domain.split(':').nth(1) {
        port.parse::<u16>().map_err(|_| {
            HttpError::invalid_field("config.workspace_domain", format!("{port:?} is not a port"))
        })?;
    }
    if c.workspace_scheme != "http" && c.workspace_scheme != "https" {
        return Err(HttpError::invalid_field(
            "config.workspace_scheme",
            "must be http or https",
        ));
    }
    if c.workspaces_quota < -1 {
        return Err(HttpError::invalid_field(
            "config.workspaces_quota",
            "must be -1 (unlimited) or more",
        ));
    }
    if c.workspaces_per_user_quota < -1 {
        return Err(HttpError::invalid_field(
            "config.workspaces_per_user_quota",
            "must be -1 (unlimited) or more",
        ));
    }
    if let Some(ns) = &c.shared_namespace {
        validate_name(ns).map_err(|e| HttpError::invalid_field("config.shared_namespace", e))?;
    }
    let d = &c.default_resources_per_workspace_container;
    check_resource_list(
        "config.default_resources_per_workspace_container.requests",
        &d.requests,
    )?;
    check_resource_list(
        "config.default_resources_per_workspace_container.limits",
        &d.limits,
    )?;
    if let Some(m) = &c.max_resources_per_workspace {
        check_resource_list("config.max_resources_per_workspace.requests", &m.requests)?;
        check_resource_list("config.max_resources_per_workspace.limits", &m.limits)?;
    }
    parse_memory_bytes(&c.data_volume_size)
        .map_err(|e| HttpError::invalid_field("config.data_volume_size", e))?;
    Ok(())
}

impl Store {
    /// Creates an agent; returns it with its token (shown once, stored hashed).
    pub async fn create_agent(
        &self,
        name: &str,
        config: &AgentConfig,
        now: i64,
    ) -> Result<(AgentRow, String), HttpError> {
        validate_name(name).map_err(|e| HttpError::invalid_field("name", e))?;
        validate_agent_config(config)?;
        let token = crypto::new_agent_token();
        let json = serde_json::to_string(config)
            .map_err(|e| HttpError::internal("encoding agent config", &e))?;
        let r = sqlx::query(&format!(
            "INSERT INTO agents (name, token_hash, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $4) RETURNING {COLS}"
        ))
        .bind(name)
        .bind(crypto::token_digest(&token))
        .bind(json)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                HttpError::conflict("already_exists", format!("an agent named {name:?} already exists"))
            } else {
                e.into()
            }
        })?;
        Ok((row(&r)?, token))
    }

    pub async fn list_agents(&self) -> Result<Vec<AgentRow>, sqlx::Error> {
        let rows = sqlx::query(&format!("SELECT {COLS} FROM agents ORDER BY id"))
            .fetch_all(&self.db.pool)
            .await?;
        rows.iter().map(row).collect()
    }

    pub async fn agent_by_id(&self, id: AgentId) -> Result<Option<AgentRow>, sqlx::Error> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM agents WHERE id = $1"))
            .bind(id.get())
            .fetch_optional(&self.db.pool)
            .await?;
        r.as_ref().map(row).transpose()
    }

    /// An agent by name, or by id when `key` is all digits.
    pub async fn agent_by_key(&self, key: &str) -> Result<Option<AgentRow>, sqlx::Error> {
        if let Ok(id) = key.parse::<i64>() {
            if let Some(a) = self.agent_by_id(AgentId(id)).await? {
                return Ok(Some(a));
            }
        }
        let r = sqlx::query(&format!("SELECT {COLS} FROM agents WHERE name = $1"))
            .bind(key)
            .fetch_optional(&self.db.pool)
            .await?;
        r.as_ref().map(row).transpose()
    }

    pub async fn update_agent_config(
        &self,
        id: AgentId,
        config: &AgentConfig,
        now: i64,
    ) -> Result<Option<AgentRow>, HttpError> {
        validate_agent_config(config)?;
        let json = serde_json::to_string(config)
            .map_err(|e| HttpError::internal("encoding agent config", &e))?;
        let r = sqlx::query(&format!(
            "UPDATE agents SET config = $1, updated_at = $2 WHERE id = $3 RETURNING {COLS}"
        ))
        .bind(json)
        .bind(now)
        .bind(id.get())
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(r.as_ref().map(row).transpose()?)
    }

    /// Replaces an agent's token (a lost or leaked token); the old one stops working at once.
    /// Returns the new token, shown once, or `None` when no such agent exists.
    pub async fn reset_agent_token(
        &self,
        id: AgentId,
        now: i64,
    ) -> Result<Option<String>, sqlx::Error> {
        let token = crypto::new_agent_token();
        let done = sqlx::query("UPDATE agents SET token_hash = $1, updated_at = $2 WHERE id = $3")
            .bind(crypto::token_digest(&token))
            .bind(now)
            .bind(id.get())
            .execute(&self.db.pool)
            .await?;
        Ok((done.rows_affected() == 1).then_some(token))
    }

    /// The agent owning a presented agent token.
    pub async fn authenticate_agent(&self, token: &str) -> Result<Option<AgentRow>, sqlx::Error> {
        if !token.starts_with(crypto::AGENT_TOKEN_PREFIX) || token.len() > 200 {
            return Ok(None);
        }
        let digest = crypto::token_digest(token);
        let r = sqlx::query(&format!(
            "SELECT {COLS}, token_hash FROM agents WHERE token_hash = $1"
        ))
        .bind(&digest)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = r else { return Ok(None) };
        if !crypto::ct_eq(&get_str(&r, "token_hash")?, &digest) {
            return Ok(None);
        }
        Ok(Some(row(&r)?))
    }
}
