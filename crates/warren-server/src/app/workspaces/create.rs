//! Creating a workspace: from a devfile given, a project (its stored devfile or its
//! repository's definition at the workspace's ref), a repository opened by URL without a
//! project, or the server's default devfile.

use super::checks::{
    check_quotas, check_variables, choose_agent, size_at_creation, size_for_requirements,
};
use super::{for_caller, with_notices};
use crate::app::render::{self, RenderInput};
use crate::app::sources::{self, Source};
use crate::app::{names, rights, AppError, AppState, ErrorKind, Principal};
use crate::store::projects::ProjectRow;
use crate::store::workspaces::{NewWorkspace, StoredSeed, StoredVariable};
use warren_types::api::{CreateWorkspaceRequest, Workspace};
use warren_types::AgentId;
use warren_types::DesiredState;

/// The request's `definition`: a path in the project's (or the repository's) repository, given
/// with a project or a repository and without a devfile of its own.
fn check_definition(req: &CreateWorkspaceRequest) -> Result<Option<&str>, AppError> {
    let Some(path) = req.definition.as_deref() else {
        return Ok(None);
    };
    let bad = |why: &str| {
        Err(AppError::invalid_field(
            "definition",
            format!("{path:?} {why}"),
        ))
    };
    if req.project.is_none() && req.repository.is_none() {
        return bad("names a file of a repository: give the project or the repository too");
    }
    if req.devfile.is_some() {
        return bad("would be read instead of the devfile given: give one or the other");
    }
    if path.is_empty() || path.len() > 1024 || path.contains(['\\', '\0']) || path.starts_with('/')
    {
        return bad("must be a path relative to the repository's root");
    }
    if path
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return bad("must be a plain path inside the repository (no `.`, `..` or empty parts)");
    }
    Ok(Some(path))
}

/// What a new workspace's definition must be beyond parsing: a devfile that builds an image
/// at start needs a project or a repository (the build context comes from it), and a starter
/// project is for a workspace without one and must be among the devfile's.
pub(super) fn check_for_creation(
    devfile: &warren_devfile::Devfile,
    field: &str,
    has_sources: bool,
    starter: Option<&str>,
) -> Result<(), AppError> {
    // A build at start reads the project when it has a Dockerfile or a local Feature; a dev
    // container's image with published Features needs none.
    let reads_project = |i: &&warren_devfile::ImageComponent| {
        !i.dockerfile.is_empty()
            || i.features
                .iter()
                .flat_map(|f| &f.features)
                .any(|f| matches!(f.source, warren_types::features::FeatureSource::Local(_)))
    };
    if let Some(i) = devfile
        .images
        .iter()
        .filter(|i| i.auto_build)
        .find(|i| reads_project(i) && !has_sources)
    {
        return Err(AppError::invalid_field(
            field,
            format!(
                "image component {:?} is built when the workspace starts (`autoBuild`), from the workspace's project or repository; create the workspace from a project or a repository",
                i.name
            ),
        ));
    }
    if let Some(s) = starter {
        if has_sources {
            return Err(AppError::invalid_field(
                "starter",
                "a starter project is for a workspace without a project repository",
            ));
        }
        if !devfile.starter_projects.iter().any(|p| p.name == s) {
            let names: Vec<&str> = devfile
                .starter_projects
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            return Err(AppError::invalid_field(
                "starter",
                if names.is_empty() {
                    format!("the devfile has no starter projects, so none named {s:?}")
                } else {
                    format!(
                        "the devfile has no starter project {s:?} (it has {})",
                        names.join(", ")
                    )
                },
            ));
        }
    }
    Ok(())
}

/// The request's project (one the caller may use) or repository, and where its source is.
async fn project_and_source(
    state: &AppState,
    who: &Principal,
    req: &CreateWorkspaceRequest,
) -> Result<(Option<ProjectRow>, Option<Source>), AppError> {
    if req.project.is_some() && req.repository.is_some() {
        return Err(AppError::invalid_field(
            "repository",
            "give a project or a repository, not both",
        ));
    }
    let project = match &req.project {
        Some(p) => Some(
            crate::app::projects::usable(state, who, p)
                .await
                .map_err(|e| {
                    if e.kind == ErrorKind::NotFound {
                        AppError::invalid_field("project", format!("no project named {p:?}"))
                    } else {
                        e
                    }
                })?,
        ),
        None => None,
    };
    let source = match (&project, &req.repository) {
        (Some(p), _) => Some(Source::of_project(state, p)?),
        (None, Some(url)) => {
            sources::check_repository_url(url)?;
            Some(Source::of_repository(url))
        }
        (None, None) => None,
    };
    Ok((project, source))
}

