//! The create form: its fields, how its text becomes a request, and where an error lands.

use super::*;

#[derive(Debug, Default, Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    project: String,
    /// A Git repository to open without a project (`URL` or `URL#REF`).
    #[serde(default)]
    repository: String,
    #[serde(default)]
    devfile: String,
    /// An uploaded devfile (multipart); wins over the pasted one when not empty.
    #[serde(default)]
    devfile_file: String,
    #[serde(default)]
    agent: String,
    /// The space's path; empty: the creator's personal space.
    #[serde(default)]
    space: String,
    /// A machine class of the agent's; empty: its default, or the size in numbers.
    #[serde(default)]
    class: String,
    #[serde(default)]
    cpu: String,
    #[serde(default)]
    memory: String,
    #[serde(default, rename = "ref")]
    git_ref: String,
    /// With a project: the definition in its repository to run instead of the project's.
    #[serde(default)]
    definition: String,
    /// Without a project: the devfile's starter project to clone.
    #[serde(default)]
    starter: String,
    /// `KEY=value` per line.
    #[serde(default)]
    variables: String,
    /// `KEY=value` per line, stored encrypted and never shown again.
    #[serde(default)]
    secret_variables: String,
}

pub(super) fn opt(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// Reads `KEY=value` lines; a line without `=` is an error naming it.
pub(super) fn parse_variables(
    text: &str,
    secret: bool,
    field: &str,
) -> Result<Vec<VariableInput>, AppError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(AppError::invalid_field(
                field,
                format!("line {}: expected KEY=value", i + 1),
            ));
        };
        out.push(VariableInput {
            key: k.trim().to_owned(),
            value: v.to_owned(),
            kind: VariableKind::Env,
            secret,
        });
    }
    Ok(out)
}

/// The form field a domain error concerns, as the create form names its fields.
pub(super) fn form_field(e: &AppError) -> Option<&'static str> {
    let f = e.field.as_deref()?;
    Some(match f {
        "name" => "name",
        "agent" => "agent",
        "space" => "space",
        "project" | "project devfile" | "repository devfile" => "project",
        "repository" => "repository",
        "devfile" => "devfile",
        "ref" => "ref",
        "starter" => "starter",
        "definition" => "definition",
        "resources.class" | "resources" => "class",
        f if f.starts_with("resources.cpu") || f == "cpu" => "cpu",
        f if f.starts_with("resources.memory") || f == "memory" => "memory",
        f if f.starts_with("resources") => "cpu",
        f if f.starts_with("variables") => "variables",
        "secret_variables" => "secret_variables",
        _ => return None,
    })
}

