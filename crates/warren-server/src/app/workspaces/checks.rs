//! What a new or resized workspace is checked against before anything is written: its
//! variables, its resources against the agent's limits, the agent it goes to and the agent's
//! quotas.

use super::super::{render, AppError, AppState, ErrorKind};
use crate::store::agents::AgentRow;
use crate::store::workspaces::{QuotaCounts, StoredVariable};
use warren_devfile::{MAX_ENV_BYTES, MAX_ENV_VAR_BYTES};
use warren_types::api::{VariableInput, VariableKind, WorkspaceResources};
use warren_types::host_requirements::{GpuRequirement, HostRequirements};
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
/// The size a new workspace gets: the machine class it names (one of the agent's, alone),
/// else a size in numbers (where the agent takes them), else the agent's default class,
/// else nothing (the devfile's and the agent's defaults).
pub(crate) fn size_at_creation(
    asked: WorkspaceResources,
    agent: &AgentRow,
) -> Result<WorkspaceResources, AppError> {
    let cfg = &agent.config;
    let numbers = asked.cpu.is_some() || asked.memory.is_some();
    if asked.class.is_some() {
        if numbers {
            return Err(AppError::invalid_field(
                "resources.class",
                "give a machine class or a size in numbers, not both",
            ));
        }
        render::machine_class(agent, &asked)?;
        return Ok(asked);
    }
    if numbers {
        if !cfg.machine_classes.is_empty() && !cfg.custom_sizes {
            return Err(AppError::invalid_field(
                "resources",
                format!(
                    "agent {} takes a machine class, not a size in numbers: {}",
                    agent.name,
                    render::offered(cfg)
                ),
            ));
        }
        check_resources(&asked, agent)?;
        return Ok(asked);
    }
    Ok(WorkspaceResources {
        class: cfg.default_class().map(|c| c.name.clone()),
        ..asked
    })
}

/// The size a new workspace gets from its definition's host requirements (a dev container's
/// `hostRequirements`): when its creator named no class and no numbers, the class that meets
/// them (the default when it does, else the smallest), with a notice when that is not the
/// default. A named class that does not meet them is refused saying what it lacks and which
/// classes would do, as is a GPU that no class (or a size in numbers) can give.
pub(crate) fn size_for_requirements(
    asked: &WorkspaceResources,
    chosen: WorkspaceResources,
    needs: Option<&HostRequirements>,
    agent: &AgentRow,
) -> Result<(WorkspaceResources, Option<String>), AppError> {
    let Some(needs) = needs else {
        return Ok((chosen, None));
    };
    let cfg = &agent.config;
    let storage = cfg.data_volume_size.as_str();
    let meeting = || {
        let names: Vec<&str> = cfg
            .machine_classes
            .iter()
            .filter(|c| needs.lacks(c, storage).is_empty())
            .map(|c| c.name.as_str())
            .collect();
        if names.is_empty() {
            "no class of the agent's does".to_owned()
        } else {
            format!("{} would", names.join(", "))
        }
    };
    if let Some(class) = render::machine_class(agent, asked)? {
        let lacks = needs.lacks(class, storage);
        if !lacks.is_empty() {
            return Err(AppError::invalid_field(
                "resources.class",
                format!(
                    "machine class {} does not meet the definition's host requirements ({needs}): it lacks {}; {}",
                    class.name,
                    lacks.join(", "),
                    meeting()
                ),
            ));
        }
        return Ok((chosen, None));
    }
    let gpu_refused = |why: String| {
        AppError::invalid_field(
            "resources",
            format!("the definition's host requirements ask for a GPU, which {why}"),
        )
    };
    if asked.cpu.is_some() || asked.memory.is_some() {
        if needs.gpu == GpuRequirement::Required {
            return Err(gpu_refused(format!(
                "only a machine class gives, not a size in numbers; {}",
                meeting()
            )));
        }
        return Ok((chosen, None));
    }
    match needs.choose(&cfg.machine_classes, cfg.default_class(), storage) {
        Ok(Some(class)) => {
            let notice = (Some(class.name.as_str()) != chosen.class.as_deref()).then(|| {
                format!(
                    "hostRequirements: machine class {} chosen, the agent's {} that meets them ({needs})",
                    class.name,
                    if cfg.machine_classes.len() > 1 { "smallest" } else { "only one" }
                )
            });
            let sized = WorkspaceResources {
                class: Some(class.name.clone()),
                cpu: None,
                memory: None,
            };
            Ok((sized, notice))
        }
        Ok(None) => {
            if needs.gpu == GpuRequirement::Required {
                return Err(gpu_refused(format!(
                    "agent {} does not give: it has no machine class with one",
                    agent.name
                )));
            }
            let small = needs.storage.as_deref().filter(|s| {
                parse_memory_bytes(s).unwrap_or(0) > parse_memory_bytes(storage).unwrap_or(0)
            });
            let notice = small.map(|s| {
                format!(
                    "hostRequirements.storage: the workspace's volume is {storage} (agent {}'s size), not the {s} asked for",
                    agent.name
                )
            });
            Ok((chosen, notice))
        }
        Err(why) => Err(AppError::invalid_field(
            "resources",
            format!(
                "the definition's host requirements ({needs}) on agent {}: {why}",
                agent.name
            ),
        )),
    }
}

