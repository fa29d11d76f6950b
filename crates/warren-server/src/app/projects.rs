//! Projects: a repository, how to authenticate to it, and who may use it.
//!
//! A project is `private` (its members and admins see and use it; the default) or
//! `internal` (every signed-in user does). Members are `maintainer`s (manage it: credential,
//! members, settings, deletion) or `developer`s (create workspaces from it); its creator is
//! its first maintainer. Anyone else is told "not found", as for workspaces.
//!
//! The credential is sealed at rest and never returned; a `git_url` carrying one is refused
//! (and those stored before this rule are moved into sealed storage at start,
//! [`move_url_credentials`]). The server reads the devfile from the repository at the
//! workspace's ref when the project stores none (`sources::definition`).

use super::agents::validate_name;
use super::{render, AppError, AppState, ErrorKind, Principal};
use crate::app::audit;
use crate::store::projects::{NewProject, ProjectRow};
use warren_types::api::{
    CreateProjectRequest, Project, ProjectMember, ProjectRole, ProjectVisibility,
    SetProjectMemberRequest, UpdateProjectRequest,
};
use warren_types::git::GitCredential;
use warren_types::UserId;

fn not_found(key: &str) -> AppError {
    AppError::not_found(format!("project {key:?}"))
}

/// The API's view of a project.
async fn view(p: &ProjectRow, state: &AppState) -> Result<Project, AppError> {
    let kind = state.store.project_credential(p)?.map(|c| c.kind());
    let mut shown = p.to_api(kind);
    if let Some(a) = p.prebuild_agent_id {
        let agent = state.store.agent_by_id(a).await?;
        shown.prebuild_agent = agent.map(|a| a.name);
        shown.prebuild_refs = p.prebuilt_refs().into_iter().map(str::to_owned).collect();
        shown.prebuild_every_hours = p.prebuild_every_hours.and_then(|h| u32::try_from(h).ok());
        shown.prebuild_pool = p.prebuild_pool.and_then(|n| u32::try_from(n).ok());
    }
    Ok(shown)
}

/// The caller's role on a project: `Some(Maintainer)` for admins.
async fn role_of(
    state: &AppState,
    who: &Principal,
    p: &ProjectRow,
) -> Result<Option<ProjectRole>, AppError> {
    if who.user.is_admin {
        return Ok(Some(ProjectRole::Maintainer));
    }
    Ok(state.store.project_role(p.id, who.user.id).await?)
}

/// A project the caller may see and use (create workspaces from), by name or id.
pub async fn usable(state: &AppState, who: &Principal, key: &str) -> Result<ProjectRow, AppError> {
    let p = state
        .store
        .project_by_key(key)
        .await?
        .ok_or_else(|| not_found(key))?;
    if p.visibility == ProjectVisibility::Internal || role_of(state, who, &p).await?.is_some() {
        Ok(p)
    } else {
        Err(not_found(key))
    }
}