pub(super) async fn create_form(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    f: &CreateForm,
    error: Option<&AppError>,
) -> Result<Response, UiError> {
    let projects = projects::list(state, &viewer.who).await?;
    let agents = agents::list(state, &viewer.who).await?;
    // Where the viewer may create: developer or owner there (the personal space among them).
    let spaces: Vec<String> = spaces::list(state, &viewer.who)
        .await?
        .into_iter()
        .filter(|s| s.your_role >= Some(SpaceRole::Developer))
        .map(|s| s.path)
        .collect();
    let personal = format!("users/{}", viewer.who.user.username);
    // A repository's definition that is wrong is the repository field's business when one
    // was opened by URL, the project's otherwise.
    let err_field = error.and_then(form_field).map(|f_| {
        if f_ == "project" && !f.repository.trim().is_empty() {
            "repository"
        } else {
            f_
        }
    });
    let err_for = |name: &str| -> Option<String> {
        error
            .filter(|_| err_field == Some(name))
            .map(|e| e.message.clone())
    };
    let general = error.filter(|_| err_field.is_none());
    let field = |id: &'static str, label: &'static str, value: &str, hint: &'static str| {
        let e = err_for(id);
        layout::input(layout::Input {
            id,
            label,
            value: Some(value),
            placeholder: Some(hint),
            error: e.as_deref(),
            ..layout::Input::default()
        })
    };
    let devfile_err = err_for("devfile");
    let (dev_described, dev_bad) = invalid("devfile", devfile_err.as_deref());
    let vars_err = err_for("variables");
    let (vars_described, vars_bad) = invalid("variables", vars_err.as_deref());
    let agent_err = err_for("agent");
    let space_err = err_for("space");
    let project_err = err_for("project");
    let body = html! {
        @if let Some(e) = general { p.error role="alert" { (e.message) } }
        form.card method="post" action="/workspaces/new" enctype="multipart/form-data" {
            (csrf(viewer))
            (field("name", "Name (optional)", &f.name, "generated when empty"))
            (select_field("project", "Project", project_err.as_deref(), html! {
                option value="" selected[f.project.is_empty()] { "None: use the devfile below" }
                @for p in &projects {
                    option value=(p.name) selected[f.project == p.name] { (p.name) " — " (p.git_url) }
                }
            }))
            (field("repository", "Or a repository (optional)", &f.repository, "a Git URL to open without a project: https://git.example.com/team/app.git"))
            (field("ref", "Git ref (optional)", &f.git_ref, "the default branch"))
            (field("definition", "Definition in the repository (optional)", &f.definition, "its devfile, else .devcontainer/devcontainer.json; e.g. .devcontainer/python/devcontainer.json"))
            (field("starter", "Starter project (optional)", &f.starter, "without a project: the devfile's first"))
            div.field {
                label for="devfile" { "Devfile (YAML)" }
                p.hint id="devfile-hint" { "Paste a devfile, or upload one below. Left empty: the project's devfile, else the server's default." }
                textarea id="devfile" name="devfile" rows="12" spellcheck="false"
                    aria-describedby=(dev_described.unwrap_or_else(|| "devfile-hint".into())) aria-invalid=[dev_bad] { (f.devfile) }
                (field_error("devfile", devfile_err.as_deref()))
                label for="devfile_file" { "Or upload a devfile" }
                input type="file" id="devfile_file" name="devfile_file" accept=".yaml,.yml,text/yaml";
            }
            (select_field("agent", "Agent", agent_err.as_deref(), html! {
                @if agents.len() != 1 { option value="" { "Choose an agent" } }
                @for a in &agents {
                    option value=(a.name) selected[f.agent == a.name || agents.len() == 1] {
                        (a.name)
                        @if a.last_seen_at.is_none() { " (never connected)" }
                    }
                }
            }))
            (select_field("space", "Space", space_err.as_deref(), html! {
                @for p in &spaces {
                    option value=(p) selected[f.space == *p || (f.space.is_empty() && *p == personal)] {
                        (p) @if *p == personal { " (yours)" }
                    }
                }
            }))
            @if agents.iter().any(|a| !a.config.machine_classes.is_empty()) {
                (select_field("class", "Machine class", err_for("class").as_deref(), html! {
                    option value="" selected[f.class.is_empty()] { "Automatic: what the definition's hostRequirements need, else the agent's default (or the size below)" }
                    @for a in &agents {
                        @for c in &a.config.machine_classes {
                            option value=(c.name) selected[f.class == c.name] {
                                (c.name) @if !c.description.is_empty() { " — " (c.description) }
                                @if agents.len() > 1 { " (agent " (a.name) ")" }
                            }
                        }
                    }
                }))
            }
            div.row {
                (field("cpu", "CPU (optional)", &f.cpu, "e.g. 2 or 500m"))
                (field("memory", "Memory (optional)", &f.memory, "e.g. 4Gi"))
            }
            div.field {
                label for="variables" { "Environment variables (optional)" }
                p.hint id="variables-hint" { "One KEY=value per line." }
                textarea id="variables" name="variables" rows="3" spellcheck="false"
                    aria-describedby=(vars_described.unwrap_or_else(|| "variables-hint".into())) aria-invalid=[vars_bad] { (f.variables) }
                (field_error("variables", vars_err.as_deref()))
            }
            div.field {
                label for="secret_variables" { "Secret variables (optional)" }
                p.hint id="secret-hint" { "One KEY=value per line; stored encrypted, never shown again." }
                textarea id="secret_variables" name="secret_variables" rows="2" spellcheck="false"
                    aria-describedby="secret-hint" { }
                (field_error("secret_variables", err_for("secret_variables").as_deref()))
            }
            button.primary type="submit" { "Create workspace" }
        }
    };
    Ok(layout::page(viewer, status, "New workspace", body))
}

#[derive(Debug, Default, Deserialize)]
pub struct NewQuery {
    #[serde(default)]
    project: Option<String>,
    /// A repository to open (`URL`, or `URL#REF` with the `#` escaped as `%23`).
    #[serde(default)]
    repo: Option<String>,
    #[serde(default, rename = "ref")]
    git_ref: Option<String>,
}

