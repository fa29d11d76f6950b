//! Where a workspace's sources come from: its project's repository (with the project's
//! credential, default ref and devfile path), or a repository opened by URL without a project
//! (`warren ws create --repo`: its default branch, the usual definition locations, read with
//! its owner's own credential for the host when they have one).
//! The definition is read from either the same way ([`definition`]), a workspace's clone and
//! its build contexts are made from either the same way.

use super::personal::{self, OwnerCredential};
use super::render::ProjectInput;
use super::{AppError, AppState, ErrorKind};
use crate::store::projects::ProjectRow;
use crate::store::workspaces::{StoredVariable, WorkspaceRow};
use std::collections::{BTreeMap, BTreeSet};
use warren_git::{GitError, Remote};
use warren_types::api::VariableKind;
use warren_types::git::{GitCredential, DEVFILE_LOCATIONS};

/// A repository a workspace's sources come from.
#[derive(Debug, Clone)]
pub struct Source {
    /// The folder under `/projects` (a project's name, a repository's last path segment).
    pub name: String,
    pub url: String,
    pub credential: Option<GitCredential>,
    /// The ref when the workspace names none (empty: the repository's default branch).
    pub default_ref: String,
    /// Where the definition is looked for, in order, when the workspace names none.
    pub definition_paths: Vec<String>,
    /// Whether the definition may be the server's default when none is found (a repository
    /// opened by URL; a project's devfile path is its maintainers' promise).
    pub default_definition: bool,
    /// Names it in messages: `project "app"`, `repository https://…`.
    pub label: String,
    /// Whether it is a project's (whose name prefixes git's errors, which name the URL).
    project: bool,
    /// The workspace owner's own credential for its host, which the workspace's credential
    /// helper uses instead of the project's (issue 41, item 5); the server reads a project
    /// with the project's.
    owner_credential: Option<GitCredential>,
    /// The host of an owner's credential withheld from this workspace (others may use it).
    withheld_host: Option<String>,
}

impl std::fmt::Display for Source {
    /// `project app`, `repository https://…`: how answers name it to the user.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.project {
            write!(f, "project {}", self.name)
        } else {
            f.write_str(&self.label)
        }
    }
}

impl Source {
    /// A project's repository, with its credential (opened here, used by the server and the
    /// workspace's credential helper only).
    pub fn of_project(state: &AppState, p: &ProjectRow) -> Result<Source, AppError> {
        let mut definition_paths = vec![p.devfile_path.clone()];
        if !warren_devcontainer::is_config_path(&p.devfile_path) {
            definition_paths.extend(warren_devcontainer::LOCATIONS.map(str::to_owned));
        }
        Ok(Source {
            name: p.name.clone(),
            url: p.git_url.clone(),
            credential: state.store.project_credential(p)?,
            default_ref: p.default_ref.clone(),
            definition_paths,
            default_definition: false,
            label: format!("project {:?}", p.name),
            project: true,
            owner_credential: None,
            withheld_host: None,
        })
    }

    /// A repository opened by URL (already checked with [`check_repository_url`]).
    pub fn of_repository(url: &str) -> Source {
        Source {
            name: warren_types::git::repository_folder(url),
            url: url.to_owned(),
            credential: None,
            default_ref: String::new(),
            definition_paths: DEVFILE_LOCATIONS
                .iter()
                .chain(&warren_devcontainer::LOCATIONS)
                .map(|p| (*p).to_owned())
                .collect(),
            default_definition: true,
            label: format!("repository {}", warren_git::display_url(url)),
            project: false,
            owner_credential: None,
            withheld_host: None,
        }
    }

    /// With the owner's credential for its host: the workspace's from now on, and the
    /// server's for a repository opened by URL (which has no other).
    pub fn with_owner(mut self, owner: OwnerCredential) -> Source {
        match owner {
            OwnerCredential::None => {}
            OwnerCredential::Given(c) => {
                if !self.project {
                    self.credential = Some(c.clone());
                }
                self.owner_credential = Some(c);
            }
            OwnerCredential::Withheld { host } => self.withheld_host = Some(host),
        }
        self
    }

    /// Attaches `owner`'s credential for a workspace others may use when `shared`.
    pub async fn for_owner(
        self,
        state: &AppState,
        owner: warren_types::UserId,
        shared: bool,
    ) -> Result<Source, AppError> {
        let found = personal::owner_git_credential(state, owner, &self.url, shared).await?;
        Ok(self.with_owner(found))
    }