/// A project the caller maintains; one they only use is refused naming the role needed.
pub(crate) async fn maintained(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<ProjectRow, AppError> {
    let p = usable(state, who, key).await?;
    match role_of(state, who, &p).await? {
        Some(ProjectRole::Maintainer) => Ok(p),
        _ => Err(AppError::forbidden(format!(
            "managing project {:?} needs its maintainer role (or an admin)",
            p.name
        ))),
    }
}

/// The projects the caller may see.
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<Project>, AppError> {
    let filter = (!who.user.is_admin).then_some(who.user.id);
    let mut shown = vec![];
    for p in state.store.list_projects(filter).await? {
        shown.push(view(&p, state).await?);
    }
    Ok(shown)
}

/// One project the caller may see, by name or id.
pub async fn get(state: &AppState, who: &Principal, key: &str) -> Result<Project, AppError> {
    view(&usable(state, who, key).await?, state).await
}

fn check_devfile_path(path: &str) -> Result<(), AppError> {
    if path.is_empty()
        || path.len() > 1024
        || path.starts_with('/')
        || path.split('/').any(|c| c == "..")
        || path.chars().any(|c| c.is_control())
    {
        return Err(AppError::invalid_field(
            "devfile_path",
            "must be a relative path inside the repository",
        ));
    }
    Ok(())
}

fn check_credential(c: &GitCredential) -> Result<(), AppError> {
    c.validate().map_err(|e| {
        let field = e.split(':').next().unwrap_or_default();
        AppError {
            field: Some(format!("credential.{field}")),
            ..AppError::new(
                ErrorKind::Invalid,
                "invalid_field",
                format!("credential.{e}"),
            )
        }
    })
}

/// Creates a project (any signed-in user, who becomes its maintainer).
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateProjectRequest,
) -> Result<Project, AppError> {
    let r: Result<Project, AppError> = async {
        if let Some(text) = &req.devfile {
            // The project keeps the text as given: its parent is fetched again for each
            // workspace, so a registry's fixes reach new workspaces.
            let flat = render::resolve_parent(&state.parents, text, "devfile").await?;
            render::parse(&flat, "devfile")?;
        }
        validate_name(&req.name).map_err(|e| AppError::invalid_field("name", e))?;
        validate_git_url(&req.git_url).map_err(|e| AppError::invalid_field("git_url", e))?;
        let default_ref = req.default_ref.clone().unwrap_or_else(|| "main".into());
        warren_types::git::validate_ref(&default_ref)
            .map_err(|e| AppError::invalid_field("default_ref", e))?;
        let devfile_path = req
            .devfile_path
            .clone()
            .unwrap_or_else(|| ".devfile.yaml".into());
        check_devfile_path(&devfile_path)?;
        if let Some(c) = &req.credential {
            check_credential(c)?;
        }
        let new = NewProject {
            name: req.name.clone(),
            git_url: req.git_url.clone(),
            default_ref,
            devfile_path,
            devfile: req.devfile.clone(),
            created_by: who.user.id,
            visibility: req.visibility.unwrap_or(ProjectVisibility::Private),
            credential: req.credential.clone(),
        };
        let p = state
            .store
            .insert_project(&new, state.clock.now_ms())
            .await
            .map_err(super::error::already_exists(|| {
                format!("a project named {:?} already exists", req.name)
            }))?;
        tracing::info!(project = %p.name, by = %who.user.username, credential = ?req.credential.as_ref().map(GitCredential::kind), "project created");
        view(&p, state).await
    }
    .await;
    audit::audited(
        state,
        who,
        "project.create",
        audit::Target::named("project", &req.name),
        r,
    )
    .await
}

/// A maintainer's change of visibility, default ref or devfile path.
pub async fn update(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &UpdateProjectRequest,
) -> Result<Project, AppError> {
    let r: Result<Project, AppError> = async {
        let p = maintained(state, who, key).await?;
        let default_ref = req.default_ref.clone().unwrap_or(p.default_ref.clone());
        warren_types::git::validate_ref(&default_ref)
            .map_err(|e| AppError::invalid_field("default_ref", e))?;
        let devfile_path = req.devfile_path.clone().unwrap_or(p.devfile_path.clone());
        check_devfile_path(&devfile_path)?;
        let updated = state
            .store
            .update_project(
                p.id,
                req.visibility.unwrap_or(p.visibility),
                &default_ref,
                &devfile_path,
                &p.git_url,
            )
            .await?
            .ok_or_else(|| not_found(key))?;
        view(&updated, state).await
    }
    .await;
    audit::audited(
        state,
        who,
        "project.update",
        audit::Target::named("project", key),
        r,
    )
    .await
}

/// Deletes a project (admins and its maintainers); its workspaces keep running and only
/// lose the link.
pub async fn delete(state: &AppState, who: &Principal, key: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let p = maintained(state, who, key).await?;
        state.store.delete_project(p.id).await?;
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "project.delete",
        audit::Target::named("project", key),
        r,
    )
    .await
}

