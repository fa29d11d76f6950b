//! Printing results: tables for people, the API's own JSON or YAML for scripts.

use chrono::{DateTime, Utc};
use comfy_table::{presets, Table};
use serde::Serialize;
use warren_types::api::{
    Agent, EntryKind, Mount, MountPhase, OAuthClient, Project, ProjectMember, Space, SpaceMember,
    SpaceRole, SshKey, Token, Tree, TreeEntry, TreeSpace, User, Workspace, WorkspaceGrant,
};
use warren_types::gitops::{AgentGitops, Policy, Repository, SourceStatus};

mod audit;
mod gitops;
mod groups;
mod tree;

pub use audit::audit_verification;

pub use gitops::*;
pub use groups::*;
pub use tree::*;

/// What a rebuild changes (or would): one line per part, with before and after.
pub fn rebuild_plan(plan: &warren_types::api::RebuildOutcome) -> String {
    use warren_types::api::ChangeKind;
    let verb = if plan.applied {
        "Rebuilt"
    } else {
        "Rebuilding"
    };
    let mut s = format!("{verb} {} from {}", plan.workspace.name, plan.source);
    if plan.changes.is_empty() {
        s.push_str(": no change to its containers, endpoints, volumes or start-up commands.");
        return s;
    }
    s.push_str(&format!(" changes {} part(s):", plan.changes.len()));
    for c in &plan.changes {
        match c.change {
            ChangeKind::Added => s.push_str(&format!(
                "\n  + {}: {}",
                c.part,
                c.after.as_deref().unwrap_or("")
            )),
            ChangeKind::Removed => s.push_str(&format!(
                "\n  - {}: {}",
                c.part,
                c.before.as_deref().unwrap_or("")
            )),
            ChangeKind::Changed => s.push_str(&format!(
                "\n  ~ {}:\n      was: {}\n      now: {}",
                c.part,
                c.before.as_deref().unwrap_or(""),
                c.after.as_deref().unwrap_or("")
            )),
        }
    }
    s
}

/// `-o/--output`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The API's JSON, pretty-printed.
    Json,
    /// The same fields as YAML.
    Yaml,
}

/// Renders `value` in `format`; `human` makes the people's version.
pub fn render<T: Serialize + ?Sized>(
    format: Format,
    value: &T,
    human: impl FnOnce(&T) -> String,
) -> String {
    let mut s = match format {
        Format::Table => human(value),
        // Serialising our own typed values cannot fail (no maps with non-string keys).
        Format::Json => serde_json::to_string_pretty(value).unwrap_or_default(),
        Format::Yaml => serde_yaml::to_string(value).unwrap_or_default(),
    };
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(header.iter().copied());
    t
}

/// Key/value pairs of one object.
fn details(rows: Vec<(&str, String)>) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    for (k, v) in rows {
        t.add_row(vec![format!("{k}:"), v]);
    }
    trim_lines(&t.to_string())
}