    pub fn remote(&self) -> Remote<'_> {
        Remote {
            url: &self.url,
            credential: self.credential.as_ref(),
        }
    }

    /// What the renderer clones, at `git_ref` (the workspace's, else the default).
    pub fn project_input<'a>(&'a self, git_ref: Option<&'a str>) -> ProjectInput<'a> {
        ProjectInput {
            name: &self.name,
            git_url: &self.url,
            git_ref: git_ref.unwrap_or(&self.default_ref),
            credential: self.owner_credential.as_ref().or(self.credential.as_ref()),
        }
    }

    /// A git error as the API answers it, naming this source.
    pub fn git_error(&self, e: &GitError) -> AppError {
        if self.project {
            return git_error(&self.label, e);
        }
        let mut error = git_error("", e);
        if matches!(e, GitError::Auth { .. }) {
            // Git's own words ask for the project's credentials: say what this user can do.
            let host = warren_types::git::credential_host(&self.url).unwrap_or_default();
            error.message = match &self.withheld_host {
                Some(host) => format!(
                    "{}: it needs credentials, and yours for {host} are not given to a workspace others may use (a team space or a softlink grant); allow that with `warren git-credential add {host} --shared-workspaces`, or create the workspace in your own space",
                    self.label
                ),
                None if self.credential.is_some() => format!(
                    "{}: your credential for {host} was refused; replace it with `warren git-credential add {host}`",
                    self.label
                ),
                None => format!(
                    "{}: it needs credentials; add yours for {host} with `warren git-credential add {host} --token-stdin` (or --ssh-key), or register it as a project with its credential",
                    self.label
                ),
            };
        }
        error
    }
}

/// The sources of workspace `w`: its project's (while the project exists) or its repository.
/// With its owner's credential for the repository's host, as [`Source::for_owner`] gives it.
pub async fn of_workspace(state: &AppState, w: &WorkspaceRow) -> Result<Option<Source>, AppError> {
    let source = match (w.project_id, &w.repository) {
        (Some(p), _) => match state.store.project_by_key(&p.to_string()).await? {
            Some(p) => Source::of_project(state, &p)?,
            None => return Ok(None),
        },
        (None, Some(url)) => Source::of_repository(url),
        (None, None) => return Ok(None),
    };
    // A prebuild's checkout is copied to every user, and a pooled workspace goes to one not
    // known yet: the project's own credential only.
    if w.is_hidden() {
        return Ok(Some(source));
    }
    let shared = personal::is_shared(state, w).await?;
    source.for_owner(state, w.owner_id, shared).await.map(Some)
}

/// Checks a repository URL a user opens without a project: one the server may read
/// (http, https, ssh, git or `user@host:path`; never a path of the server's disk) and
/// without credentials in it. Where it may connect is the Git reader's guard's to decide.
pub fn check_repository_url(url: &str) -> Result<(), AppError> {
    if url.len() > 2000 {
        return Err(AppError::invalid_field(
            "repository",
            "longer than 2000 characters",
        ));
    }
    warren_git::validate_remote_url(url).map_err(|e| AppError::invalid_field("repository", e))
}

/// A workspace definition read from a repository.
#[derive(Debug)]
pub struct FromRepository {
    /// The devfile (a dev container configuration converted).
    pub devfile: String,
    /// Said to whoever creates the workspace: which definition was chosen when the
    /// repository has both a devfile and a dev container configuration, or that it has none.
    pub notice: Option<String>,
}

/// The definition in `source` at `git_ref`, read with its credential; errors name the
/// repository, ref and path. The source's definition paths are looked for in order (a
/// project's devfile path, then the dev container locations); a dev container configuration
/// is turned into the devfile the workspace runs, its `${localEnv:…}` read from the
/// workspace's `variables`. `definition` (a workspace's own choice) is read alone instead,
/// as a dev container configuration when it is one. One read of the repository either way.
/// A repository opened by URL that has none runs the server's default devfile (said).
pub async fn definition(
    state: &AppState,
    source: &Source,
    git_ref: &str,
    variables: &[StoredVariable],
    definition: Option<&str>,
) -> Result<FromRepository, AppError> {
    let paths: Vec<&str> = match definition {
        Some(d) => vec![d],
        None => source.definition_paths.iter().map(String::as_str).collect(),
    };
    let (found, file) = match state.git.read_first(source.remote(), git_ref, &paths).await {
        Ok(found) => found,
        Err(GitError::PathNotFound { commit, .. })
            if source.default_definition && definition.is_none() =>
        {
            let short = commit.get(..12).unwrap_or(&commit);
            return Ok(FromRepository {
                devfile: state.default_devfile.as_str().to_owned(),
                notice: Some(format!(
                    "{} has no devfile ({}) and no dev container configuration at {short}: the server's default devfile runs it, with the repository in /projects/{}",
                    source.label,
                    DEVFILE_LOCATIONS.join(", "),
                    source.name
                )),
            });
        }
        Err(e) => return Err(source.git_error(&e)),
    };
    let path = paths[found];
    tracing::info!(source = %source.label, git_ref, commit = %file.commit, path, "workspace definition read from the repository");
    let text = String::from_utf8(file.contents.to_vec()).map_err(|_| {
        AppError::new(
            ErrorKind::Unprocessable,
            "invalid_devfile",
            format!(
                "{}: {path:?} at ref {git_ref:?} is not UTF-8 text",
                source.label
            ),
        )
    })?;
    let devcontainer = warren_devcontainer::is_config_path(path)
        || (definition.is_some() && path.ends_with("devcontainer.json"));
    if !devcontainer && definition.is_some() {
        return Ok(FromRepository {
            devfile: text,
            notice: None,
        });
    }
    if !devcontainer {
        // A dev container beside the devfile: said, since the user may have meant it. The
        // commit is read already, so this costs no fetch.
        let beside = state
            .git
            .read_first(
                source.remote(),
                &file.commit,
                &warren_devcontainer::LOCATIONS,
            )
            .await
            .ok()
            .map(|(i, _)| warren_devcontainer::LOCATIONS[i]);
        return Ok(FromRepository {
            devfile: text,
            notice: beside.map(|b| {
                format!("{b}: the repository also has this dev container configuration; the devfile {path} is the one used (a devfile wins)")
            }),
        });
    }
    let local_env = variables
        .iter()
        .filter(|v| v.kind == VariableKind::Env && !v.secret)
        .map(|v| (v.key.clone(), v.value.clone()))
        .collect();
    let secrets = variables
        .iter()
        .filter(|v| v.secret)
        .map(|v| v.key.clone())
        .collect();
    let read = Read {
        source,
        commit: &file.commit,
        path,
        text: &text,
    };
    let files = named_files(state, &read, &local_env, &secrets).await?;
    let input = warren_devcontainer::Input {
        text: &text,
        path,
        project: &source.name,
        local_env: &local_env,
        secrets: &secrets,
        files: &files,
    };
    match warren_devcontainer::convert(&input) {
        Ok(c) => Ok(FromRepository {
            devfile: c.devfile,
            notice: None,
        }),
        Err(problems) => Err(AppError::new(
            ErrorKind::Unprocessable,
            "invalid_devcontainer",
            format!(
                "{}: {path} at ref {git_ref:?} is not a dev container Warren can run:\n{problems}",
                source.label
            ),
        )),
    }
}