/// Sets (or with `None` removes) the project's credential; its workspaces get it too (their
/// Secret is rewritten in place, without a restart).
pub async fn set_credential(
    state: &AppState,
    who: &Principal,
    key: &str,
    credential: Option<&GitCredential>,
) -> Result<Project, AppError> {
    let r: Result<Project, AppError> = async {
        let p = maintained(state, who, key).await?;
        if let Some(c) = credential {
            check_credential(c)?;
        }
        state.store.set_project_credential(p.id, credential).await?;
        tracing::info!(project = %p.name, by = %who.user.username, credential = ?credential.map(GitCredential::kind), "project credential changed");
        super::rerender::rerender_project_workspaces(state, p.id).await?;
        let p = state
            .store
            .project_by_key(&p.id.to_string())
            .await?
            .ok_or_else(|| not_found(key))?;
        view(&p, state).await
    }
    .await;
    audit::audited_with(
        state,
        who,
        "project.set_credential",
        audit::Target::named("project", key),
        if credential.is_some() {
            "set".to_owned()
        } else {
            "removed".to_owned()
        },
        r,
    )
    .await
}

/// The project's members (whoever may see the project).
pub async fn members(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Vec<ProjectMember>, AppError> {
    let p = usable(state, who, key).await?;
    Ok(state.store.project_members(p.id).await?)
}

async fn user_by_key(state: &AppState, key: &str) -> Result<UserId, AppError> {
    Ok(super::lookup::user_by_key(state, key).await?.id)
}

/// Adds a member or changes their role (maintainers).
pub async fn set_member(
    state: &AppState,
    who: &Principal,
    key: &str,
    user: &str,
    req: &SetProjectMemberRequest,
) -> Result<Vec<ProjectMember>, AppError> {
    let r: Result<Vec<ProjectMember>, AppError> = async {
        let p = maintained(state, who, key).await?;
        let uid = user_by_key(state, user).await?;
        if req.role == ProjectRole::Developer
            && state.store.project_role(p.id, uid).await? == Some(ProjectRole::Maintainer)
            && state
                .store
                .project_members(p.id)
                .await?
                .iter()
                .filter(|m| m.role == ProjectRole::Maintainer)
                .count()
                == 1
        {
            return Err(last_maintainer(&p.name));
        }
        state
            .store
            .set_project_member(p.id, uid, req.role, state.clock.now_ms())
            .await?;
        Ok(state.store.project_members(p.id).await?)
    }
    .await;
    audit::audited_with(
        state,
        who,
        "project.set_member",
        audit::Target::named("project", key),
        format!("{user}: {}", req.role.as_str()),
        r,
    )
    .await
}

fn last_maintainer(project: &str) -> AppError {
    AppError::conflict(
        "last_maintainer",
        format!(
            "this is project {project:?}'s last maintainer; make another member maintainer first"
        ),
    )
}

/// Removes a member (maintainers, or members leaving); never the last maintainer.
pub async fn remove_member(
    state: &AppState,
    who: &Principal,
    key: &str,
    user: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let p = usable(state, who, key).await?;
        let uid = user_by_key(state, user).await?;
        if uid != who.user.id {
            maintained(state, who, key).await?;
        }
        match state.store.remove_project_member(p.id, uid).await? {
            Some(true) => Ok(()),
            Some(false) => Err(last_maintainer(&p.name)),
            None => Err(AppError::not_found(format!(
                "member {user:?} of project {:?}",
                p.name
            ))),
        }
    }
    .await;
    audit::audited_with(
        state,
        who,
        "project.remove_member",
        audit::Target::named("project", key),
        user.to_owned(),
        r,
    )
    .await
}

