//! Regional proxies (issue 42): a proxy started with `--region` is the front door of that
//! region's agents. Every proxy says it serves every few seconds; while one of a region's
//! proxies has said so lately, the workspaces of agents configured with that region are shown
//! with URLs on its domain (their traffic then stays in the region), and otherwise with the
//! central proxy's URLs and a notice saying why — a user is sent to a proxy that serves, never
//! to an error page.
//!
//! Sign-in stays central: a regional proxy sends browsers to this server's authorize
//! endpoint like any proxy, so one sign-in holds across regions.
//!
//! Where a region's URLs point is an administrator's word, not a proxy's: a region is
//! registered with its door (workspace domain, scheme, SSH address), and a presence only
//! switches it on while it says exactly that door. The internal secret a presence is signed
//! with is held by every proxy and relay; without the registration any of them could send a
//! region's users (and their session hand-offs) to a host of its choosing.

use super::{AppError, AppState, ErrorKind, Principal};
use crate::app::audit;
use crate::store::proxy_presence::{PresenceRow, RegionRow};
pub use crate::store::workspaces::AgentFront;
use warren_types::api::{Region, RegionProxy, RegionSpec, Workspace, WorkspaceRegion};
use warren_types::internal::{ProxyPresence, PROXY_PRESENCE_STALE_SECS};

fn check_instance(v: &str) -> Result<(), AppError> {
    let ok = (16..=64).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(AppError::invalid_field(
            "instance",
            "must be 16 to 64 of A-Z a-z 0-9 _ -",
        ))
    }
}

/// A proxy says it serves (checked: what it says becomes the URLs users are given).
pub async fn announce(state: &AppState, p: &ProxyPresence) -> Result<(), AppError> {
    check_instance(&p.instance)?;
    if let Some(r) = &p.region {
        check_region("region", r)?;
    }
    if p.public_port.is_some() && p.workspace_domain.contains(':') {
        return Err(AppError::invalid_field(
            "workspace_domain",
            "give the port in public_port only",
        ));
    }
    let domain = match p.public_port {
        Some(port) => format!("{}:{port}", p.workspace_domain),
        None => p.workspace_domain.clone(),
    };
    let domain = checked_door(&domain, &p.public_scheme, p.ssh_address.as_deref())?;
    if let Some(r) = &p.region {
        let Some(reg) = state.store.region(r).await? else {
            return Err(AppError::new(
                ErrorKind::Forbidden,
                "region_not_registered",
                format!("region {r} is not registered: an administrator registers it and its door with `warren region set {r} --workspace-domain …`"),
            ));
        };
        let said = (
            domain.as_str(),
            p.public_scheme.as_str(),
            p.ssh_address.as_deref(),
        );
        if said != door(&reg) {
            return Err(AppError::new(
                ErrorKind::Forbidden,
                "not_the_regions_door",
                format!(
                    "this proxy serves {}, but region {r} is registered for {}: the region's URLs never point elsewhere (`warren region set` changes them)",
                    describe(said),
                    describe(door(&reg))
                ),
            ));
        }
    }
    let now = state.clock.now_ms();
    state
        .store
        .record_proxy_presence(&PresenceRow {
            instance: p.instance.clone(),
            region: p.region.clone().unwrap_or_default(),
            workspace_domain: domain,
            public_scheme: p.public_scheme.clone(),
            ssh_address: p.ssh_address.clone(),
            started_at: now,
            last_seen: now,
        })
        .await?;
    Ok(())
}

/// `domain` without the scheme's default port, as browsers write the host (so that
/// `ws.eu.example:443` and `ws.eu.example` are one door for `https`).
fn without_default_port<'a>(scheme: &str, domain: &'a str) -> &'a str {
    let default = match scheme {
        "https" => ":443",
        "http" => ":80",
        _ => return domain,
    };
    domain.strip_suffix(default).unwrap_or(domain)
}

