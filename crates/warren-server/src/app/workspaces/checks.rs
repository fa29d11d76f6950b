//! What a new or resized workspace is checked against before anything is written: its
//! variables, its resources against the agent's limits, the agent it goes to and the agent's
//! quotas.

use super::super::{AppError, AppState, ErrorKind};
use crate::store::agents::AgentRow;
use crate::store::workspaces::{QuotaCounts, StoredVariable};
use warren_devfile::{MAX_ENV_BYTES, MAX_ENV_VAR_BYTES};
use warren_types::api::{VariableInput, VariableKind, WorkspaceResources};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};

/// Most variables one workspace may carry, and the largest value.
const MAX_VARIABLES: usize = 200;
const MAX_VARIABLE_BYTES: usize = 256 * 1024;

pub(crate) fn check_variables(vars: &[VariableInput]) -> Result<Vec<StoredVariable>, AppError> {
    if vars.len() > MAX_VARIABLES {
        return Err(AppError::invalid_field(
            "variables",
            format!("at most {MAX_VARIABLES} variables"),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = vec![];
    for (i, v) in vars.iter().enumerate() {
        let field = format!("variables[{i}].key");
        let key_ok = match v.kind {
            VariableKind::Env => {
                v.key
                    .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && v.key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }
            VariableKind::File => {
                !v.key.is_empty()
                    && v.key != "."
                    && v.key != ".."
                    && v.key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            }
        };
        if !key_ok || v.key.len() > 253 {
            let rule = match v.kind {
                VariableKind::Env => "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                VariableKind::File => "a file name (letters, digits, '.', '_', '-')",
            };
            return Err(AppError::invalid_field(
                &field,
                format!("{:?} is not {rule}", v.key),
            ));
        }
        if !seen.insert((v.kind == VariableKind::File, v.key.clone())) {
            return Err(AppError::invalid_field(
                &field,
                format!("{:?} is given twice", v.key),
            ));
        }
        if v.value.len() > MAX_VARIABLE_BYTES {
            return Err(AppError::invalid_field(
                &format!("variables[{i}].value"),
                format!("longer than {MAX_VARIABLE_BYTES} bytes"),
            ));
        }
        if v.kind == VariableKind::Env && v.key.len() + v.value.len() + 1 > MAX_ENV_VAR_BYTES {
            return Err(AppError::invalid_field(
                &format!("variables[{i}].value"),
                format!(
                    "{}: longer than {MAX_ENV_VAR_BYTES} bytes with its name, which Linux refuses in an environment; use a file variable",
                    v.key
                ),
            ));
        }
        out.push(StoredVariable {
            key: v.key.clone(),
            kind: v.kind,
            secret: v.secret,
            value: v.value.clone(),
        });
    }
    let env_bytes: usize = out
        .iter()
        .filter(|v| v.kind == VariableKind::Env)
        .map(|v| v.key.len() + v.value.len() + 2)
        .sum();
    if env_bytes > MAX_ENV_BYTES {
        return Err(AppError::invalid_field(
            "variables",
            format!(
                "the environment variables take {env_bytes} bytes together; at most {MAX_ENV_BYTES} fit in a process's environment (use file variables for large values)"
            ),
        ));
    }
    Ok(out)
}

/// The smallest workspace size a user may ask for: below it no editor or shell starts, and
/// the container runtime refuses memory limits under a few MiB with an opaque error.
const MIN_WORKSPACE_CPU_MILLIS: u64 = 100;
const MIN_WORKSPACE_MEMORY_BYTES: u64 = 64 << 20;

/// Checks a requested workspace size: valid quantities, not below the floors, and within
/// what `agent` reported it can give one workspace (its host's CPUs and memory). The agent's
/// `max_resources_per_workspace` is checked by rendering.
pub(super) fn check_resources(r: &WorkspaceResources, agent: &AgentRow) -> Result<(), AppError> {
    /// One requested quantity and its bounds.
    struct Size<'a> {
        field: &'static str,
        asked: &'a Option<String>,
        parse: fn(&str) -> Result<u64, warren_types::quantity::QuantityError>,
        floor: u64,
        floor_words: &'static str,
        /// The host's amount, and how it is said.
        host: Option<(u64, String)>,
    }
    let cap = agent.capacity;
    let sizes = [
        Size {
            field: "resources.cpu",
            asked: &r.cpu,
            parse: parse_cpu_millis,
            floor: MIN_WORKSPACE_CPU_MILLIS,
            floor_words: "100m (0.1 CPU)",
            host: cap.map(|c| {
                (
                    c.cpu_millis,
                    format!("{} CPUs", c.cpu_millis as f64 / 1000.0),
                )
            }),
        },
        Size {
            field: "resources.memory",
            asked: &r.memory,
            parse: parse_memory_bytes,
            floor: MIN_WORKSPACE_MEMORY_BYTES,
            floor_words: "64Mi",
            host: cap.map(|c| (c.memory_bytes, format!("{}Mi", c.memory_bytes >> 20))),
        },
    ];
    for size in sizes {
        let Some(asked) = size.asked else { continue };
        let n = (size.parse)(asked).map_err(|e| AppError::invalid_field(size.field, e))?;
        if n < size.floor {
            return Err(AppError::invalid_field(
                size.field,
                format!(
                    "{asked} is below the smallest workspace size, {}",
                    size.floor_words
                ),
            ));
        }
        if let Some((_, words)) = size.host.filter(|(most, _)| n > *most) {
            return Err(AppError::invalid_field(
                size.field,
                format!(
                    "{asked} is more than agent {} can give one workspace ({words})",
                    agent.name
                ),
            ));
        }
    }
    Ok(())
}

pub(super) async fn choose_agent(
    state: &AppState,
    key: Option<&str>,
) -> Result<AgentRow, AppError> {
    match key {
        Some(k) => state
            .store
            .agent_by_key(k)
            .await?
            .filter(|a| !a.is_connector())
            .ok_or_else(|| AppError::invalid_field("agent", format!("no agent named {k:?}"))),
        None => {
            let mut agents = state.store.list_agents().await?;
            match agents.len() {
                0 => Err(AppError::invalid_field(
                    "agent",
                    "no agent exists yet; an admin must create one",
                )),
                1 => Ok(agents.remove(0)),
                _ => Err(AppError::invalid_field(
                    "agent",
                    format!(
                        "required when several agents exist ({})",
                        agents
                            .iter()
                            .map(|a| a.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
    }
}

/// A quota refusal names the quota and the count.
pub(super) fn check_quotas(agent: &AgentRow, counts: QuotaCounts) -> Result<(), AppError> {
    let quota = agent.config.workspaces_quota;
    let per_user_quota = agent.config.workspaces_per_user_quota;
    if quota >= 0 && counts.agent_total >= quota {
        return Err(AppError::new(
            ErrorKind::Forbidden,
            "quota_exceeded",
            format!(
                "workspaces_quota of this agent is {quota} and it already has {} workspaces that are not terminated",
                counts.agent_total
            ),
        ));
    }
    if per_user_quota >= 0 && counts.user_total >= per_user_quota {
        return Err(AppError::new(
            ErrorKind::Forbidden,
            "quota_exceeded",
            format!(
                "workspaces_per_user_quota of this agent is {per_user_quota} and you already have {} workspaces on it that are not terminated",
                counts.user_total
            ),
        ));
    }
    Ok(())
}