/// `GET /workspaces/new`, and `GET /new?repo=URL[&ref=REF]` (the Gitpod and Codespaces
/// habit of a link that opens a repository): the form, filled in. A GET creates nothing (a
/// link must not make workspaces on its visitor's behalf); the visitor confirms.
pub async fn new_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<NewQuery>,
) -> Result<Response, UiError> {
    let (repository, in_url) = match q.repo.as_deref().map(str::trim) {
        Some(r) => {
            let (url, r) = warren_types::git::split_repository_ref(r);
            (url.to_owned(), r.map(str::to_owned))
        }
        None => (String::new(), None),
    };
    let f = CreateForm {
        project: q.project.unwrap_or_default(),
        repository,
        git_ref: q.git_ref.or(in_url).unwrap_or_default(),
        ..CreateForm::default()
    };
    create_form(&state, &viewer, StatusCode::OK, &f, None).await
}

/// `POST /workspaces/new`
pub async fn create(
    State(state): State<AppState>,
    Posted { viewer, form: f }: Posted<CreateForm>,
) -> Result<Response, UiError> {
    let request = (|| -> Result<CreateWorkspaceRequest, AppError> {
        let mut variables = parse_variables(&f.variables, false, "variables")?;
        variables.extend(parse_variables(
            &f.secret_variables,
            true,
            "secret_variables",
        )?);
        let resources = match (opt(&f.class), opt(&f.cpu), opt(&f.memory)) {
            (None, None, None) => None,
            (class, cpu, memory) => Some(WorkspaceResources { class, cpu, memory }),
        };
        let (repository, in_url) = match opt(&f.repository) {
            Some(r) => {
                let (url, r) = warren_types::git::split_repository_ref(&r);
                (Some(url.to_owned()), r.map(str::to_owned))
            }
            None => (None, None),
        };
        let git_ref = match (opt(&f.git_ref), in_url) {
            (Some(_), Some(_)) => {
                return Err(AppError::invalid_field(
                    "ref",
                    "give the ref once: in the repository's URL after # or here",
                ))
            }
            (a, b) => a.or(b),
        };
        Ok(CreateWorkspaceRequest {
            project: opt(&f.project),
            repository,
            devfile: opt(&f.devfile_file).or_else(|| opt(&f.devfile)),
            agent: opt(&f.agent),
            name: opt(&f.name),
            resources,
            variables,
            git_ref,
            definition: opt(&f.definition),
            starter: opt(&f.starter),
            space: opt(&f.space),
        })
    })();
    let result = match request {
        Ok(req) => domain::create(&state, &viewer.who, &req).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(w) => Ok(Redirect::to(&format!("/workspaces/{}", w.name)).into_response()),
        Err(e) if is_form_error(&e) => {
            let status = crate::http::error::status_of(e.kind);
            // The uploaded file is shown in the text area, so a fix does not need it again.
            let f = CreateForm {
                devfile: opt(&f.devfile_file).unwrap_or(f.devfile.clone()),
                devfile_file: String::new(),
                secret_variables: String::new(),
                ..f
            };
            create_form(&state, &viewer, status, &f, Some(&e)).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Errors the form shows beside its fields (the rest get an error page).
pub(super) fn is_form_error(e: &AppError) -> bool {
    matches!(
        e.kind,
        ErrorKind::Invalid | ErrorKind::Unprocessable | ErrorKind::Conflict | ErrorKind::Forbidden
    ) || e.code == "quota_exceeded"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_lines() {
        let v = parse_variables("A=1\n\nB = two=2\r\n", false, "variables").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!((v[1].key.as_str(), v[1].value.as_str()), ("B", " two=2"));
        let e = parse_variables("A=1\nnope", true, "secret_variables").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("secret_variables"));
        assert!(e.message.contains("line 2"), "{}", e.message);
    }

    #[test]
    fn errors_land_beside_their_field() {
        let f = |field: &str| form_field(&AppError::invalid_field(field, "x"));
        assert_eq!(f("resources.memory"), Some("memory"));
        assert_eq!(f("variables[3].key"), Some("variables"));
        assert_eq!(f("repository devfile"), Some("project"));
        assert_eq!(f("repository"), Some("repository"));
        assert_eq!(f("devfile"), Some("devfile"));
        assert_eq!(f("limit"), None);
    }
}
