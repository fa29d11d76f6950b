//! The CLI's tables and texts for the tree: spaces, the tree itself, mounts, grants and
//! members.

use super::*;

pub fn spaces(items: &[Space]) -> String {
    let mut t = table(&["PATH", "YOUR ROLE", "CREATED"]);
    for s in items {
        t.add_row(vec![
            s.path.clone(),
            s.your_role.map_or("-", SpaceRole::as_str).to_owned(),
            time(&s.created_at),
        ]);
    }
    finish(t)
}

pub fn space(s: &Space) -> String {
    format!(
        "path:      {}\nyour role: {}\ncreated:   {}",
        s.path,
        s.your_role.map_or("- (admin)", SpaceRole::as_str),
        time(&s.created_at)
    )
}

/// The tree as `warren ws tree` draws it: each space under the nearest space above it that is
/// shown (by the rest of its path), its entries first, then the spaces below.
pub fn tree(t: &Tree) -> String {
    use std::collections::{BTreeMap, BTreeSet};
    let paths: BTreeSet<&str> = t.spaces.iter().map(|s| s.path.as_str()).collect();
    let nearest = |path: &str| -> Option<String> {
        let mut cur = path.rsplit_once('/').map(|(a, _)| a);
        while let Some(c) = cur {
            if paths.contains(c) {
                return Some(c.to_owned());
            }
            cur = c.rsplit_once('/').map(|(a, _)| a);
        }
        None
    };
    let mut children: BTreeMap<Option<String>, Vec<&TreeSpace>> = BTreeMap::new();
    for s in &t.spaces {
        children.entry(nearest(&s.path)).or_default().push(s);
    }
    fn role(s: &TreeSpace) -> String {
        s.your_role
            .map(|r| format!("  [{}]", r.as_str()))
            .unwrap_or_default()
    }
    fn entry(e: &TreeEntry) -> String {
        if e.kind == EntryKind::Mount {
            let mut line = format!(
                "{}  mount {} → {}  {}",
                e.name,
                e.mount_type.map_or("?", |t| t.as_str()),
                e.points_to.as_deref().unwrap_or("?"),
                e.phase.map_or("?", phase)
            );
            line.push_str(&format!("  owner {}", e.owner_username));
            return line;
        }
        let kind = "workspace";
        let mut line = format!("{}  {kind} {}", e.name, e.actual_state);
        let settled = e.desired_state.to_string() == e.actual_state.to_string();
        if !settled {
            line.push_str(&format!(" (desired {})", e.desired_state));
        }
        line.push_str(&format!("  owner {}", e.owner_username));
        if let Some(url) = &e.url {
            line.push_str(&format!("  {url}"));
        }
        if let Some(reason) = &e.reason {
            line.push_str(&format!("\n    {reason}"));
        }
        line
    }
    fn draw(
        s: &TreeSpace,
        children: &BTreeMap<Option<String>, Vec<&TreeSpace>>,
        prefix: &str,
        out: &mut String,
    ) {
        let below = children
            .get(&Some(s.path.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let count = s.entries.len() + below.len();
        let mut i = 0;
        let branch = |out: &mut String, text: &str, i: usize| -> String {
            let last = i + 1 == count;
            let (head, rest) = if last {
                ("└── ", "    ")
            } else {
                ("├── ", "│   ")
            };
            let mut lines = text.lines();
            out.push_str(&format!("{prefix}{head}{}\n", lines.next().unwrap_or("")));
            for l in lines {
                out.push_str(&format!("{prefix}{rest}{}\n", l.trim_start()));
            }
            format!("{prefix}{rest}")
        };
        for e in &s.entries {
            branch(out, &entry(e), i);
            i += 1;
        }
        for c in below {
            let name = c
                .path
                .strip_prefix(&format!("{}/", s.path))
                .unwrap_or(&c.path);
            let next = branch(out, &format!("{name}/{}", role(c)), i);
            i += 1;
            draw(c, children, &next, out);
        }
    }
    let mut out = String::new();
    for root in children.get(&None).map(Vec::as_slice).unwrap_or_default() {
        out.push_str(&format!("{}/{}\n", root.path, role(root)));
        draw(root, &children, "", &mut out);
    }
    if out.is_empty() {
        out.push_str("(nothing here you may see)\n");
    }
    if t.truncated {
        out.push_str("… more entries than one answer holds: ask for a space further down\n");
    }
    out.trim_end().to_owned()
}

fn phase(p: MountPhase) -> &'static str {
    match p {
        MountPhase::Initializing => "Initializing",
        MountPhase::Connecting => "Connecting",
        MountPhase::Ready => "Ready",
        MountPhase::Unknown => "Unknown",
        MountPhase::Unavailable => "Unavailable",
    }
}

fn points_to(m: &Mount) -> String {
    if m.connector {
        return "(connector)".into();
    }
    m.reference
        .clone()
        .or_else(|| m.url.clone())
        .unwrap_or_else(|| "-".into())
}

pub fn mounts(items: &[Mount]) -> String {
    let mut t = table(&["NAME", "TYPE", "POINTS TO", "PHASE", "SPACE", "OWNER"]);
    for m in items {
        t.add_row(vec![
            m.name.clone(),
            m.mount_type.as_str().to_owned(),
            points_to(m),
            phase(m.status.phase).to_owned(),
            m.space.clone(),
            m.owner_username.clone(),
        ]);
    }
    finish(t)
}

pub fn mount(m: &Mount) -> String {
    let mut out = format!(
        "name:      {}\ntype:      {}\npoints to: {}\nphase:     {}\nspace:     {}\nowner:     {}",
        m.name,
        m.mount_type.as_str(),
        points_to(m),
        phase(m.status.phase),
        m.space,
        m.owner_username
    );
    if let Some(r) = &m.status.resolved {
        out.push_str(&format!("\nleads to:  {r}"));
    }
    if let Some(u) = &m.status.url {
        out.push_str(&format!("\nurl:       {u}"));
    }
    if !m.ports.is_empty() {
        let ports: Vec<String> = m.ports.iter().map(u16::to_string).collect();
        out.push_str(&format!("\nports:     {}", ports.join(", ")));
    }
    if let Some(t) = &m.connector_token {
        out.push_str(&format!("\ntoken:     {t}"));
    }
    for c in &m.status.conditions {
        out.push_str(&format!(
            "\ncondition: {} {} ({}): {}",
            c.kind, c.status, c.reason, c.message
        ));
    }
    out
}

pub fn grants(items: &[WorkspaceGrant]) -> String {
    let mut t = table(&["USER", "SINCE"]);
    for g in items {
        t.add_row(vec![g.username.clone(), time(&g.created_at)]);
    }
    finish(t)
}

pub fn space_members(items: &[SpaceMember]) -> String {
    let mut t = table(&["USER", "ROLE", "SINCE"]);
    for m in items {
        t.add_row(vec![
            m.username.clone(),
            m.role.as_str().to_owned(),
            time(&m.created_at),
        ]);
    }
    finish(t)
}

pub fn members(items: &[ProjectMember]) -> String {
    let mut t = table(&["USER", "ROLE", "SINCE"]);
    for m in items {
        t.add_row(vec![
            m.username.clone(),
            format!("{:?}", m.role).to_lowercase(),
            time(&m.created_at),
        ]);
    }
    finish(t)
}