/// Checks a door as a proxy says it or an admin registers it (each part becomes part of the
/// URLs or SSH command users are given); its workspace domain as browsers write it.
fn checked_door(domain: &str, scheme: &str, ssh: Option<&str>) -> Result<String, AppError> {
    check_workspace_domain("workspace_domain", domain)?;
    if scheme != "http" && scheme != "https" {
        return Err(AppError::invalid_field(
            "public_scheme",
            "must be http or https",
        ));
    }
    if let Some(a) = ssh {
        if warren_types::parse_ssh_address(a).is_none() {
            return Err(AppError::invalid_field(
                "ssh_address",
                format!("{a:?} is not host:port (a host not starting with '-', a port 1-65535)"),
            ));
        }
    }
    Ok(without_default_port(scheme, domain).to_owned())
}

/// What a region's URLs are made of: workspace domain, scheme, SSH address.
pub type Door<'a> = (&'a str, &'a str, Option<&'a str>);

fn door(r: &RegionRow) -> Door<'_> {
    (
        &r.workspace_domain,
        &r.public_scheme,
        r.ssh_address.as_deref(),
    )
}

fn presence_door(r: &PresenceRow) -> Door<'_> {
    (
        &r.workspace_domain,
        &r.public_scheme,
        r.ssh_address.as_deref(),
    )
}

/// A door in words, as messages and the regions page show it.
pub fn describe((domain, scheme, ssh): Door<'_>) -> String {
    match ssh {
        Some(a) => format!("{scheme}://*.{domain} with SSH at {a}"),
        None => format!("{scheme}://*.{domain} without SSH"),
    }
}

/// Registers region `name` with its door, or changes the door (admins). Its workspaces move
/// to the new door once one of its proxies says it serves it.
pub async fn register(
    state: &AppState,
    who: &Principal,
    name: &str,
    spec: &RegionSpec,
) -> Result<Region, AppError> {
    let r: Result<Region, AppError> = async {
        who.require_admin()?;
        check_region("name", name)?;
        let domain = checked_door(
            &spec.workspace_domain,
            &spec.public_scheme,
            spec.ssh_address.as_deref(),
        )?;
        let now = state.clock.now_ms();
        state
            .store
            .put_region(&RegionRow {
                name: name.to_owned(),
                workspace_domain: domain,
                public_scheme: spec.public_scheme.clone(),
                ssh_address: spec.ssh_address.clone(),
                created_at: now,
                updated_at: now,
            })
            .await?;
        let shown = regions(state, who).await?;
        shown
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| AppError::not_found(format!("region {name}")))
    }
    .await;
    audit::audited(
        state,
        who,
        "region.set",
        audit::Target::named("region", name),
        r,
    )
    .await
}

/// Removes region `name` (admins): its workspaces are shown with the central proxy's URLs
/// at once, and its proxies' presences are refused from then on.
pub async fn unregister(state: &AppState, who: &Principal, name: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        check_region("name", name)?;
        if state.store.remove_region(name).await? {
            Ok(())
        } else {
            Err(AppError::not_found(format!("region {name}")))
        }
    }
    .await;
    audit::audited(
        state,
        who,
        "region.remove",
        audit::Target::named("region", name),
        r,
    )
    .await
}

/// Every registered region and whether one of its proxies serves its door now (admins).
pub async fn regions(state: &AppState, who: &Principal) -> Result<Vec<Region>, AppError> {
    who.require_admin()?;
    let doors = FrontDoors::load(state).await?;
    Ok(doors
        .registered
        .iter()
        .map(|r| Region {
            serving: doors.serving(&r.name).is_some(),
            name: r.name.clone(),
            workspace_domain: r.workspace_domain.clone(),
            public_scheme: r.public_scheme.clone(),
            ssh_address: r.ssh_address.clone(),
            created_at: crate::db::from_millis(r.created_at),
            updated_at: crate::db::from_millis(r.updated_at),
        })
        .collect())
}

/// A proxy stops: its region's URLs move to another of its proxies, or the central one, at
/// once instead of after [`PROXY_PRESENCE_STALE_SECS`].
pub async fn leave(state: &AppState, instance: &str) -> Result<(), AppError> {
    check_instance(instance)?;
    Ok(state.store.forget_proxy_presence(instance).await?)
}

