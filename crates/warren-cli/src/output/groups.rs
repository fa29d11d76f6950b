//! The CLI's tables for groups, their members and the roles they hold on spaces.

use super::*;
use warren_types::api::{Group, GroupDetail, SpaceGroupRole};

pub fn groups(items: &[Group]) -> String {
    let mut t = table(&["NAME", "SOURCE", "MEMBERS", "DESCRIPTION", "CREATED"]);
    for g in items {
        t.add_row(vec![
            g.name.clone(),
            g.source.as_str().to_owned(),
            g.members.to_string(),
            g.description.clone(),
            time(&g.created_at),
        ]);
    }
    finish(t)
}

pub fn group(d: &GroupDetail) -> String {
    let g = &d.group;
    let mut s = details(vec![
        ("Name", g.name.clone()),
        ("Source", g.source.as_str().to_owned()),
        ("Description", g.description.clone()),
        ("Created", time(&g.created_at)),
    ]);
    s.push_str("\n\n");
    if d.members.is_empty() {
        s.push_str("No members.");
        return s;
    }
    let mut t = table(&["MEMBER", "SINCE", "UNTIL"]);
    for m in &d.members {
        t.add_row(vec![
            m.username.clone(),
            time(&m.created_at),
            // An `oidc` membership lasts until the next sign-in renews it.
            m.expires_at.as_ref().map_or_else(|| "-".to_owned(), time),
        ]);
    }
    s.push_str(&finish(t));
    s
}

pub fn space_group_roles(items: &[SpaceGroupRole]) -> String {
    let mut t = table(&["GROUP", "SOURCE", "ROLE", "SINCE"]);
    for r in items {
        t.add_row(vec![
            r.group.clone(),
            r.source.as_str().to_owned(),
            r.role.as_str().to_owned(),
            time(&r.created_at),
        ]);
    }
    finish(t)
}
