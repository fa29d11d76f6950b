//! The CLI's tables and texts for GitOps: repositories, an agent's sources, their status and
//! the policy.

use super::*;

pub fn repositories(items: &[Repository]) -> String {
    if items.is_empty() {
        return "No repositories.".into();
    }
    let mut t = table(&["NAME", "ID", "URL", "CREDENTIAL", "WEBHOOK", "USED BY"]);
    for r in items {
        t.add_row(vec![
            r.name.clone(),
            r.id.to_string(),
            r.url.clone(),
            r.credential.clone().unwrap_or_else(|| "-".into()),
            if r.webhook { "yes" } else { "no" }.into(),
            if r.used_by.is_empty() {
                "-".into()
            } else {
                r.used_by.join(", ")
            },
        ]);
    }
    finish(t)
}

pub fn repository(r: &Repository) -> String {
    details(vec![
        ("Name", r.name.clone()),
        ("ID", r.id.to_string()),
        ("URL", r.url.clone()),
        (
            "Credential",
            r.credential.clone().unwrap_or_else(|| "none".into()),
        ),
        (
            "Webhook secret",
            if r.webhook { "set" } else { "none" }.into(),
        ),
        (
            "Used by",
            if r.used_by.is_empty() {
                "no source".into()
            } else {
                r.used_by.join(", ")
            },
        ),
        ("Created", time(&r.created_at)),
    ])
}

pub fn sources(g: &AgentGitops) -> String {
    if g.sources.is_empty() {
        return "No GitOps sources.".into();
    }
    let mut t = table(&[
        "NAME",
        "REPOSITORY",
        "REF",
        "PATHS",
        "MODE",
        "NAMESPACE",
        "PRUNE",
        "INTERVAL",
    ]);
    for s in &g.sources {
        t.add_row(vec![
            s.name.clone(),
            s.repository.clone(),
            s.git_ref.clone(),
            if s.paths.is_empty() {
                "(all manifests)".into()
            } else {
                s.paths.join(" ")
            },
            s.mode.as_str().into(),
            s.namespace.clone().unwrap_or_else(|| "-".into()),
            if s.prune { "yes" } else { "no" }.into(),
            s.interval.clone(),
        ]);
    }
    finish(t)
}

pub fn gitops_status(items: &[SourceStatus]) -> String {
    if items.is_empty() {
        return "No GitOps status reported yet.".into();
    }
    let mut out = Vec::new();
    let mut t = table(&[
        "SOURCE",
        "COMMIT",
        "SYNCED",
        "APPLIED",
        "UNCHANGED",
        "PRUNED",
        "ERRORS",
        "READY",
    ]);
    for s in items {
        let ready = s.health.iter().filter(|h| h.ready).count();
        t.add_row(vec![
            s.source.clone(),
            s.commit
                .as_deref()
                .map(|c| c.chars().take(12).collect())
                .unwrap_or_else(|| "-".into()),
            time(&s.synced_at),
            s.applied.to_string(),
            s.unchanged.to_string(),
            s.pruned.to_string(),
            s.errors.len().to_string(),
            format!("{ready}/{}", s.health.len()),
        ]);
    }
    out.push(finish(t));
    for s in items {
        for e in &s.errors {
            let place = [e.file.as_deref(), e.object.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            if place.is_empty() {
                out.push(format!("{}: {}", s.source, e.message));
            } else {
                out.push(format!("{}: {place}: {}", s.source, e.message));
            }
        }
    }
    out.join("\n")
}

pub fn gitops_policy(p: &Policy) -> String {
    details(vec![
        (
            "Denied kinds",
            if p.deny.is_empty() {
                "none".into()
            } else {
                p.deny.join(", ")
            },
        ),
        (
            "Cluster mode",
            if p.allow_cluster_mode {
                "allowed"
            } else {
                "refused"
            }
            .into(),
        ),
    ])
}