/// comfy-table pads every cell; trailing blanks only make `grep`/`diff` harder.
fn trim_lines(s: &str) -> String {
    s.lines()
        .map(|l| {
            let l = l.trim_end();
            l.strip_prefix(' ').unwrap_or(l)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn finish(t: Table) -> String {
    trim_lines(&t.to_string())
}

/// What a timer will do next, in words: `stops at 2026-12-01 18:00:00 UTC (in 2 h 5 min): …`.
pub fn planned(p: &warren_types::api::PlannedChange, now: DateTime<Utc>) -> String {
    let verb = match p.desired_state {
        warren_types::DesiredState::Terminated => "terminated",
        _ => "stopped",
    };
    format!(
        "{verb} at {} UTC ({}): {}",
        time(&p.at),
        until(p.at, now),
        p.reason
    )
}

/// `in 2 h 5 min`, `in 9 min`, `in 40 s`, `due now`.
pub fn until(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (at - now).num_seconds();
    match secs {
        s if s <= 0 => "due now".into(),
        s if s < 60 => format!("in {s} s"),
        s if s < 3600 => format!("in {} min", s / 60),
        s if s < 86_400 => format!("in {} h {} min", s / 3600, (s % 3600) / 60),
        s => format!("in {} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub fn time(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
}

pub fn resources(r: &warren_types::api::WorkspaceResources) -> String {
    if let Some(class) = &r.class {
        return format!("class {class}");
    }
    match (&r.cpu, &r.memory) {
        (None, None) => "default".into(),
        (cpu, mem) => format!("cpu {} / memory {}", opt(cpu), opt(mem)),
    }
}

pub fn workspaces(items: &[Workspace]) -> String {
    if items.is_empty() {
        return "No workspaces.".into();
    }
    let mut t = table(&[
        "NAME", "STATE", "DESIRED", "OWNER", "AGENT", "PROJECT", "URL",
    ]);
    for w in items {
        t.add_row(vec![
            w.name.clone(),
            // The agent cannot see its runtime: this is only the last state it reported.
            if w.agent_fault.is_some() {
                format!("{} (stale)", w.actual_state)
            } else {
                w.actual_state.to_string()
            },
            w.desired_state.to_string(),
            w.owner_username.clone(),
            w.agent_name.clone(),
            // A repository opened without a project stands where the project would.
            opt(&w.project_name.clone().or_else(|| w.repository.clone())),
            opt(&w.url),
        ]);
    }
    finish(t)
}

pub fn workspace(w: &Workspace) -> String {
    workspace_with_status(w, None, None, None)
}

/// What the workspace's own output last said about its editor.
pub use warren_types::config::editor_status;

/// [`workspace`], with its startup and its editor's status as the workspace's output gives
/// them, and how many parts of its definition changed since it was built (`update`).
pub fn workspace_with_status(
    w: &Workspace,
    startup: Option<&str>,
    editor_status: Option<&str>,
    update: Option<usize>,
) -> String {
    let mut rows = vec![
        ("Name", w.name.clone()),
        ("ID", w.id.to_string()),
        ("State", w.actual_state.to_string()),
        ("Desired", w.desired_state.to_string()),
        ("Owner", w.owner_username.clone()),
        ("Space", w.space.clone()),
        (
            "You may",
            w.your_right.map_or("-", |r| r.as_str()).to_owned(),
        ),
        ("Agent", w.agent_name.clone()),
        ("Project", opt(&w.project_name)),
    ];
    if let Some(r) = &w.repository {
        rows.push(("Repository", r.clone()));
    }
    if let Some(r) = &w.git_ref {
        rows.push(("Ref", r.clone()));
    }
    rows.extend([
        ("Namespace", w.namespace.clone()),
        ("Resources", resources(&w.resources)),
        ("URL", opt(&w.url)),
    ]);
    if let Some(p) = &w.planned {
        rows.push(("Next", planned(p, Utc::now())));
    }
    if let Some(startup) = startup {
        rows.push(("Startup", startup.to_owned()));
    }
    if let Some(editor) = &w.editor_url {
        rows.push((
            "Editor",
            match editor_status {
                Some(status) => format!("{editor} ({status})"),
                None => editor.clone(),
            },
        ));
    }
    if let Some(reason) = &w.failure_reason {
        rows.push(("Failure", reason.clone()));
    }
    if let Some(reason) = &w.waiting_reason {
        rows.push(("Waiting", reason.clone()));
    }
    if let Some(n) = update {
        let whose = if w.project_name.is_some() {
            "its project's"
        } else {
            "its repository's"
        };
        rows.push((
            "Update",
            format!(
                "{whose} definition changed since it was built ({n} change(s)): warren ws rebuild {} shows them",
                w.name
            ),
        ));
    }
    if let Some(fault) = &w.agent_fault {
        rows.push(("Agent fault", fault.clone()));
    }
    if let Some(warning) = &w.isolation_warning {
        rows.push(("Warning", warning.clone()));
    }
    if let Some(r) = &w.region {
        rows.push((
            "Region",
            match &r.notice {
                Some(n) => format!("{} (central proxy: {n})", r.name),
                None => format!("{} (its own proxy)", r.name),
            },
        ));
    }
    for (name, url) in &w.endpoints {
        rows.push(("Endpoint", format!("{name} {url}")));
    }
    for v in &w.variables {
        let value = if v.secret {
            "(secret)".to_owned()
        } else {
            opt(&v.value)
        };
        let kind = match v.kind {
            warren_types::api::VariableKind::Env => "env",
            warren_types::api::VariableKind::File => "file",
        };
        rows.push(("Variable", format!("{} ({kind}) = {value}", v.key)));
    }
    for c in &w.commands {
        let mut line = format!("{} ({}): {}", c.id, c.kind, c.summary);
        if let Some(g) = &c.group {
            line.push_str(&format!(" [{g}]"));
        }
        if c.at_start {
            line.push_str(" [at start]");
        }
        rows.push(("Command", line));
    }
    for n in &w.notices {
        rows.push(("Notice", n.clone()));
    }
    rows.push(("Created", time(&w.created_at)));
    rows.push(("Updated", time(&w.updated_at)));
    rows.push((
        "Last used",
        w.last_activity_at
            .as_ref()
            .map(time)
            .unwrap_or_else(|| "never".into()),
    ));
    details(rows)
}

pub fn agents(items: &[Agent]) -> String {
    if items.is_empty() {
        return "No agents.".into();
    }
    let mut t = table(&["NAME", "ID", "DOMAIN", "LAST SEEN", "CREATED"]);
    for a in items {
        t.add_row(vec![
            a.name.clone(),
            a.id.to_string(),
            a.config.workspace_domain.clone(),
            a.last_seen_at
                .as_ref()
                .map(time)
                .unwrap_or_else(|| "never".into()),
            time(&a.created_at),
        ]);
    }
    finish(t)
}

/// `warren proxy list`.
pub fn proxies(items: &[warren_types::api::RegionProxy]) -> String {
    if items.is_empty() {
        return "No proxy has said it serves in the last day.".into();
    }
    let mut t = table(&[
        "REGION",
        "WORKSPACE DOMAIN",
        "SSH",
        "SERVING",
        "LAST SEEN",
        "STARTED",
    ]);
    for p in items {
        t.add_row(vec![
            p.region.clone().unwrap_or_else(|| "(central)".into()),
            format!("{}://*.{}", p.public_scheme, p.workspace_domain),
            p.ssh_address.clone().unwrap_or_else(|| "-".into()),
            if p.serving { "yes" } else { "no" }.into(),
            time(&p.last_seen_at),
            time(&p.started_at),
        ]);
    }
    finish(t)
}

/// `warren region list` (and `set`).
pub fn regions(items: &[warren_types::api::Region]) -> String {
    if items.is_empty() {
        return "No region is registered: every workspace is reached through the central proxy."
            .into();
    }
    let mut t = table(&["REGION", "WORKSPACE DOMAIN", "SSH", "SERVING", "CHANGED"]);
    for r in items {
        t.add_row(vec![
            r.name.clone(),
            format!("{}://*.{}", r.public_scheme, r.workspace_domain),
            r.ssh_address.clone().unwrap_or_else(|| "(central)".into()),
            if r.serving { "yes" } else { "no" }.into(),
            time(&r.updated_at),
        ]);
    }
    finish(t)
}

pub fn agent(a: &Agent) -> String {
    let quota = |q: i64| {
        if q < 0 {
            "unlimited".to_owned()
        } else {
            q.to_string()
        }
    };
    let mut out = details(vec![
        ("Name", a.name.clone()),
        ("ID", a.id.to_string()),
        (
            "Last seen",
            a.last_seen_at
                .as_ref()
                .map(time)
                .unwrap_or_else(|| "never".into()),
        ),
        ("Created", time(&a.created_at)),
        (
            "Runtime",
            match (&a.runtime_fault, &a.runtime_fault_since) {
                (Some(f), Some(since)) => format!("cannot be seen since {}: {f}", time(since)),
                (Some(f), None) => format!("cannot be seen: {f}"),
                _ => "ok".into(),
            },
        ),
        (
            "Isolation",
            a.isolation_warning
                .clone()
                .unwrap_or_else(|| "enforced".into()),
        ),
        ("Domain", a.config.workspace_domain.clone()),
        (
            "Region",
            a.config
                .region
                .clone()
                .unwrap_or_else(|| "none (the central proxy)".into()),
        ),
        ("Workspaces quota", quota(a.config.workspaces_quota)),
        ("Per-user quota", quota(a.config.workspaces_per_user_quota)),
        (
            "Editor",
            if a.config.editor.enabled() {
                format!(
                    "{} {} from {}, port {}",
                    a.config.editor.name.as_str(),
                    a.config.editor.version,
                    a.config.editor.tools_image(),
                    a.config.editor.port
                )
            } else {
                "none".into()
            },
        ),
    ]);
    out.push_str("\nConfiguration:\n");
    let yaml = serde_yaml::to_string(&a.config).unwrap_or_default();
    for line in yaml.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

pub fn projects(items: &[Project]) -> String {
    if items.is_empty() {
        return "No projects.".into();
    }
    let mut t = table(&[
        "NAME",
        "ID",
        "GIT URL",
        "REF",
        "DEVFILE",
        "VISIBILITY",
        "CREDENTIAL",
    ]);
    for p in items {
        let devfile = if p.has_devfile {
            format!("{} (stored)", p.devfile_path)
        } else {
            p.devfile_path.clone()
        };
        t.add_row(vec![
            p.name.clone(),
            p.id.to_string(),
            p.git_url.clone(),
            p.default_ref.clone(),
            devfile,
            p.visibility.as_str().to_owned(),
            p.credential.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    finish(t)
}

pub fn project(p: &Project) -> String {
    details(vec![
        ("Name", p.name.clone()),
        ("ID", p.id.to_string()),
        ("Git URL", p.git_url.clone()),
        ("Ref", p.default_ref.clone()),
        ("Devfile", p.devfile_path.clone()),
        ("Devfile stored", p.has_devfile.to_string()),
        ("Visibility", p.visibility.as_str().to_owned()),
        (
            "Credential",
            p.credential.clone().unwrap_or_else(|| "none".into()),
        ),
        (
            "Prebuilds",
            p.prebuild_agent
                .as_ref()
                .map(|a| {
                    let every = p
                        .prebuild_every_hours
                        .map(|h| format!(", again every {h}h"))
                        .unwrap_or_default();
                    let pool = p
                        .prebuild_pool
                        .map(|n| format!(", a warm pool of {n}"))
                        .unwrap_or_default();
                    format!("{} on agent {a}{every}{pool}", p.prebuild_refs.join(", "))
                })
                .unwrap_or_else(|| "off".into()),
        ),
        ("Created", time(&p.created_at)),
    ])
}

/// A prebuild's state, with why it failed or went.
pub fn prebuild_state(b: &warren_types::prebuild::Prebuild) -> String {
    use warren_types::prebuild::PrebuildState;
    let state = match b.state {
        PrebuildState::Running => "running",
        PrebuildState::Ready => "ready",
        PrebuildState::Failed => "failed",
        PrebuildState::Removed => "removed",
    };
    match &b.reason {
        Some(r) => format!("{state}: {r}"),
        None => state.to_owned(),
    }
}

pub fn prebuilds(items: &[warren_types::prebuild::Prebuild]) -> String {
    if items.is_empty() {
        return "No prebuilds.".into();
    }
    let mut t = table(&[
        "ID", "REF", "COMMIT", "AGENT", "TRIGGER", "USED", "SPACE", "CREATED", "STATE",
    ]);
    for b in items {
        t.add_row(vec![
            b.id.to_string(),
            b.git_ref.clone(),
            b.commit.get(..12).unwrap_or(&b.commit).to_owned(),
            b.agent.clone(),
            b.trigger.as_str().to_owned(),
            b.used.to_string(),
            b.stored_bytes
                .map(warren_types::quantity::format_size)
                .unwrap_or_else(|| "-".into()),
            time(&b.created_at),
            match b.pool_ready {
                Some(n) => format!("{}, {n} in the warm pool", prebuild_state(b)),
                None => prebuild_state(b),
            },
        ]);
    }
    format!("{}\n{}", finish(t), prebuild_space(items))
}

/// What a project's kept prebuilds take on their agents, in all.
pub fn prebuild_space(items: &[warren_types::prebuild::Prebuild]) -> String {
    let measured: Vec<u64> = items.iter().filter_map(|b| b.stored_bytes).collect();
    let total = measured.iter().fold(0u64, |a, b| a.saturating_add(*b));
    format!(
        "Space kept: {} in {} prebuild{} measured",
        warren_types::quantity::format_size(total),
        measured.len(),
        if measured.len() == 1 { "" } else { "s" }
    )
}

fn scopes(t: &Token) -> String {
    t.scopes
        .iter()
        .map(|s| match s {
            warren_types::api::TokenScope::Api => "api",
            warren_types::api::TokenScope::ReadApi => "read_api",
            warren_types::api::TokenScope::Workspace => "workspace",
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub fn tokens(items: &[Token]) -> String {
    if items.is_empty() {
        return "No tokens.".into();
    }
    let mut t = table(&["ID", "NAME", "SCOPES", "EXPIRES", "LAST USED", "STATUS"]);
    let now = Utc::now();
    for tok in items {
        let status = if tok.revoked {
            "revoked"
        } else if tok.expires_at <= now {
            "expired"
        } else {
            "active"
        };
        t.add_row(vec![
            tok.id.to_string(),
            tok.name.clone(),
            scopes(tok),
            time(&tok.expires_at),
            tok.last_used_at
                .as_ref()
                .map(time)
                .unwrap_or_else(|| "never".into()),
            status.to_owned(),
        ]);
    }
    finish(t)
}

pub fn token(t: &Token) -> String {
    details(vec![
        ("ID", t.id.to_string()),
        ("Name", t.name.clone()),
        ("Scopes", scopes(t)),
        ("Expires", time(&t.expires_at)),
    ])
}

pub fn ssh_keys(items: &[SshKey]) -> String {
    if items.is_empty() {
        return "No SSH keys.".into();
    }
    let mut t = table(&["ID", "NAME", "FINGERPRINT", "ADDED"]);
    for k in items {
        t.add_row(vec![
            k.id.to_string(),
            k.name.clone(),
            k.fingerprint.clone(),
            time(&k.created_at),
        ]);
    }
    finish(t)
}

pub fn users(items: &[User]) -> String {
    let mut t = table(&["ID", "USERNAME", "ADMIN", "STATUS", "CREATED"]);
    for u in items {
        let status = if u.deletion_requested_at.is_some() {
            "deleting"
        } else if u.disabled_at.is_some() {
            "disabled"
        } else {
            "active"
        };
        t.add_row(vec![
            u.id.to_string(),
            u.username.clone(),
            if u.is_admin { "yes" } else { "no" }.to_owned(),
            status.to_owned(),
            time(&u.created_at),
        ]);
    }
    finish(t)
}

pub fn oauth_clients(items: &[OAuthClient]) -> String {
    let mut t = table(&["CLIENT ID", "NAME", "KIND", "REDIRECT URIS", "CREATED"]);
    for c in items {
        let kind = match (c.first_party, c.confidential) {
            (true, true) => "first-party, confidential",
            (true, false) => "first-party, public",
            (false, true) => "confidential",
            (false, false) => "public",
        };
        t.add_row(vec![
            c.client_id.clone(),
            c.name.clone(),
            kind.to_owned(),
            c.redirect_uris.join(" "),
            time(&c.created_at),
        ]);
    }
    finish(t)
}

pub fn user(u: &User) -> String {
    users(std::slice::from_ref(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    use warren_types::api::{Page, Variable, VariableKind, WorkspaceResources};
    use warren_types::{ActualState, DesiredState};

    fn ws(name: &str) -> Workspace {
        Workspace {
            name: name.into(),
            namespace: format!("warren-ws-{name}"),
            desired_state: DesiredState::Stopped,
            actual_state: ActualState::Stopping,
            url: Some("http://3000-dev.ws.localhost".into()),
            endpoints: [("web".to_owned(), "http://3000-dev.ws.localhost".to_owned())].into(),
            resources: WorkspaceResources {
                class: None,
                cpu: Some("2".into()),
                memory: None,
            },
            variables: vec![Variable {
                key: "DB_PASSWORD".into(),
                kind: VariableKind::Env,
                secret: true,
                value: None,
            }],
            ..crate::sample::workspace()
        }
    }

    #[test]
    fn workspace_table_has_a_header_and_one_row_each() {
        let s = render(Format::Table, &vec![ws("dev"), ws("other")], |v| {
            workspaces(v)
        });
        let lines: Vec<_> = s.lines().collect();
        assert_eq!(lines.len(), 3, "{s}");
        let header: Vec<_> = lines[0].split_whitespace().collect();
        assert_eq!(
            header,
            ["NAME", "STATE", "DESIRED", "OWNER", "AGENT", "PROJECT", "URL"]
        );
        let row: Vec<_> = lines[1].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "dev",
                "Stopping",
                "Stopped",
                "ann",
                "local",
                "-",
                "http://3000-dev.ws.localhost"
            ]
        );
        assert!(lines.iter().all(|l| l.trim_end() == *l), "{s:?}");
        assert_eq!(
            render(Format::Table, &Vec::<Workspace>::new(), |v| workspaces(v)),
            "No workspaces.\n"
        );
    }

    #[test]
    fn details_hide_secret_values_and_show_the_state() {
        let s = workspace(&ws("dev"));
        assert!(s.contains("DB_PASSWORD (env) = (secret)"), "{s}");
        assert!(s.contains("cpu 2 / memory -"), "{s}");
        assert!(
            s.lines()
                .any(|l| l.starts_with("Desired:") && l.ends_with("Stopped")),
            "{s}"
        );
    }

    #[test]
    fn json_and_yaml_are_the_api_fields() {
        let page = Page {
            items: vec![ws("dev")],
            next_cursor: None,
        };
        let json = render(Format::Json, &page, |_| unreachable!());
        let back: Page<Workspace> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, page);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["items"][0]["desired_state"], "Stopped");
        let yaml = render(Format::Yaml, &page, |_| unreachable!());
        let back: Page<Workspace> = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(back, page);
    }
}
