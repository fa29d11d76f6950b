//! A user's own secrets and identity (issue 41, item 5): environment variables and files
//! given to their workspaces — sealed at rest, never shown again — and the name and email
//! address their commits are made with.
//!
//! A secret goes to a workspace of its owner's only, at each render: those whose project (a
//! workspace opened by URL: its repository's folder) matches its `projects` globs, and only
//! those no one else may use (the personal space, no softlink grant) unless it allows shared
//! ones, as whoever may use a workspace may read its environment. A change re-renders the
//! owner's workspaces: files follow in place, the environment at the next start.

use super::personal::patterns;
use super::{AppError, AppState, Principal};
use crate::app::audit;
use crate::db::from_millis;
use crate::store::secrets::{NewSecret, UserGitCredentialRow, UserSecretRow};
use crate::store::users::UserRow;
use warren_types::api::{
    SetGitCredentialRequest, SetProfileRequest, SetSecretRequest, User, UserGitCredential,
    UserSecret, VariableInput, VariableKind, MAX_USER_SECRETS, MAX_USER_SECRET_BYTES,
};
use warren_types::git::GitCredential;

/// Longest name or email address.
const MAX_PROFILE_FIELD_BYTES: usize = 256;

fn to_api(s: &UserSecretRow) -> UserSecret {
    UserSecret {
        name: s.name.clone(),
        kind: s.kind,
        projects: s.projects.clone(),
        shared_workspaces: s.shared_workspaces,
        created_at: from_millis(s.created_at),
        updated_at: from_millis(s.updated_at),
    }
}

/// The caller's secrets (never their values).
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<UserSecret>, AppError> {
    let rows = state.store.user_secrets(who.user.id).await?;
    Ok(rows.iter().map(to_api).collect())
}

/// Sets the caller's secret `name` (replacing one of that name); whether it is new, and what
/// the API shows of it. Their workspaces are re-rendered with it.
pub async fn set(
    state: &AppState,
    who: &Principal,
    name: &str,
    req: &SetSecretRequest,
) -> Result<(bool, UserSecret), AppError> {
    let r: Result<(bool, UserSecret), AppError> = async {
        check_name(name, req.kind)?;
        if req.value.len() > MAX_USER_SECRET_BYTES {
            return Err(AppError::invalid_field(
                "value",
                format!("longer than {MAX_USER_SECRET_BYTES} bytes"),
            ));
        }
        // The variables' own rules (names, the environment's size limits) in one place.
        super::workspaces::check_variables(&[VariableInput {
            key: name.to_owned(),
            value: req.value.clone(),
            kind: req.kind,
            secret: true,
        }])
        .map_err(|e| AppError::invalid_field("value", after_field(&e.message)))?;
        let projects = req
            .projects
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty());
        if let Some(p) = projects {
            patterns(p).map_err(|e| AppError::invalid_field("projects", e))?;
        }
        let new = NewSecret {
            name,
            kind: req.kind,
            value: &req.value,
            projects,
            shared_workspaces: req.shared_workspaces,
        };
        let now = state.clock.now_ms();
        let Some(created) = state
            .store
            .put_user_secret(who.user.id, new, now, MAX_USER_SECRETS)
            .await?
        else {
            return Err(AppError::conflict(
                "too_many_secrets",
                format!("at most {MAX_USER_SECRETS} secrets per user; remove one first"),
            ));
        };
        tracing::info!(user = %who.user.username, secret = name, kind = ?req.kind, created, "user secret set");
        reapply(state, &who.user).await;
        let shown = state
            .store
            .user_secrets(who.user.id)
            .await?
            .iter()
            .find(|s| s.name == name)
            .map(to_api)
            .ok_or_else(|| AppError::not_found(format!("secret {name:?}")))?;
        Ok((created, shown))
    }
    .await;
    audit::audited(
        state,
        who,
        "secret.set",
        audit::Target::named("secret", name),
        r,
    )
    .await
}

/// Removes the caller's secret `name` from the server and from their workspaces.
pub async fn delete(state: &AppState, who: &Principal, name: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        if !state.store.delete_user_secret(who.user.id, name).await? {
            return Err(AppError::not_found(format!("secret {name:?}")));
        }
        tracing::info!(user = %who.user.username, secret = name, "user secret removed");
        reapply(state, &who.user).await;
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "secret.remove",
        audit::Target::named("secret", name),
        r,
    )
    .await
}

/// Sets (or, absent, clears) the name and email address the caller's commits are made with.
pub async fn set_profile(
    state: &AppState,
    who: &Principal,
    req: &SetProfileRequest,
) -> Result<User, AppError> {
    let clean = |field: &str, v: &Option<String>| -> Result<Option<String>, AppError> {
        let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        if v.len() > MAX_PROFILE_FIELD_BYTES || v.chars().any(|c| c.is_control()) {
            return Err(AppError::invalid_field(
                field,
                format!("one line of at most {MAX_PROFILE_FIELD_BYTES} bytes"),
            ));
        }
        Ok(Some(v.to_owned()))
    };
    let full_name = clean("full_name", &req.full_name)?;
    let email = clean("email", &req.email)?;
    if let Some(e) = &email {
        let ok = e.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.is_empty() && !e.contains(char::is_whitespace)
        }) && !e.contains(['<', '>']);
        if !ok {
            return Err(AppError::invalid_field(
                "email",
                format!("{e:?} is not an email address (name@host)"),
            ));
        }
    }
    state
        .store
        .set_profile(who.user.id, full_name.as_deref(), email.as_deref())
        .await?;
    let u = state
        .store
        .user_by_id(who.user.id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    tracing::info!(user = %u.username, "profile set");
    reapply(state, &u).await;
    Ok(u.to_api())
}