/// Checks a domain of workspace hosts, `host[:port]` (an agent's, a regional proxy's): a
/// host name and at most one port, nothing else (it becomes part of every URL users get).
pub(crate) fn check_workspace_domain(field: &'static str, domain: &str) -> Result<(), AppError> {
    let (host, port) = match domain.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (domain, None),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 200
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-'));
    if !host_ok {
        return Err(AppError::invalid_field(
            field,
            format!("{domain:?} is not a host name"),
        ));
    }
    if let Some(port) = port {
        let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
        if !digits || port.parse::<u16>().is_err() {
            return Err(AppError::invalid_field(
                field,
                format!("{port:?} is not a port"),
            ));
        }
    }
    Ok(())
}

/// A region name: a DNS label, as in host names.
pub fn check_region(field: &'static str, v: &str) -> Result<(), AppError> {
    if warren_types::is_dns_label(v, 63) {
        Ok(())
    } else {
        Err(AppError::invalid_field(
            field,
            format!("{v:?} is not a region name (1-63 of a-z, 0-9 and '-', not starting or ending with '-')"),
        ))
    }
}

/// Every proxy seen in the last day and whether it serves now (admins).
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<RegionProxy>, AppError> {
    who.require_admin()?;
    let now = state.clock.now_ms();
    let rows = state.store.proxy_presences(0).await?;
    Ok(rows
        .into_iter()
        .map(|r| RegionProxy {
            serving: serving(&r, now),
            region: (!r.region.is_empty()).then_some(r.region),
            workspace_domain: r.workspace_domain,
            public_scheme: r.public_scheme,
            ssh_address: r.ssh_address,
            started_at: crate::db::from_millis(r.started_at),
            last_seen_at: crate::db::from_millis(r.last_seen),
        })
        .collect())
}

fn serving(r: &PresenceRow, now_ms: i64) -> bool {
    r.last_seen >= now_ms - PROXY_PRESENCE_STALE_SECS * 1000
}

/// The regional proxies as one request sees them: read once, applied to every workspace it
/// shows.
#[derive(Debug, Default)]
pub struct FrontDoors {
    /// The registered regions, by name.
    registered: Vec<RegionRow>,
    /// Regional proxies seen in the last day, the most recently seen first.
    regional: Vec<PresenceRow>,
    now_ms: i64,
}

impl FrontDoors {
    pub async fn load(state: &AppState) -> Result<FrontDoors, AppError> {
        let registered = state.store.regions().await?;
        let mut regional = state.store.proxy_presences(0).await?;
        regional.retain(|r| !r.region.is_empty());
        Ok(FrontDoors {
            registered,
            regional,
            now_ms: state.clock.now_ms(),
        })
    }

    /// The region's registered door, when one of its proxies says lately that it serves
    /// exactly that door (a presence said before the door changed does not count).
    fn serving(&self, region: &str) -> Option<&RegionRow> {
        let reg = self.registered.iter().find(|r| r.name == region)?;
        self.regional
            .iter()
            .any(|p| p.region == region && serving(p, self.now_ms) && presence_door(p) == door(reg))
            .then_some(reg)
    }

    /// Points `w`'s URLs at its region's proxy when one serves, and says which door it got.
    pub fn apply(&self, w: &mut Workspace, agent: &AgentFront) {
        let urls = w
            .url
            .iter_mut()
            .chain(w.terminal_url.iter_mut())
            .chain(w.editor_url.iter_mut())
            .chain(w.endpoints.values_mut());
        w.region = self.move_urls(urls, agent);
    }

    /// Moves one URL of a workspace of `agent` (a port's) as [`FrontDoors::apply`] does.
    pub fn move_url(&self, url: &mut String, agent: &AgentFront) {
        self.move_urls(std::iter::once(url), agent);
    }

