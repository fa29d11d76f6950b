//! The audit log: who did what to what, when, from where, and how it ended — recorded once,
//! here in the domain layer, by the operation itself (so the API, the web UI and the proxy's
//! questions are recorded alike), appended to a hash chain in the database and copied as a
//! JSON line to the configured stream. Reading it: admins everything, a space's owners what
//! happened in their spaces.

mod stream;
mod writer;

pub use stream::Stream;
pub use writer::Log;

use super::{AppError, AppState, ErrorKind, Principal};
use crate::store::audit::{AuditFilter, NewAuditEntry};
use crate::store::users::UserRow;
use crate::store::workspaces::WorkspaceRow;
use crate::trace::Channel;
use warren_types::api::Workspace;
use warren_types::api::{
    AuditActorKind, AuditEntry, AuditOutcome, AuditQuery, AuditVerification, Page, SpaceRole,
    AUDIT_GENESIS,
};
use warren_types::{DesiredState, UserId};

/// The action a desired state stands for.
pub fn desired_action(d: DesiredState) -> &'static str {
    match d {
        DesiredState::Running => "workspace.start",
        DesiredState::Stopped => "workspace.stop",
        DesiredState::RestartRequested => "workspace.restart",
        DesiredState::Terminated => "workspace.delete",
    }
}

/// Longest text kept in any field: names and details come from requests, and a failed
/// sign-in's account name from anyone.
const FIELD_MAX: usize = 200;
const DETAIL_MAX: usize = 1000;

/// Who acts.
#[derive(Debug, Clone)]
pub struct Actor {
    kind: AuditActorKind,
    id: Option<UserId>,
    name: Option<String>,
    credential: Option<String>,
}

impl Actor {
    /// A principal of the API or the web UI.
    pub fn of(who: &Principal) -> Actor {
        let credential = match &who.token {
            Some(t) => format!("token {}", t.id),
            None => "session".to_owned(),
        };
        Actor::user(&who.user, &credential)
    }

    /// A user who proved who they are with `credential` (`password`, `sso`, `ssh key`, …).
    pub fn user(u: &UserRow, credential: &str) -> Actor {
        Actor {
            kind: AuditActorKind::User,
            id: Some(u.id),
            name: Some(u.username.clone()),
            credential: Some(credential.to_owned()),
        }
    }

    /// Someone who has not proved who they are; `tried` is the account they named, if any.
    pub fn anonymous(tried: Option<&str>, credential: &str) -> Actor {
        Actor {
            kind: AuditActorKind::Anonymous,
            id: None,
            name: tried.map(|t| clip(t, FIELD_MAX)),
            credential: Some(credential.to_owned()),
        }
    }

    /// Warren itself, acting on a policy.
    pub fn system() -> Actor {
        Actor {
            kind: AuditActorKind::System,
            id: None,
            name: None,
            credential: None,
        }
    }
}

/// What was acted on.
#[derive(Debug, Clone)]
pub struct Target {
    kind: &'static str,
    id: Option<String>,
    name: Option<String>,
    space: Option<String>,
}

impl Target {
    pub fn new(kind: &'static str, id: impl ToString, name: &str) -> Target {
        Target {
            kind,
            id: Some(id.to_string()),
            name: Some(clip(name, FIELD_MAX)),
            space: None,
        }
    }

    /// Something named in a request that was refused before it was found or made.
    pub fn named(kind: &'static str, name: &str) -> Target {
        Target {
            kind,
            id: None,
            name: Some(clip(name, FIELD_MAX)),
            space: None,
        }
    }

    pub fn in_space(mut self, path: &str) -> Target {
        self.space = Some(path.to_owned());
        self
    }

    pub fn workspace(w: &WorkspaceRow) -> Target {
        Target::new("workspace", w.id, &w.name).in_space(&w.space_path)
    }

    /// A workspace as the API shows it.
    pub fn shown_workspace(w: &Workspace) -> Target {
        Target::new("workspace", w.id, &w.name).in_space(&w.space)
    }

    /// The outcome's workspace, else the key the caller named.
    pub fn workspace_or_key(r: &Result<Workspace, AppError>, key: &str) -> Target {
        match r {
            Ok(w) => Target::shown_workspace(w),
            Err(_) => Target::named("workspace", key),
        }
    }