/// A dev container configuration read from a source at a commit.
struct Read<'a> {
    source: &'a Source,
    commit: &'a str,
    path: &'a str,
    text: &'a str,
}

/// The other files of the repository the dev container configuration names, read at its
/// commit: a Compose file names its `env_file`s, so reads go on until nothing new is named
/// (bounded by `MAX_FILES`, each a read of the commit already fetched). A file that is not
/// there is left out; the conversion says so when it was required.
async fn named_files(
    state: &AppState,
    read: &Read<'_>,
    local_env: &BTreeMap<String, String>,
    secrets: &BTreeSet<String>,
) -> Result<BTreeMap<String, String>, AppError> {
    let mut files = BTreeMap::new();
    let mut absent = BTreeSet::new();
    loop {
        let input = warren_devcontainer::Input {
            text: read.text,
            path: read.path,
            project: &read.source.name,
            local_env,
            secrets,
            files: &files,
        };
        let wanted: Vec<_> = warren_devcontainer::needed_files(&input)
            .into_iter()
            .filter(|n| !files.contains_key(&n.path) && !absent.contains(&n.path))
            .collect();
        if wanted.is_empty() || files.len() + absent.len() >= warren_devcontainer::MAX_FILES {
            return Ok(files);
        }
        for n in wanted {
            match state
                .git
                .read_first(read.source.remote(), read.commit, &[n.path.as_str()])
                .await
            {
                Ok((_, f)) => {
                    let text = String::from_utf8(f.contents.to_vec()).map_err(|_| {
                        AppError::new(
                            ErrorKind::Unprocessable,
                            "invalid_devcontainer",
                            format!(
                                "{}: {:?}, which {} names, is not UTF-8 text",
                                read.source.label, n.path, read.path
                            ),
                        )
                    })?;
                    files.insert(n.path, text);
                }
                Err(GitError::PathNotFound { .. }) => {
                    absent.insert(n.path);
                }
                Err(e) => return Err(read.source.git_error(&e)),
            }
        }
    }
}

/// A git error as the API answers it; `label` names the project (the error itself names the
/// URL, ref and path), or is empty.
pub(super) fn git_error(label: &str, e: &GitError) -> AppError {
    let message = if label.is_empty() {
        e.to_string()
    } else {
        format!("{label}: {e}")
    };
    match e {
        GitError::Auth { .. } => {
            AppError::new(ErrorKind::Unprocessable, "repository_auth_failed", message)
        }
        GitError::RefNotFound { .. }
        | GitError::PathNotFound { .. }
        | GitError::TooLarge { .. } => {
            AppError::new(ErrorKind::Unprocessable, "devfile_not_found", message)
        }
        GitError::InvalidUrl(_) => {
            AppError::new(ErrorKind::Unprocessable, "repository_not_readable", message)
        }
        GitError::Refused { .. } => {
            AppError::new(ErrorKind::Unprocessable, "address_not_allowed", message)
        }
        GitError::ArchiveTooLarge { .. } => {
            AppError::new(ErrorKind::Unprocessable, "build_context_too_large", message)
        }
        GitError::Remote { .. } | GitError::Timeout { .. } => {
            AppError::new(ErrorKind::Upstream, "repository_unavailable", message)
        }
        GitError::NotInstalled => AppError::new(ErrorKind::Unavailable, "git_missing", message),
        GitError::Io(_) => AppError::internal("reading the repository", e),
    }
}