/// Splits credentials out of a URL: the URL without them and the credential, if it had one
/// (`user:password@` → basic, a lone `token@` → token). SSH user names are not secrets and
/// stay.
pub fn split_url_credential(url: &str) -> Option<(String, GitCredential)> {
    let mut u = url::Url::parse(url).ok()?;
    let http = matches!(u.scheme(), "http" | "https");
    let user = percent_decode(u.username());
    let credential = match u.password() {
        Some(p) => GitCredential::Basic {
            username: user,
            password: percent_decode(p),
        },
        None if http && !user.is_empty() => GitCredential::Token {
            token: user,
            username: None,
        },
        None => return None,
    };
    let _ = u.set_password(None);
    if http || matches!(credential, GitCredential::Basic { .. }) {
        let _ = u.set_username("");
    }
    Some((u.to_string(), credential))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Moves credentials found in stored `git_url`s into sealed storage and makes those
/// projects private (their URL was readable by every user); run at every start, a no-op
/// once done. Returns how many projects were changed.
pub async fn move_url_credentials(state: &AppState) -> Result<usize, AppError> {
    let mut moved = 0;
    for p in state.store.projects_with_userinfo().await? {
        let Some((clean, credential)) = split_url_credential(&p.git_url) else {
            continue;
        };
        // A credential set explicitly wins over one left in the URL.
        let credential = state.store.project_credential(&p)?.unwrap_or(credential);
        if state
            .store
            .move_url_credential(p.id, &p.git_url, &clean, &credential)
            .await?
        {
            tracing::info!(project = %p.name, url = %clean, "moved credentials out of the project's git_url into sealed storage; the project is now private");
            moved += 1;
        }
    }
    Ok(moved)
}

/// Git URLs Warren can clone: http(s), ssh:// and scp-like `user@host:path`, or `file://`;
/// never with credentials in them.
pub fn validate_git_url(u: &str) -> Result<(), String> {
    if u.len() > 2000
        || u.chars().any(|c| c.is_whitespace() || c.is_control())
        || u.starts_with('-')
    {
        return Err(format!("{u:?} is not a git URL"));
    }
    if let Ok(p) = url::Url::parse(u) {
        if !["http", "https", "ssh", "git", "file"].contains(&p.scheme()) {
            return Err(format!(
                "scheme {:?} is not supported (http, https, ssh, git, file)",
                p.scheme()
            ));
        }
        if warren_git::carries_credentials(&p) {
            return Err(
                "must not carry credentials: give them as the project's credential \
                 (`credential` in the API, `--token-stdin`/`--password-stdin`/`--ssh-key` in \
                 `warren project create`), which is stored encrypted and never shown"
                    .into(),
            );
        }
        return Ok(());
    }
    let scp_like = u
        .split_once(':')
        .is_some_and(|(h, p)| h.contains('@') && !h.contains('/') && !p.is_empty());
    if scp_like {
        Ok(())
    } else {
        Err(format!("{u:?} is not a git URL"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_split_out_of_urls() {
        let (u, c) = split_url_credential("https://ann:p%40ss@git.example.com/r.git").unwrap();
        assert_eq!(u, "https://git.example.com/r.git");
        assert_eq!(
            c,
            GitCredential::Basic {
                username: "ann".into(),
                password: "p@ss".into()
            }
        );
        let (u, c) = split_url_credential("https://glpat-xyz@git.example.com/r.git").unwrap();
        assert_eq!(u, "https://git.example.com/r.git");
        assert_eq!(c.username_password(), Some(("oauth2", "glpat-xyz")));
        assert_eq!(split_url_credential("ssh://git@host/r.git"), None);
        assert_eq!(split_url_credential("https://git.example.com/r.git"), None);
    }

    #[test]
    fn urls_with_credentials_are_refused() {
        for bad in [
            "https://ann:pw@git.example.com/r.git",
            "https://token@git.example.com/r.git",
            "ssh://git:pw@host/r.git",
        ] {
            assert!(
                validate_git_url(bad)
                    .unwrap_err()
                    .contains("project's credential"),
                "{bad}"
            );
        }
        for ok in ["ssh://git@host/r.git", "git@host:r.git", "https://h/r.git"] {
            assert_eq!(validate_git_url(ok), Ok(()), "{ok}");
        }
    }
}
