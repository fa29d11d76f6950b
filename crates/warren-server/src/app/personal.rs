//! What a workspace is given of its owner's own settings (issue 41, item 5), at each render:
//! their commit identity, the secrets that match it, and their credential for its repository.
//!
//! Whoever may use a workspace may read its environment, so a secret or credential goes to a
//! workspace others may use (a team space, a softlink grant) only when its owner allowed that.

use super::{AppError, AppState};
use crate::store::spaces::USERS_ROOT;
use crate::store::users::UserRow;
use crate::store::workspaces::{StoredVariable, WorkspaceRow};
use warren_types::api::VariableKind;
use warren_types::git::GitCredential;
use warren_types::UserId;

/// Longest `projects` pattern list of a secret.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// The comma-separated globs of a secret's `projects`.
pub fn patterns(list: &str) -> Result<globset::GlobSet, String> {
    if list.len() > MAX_PATTERN_BYTES {
        return Err(format!("longer than {MAX_PATTERN_BYTES} bytes"));
    }
    let mut set = globset::GlobSetBuilder::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let glob = globset::GlobBuilder::new(p)
            .case_insensitive(true)
            .build()
            .map_err(|e| format!("{p:?} is not a glob: {}", e.kind()))?;
        set.add(glob);
    }
    set.build().map_err(|e| e.to_string())
}

/// Where a workspace is, as the choice of its owner's secrets needs it.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// Its space's path.
    pub space: &'a str,
    /// Its project's name, or (opened by URL) its repository's folder.
    pub project: Option<&'a str>,
    /// Whether someone holds a softlink grant to it.
    pub granted: bool,
}

/// What of its owner's a workspace is given: the identity's variables then the matching
/// secrets' (plain), and the names of secrets withheld because others may use it.
#[derive(Debug, Default)]
pub struct Personal {
    pub variables: Vec<StoredVariable>,
    pub withheld: Vec<String>,
}

/// `owner`'s variables for a workspace at `at`.
pub async fn personal(
    state: &AppState,
    owner: &UserRow,
    at: Placement<'_>,
) -> Result<Personal, AppError> {
    let mut out = Personal::default();
    let name = owner.full_name.as_deref().unwrap_or(&owner.username);
    let mut env = |key: &str, value: &str| {
        out.variables.push(StoredVariable {
            key: key.into(),
            kind: VariableKind::Env,
            secret: false,
            value: value.into(),
        })
    };
    env("GIT_AUTHOR_NAME", name);
    env("GIT_COMMITTER_NAME", name);
    if let Some(email) = &owner.email {
        env("GIT_AUTHOR_EMAIL", email);
        env("GIT_COMMITTER_EMAIL", email);
    }
    let shared = at.granted || at.space != personal_space(&owner.username);
    for s in state.store.user_secrets(owner.id).await? {
        let wanted = match (&s.projects, at.project) {
            (None, _) => true,
            (Some(p), Some(project)) => patterns(p).is_ok_and(|g| g.is_match(project)),
            (Some(_), None) => false,
        };
        if !wanted {
            continue;
        }
        if shared && !s.shared_workspaces {
            out.withheld.push(s.name.clone());
            continue;
        }
        out.variables.push(StoredVariable {
            key: s.name.clone(),
            kind: s.kind,
            secret: true,
            value: state.store.open_secret(&s)?,
        });
    }
    Ok(out)
}

/// `personal` then `own` (the workspace's own variables), a later one replacing an earlier
/// of the same kind and name.
pub fn merged(personal: Vec<StoredVariable>, own: &[StoredVariable]) -> Vec<StoredVariable> {
    let mut out: Vec<StoredVariable> = vec![];
    for v in personal.into_iter().chain(own.iter().cloned()) {
        match out.iter_mut().find(|o| o.kind == v.kind && o.key == v.key) {
            Some(o) => *o = v,
            None => out.push(v),
        }
    }
    out
}

/// A notice for a workspace that does not get some of its owner's secrets.
pub fn withheld_notice(withheld: &[String]) -> Option<String> {
    (!withheld.is_empty()).then(|| {
        format!(
            "your secrets {} are not given to this workspace: others may use it (a team space or a softlink grant) and so could read them; allow that with `warren secret set NAME --shared-workspaces`",
            withheld.join(", ")
        )
    })
}

/// A user's own credential for a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerCredential {
    /// They have none for its host.
    None,
    /// Theirs, for a workspace only they may use (or one that allows shared ones).
    Given(GitCredential),
    /// They have one, but not for a workspace others may use.
    Withheld { host: String },
}

/// `owner`'s credential for repository `url`, for a workspace others may use when `shared`.
pub async fn owner_git_credential(
    state: &AppState,
    owner: UserId,
    url: &str,
    shared: bool,
) -> Result<OwnerCredential, AppError> {
    let Ok(host) = warren_types::git::credential_host(url) else {
        return Ok(OwnerCredential::None);
    };
    let found = state
        .store
        .user_git_credentials(owner)
        .await?
        .into_iter()
        .find(|c| c.host == host);
    let Some(c) = found else {
        return Ok(OwnerCredential::None);
    };
    if shared && !c.shared_workspaces {
        return Ok(OwnerCredential::Withheld { host });
    }
    let credential = state.store.open_git_credential(&c)?;
    Ok(if credential.fits(&host) {
        OwnerCredential::Given(credential)
    } else {
        OwnerCredential::None
    })
}

/// Whether someone besides its owner may use workspace `w` (its space is not the owner's
/// personal one, or someone holds a softlink grant to it).
pub async fn is_shared(state: &AppState, w: &WorkspaceRow) -> Result<bool, AppError> {
    Ok(w.space_path != personal_space(&w.owner_username)
        || !state.store.grants(w.id).await?.is_empty())
}

/// The personal space of user `username`.
pub fn personal_space(username: &str) -> String {
    format!("{USERS_ROOT}/{username}")
}