/// The new workspace's definition, its parent resolved: the request's devfile, else the
/// project's stored one, else the one in the repository at the workspace's ref (the
/// request's `definition` there, when given); the server default only without either. With
/// the field it came from, for errors, and a notice of which file was chosen.
async fn definition_text(
    state: &AppState,
    req: &CreateWorkspaceRequest,
    project: Option<&ProjectRow>,
    source: Option<&Source>,
    git_ref: Option<&str>,
    variables: &[StoredVariable],
    definition: Option<&str>,
) -> Result<(String, &'static str, Option<String>), AppError> {
    let mut chosen = None;
    let stored = project.and_then(|p| p.devfile.as_ref());
    let (text, field) = match (&req.devfile, source) {
        (Some(d), _) => (d.clone(), "devfile"),
        (None, Some(_)) if stored.is_some() && definition.is_none() => {
            (stored.cloned().unwrap_or_default(), "project devfile")
        }
        (None, Some(s)) => {
            let read = sources::definition(
                state,
                s,
                git_ref.unwrap_or(&s.default_ref),
                variables,
                definition,
            )
            .await?;
            chosen = read.notice;
            (read.devfile, "repository devfile")
        }
        (None, None) => (state.default_devfile.as_str().to_owned(), "default devfile"),
    };
    let text = render::resolve_parent(&state.parents, &text, field).await?;
    Ok((text, field, chosen))
}

/// The ready prebuild a new workspace of project `p` at `git_ref` on `agent` starts from
/// (the newest of that ref on the project's prebuilds' agent, when the project prebuilds the
/// ref and the workspace's definition is the project's own: a devfile given may want other
/// volumes), and the notice that says so.
async fn seed_for(
    state: &AppState,
    p: &ProjectRow,
    agent: AgentId,
    git_ref: &str,
) -> Result<(Option<StoredSeed>, Option<String>), AppError> {
    if p.prebuild_agent_id != Some(agent) || !p.prebuilt_refs().contains(&git_ref) {
        return Ok((None, None));
    }
    let newest = (state.store).usable_prebuild(p.id, agent, git_ref).await?;
    let Some(seed) = newest.and_then(|r| {
        Some(StoredSeed {
            prebuild: r.id,
            workspace_id: r.workspace()?,
            workspace: r.workspace_name.clone()?,
            commit: r.commit_sha,
        })
    }) else {
        return Ok((None, None));
    };
    // Before the insert: the collector keeps a prebuild chosen this recently.
    state
        .store
        .prebuild_used(seed.prebuild, state.clock.now_ms())
        .await?;
    let notice = format!(
        "starts from the prebuild of commit {}: the commits since are fetched and only the steps of every start run",
        seed.commit.get(..12).unwrap_or(&seed.commit)
    );
    Ok((Some(seed), Some(notice)))
}

/// Creates a workspace from the request's devfile, else the project's, else the server's
/// default; renders its objects and asks for `Running`.
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateWorkspaceRequest,
) -> Result<Workspace, AppError> {
    let r = create_unaudited(state, who, req).await;
    let target = match &r {
        Ok(w) => crate::app::audit::Target::shown_workspace(w),
        Err(_) => crate::app::audit::Target::named("workspace", req.name.as_deref().unwrap_or("")),
    };
    crate::app::audit::audited(state, who, "workspace.create", target, r).await
}

