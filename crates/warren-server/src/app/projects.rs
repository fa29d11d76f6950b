//! Projects: any signed-in user creates and reads them; deleting one needs an admin. A
//! stored devfile is validated on creation, so a broken one is refused before anyone uses it.

use super::agents::validate_name;
use super::{render, AppError, AppState, Principal};
use crate::store::projects::{NewProject, ProjectRow};
use warren_types::api::{CreateProjectRequest, Project};

/// Every project (any signed-in user).
pub async fn list(state: &AppState, _who: &Principal) -> Result<Vec<Project>, AppError> {
    Ok(state
        .store
        .list_projects()
        .await?
        .iter()
        .map(|p| p.to_api())
        .collect())
}

/// One project by name or id (any signed-in user).
pub async fn get(state: &AppState, _who: &Principal, key: &str) -> Result<Project, AppError> {
    Ok(by_key(state, key).await?.to_api())
}

async fn by_key(state: &AppState, key: &str) -> Result<ProjectRow, AppError> {
    state
        .store
        .project_by_key(key)
        .await?
        .ok_or_else(|| AppError::not_found(format!("project {key:?}")))
}

/// Creates a project (any signed-in user).
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateProjectRequest,
) -> Result<Project, AppError> {
    if let Some(text) = &req.devfile {
        render::parse(text, "devfile")?;
    }
    validate_name(&req.name).map_err(|e| AppError::invalid_field("name", e))?;
    validate_git_url(&req.git_url).map_err(|e| AppError::invalid_field("git_url", e))?;
    let default_ref = req.default_ref.clone().unwrap_or_else(|| "main".into());
    validate_ref(&default_ref).map_err(|e| AppError::invalid_field("default_ref", e))?;
    let devfile_path = req
        .devfile_path
        .clone()
        .unwrap_or_else(|| ".devfile.yaml".into());
    if devfile_path.is_empty()
        || devfile_path.starts_with('/')
        || devfile_path.split('/').any(|c| c == "..")
    {
        return Err(AppError::invalid_field(
            "devfile_path",
            "must be a relative path inside the repository",
        ));
    }
    let new = NewProject {
        name: req.name.clone(),
        git_url: req.git_url.clone(),
        default_ref,
        devfile_path,
        devfile: req.devfile.clone(),
        created_by: who.user.id,
    };
    let p = state
        .store
        .insert_project(&new, state.clock.now_ms())
        .await
        .map_err(super::error::already_exists(|| {
            format!("a project named {:?} already exists", req.name)
        }))?;
    Ok(p.to_api())
}

/// Deletes a project (admins only); its workspaces keep running and only lose the link.
pub async fn delete(state: &AppState, who: &Principal, key: &str) -> Result<(), AppError> {
    who.require_admin()?;
    let p = by_key(state, key).await?;
    state.store.delete_project(p.id).await?;
    Ok(())
}

/// Git URLs Warren can clone: http(s), ssh:// and scp-like `user@host:path`, or `file://`.
pub fn validate_git_url(u: &str) -> Result<(), String> {
    if u.len() > 2000 || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{u:?} is not a git URL"));
    }
    if let Ok(p) = url::Url::parse(u) {
        if ["http", "https", "ssh", "git", "file"].contains(&p.scheme()) {
            return Ok(());
        }
        return Err(format!(
            "scheme {:?} is not supported (http, https, ssh, git, file)",
            p.scheme()
        ));
    }
    let scp_like = u
        .split_once(':')
        .is_some_and(|(h, p)| h.contains('@') && !p.is_empty());
    if scp_like {
        Ok(())
    } else {
        Err(format!("{u:?} is not a git URL"))
    }
}

fn validate_ref(r: &str) -> Result<(), String> {
    let ok = !r.is_empty()
        && r.len() <= 255
        && !r.starts_with('-')
        && !r.contains("..")
        && r.chars()
            .all(|c| c.is_ascii_graphic() && !"~^:?*[\\".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{r:?} is not a valid git ref"))
    }
}
