//! `warren ws port NAME [PORT]`: who may reach a workspace's ports, changed live, and share
//! links that open one port for whoever holds them (issue 41, item 4).

use crate::commands::{named, print};
use crate::output::Format;
use crate::ws_args::WsPortArgs;
use crate::CliError;
use comfy_table::{presets, Table};
use serde::Serialize;
use warren_client::Client;
use warren_types::api::{ShareLink, VisibilitySource, WorkspacePort};

/// What `warren ws port NAME` shows: the ports, then the links (only for who may manage the
/// workspace; empty otherwise).
#[derive(Debug, Serialize)]
struct Listing {
    ports: Vec<WorkspacePort>,
    share_links: Vec<ShareLink>,
}

fn source(s: VisibilitySource) -> &'static str {
    match s {
        VisibilitySource::AgentDefault => "agent default",
        VisibilitySource::Definition => "devfile",
        VisibilitySource::User => "set",
        VisibilitySource::Warren => "editor (fixed)",
    }
}

fn listing(l: &Listing) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(["PORT", "VISIBILITY", "FROM", "ENDPOINTS", "URL"]);
    for p in &l.ports {
        t.add_row(vec![
            p.port.to_string(),
            p.visibility.to_string(),
            source(p.source).to_owned(),
            p.endpoints.join(","),
            p.url.clone(),
        ]);
    }
    let mut out = trimmed(&t);
    if !l.share_links.is_empty() {
        let mut t = Table::new();
        t.load_preset(presets::NOTHING);
        t.set_header(["LINK", "PORT", "BY", "EXPIRES", "STATE"]);
        let now = chrono::Utc::now();
        for s in &l.share_links {
            let state = match s.revoked_at {
                Some(_) => "revoked",
                None if s.expires_at <= now => "expired",
                None => "open",
            };
            t.add_row(vec![
                s.id.to_string(),
                s.port.to_string(),
                s.created_by.clone(),
                crate::output::time(&s.expires_at),
                state.to_owned(),
            ]);
        }
        out.push_str("\n\n");
        out.push_str(&trimmed(&t));
    }
    out.push('\n');
    out
}

pub(crate) fn trimmed(t: &Table) -> String {
    t.to_string()
        .lines()
        .map(|l| l.trim_end().strip_prefix(' ').unwrap_or(l.trim_end()))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) async fn run(c: &Client, out: Format, a: WsPortArgs) -> Result<(), CliError> {
    let ws = a.name.as_str();
    if let Some(id) = a.revoke {
        named("workspace", ws, c.revoke_share_link(ws, id).await)?;
        eprintln!("Revoked share link {id} of {ws}; the proxy stops honouring it within a minute.");
        return Ok(());
    }
    let Some(port) = a.port else {
        let ports = named("workspace", ws, c.workspace_ports(ws).await)?;
        // Links are for who may manage the workspace; a user does not lose the ports for it.
        let share_links = c.share_links(ws).await.unwrap_or_default();
        print(out, &Listing { ports, share_links }, listing);
        return Ok(());
    };
    if a.share {
        let secs = a.expires.map(|d| d.as_secs().max(1));
        let link = named("workspace", ws, c.create_share_link(ws, port, secs).await)?;
        if out == Format::Table {
            println!("{}", link.url.as_deref().unwrap_or_default());
            eprintln!(
                "Anyone with this link reaches port {port} of {ws} without signing in, until {} (link {}; `warren ws port {ws} --revoke {}` ends it). It is not shown again.",
                crate::output::time(&link.expires_at),
                link.id,
                link.id
            );
        } else {
            print(out, &link, |_| String::new());
        }
        return Ok(());
    }
    if a.visibility.is_none() && !a.default {
        let ports = named("workspace", ws, c.workspace_ports(ws).await)?;
        let p: Vec<WorkspacePort> = ports.into_iter().filter(|p| p.port == port).collect();
        if p.is_empty() {
            return Err(CliError::Failed(format!(
                "port {port} of workspace {ws:?} is not served by the proxy (see warren ws port {ws})"
            )));
        }
        print(
            out,
            &Listing {
                ports: p,
                share_links: vec![],
            },
            listing,
        );
        return Ok(());
    }
    let p = named(
        "workspace",
        ws,
        c.set_workspace_port(ws, port, a.visibility).await,
    )?;
    if out == Format::Table {
        eprintln!(
            "Port {port} of {ws} is now {} ({}): {}.",
            p.visibility,
            source(p.source),
            p.visibility.describe()
        );
    } else {
        print(out, &p, |_| String::new());
    }
    Ok(())
}