    /// Moves `urls` to the region's proxy of `agent` when one serves; the region as shown.
    fn move_urls<'a>(
        &self,
        urls: impl Iterator<Item = &'a mut String>,
        agent: &AgentFront,
    ) -> Option<WorkspaceRegion> {
        let region = agent.region.as_ref()?;
        let Some(door) = self.serving(region) else {
            let last = self.regional.iter().find(|r| &r.region == region);
            let registered = self.registered.iter().any(|r| &r.name == region);
            let notice = match last {
                _ if !registered => format!(
                    "region {region} is not registered; this workspace is reached through the central proxy"
                ),
                Some(r) => format!(
                    "region {region}'s proxy has not answered since {}; this workspace is reached through the central proxy until it is back",
                    crate::db::from_millis(r.last_seen).format("%Y-%m-%d %H:%M:%S UTC")
                ),
                None => format!(
                    "region {region} has no proxy serving; this workspace is reached through the central proxy"
                ),
            };
            return Some(WorkspaceRegion {
                name: region.clone(),
                regional: false,
                ssh_address: None,
                notice: Some(notice),
            });
        };
        let from = (
            agent.workspace_scheme.as_str(),
            agent.workspace_domain.as_str(),
        );
        let to = (door.public_scheme.as_str(), door.workspace_domain.as_str());
        for u in urls {
            if let Some(m) = moved(u, from, to) {
                *u = m;
            }
        }
        Some(WorkspaceRegion {
            name: region.clone(),
            regional: true,
            ssh_address: door.ssh_address.clone(),
            notice: None,
        })
    }
}

