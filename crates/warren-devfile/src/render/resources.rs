//! Container resources: the devfile's, the agent's defaults and the user's request resolved
//! into requests and limits, and the pod's sum checked against the agent's cap.

use super::RenderError;
use crate::model::Container;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use warren_types::api::WorkspaceResources;
use warren_types::config::ResourceList;
use warren_types::quantity::{
    format_cpu_millis, format_memory_bytes, parse_cpu_millis, parse_memory_bytes, QuantityError,
};

pub(super) fn quantity_err(field: impl Into<String>) -> impl FnOnce(QuantityError) -> RenderError {
    let field = field.into();
    move |source| RenderError::Quantity { field, source }
}

/// Resolved cpu/memory of one container, in exact units and as written.
#[derive(Default, Clone)]
pub(super) struct Res {
    pub(super) cpu_req: Option<(u64, String)>,
    pub(super) cpu_lim: Option<(u64, String)>,
    pub(super) mem_req: Option<(u64, String)>,
    pub(super) mem_lim: Option<(u64, String)>,
}

impl Res {
    pub(super) fn to_k8s(&self) -> Option<core::ResourceRequirements> {
        let list = |cpu: &Option<(u64, String)>, mem: &Option<(u64, String)>| {
            let mut m = BTreeMap::new();
            if let Some((_, s)) = cpu {
                m.insert("cpu".to_owned(), Quantity(s.clone()));
            }
            if let Some((_, s)) = mem {
                m.insert("memory".to_owned(), Quantity(s.clone()));
            }
            (!m.is_empty()).then_some(m)
        };
        let requests = list(&self.cpu_req, &self.mem_req);
        let limits = list(&self.cpu_lim, &self.mem_lim);
        if requests.is_none() && limits.is_none() {
            return None;
        }
        Some(core::ResourceRequirements {
            requests,
            limits,
            ..Default::default()
        })
    }
}

pub(super) fn parse_q(
    s: &Option<String>,
    cpu: bool,
    field: &str,
) -> Result<Option<(u64, String)>, RenderError> {
    match s {
        None => Ok(None),
        Some(v) => {
            let n = if cpu {
                parse_cpu_millis(v)
            } else {
                parse_memory_bytes(v)
            }
            .map_err(quantity_err(field))?;
            Ok(Some((n, v.clone())))
        }
    }
}

pub(super) fn resolve_resources(
    c: &Container,
    defaults: &ResourceList,
    default_limits: &ResourceList,
    user: Option<&WorkspaceResources>,
) -> Result<Res, RenderError> {
    let d = "default_resources_per_workspace_container";
    let pick = |devfile: &Option<String>, default: &Option<String>, cpu: bool, field: &str| {
        match devfile {
            Some(_) => parse_q(devfile, cpu, &format!("devfile container {:?}", c.name)),
            None => parse_q(default, cpu, field),
        }
    };
    let mut r = Res {
        cpu_req: pick(
            &c.cpu_request,
            &defaults.cpu,
            true,
            &format!("{d}.requests.cpu"),
        )?,
        cpu_lim: pick(
            &c.cpu_limit,
            &default_limits.cpu,
            true,
            &format!("{d}.limits.cpu"),
        )?,
        mem_req: pick(
            &c.memory_request,
            &defaults.memory,
            false,
            &format!("{d}.requests.memory"),
        )?,
        mem_lim: pick(
            &c.memory_limit,
            &default_limits.memory,
            false,
            &format!("{d}.limits.memory"),
        )?,
    };
    if let Some(u) = user {
        if let Some(v) = parse_q(&u.cpu, true, "requested workspace cpu")? {
            r.cpu_lim = Some(v);
        }
        if let Some(v) = parse_q(&u.memory, false, "requested workspace memory")? {
            r.mem_lim = Some(v);
        }
    }
    // A default request may exceed a devfile (or requested) limit: requests = min(request, limit).
    for (req, lim) in [(&mut r.cpu_req, &r.cpu_lim), (&mut r.mem_req, &r.mem_lim)] {
        if let (Some(q), Some(l)) = (req.as_ref(), lim.as_ref()) {
            if q.0 > l.0 {
                *req = Some(l.clone());
            }
        }
    }
    Ok(r)
}

/// Checks the sum over the pod against `max_resources_per_workspace`.
pub(super) fn check_cap(
    app: &[(&str, Res)],
    init: &[(&str, Res)],
    cap: &warren_types::config::ResourceRequirements,
) -> Result<(), RenderError> {
    type Get = fn(&Res) -> &Option<(u64, String)>;
    /// (resource, kind, devfile field, accessor, cap, is cpu)
    type Check<'c> = (
        &'static str,
        &'static str,
        &'static str,
        Get,
        &'c Option<String>,
        bool,
    );
    let checks: [Check<'_>; 4] = [
        (
            "cpu",
            "limits",
            "cpuLimit",
            |r| &r.cpu_lim,
            &cap.limits.cpu,
            true,
        ),
        (
            "memory",
            "limits",
            "memoryLimit",
            |r| &r.mem_lim,
            &cap.limits.memory,
            false,
        ),
        (
            "cpu",
            "requests",
            "cpuRequest",
            |r| &r.cpu_req,
            &cap.requests.cpu,
            true,
        ),
        (
            "memory",
            "requests",
            "memoryRequest",
            |r| &r.mem_req,
            &cap.requests.memory,
            false,
        ),
    ];
    for (resource, kind, field, get, cap_value, cpu) in checks {
        let Some(cap_s) = cap_value else { continue };
        let cap_n = if cpu {
            parse_cpu_millis(cap_s)
        } else {
            parse_memory_bytes(cap_s)
        }
        .map_err(quantity_err(format!(
            "max_resources_per_workspace.{kind}.{resource}"
        )))?;
        let mut sum: u64 = 0;
        let mut max_init: u64 = 0;
        for (list, is_init) in [(app, false), (init, true)] {
            for (name, r) in list {
                // Kubernetes defaults a missing request to the limit; with neither, the
                // container is unbounded and a quota would refuse the pod.
                let fallback = match (kind, resource) {
                    ("requests", "cpu") => r.cpu_lim.as_ref(),
                    ("requests", _) => r.mem_lim.as_ref(),
                    _ => None,
                };
                let value = get(r).as_ref().or(fallback);
                let Some((n, _)) = value else {
                    return Err(RenderError::Unbounded {
                        container: (*name).to_owned(),
                        resource,
                        kind,
                        field,
                    });
                };
                if is_init {
                    max_init = max_init.max(*n);
                } else {
                    sum = sum.saturating_add(*n);
                }
            }
        }
        // Init containers run one at a time before the others: the pod needs the larger.
        let total = sum.max(max_init);
        if total > cap_n {
            let fmt = |n: u64| {
                if cpu {
                    format_cpu_millis(n)
                } else {
                    format_memory_bytes(n)
                }
            };
            return Err(RenderError::ExceedsCap {
                resource,
                kind,
                asked: fmt(total),
                cap: cap_s.clone(),
            });
        }
    }
    Ok(())
}