/// The rest of a field error's message (`key: problem` → `problem`).
fn after_field(message: &str) -> String {
    message
        .split_once(": ")
        .map_or(message, |(_, rest)| rest)
        .to_owned()
}

fn check_name(name: &str, kind: VariableKind) -> Result<(), AppError> {
    if kind == VariableKind::Env
        && (name.starts_with("WARREN_") || name == "PROJECTS_ROOT" || name == "PROJECT_SOURCE")
    {
        return Err(AppError::invalid_field(
            "name",
            format!("{name:?} is reserved for Warren"),
        ));
    }
    super::workspaces::check_variables(&[VariableInput {
        key: name.to_owned(),
        value: String::new(),
        kind,
        secret: true,
    }])
    .map_err(|e| AppError::invalid_field("name", after_field(&e.message)))?;
    Ok(())
}

/// Re-renders `user`'s workspaces after their secrets or identity changed; a workspace that
/// cannot take the change keeps its objects (logged, its failure reason set).
async fn reapply(state: &AppState, user: &UserRow) {
    if let Err(e) = super::rerender::rerender_owner_workspaces(state, user.id).await {
        tracing::warn!(user = %user.username, error = %e.message, "re-rendering the user's workspaces failed");
    }
}

/// Most Git credentials one user may keep.
pub const MAX_GIT_CREDENTIALS: usize = 50;

fn git_to_api(c: &UserGitCredentialRow) -> UserGitCredential {
    UserGitCredential {
        id: c.id,
        host: c.host.clone(),
        kind: c.kind.clone(),
        shared_workspaces: c.shared_workspaces,
        created_at: from_millis(c.created_at),
        updated_at: from_millis(c.updated_at),
    }
}

/// The caller's Git credentials (never the secrets).
pub async fn list_git_credentials(
    state: &AppState,
    who: &Principal,
) -> Result<Vec<UserGitCredential>, AppError> {
    let rows = state.store.user_git_credentials(who.user.id).await?;
    Ok(rows.iter().map(git_to_api).collect())
}

/// Sets the caller's credential for a forge's host (replacing one for that host); whether it
/// is new, and what the API shows of it. Their workspaces are re-rendered with it.
pub async fn set_git_credential(
    state: &AppState,
    who: &Principal,
    req: &SetGitCredentialRequest,
) -> Result<(bool, UserGitCredential), AppError> {
    let r: Result<(bool, UserGitCredential), AppError> = async {
        let host = warren_types::git::credential_host(&req.host)
            .map_err(|e| AppError::invalid_field("host", e))?;
        req.credential.validate().map_err(|e| {
            AppError::invalid_field(
                &format!("credential.{}", e.split(':').next().unwrap_or("")),
                after_field(&e),
            )
        })?;
        if !req.credential.fits(&host) {
            return Err(AppError::invalid_field(
                "credential",
                match req.credential {
                    GitCredential::SshKey { .. } => {
                        format!("a private key is for ssh:// hosts, not {host}")
                    }
                    _ => format!("a token or password is for https:// and http:// hosts, not {host}"),
                },
            ));
        }
        let now = state.clock.now_ms();
        let Some(created) = state
            .store
            .put_user_git_credential(
                who.user.id,
                &host,
                &req.credential,
                req.shared_workspaces,
                now,
                MAX_GIT_CREDENTIALS,
            )
            .await?
        else {
            return Err(AppError::conflict(
                "too_many_credentials",
                format!("at most {MAX_GIT_CREDENTIALS} Git credentials per user; remove one first"),
            ));
        };
        tracing::info!(user = %who.user.username, %host, kind = req.credential.kind(), created, "user git credential set");
        reapply(state, &who.user).await;
        let shown = state
            .store
            .user_git_credentials(who.user.id)
            .await?
            .iter()
            .find(|c| c.host == host)
            .map(git_to_api)
            .ok_or_else(|| AppError::not_found(format!("git credential for {host}")))?;
        Ok((created, shown))
    }
    .await;
    audit::audited(
        state,
        who,
        "git_credential.set",
        audit::Target::named("git_credential", &req.host),
        r,
    )
    .await
}

/// Removes the caller's Git credential `id`, from the server and from their workspaces.
pub async fn delete_git_credential(
    state: &AppState,
    who: &Principal,
    id: i64,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        if !state
            .store
            .delete_user_git_credential(who.user.id, id)
            .await?
        {
            return Err(AppError::not_found(format!("git credential {id}")));
        }
        tracing::info!(user = %who.user.username, id, "user git credential removed");
        reapply(state, &who.user).await;
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "git_credential.remove",
        audit::Target::new("git_credential", id, ""),
        r,
    )
    .await
}