/// `url` on host `{label}.{from domain}` with `from`'s scheme, moved to the same label under
/// `to`; `None` for any other URL (left as it is).
fn moved(
    url: &str,
    (from_scheme, from_domain): (&str, &str),
    (to_scheme, to_domain): (&str, &str),
) -> Option<String> {
    let rest = url.strip_prefix(from_scheme)?.strip_prefix("://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let label = host.strip_suffix(from_domain)?.strip_suffix('.')?;
    if label.is_empty() || label.contains('.') {
        return None;
    }
    Some(format!("{to_scheme}://{label}.{to_domain}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_workspace_hosts_of_the_central_domain_move() {
        let from = ("http", "ws.example:8080");
        let to = ("https", "eu.ws.example");
        assert_eq!(
            moved("http://8080-a.ws.example:8080/x?y=1", from, to).as_deref(),
            Some("https://8080-a.eu.ws.example/x?y=1")
        );
        assert_eq!(
            moved("http://terminal-a.ws.example:8080", from, to).as_deref(),
            Some("https://terminal-a.eu.ws.example/")
        );
        // Another scheme, another domain, a deeper host, a look-alike: unchanged.
        for u in [
            "https://8080-a.ws.example:8080/",
            "http://8080-a.other.example/",
            "http://x.8080-a.ws.example:8080/",
            "http://8080-aws.example:8080/",
            "http://ws.example:8080/",
        ] {
            assert_eq!(moved(u, from, to), None, "{u}");
        }
    }

    #[test]
    fn ssh_addresses_are_host_and_port() {
        use warren_types::parse_ssh_address as parse;
        assert_eq!(parse("ssh.eu.example:2222"), Some(("ssh.eu.example", 2222)));
        assert_eq!(parse("[::1]:22"), Some(("::1", 22)));
        for bad in [
            "ssh.eu.example",
            "h:0",
            "h:x",
            ":22",
            "h o:22",
            "h/x:22",
            "-D1080:22",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_door_is_the_same_with_or_without_the_schemes_default_port() {
        assert_eq!(without_default_port("https", "ws.eu:443"), "ws.eu");
        assert_eq!(without_default_port("http", "ws.eu:80"), "ws.eu");
        assert_eq!(without_default_port("https", "ws.eu:80"), "ws.eu:80");
        assert_eq!(without_default_port("http", "ws.eu:8443"), "ws.eu:8443");
        assert_eq!(without_default_port("https", "ws.eu:4430"), "ws.eu:4430");
    }

    #[test]
    fn a_workspace_domain_is_a_host_and_at_most_one_port() {
        for ok in ["ws.example", "ws.example:8443", "localhost:1"] {
            assert!(check_workspace_domain("d", ok).is_ok(), "{ok}");
        }
        for bad in [
            "eu.example:443:@evil.com",
            "eu.example:443:8443",
            "eu.example:",
            "eu.example:+443",
            "eu.example/x",
            ":443",
            "a..b",
        ] {
            assert!(check_workspace_domain("d", bad).is_err(), "{bad}");
        }
    }

    fn row(region: &str, domain: &str, last_seen: i64) -> PresenceRow {
        PresenceRow {
            instance: format!("{region}-{domain}"),
            region: region.into(),
            workspace_domain: domain.into(),
            public_scheme: "https".into(),
            ssh_address: Some(format!("ssh.{domain}:22")),
            started_at: 0,
            last_seen,
        }
    }

    fn reg(name: &str, domain: &str) -> RegionRow {
        RegionRow {
            name: name.into(),
            workspace_domain: domain.into(),
            public_scheme: "https".into(),
            ssh_address: Some(format!("ssh.{domain}:22")),
            created_at: 0,
            updated_at: 0,
        }
    }

    fn urls() -> Vec<String> {
        vec![
            "http://8080-a.ws.example/".into(),
            "http://terminal-a.ws.example/".into(),
        ]
    }

    fn shown(doors: &FrontDoors, agent: &AgentFront) -> (Vec<String>, Option<WorkspaceRegion>) {
        let mut u = urls();
        let r = doors.move_urls(u.iter_mut(), agent);
        (u, r)
    }

    #[test]
    fn a_region_whose_proxy_serves_gets_its_urls_and_else_the_central_ones_with_a_notice() {
        let agent = AgentFront {
            region: Some("eu".into()),
            workspace_scheme: "http".into(),
            workspace_domain: "ws.example".into(),
        };
        let now = 1_000_000;
        let registered = vec![reg("eu", "eu.example"), reg("us", "us.example")];
        let doors = FrontDoors {
            registered: registered.clone(),
            regional: vec![
                row("eu", "eu.example", now - 1000),
                row("us", "us.example", now),
            ],
            now_ms: now,
        };
        let (u, r) = shown(&doors, &agent);
        assert_eq!(
            u,
            [
                "https://8080-a.eu.example/",
                "https://terminal-a.eu.example/"
            ]
        );
        let r = r.expect("region");
        assert!(r.regional && r.notice.is_none());
        assert_eq!(r.ssh_address.as_deref(), Some("ssh.eu.example:22"));

        // Seen too long ago: central URLs, and since when.
        let stale = FrontDoors {
            registered: registered.clone(),
            regional: vec![row(
                "eu",
                "eu.example",
                now - PROXY_PRESENCE_STALE_SECS * 1000 - 1,
            )],
            now_ms: now,
        };
        let (u, r) = shown(&stale, &agent);
        assert_eq!(u, urls());
        let r = r.expect("region");
        assert!(!r.regional);
        assert!(r.notice.unwrap().contains("has not answered since"));

        // A fresh presence for another door than the registered one does not count.
        let elsewhere = FrontDoors {
            registered: registered.clone(),
            regional: vec![row("eu", "evil.example", now)],
            now_ms: now,
        };
        let (u, r) = shown(&elsewhere, &agent);
        assert_eq!(u, urls());
        assert!(!r.expect("region").regional);

        // Registered, never seen.
        let never = FrontDoors {
            registered,
            ..FrontDoors::default()
        };
        let (_, r) = shown(&never, &agent);
        assert!(r.unwrap().notice.unwrap().contains("has no proxy serving"));

        // Not registered: a presence alone moves nothing.
        let unregistered = FrontDoors {
            regional: vec![row("eu", "eu.example", now)],
            now_ms: now,
            ..FrontDoors::default()
        };
        let (u, r) = shown(&unregistered, &agent);
        assert_eq!(u, urls());
        assert!(r.unwrap().notice.unwrap().contains("is not registered"));

        // An agent of no region: nothing changes.
        let none = AgentFront {
            region: None,
            ..agent
        };
        assert_eq!(shown(&doors, &none), (urls(), None));
    }
}
