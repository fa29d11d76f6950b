//! Following chains of mounts: redirects to where they end, softlinks to the workspace that
//! serves them; one walk for both, bounded by [`MAX_CHAIN`] and cycle-proof.

use super::*;

/// Where following a mount's redirects ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A workspace of this Warren (or a mount of a type that is not a redirect).
    Entry(String),
    /// An external URL.
    Url(String),
    /// The chain breaks: this entry does not exist (any more).
    Missing(String),
    /// The chain comes back to this entry.
    Cycle(String),
    /// More than [`MAX_CHAIN`] redirects.
    TooLong,
}

/// One step along a chain of mounts: on to the entry a mount names, or the chain's end.
enum Step<T> {
    Next(String),
    Stop(T),
}

/// Where a chain of mounts ends, before its follower says what that means.
enum ChainEnd<T> {
    /// A mount ended it (what its step said).
    Stopped(T),
    /// A workspace not terminated (for its users a terminated one is gone, though its row
    /// stays a while).
    Workspace(Box<WorkspaceRow>),
    /// No entry of this name.
    Missing(String),
    /// The chain comes back to this entry.
    Cycle(String),
    /// More than [`MAX_CHAIN`] steps.
    TooLong,
}

/// Follows a chain of mounts from the entry `name`, `step` deciding at each mount (given with
/// its name) where to go on: the one walk of every chain, bounded and cycle-proof.
async fn follow<T>(
    state: &AppState,
    name: &str,
    step: impl Fn(MountRow, &str) -> Step<T>,
) -> Result<ChainEnd<T>, AppError> {
    let mut seen = HashSet::new();
    let mut current = name.to_owned();
    for _ in 0..=MAX_CHAIN {
        if !seen.insert(current.clone()) {
            return Ok(ChainEnd::Cycle(current));
        }
        if let Some(m) = state.store.mount_by_name(&current).await? {
            match step(m, &current) {
                Step::Next(t) => current = t,
                Step::Stop(end) => return Ok(ChainEnd::Stopped(end)),
            }
            continue;
        }
        return Ok(match state.store.workspace_by_name(&current).await? {
            Some(w) if w.desired_state != DesiredState::Terminated => {
                ChainEnd::Workspace(Box::new(w))
            }
            _ => ChainEnd::Missing(current),
        });
    }
    Ok(ChainEnd::TooLong)
}

/// Follows redirects from the entry `name` (a workspace ends the chain at once).
pub async fn resolve(state: &AppState, name: &str) -> Result<Resolved, AppError> {
    let end = follow(state, name, |m, current| {
        if m.kind != MountType::Redirect.as_str() {
            return Step::Stop(Resolved::Entry(current.to_owned()));
        }
        match (m.target, m.url) {
            (Some(t), _) => Step::Next(t),
            (None, Some(u)) => Step::Stop(Resolved::Url(u)),
            (None, None) => Step::Stop(Resolved::Missing(current.to_owned())),
        }
    })
    .await?;
    Ok(match end {
        ChainEnd::Stopped(r) => r,
        ChainEnd::Workspace(w) => Resolved::Entry(w.name),
        ChainEnd::Missing(n) => Resolved::Missing(n),
        ChainEnd::Cycle(n) => Resolved::Cycle(n),
        ChainEnd::TooLong => Resolved::TooLong,
    })
}

/// Where following a softlink's chain ends.
#[derive(Debug)]
pub enum Linked {
    /// The workspace that serves it.
    Workspace(Box<WorkspaceRow>),
    /// The chain breaks: this entry does not exist (any more), or is terminated.
    Missing(String),
    /// The chain reaches a mount that is no softlink.
    NotAWorkspace(String),
    /// The chain comes back to this entry.
    Cycle(String),
    /// More than [`MAX_CHAIN`] softlinks.
    TooLong,
}

/// Follows softlinks from the entry `name` to the workspace that serves it.
pub async fn resolve_link(state: &AppState, name: &str) -> Result<Linked, AppError> {
    let end = follow(state, name, |m, current| {
        if m.kind != MountType::Workspace.as_str() {
            return Step::Stop(Linked::NotAWorkspace(current.to_owned()));
        }
        match m.target {
            Some(t) => Step::Next(t),
            None => Step::Stop(Linked::Missing(current.to_owned())),
        }
    })
    .await?;
    Ok(match end {
        ChainEnd::Stopped(l) => l,
        ChainEnd::Workspace(w) => Linked::Workspace(w),
        ChainEnd::Missing(n) => Linked::Missing(n),
        ChainEnd::Cycle(n) => Linked::Cycle(n),
        ChainEnd::TooLong => Linked::TooLong,
    })
}