    /// The workspace `key` names, in its space when it (still) exists.
    pub async fn workspace_key(state: &AppState, key: &str) -> Target {
        match state.store.workspace_by_key(key).await {
            Ok(Some(w)) => Target::workspace(&w),
            _ => Target::named("workspace", key),
        }
    }

    pub fn user(u: &UserRow) -> Target {
        Target::new("user", u.id, &u.username)
    }
}

fn clip(s: &str, max: usize) -> String {
    // Control characters are written out (`\u{1b}`): a name tried at sign-in is anyone's,
    // and raw escapes would act on the terminal of whoever reads the log.
    let mut out = String::with_capacity(s.len().min(max + 4));
    for c in s.chars() {
        if out.len() >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// How a result is recorded: refusals for who the actor is (or is not) are `denied`, other
/// errors `failure` with their message.
fn outcome_of<T>(r: &Result<T, AppError>) -> (AuditOutcome, Option<String>) {
    match r {
        Ok(_) => (AuditOutcome::Success, None),
        Err(e) => {
            let outcome = match e.kind {
                ErrorKind::Unauthenticated | ErrorKind::Forbidden | ErrorKind::TooManyRequests => {
                    AuditOutcome::Denied
                }
                _ => AuditOutcome::Failure,
            };
            let detail = match e.kind {
                // Its message is generic; what went wrong is in the server's log.
                ErrorKind::Internal => e.code.to_owned(),
                _ => e.message.clone(),
            };
            (outcome, Some(detail))
        }
    }
}

/// Records one action, after the action itself committed: the entry is queued for this
/// server's writer ([`Log`]), which appends it (reads of the log wait for it); a failure to
/// append is logged with its cause, counted and tried again, and never undoes or fails the
/// action.
pub async fn record(
    state: &AppState,
    actor: Actor,
    action: &str,
    target: Option<Target>,
    outcome: AuditOutcome,
    detail: Option<String>,
) {
    let origin = crate::trace::origin();
    let entry = Entry {
        at_ms: state.clock.now_ms(),
        actor,
        action,
        target,
        outcome,
        detail,
        source: origin.addr.map(|a| a.to_string()),
        channel: origin.channel,
    };
    append(state, entry).await;
}

/// An entry as the domain has it, before the store's form.
struct Entry<'a> {
    at_ms: i64,
    actor: Actor,
    action: &'a str,
    target: Option<Target>,
    outcome: AuditOutcome,
    detail: Option<String>,
    source: Option<String>,
    channel: Channel,
}

async fn append(state: &AppState, e: Entry<'_>) {
    let target = e.target.unwrap_or(Target {
        kind: "",
        id: None,
        name: None,
        space: None,
    });
    let entry = NewAuditEntry {
        at_ms: e.at_ms,
        actor_kind: e.actor.kind,
        actor_id: e.actor.id,
        actor: e.actor.name,
        credential: e.actor.credential,
        action: e.action.to_owned(),
        target_kind: (!target.kind.is_empty()).then(|| target.kind.to_owned()),
        target_id: target.id,
        target: target.name,
        space: target.space,
        source: e.source.map(|s| clip(&s, FIELD_MAX)),
        request_id: crate::trace::current().map(|t| t.as_str().to_owned()),
        channel: e.channel.as_str().to_owned(),
        outcome: e.outcome,
        detail: e.detail.map(|d| clip(&d, DETAIL_MAX)),
    };
    state.audit.enqueue(entry).await;
}

/// A session's length for people: `42 s`, `5 min 3 s`, `2 h 7 min`.
fn lasted(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// Records the terminals and SSH sessions a proxy reports opened and closed: each as its
/// user's, on its workspace, from the address the proxy saw, at the time it happened; a
/// session's end says how long it lasted. An event naming a user or workspace that no longer
/// exists is recorded with the ids alone.
pub async fn sessions(
    state: &AppState,
    report: &warren_types::internal::SessionReport,
) -> Result<(), AppError> {
    use warren_types::internal::{SessionKind, MAX_SESSION_EVENTS};
    if report.events.len() > MAX_SESSION_EVENTS {
        return Err(AppError::invalid_field(
            "events",
            format!("at most {MAX_SESSION_EVENTS} per report"),
        ));
    }
    for ev in &report.events {
        let actor = match state.store.user_by_id(ev.user_id).await? {
            Some(u) => Actor::user(&u, ev.kind.as_str()),
            None => Actor {
                kind: AuditActorKind::User,
                id: Some(ev.user_id),
                name: None,
                credential: Some(ev.kind.as_str().to_owned()),
            },
        };
        let target = match state.store.workspace_by_id(ev.workspace_id).await? {
            Some(w) => Target::workspace(&w),
            None => Target {
                kind: "workspace",
                id: Some(ev.workspace_id.to_string()),
                name: None,
                space: None,
            },
        };
        let what = ev.what.as_deref().map(|w| clip(w, FIELD_MAX));
        let (action, at_ms, detail) = match ev.closed_at_ms {
            None => ("open", ev.opened_at_ms, what),
            Some(end) => {
                let length = format!("lasted {}", lasted(end - ev.opened_at_ms));
                let detail = match what {
                    Some(w) => format!("{w}, {length}"),
                    None => length,
                };
                ("close", end, Some(detail))
            }
        };
        let action = format!("{}.{action}", ev.kind.as_str());
        let entry = Entry {
            at_ms,
            actor,
            action: &action,
            target: Some(target),
            outcome: AuditOutcome::Success,
            detail,
            source: ev.source.clone(),
            channel: match ev.kind {
                SessionKind::Terminal | SessionKind::Editor => Channel::Proxy,
                SessionKind::Ssh => Channel::Ssh,
            },
        };
        append(state, entry).await;
    }
    Ok(())
}

/// Records `result` of `action` by `who` on `target`, and hands it back.
pub async fn audited<T>(
    state: &AppState,
    who: &Principal,
    action: &str,
    target: Target,
    result: Result<T, AppError>,
) -> Result<T, AppError> {
    let (outcome, detail) = outcome_of(&result);
    record(state, Actor::of(who), action, Some(target), outcome, detail).await;
    result
}

/// As [`audited`], with a detail recorded on success too (a new size, a role given).
pub async fn audited_with<T>(
    state: &AppState,
    who: &Principal,
    action: &str,
    target: Target,
    detail: String,
    result: Result<T, AppError>,
) -> Result<T, AppError> {
    let (outcome, error) = outcome_of(&result);
    let detail = Some(error.map_or(detail.clone(), |e| format!("{detail}: {e}")));
    record(state, Actor::of(who), action, Some(target), outcome, detail).await;
    result
}

/// Records a sign-in by `method` (`password`, `sso`) of the account `tried`: `user` once its
/// credentials were found right (a disabled account's sign-in is then recorded as that
/// user's, refused). Refusals anyone can cause without knowing a password — a held-back
/// attempt, a failed single sign-on callback — are recorded at most once per source and
/// minute ([`Quiet`](stream::Quiet)), so a flood of them cannot flood the log; each wrong
/// password is recorded (the throttle bounds how many there are).
pub async fn sign_in<T>(
    state: &AppState,
    tried: &str,
    method: &str,
    user: Option<&UserRow>,
    result: &Result<T, AppError>,
) {
    let (outcome, detail) = outcome_of(result);
    let actor = match user {
        Some(u) => Actor::user(u, method),
        None => Actor::anonymous(Some(tried).filter(|t| !t.is_empty()), method),
    };
    let floodable = user.is_none()
        && match result {
            Ok(_) => false,
            Err(e) => e.kind == ErrorKind::TooManyRequests || method == "sso",
        };
    if floodable {
        let key = format!("session.sign_in {method} {}", outcome.as_str());
        quietly(state, &key, actor, "session.sign_in", outcome, detail).await;
        return;
    }
    let target = user.map(Target::user);
    record(state, actor, "session.sign_in", target, outcome, detail).await;
}

/// Records a refused credential (a token that is not valid) from anyone, at most once per
/// source and minute ([`Quiet`](stream::Quiet)).
pub async fn refused_credential(state: &AppState, action: &str, credential: &str, why: &str) {
    let actor = Actor::anonymous(None, credential);
    let detail = Some(why.to_owned());
    quietly(state, action, actor, action, AuditOutcome::Denied, detail).await;
}

/// Records a refusal at most once per source and minute for each `key`; the entry recorded
/// says how many it stands for.
async fn quietly(
    state: &AppState,
    key: &str,
    actor: Actor,
    action: &str,
    outcome: AuditOutcome,
    detail: Option<String>,
) {
    let source = crate::trace::origin()
        .addr
        .map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    let admitted = {
        let mut quiet = state.audit.quiet();
        quiet.admit(key, &source, state.clock.now_ms())
    };
    let Some(earlier) = admitted else { return };
    let detail = match (detail, earlier) {
        (d, 0) => d,
        (Some(d), n) => Some(format!(
            "{d} (and {n} more from this source in the minute before)"
        )),
        (None, n) => Some(format!("{n} more from this source in the minute before")),
    };
    record(state, actor, action, None, outcome, detail).await;
}

/// Records a step of Warren's own (a policy stopping a workspace).
pub async fn by_system(state: &AppState, action: &str, target: Target, detail: &str) {
    record(
        state,
        Actor::system(),
        action,
        Some(target),
        AuditOutcome::Success,
        Some(detail.to_owned()),
    )
    .await;
}

/// Page size of the list.
const LIST_DEFAULT: i64 = 100;
const LIST_MAX: i64 = 1000;

/// A page of the log, newest first: all of it for admins, for others what happened in the
/// spaces they own (their own personal space among them).
pub async fn list(
    state: &AppState,
    who: &Principal,
    q: &AuditQuery,
) -> Result<Page<AuditEntry>, AppError> {
    // What this server recorded before the question is in the answer.
    state.audit.flush().await;
    let owned: Option<Vec<String>> = if who.user.is_admin {
        None
    } else {
        let m = crate::app::rights::memberships(state, who.user.id).await?;
        Some(
            m.into_iter()
                .filter(|(_, r)| *r == SpaceRole::Owner)
                .map(|(p, _)| p)
                .collect(),
        )
    };
    if owned.as_ref().is_some_and(Vec::is_empty) {
        return Err(AppError::forbidden(
            "reading the audit log needs an admin account, or the owner role on a space",
        ));
    }
    let mut f = AuditFilter {
        limit: q.limit.unwrap_or(LIST_DEFAULT),
        ..Default::default()
    };
    if !(1..=LIST_MAX).contains(&f.limit) {
        return Err(AppError::invalid_field(
            "limit",
            format!("must be between 1 and {LIST_MAX}"),
        ));
    }
    if let Some(c) = &q.cursor {
        f.before =
            Some(c.parse().map_err(|_| {
                AppError::invalid_field("cursor", "is not a cursor this list gave")
            })?);
    }
    if let Some(a) = &q.actor {
        match super::lookup::user_by_key(state, a).await {
            Ok(u) => {
                f.actor_id = Some(u.id);
                f.actor_name = Some(u.username);
            }
            Err(e) if e.kind == ErrorKind::NotFound => f.actor_name = Some(a.clone()),
            Err(e) => return Err(e),
        }
    }
    f.target = q.target.clone();
    f.target_kind = q.target_kind.clone();
    if let Some(a) = &q.action {
        match a.strip_suffix(".*") {
            Some(noun) => {
                f.action = Some(noun.to_owned());
                f.action_prefix = true;
            }
            None => f.action = Some(a.clone()),
        }
    }
    if let Some(o) = &q.outcome {
        f.outcome = Some(AuditOutcome::parse(o).ok_or_else(|| {
            AppError::invalid_field("outcome", "must be success, failure or denied")
        })?);
    }
    f.spaces = match (&q.space, owned) {
        (Some(s), None) => Some(vec![s.clone()]),
        (Some(s), Some(owned)) => {
            if !owned.iter().any(|o| super::rights::within(s, o)) {
                return Err(AppError::forbidden(format!(
                    "reading the audit log of space {s:?} needs its owner role (here or on a \
                     space above it), or an admin"
                )));
            }
            Some(vec![s.clone()])
        }
        (None, owned) => owned,
    };
    f.since_ms = q.since.map(|t| t.timestamp_millis());
    f.until_ms = q.until.map(|t| t.timestamp_millis());
    // One more than asked: whether there is a next page.
    let wanted = f.limit;
    f.limit = wanted + 1;
    let mut items = state.store.list_audit(&f).await?;
    let next_cursor = if items.len() as i64 > wanted {
        items.truncate(wanted as usize);
        items.last().map(|e| e.seq.to_string())
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

/// How many entries verification reads at a time.
const VERIFY_BATCH: i64 = 5000;

/// Walks the whole log from the anchor retention left and checks every link, then that the
/// last entry is the head the appends recorded (so removed newest entries show too).
pub async fn verify(store: &crate::store::Store) -> Result<AuditVerification, AppError> {
    let head = store.audit_head().await?;
    let (mut prev_seq, mut prev_hash) = (head.anchor_seq, head.anchor_hash.clone());
    let mut out = AuditVerification {
        entries: 0,
        first_seq: None,
        last_seq: None,
        head_hash: head.hash.clone(),
        broken: None,
    };
    loop {
        let batch = store.audit_after(prev_seq, VERIFY_BATCH).await?;
        if batch.is_empty() {
            break;
        }
        out.first_seq.get_or_insert(batch[0].seq);
        match warren_types::api::verify_chain(&prev_hash, prev_seq, &batch) {
            Ok((seq, hash)) => {
                out.entries += batch.len() as i64;
                (prev_seq, prev_hash) = (seq, hash);
                out.last_seq = Some(seq);
            }
            Err(b) => {
                out.entries += b.seq - prev_seq - 1;
                out.last_seq = Some(b.seq - 1).filter(|s| *s > 0);
                out.broken = Some(b);
                return Ok(out);
            }
        }
    }
    if prev_seq != head.seq || prev_hash != head.hash {
        out.broken = Some(warren_types::api::AuditBreak {
            seq: prev_seq + 1,
            reason: format!(
                "the log ends at entry {prev_seq}, but {} entries were appended: the newest \
                 were removed or rewritten",
                head.seq
            ),
        });
    }
    if head.anchor_seq == 0 && head.anchor_hash != AUDIT_GENESIS {
        out.broken = Some(warren_types::api::AuditBreak {
            seq: 1,
            reason: "the chain's start was changed".into(),
        });
    }
    Ok(out)
}

/// [`verify`] through the API: admins only.
pub async fn verify_for(state: &AppState, who: &Principal) -> Result<AuditVerification, AppError> {
    who.require_admin()?;
    state.audit.flush().await;
    verify(&state.store).await
}

/// Removes what retention lets go once an hour while this server holds the housekeeping
/// lease, until `shutdown`.
pub async fn retention_task(
    state: AppState,
    retention_days: u32,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let hour = std::time::Duration::from_secs(3600);
    super::leases::housekeeping_rounds(&state, hour, &shutdown, || async {
        match prune(&state, retention_days).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(entries = n, retention_days, "removed old audit entries"),
            Err(e) => tracing::warn!(
                error = %warren_types::error_chain(&e),
                "removing old audit entries failed; retrying in an hour"
            ),
        }
    })
    .await;
}

/// Removes entries older than the retention (oldest first, in batches), moving the anchor
/// so what is kept still verifies. Run by the housekeeping replica.
pub async fn prune(state: &AppState, retention_days: u32) -> Result<u64, AppError> {
    if retention_days == 0 {
        return Ok(0);
    }
    state.audit.flush().await;
    let before = state.clock.now_ms() - i64::from(retention_days) * 86_400_000;
    let mut gone = 0;
    loop {
        let n = state.store.prune_audit(before, 10_000).await?;
        gone += n;
        if n == 0 {
            return Ok(gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_lengths_read_as_people_say_them() {
        assert_eq!(lasted(42_400), "42 s");
        assert_eq!(lasted(303_000), "5 min 3 s");
        assert_eq!(lasted(7_620_000), "2 h 7 min");
        assert_eq!(lasted(-5), "0 s");
    }

    #[test]
    fn long_names_are_clipped_on_a_character_boundary() {
        let long = "é".repeat(300);
        let c = clip(&long, FIELD_MAX);
        assert!(c.len() <= FIELD_MAX + "…".len());
        assert!(c.ends_with('…'));
        assert_eq!(clip("short", FIELD_MAX), "short");
    }

    #[test]
    fn control_characters_are_written_out() {
        let tried = "root\u{1b}]0;pwned\u{7}\r\nadmin signed in";
        let c = clip(tried, FIELD_MAX);
        assert!(!c.chars().any(char::is_control), "{c:?}");
        assert_eq!(c, "root\\u{1b}]0;pwned\\u{7}\\u{d}\\u{a}admin signed in");
    }
}