/// The size a resize leaves workspace size `now` with: another class replaces the whole of
/// it; numbers replace what they name (a workspace of a class changes class instead). A
/// volume never shrinks (Kubernetes refuses it), so a class with less storage is refused.
pub(super) fn size_after_resize(
    now: &WorkspaceResources,
    asked: &WorkspaceResources,
    agent: &AgentRow,
) -> Result<WorkspaceResources, AppError> {
    let numbers = asked.cpu.is_some() || asked.memory.is_some();
    if asked.class.is_none() && now.class.is_some() && numbers {
        return Err(AppError::invalid_field(
            "resources",
            format!(
                "the workspace is of machine class {}: resize it to another class; {}",
                now.class.as_deref().unwrap_or_default(),
                render::offered(&agent.config)
            ),
        ));
    }
    let next = if asked.class.is_some() {
        size_at_creation(asked.clone(), agent)?
    } else {
        if numbers && !agent.config.machine_classes.is_empty() && !agent.config.custom_sizes {
            return Err(AppError::invalid_field(
                "resources",
                format!(
                    "agent {} takes a machine class, not a size in numbers: {}",
                    agent.name,
                    render::offered(&agent.config)
                ),
            ));
        }
        check_resources(asked, agent)?;
        WorkspaceResources {
            class: None,
            cpu: asked.cpu.clone().or_else(|| now.cpu.clone()),
            memory: asked.memory.clone().or_else(|| now.memory.clone()),
        }
    };
    let storage = |r: &WorkspaceResources| -> Option<(u64, String)> {
        let size = (r.class.as_ref())
            .and_then(|n| agent.config.machine_class(n))
            .and_then(|c| c.storage.clone())
            .unwrap_or_else(|| agent.config.data_volume_size.clone());
        parse_memory_bytes(&size).ok().map(|b| (b, size))
    };
    if let (Some((had, had_words)), Some((gets, gets_words))) = (storage(now), storage(&next)) {
        if gets < had {
            return Err(AppError::invalid_field(
                "resources.class",
                format!(
                    "a workspace's volume does not shrink: it has {had_words}, and class {} has {gets_words}",
                    next.class.as_deref().unwrap_or("(none)")
                ),
            ));
        }
    }
    Ok(next)
}

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

pub(crate) async fn choose_agent(
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
/// What workspace size `r` counts for against the agent's weight quota: its class's
/// weight, 1 for a workspace of no class (or of a class the agent no longer offers).
fn weight(agent: &AgentRow, r: &WorkspaceResources) -> i64 {
    (r.class.as_ref())
        .and_then(|n| agent.config.machine_class(n))
        .map_or(1, |c| i64::from(c.weight()))
}

/// Refuses a resize that would take the owner's workspaces on the agent over its weight
/// quota (their other workspaces as they are, this one at its new size).
pub(super) async fn check_weight_after_resize(
    state: &AppState,
    w: &crate::store::workspaces::WorkspaceRow,
    agent: &AgentRow,
    next: &WorkspaceResources,
) -> Result<(), AppError> {
    let quota = agent.config.weight_per_user_quota;
    if quota < 0 {
        return Ok(());
    }
    let others: i64 = (state.store.user_sizes(agent.id, w.owner_id).await?)
        .iter()
        .filter(|(id, _)| *id != w.id)
        .map(|(_, r)| weight(agent, r))
        .sum();
    let adds = weight(agent, next);
    if others + adds > quota && adds > weight(agent, &w.resources) {
        return Err(AppError::new(
            ErrorKind::Forbidden,
            "quota_exceeded",
            format!(
                "weight_per_user_quota of this agent is {quota}: the owner's other workspaces on it weigh {others} and this one would weigh {adds}; remove one, or pick a lighter machine class"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_quotas(
    agent: &AgentRow,
    counts: QuotaCounts,
    new: &WorkspaceResources,
) -> Result<(), AppError> {
    let weight_quota = agent.config.weight_per_user_quota;
    let held: i64 = counts.user_sizes.iter().map(|r| weight(agent, r)).sum();
    let adds = weight(agent, new);
    if weight_quota >= 0 && held + adds > weight_quota {
        return Err(AppError::new(
            ErrorKind::Forbidden,
            "quota_exceeded",
            format!(
                "weight_per_user_quota of this agent is {weight_quota}: your workspaces on it weigh {held} and this one {adds}; remove one, or pick a lighter machine class"
            ),
        ));
    }
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