async fn create_unaudited(
    state: &AppState,
    who: &Principal,
    req: &CreateWorkspaceRequest,
) -> Result<Workspace, AppError> {
    if let Some(n) = &req.name {
        names::validate(n).map_err(|e| AppError::invalid_field("name", e))?;
    }
    let variables = check_variables(&req.variables)?;
    let space = rights::for_new_entry(state, who, req.space.as_deref()).await?;
    crate::app::budgets::check_start(state, who.user.id, &space.path).await?;
    let agent = choose_agent(state, req.agent.as_deref()).await?;
    let asked = req.resources.clone().unwrap_or_default();
    let resources = size_at_creation(asked.clone(), &agent)?;
    let (project, source) = project_and_source(state, who, req).await?;
    // The creator's own credential for its host; at creation only a team space shares it.
    let shared = space.path != crate::app::personal::personal_space(&who.user.username);
    let source = match source {
        Some(s) => Some(s.for_owner(state, who.user.id, shared).await?),
        None => None,
    };
    if let Some(r) = &req.git_ref {
        warren_types::git::validate_ref(r).map_err(|e| AppError::invalid_field("ref", e))?;
    }
    let git_ref = req
        .git_ref
        .clone()
        .or_else(|| project.as_ref().map(|p| p.default_ref.clone()));
    let definition = check_definition(req)?;
    let (devfile_text, field, chosen) = definition_text(
        state,
        req,
        project.as_ref(),
        source.as_ref(),
        git_ref.as_deref(),
        &variables,
        definition,
    )
    .await?;
    let devfile = render::parse(&devfile_text, field)?;
    check_for_creation(&devfile, field, source.is_some(), req.starter.as_deref())?;
    // The definition's host requirements pick the class when its creator named none.
    let (resources, sized) = size_for_requirements(
        &asked,
        resources,
        devfile.host_requirements.as_ref(),
        &agent,
    )?;
    // Its owner's identity and secrets, under its own variables.
    let folder = (req.repository.as_ref())
        .filter(|_| project.is_none())
        .map(|u| warren_types::git::repository_folder(u));
    let at = crate::app::personal::Placement {
        space: &space.path,
        project: project
            .as_ref()
            .map(|p| p.name.as_str())
            .or(folder.as_deref()),
        granted: false,
    };
    let personal = crate::app::personal::personal(state, &who.user, at).await?;
    let withheld = crate::app::personal::withheld_notice(&personal.withheld);
    let all_variables = crate::app::personal::merged(personal.variables, &variables);
    // The project's own definition at a ref it prebuilds: a warm pool's workspace, else a
    // copy of the newest prebuild. A name asked for is the agent's key of a new workspace, so
    // only a generated one comes from the pool.
    let own_definition = req.devfile.is_none() && definition.is_none();
    if let (Some(p), Some(r), true, None, None) =
        (&project, &git_ref, own_definition, &req.name, &req.starter)
    {
        let claim = super::pool::Claim {
            project: p,
            agent: &agent,
            git_ref: r,
            devfile_text: &devfile_text,
            devfile: &devfile,
            resources: &resources,
            owner: &who.user,
            space: space.id,
            variables: &variables,
            all_variables: &all_variables,
            source: source.as_ref(),
        };
        if let Some((w, pooled)) = super::pool::claim(state, &claim).await? {
            let mut shown = with_notices(&w, for_caller(state, who, &w).await?)?;
            shown
                .notices
                .splice(0..0, chosen.into_iter().chain(sized).chain(withheld));
            shown.notices.push(pooled);
            return Ok(shown);
        }
    }
    let (seed, from_prebuild) = match (&project, &git_ref) {
        (Some(p), Some(r)) if own_definition => seed_for(state, p, agent.id, r).await?,
        _ => (None, None),
    };
    let now = state.clock.now_ms();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let name = req.name.clone().unwrap_or_else(names::generate);
        let new = NewWorkspace {
            name: name.clone(),
            owner_id: who.user.id,
            agent_id: agent.id,
            project_id: project.as_ref().map(|p| p.id),
            git_ref: git_ref.clone(),
            repository: req.repository.clone().filter(|_| project.is_none()),
            // Only when it was read: a devfile given wins over it.
            definition_path: definition
                .filter(|_| req.devfile.is_none() && source.is_some())
                .map(str::to_owned),
            devfile: devfile_text.clone(),
            resources: resources.clone(),
            variables: variables.clone(),
            starter: req.starter.clone(),
            space_id: space.id,
            prebuild_id: None,
            pool_of: None,
            seed: seed.clone(),
        };
        let project_input = source.as_ref().map(|s| s.project_input(git_ref.as_deref()));
        let result = state
            .store
            .insert_workspace(
                &new,
                now,
                |counts| check_quotas(&agent, counts, &resources),
                |id| {
                    render::render_workspace(
                        &devfile,
                        RenderInput {
                            name: &name,
                            id,
                            agent: &agent,
                            project: project_input,
                            resources: &resources,
                            variables: &all_variables,
                            desired: DesiredState::Running,
                            dotfiles_url: who.user.dotfiles_url.as_deref(),
                            starter: req.starter.as_deref(),
                            prebuild: false,
                            seed: seed.as_ref().map(StoredSeed::as_seed),
                        },
                    )
                },
            )
            .await;
        match result {
            Ok(w) => {
                state.signals.notify(agent.id);
                state.changed();
                let mut shown = with_notices(&w, for_caller(state, who, &w).await?)?;
                shown
                    .notices
                    .splice(0..0, chosen.into_iter().chain(sized).chain(withheld));
                shown.notices.extend(from_prebuild);
                return Ok(shown);
            }
            // A generated name collided: draw another.
            // The insert's only unique key is the name: a conflict is a name collision.
            Err(e) if e.kind == ErrorKind::Conflict && req.name.is_none() && attempts < 5 => {
                continue
            }
            Err(e) if e.kind == ErrorKind::Conflict => {
                return Err(AppError::conflict(
                    "already_exists",
                    format!("name: an entry (workspace or mount) named {name:?} already exists"),
                )
                .with_field("name"))
            }
            Err(e) => return Err(e),
        }
    }
}
