//! `warren devfile validate|render`: the server's own devfile library, run locally.

use crate::input::{self, read_text, KeyValue};
use crate::{CliError, DevfileCommand};
use std::path::PathBuf;
use warren_devfile::{ProjectSource, RenderRequest, ResolvedVariable};
use warren_types::api::VariableKind;
use warren_types::config::AgentConfig;
use warren_types::{AgentId, DesiredState, WorkspaceId};

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The devfile (`-` for stdin).
    pub file: PathBuf,
    /// Workspace name used in object names (a DNS label).
    #[arg(long, default_value = "dev")]
    pub name: String,
    /// Agent configuration (TOML, YAML or JSON by extension); default: the built-in defaults.
    #[arg(long)]
    pub agent_config: Option<PathBuf>,
    /// Render the project clone for this repository.
    #[arg(long)]
    pub git_url: Option<String>,
    /// Git ref of --git-url.
    #[arg(long = "ref", requires = "git_url")]
    pub git_ref: Option<String>,
    #[command(flatten)]
    pub limits: crate::LimitArgs,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = input::key_value)]
    pub vars: Vec<KeyValue>,
    /// Render the stopped form (replicas 0).
    #[arg(long)]
    pub stopped: bool,
    /// Print the objects as a JSON array instead of YAML documents.
    #[arg(long)]
    pub json: bool,
    /// A devfile registry for a `parent` named by `id` without `registryUrl` (repeatable).
    #[arg(
        long = "devfile-registry",
        env = "WARREN_DEVFILE_REGISTRIES",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub registries: Vec<String>,
}

pub fn run(cmd: DevfileCommand) -> Result<(), CliError> {
    match cmd {
        DevfileCommand::Validate { file, registries } => {
            let text = read_text("devfile", &file)?;
            let text = with_parent(&file, &text, &registries)?;
            let devfile = parse(&file, &text)?;
            println!("{}: Warren can run this devfile.", file.display());
            print!("{}", ensure_newline(warren_devfile::summary(&devfile)));
            Ok(())
        }
        DevfileCommand::Render(args) => render(*args),
    }
}

fn ensure_newline(mut s: String) -> String {
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// Parses, printing every error with its path on stderr when the devfile is refused.
fn parse(file: &std::path::Path, text: &str) -> Result<warren_devfile::Devfile, CliError> {
    warren_devfile::parse_devfile(text).map_err(|errs| {
        for e in &errs.0 {
            eprintln!("{}: {e}", file.display());
        }
        CliError::Failed(format!(
            "{} is not a devfile Warren can run ({} error{})",
            file.display(),
            errs.0.len(),
            if errs.0.len() == 1 { "" } else { "s" }
        ))
    })
}

/// Fetches parents over HTTP(S), as the server does (without its cache).
struct HttpFetch(reqwest::Client);

impl warren_devfile::parent::ParentFetcher for HttpFetch {
    async fn fetch(&self, url: &str) -> Result<String, String> {
        let resp = self
            .0
            .get(url)
            .send()
            .await
            .map_err(|e| format!("cannot fetch: {}", warren_types::error_chain(&e)))?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status()));
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("reading the answer: {}", warren_types::error_chain(&e)))?;
        if body.len() > warren_devfile::MAX_DEVFILE_BYTES {
            return Err(format!(
                "larger than {} KiB",
                warren_devfile::MAX_DEVFILE_BYTES >> 10
            ));
        }
        String::from_utf8(body.to_vec()).map_err(|_| "not UTF-8 text".to_owned())
    }
}

/// The devfile with its parent fetched and merged in (the text itself without one); on a
/// refusal every error is printed with its path.
fn with_parent(
    file: &std::path::Path,
    text: &str,
    registries: &[String],
) -> Result<String, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| CliError::Failed(format!("cannot make an HTTP client: {e}")))?;
    let resolved = runtime.block_on(warren_devfile::parent::resolve(
        text,
        registries,
        &HttpFetch(client),
    ));
    match resolved {
        Ok(r) => {
            for p in &r.parents {
                eprintln!("{}: parent {p} merged in", file.display());
            }
            Ok(r.text)
        }
        Err(errs) => {
            for e in &errs.0 {
                eprintln!("{}: {e}", file.display());
            }
            Err(CliError::Failed(format!(
                "{}: its parent could not be merged in",
                file.display()
            )))
        }
    }
}

fn render(a: RenderArgs) -> Result<(), CliError> {
    let text = read_text("devfile", &a.file)?;
    let text = with_parent(&a.file, &text, &a.registries)?;
    let devfile = parse(&a.file, &text)?;
    let agent_config = match &a.agent_config {
        Some(p) => crate::commands::read_agent_config(p)?,
        None => AgentConfig::default(),
    };
    let resources = a.limits.resources();
    let variables: Vec<ResolvedVariable> = a
        .vars
        .iter()
        .map(|kv| ResolvedVariable {
            key: kv.key.clone(),
            value: kv.value.clone(),
            kind: VariableKind::Env,
        })
        .collect();
    let project_name = a.git_url.as_deref().map(repo_name).unwrap_or_default();
    let req = RenderRequest {
        workspace_name: &a.name,
        workspace_id: WorkspaceId(0),
        agent_id: AgentId(0),
        agent_config: &agent_config,
        project: a.git_url.as_deref().map(|url| ProjectSource {
            name: &project_name,
            git_url: url,
            git_ref: a.git_ref.as_deref().unwrap_or(""),
            credential: None,
        }),
        resources: resources.as_ref(),
        machine: None,
        variables: &variables,
        desired_state: if a.stopped {
            DesiredState::Stopped
        } else {
            DesiredState::Running
        },
        dotfiles_url: None,
        starter: None,
        prebuild: false,
        seed: None,
    };
    let rendered = warren_devfile::render(&devfile, &req)
        .map_err(|e| CliError::Failed(format!("{}: cannot render: {e}", a.file.display())))?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rendered.objects).unwrap_or_default()
        );
    } else {
        print!("{}", warren_devfile::objects_to_yaml(&rendered.objects));
    }
    Ok(())
}

/// `https://host/org/my-app.git` → `my-app`: the directory the clone goes to.
fn repo_name(url: &str) -> String {
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("project");
    let name = last.strip_suffix(".git").unwrap_or(last);
    if name.is_empty() {
        "project".into()
    } else {
        name.into()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn repo_names() {
        assert_eq!(super::repo_name("https://h/org/my-app.git"), "my-app");
        assert_eq!(super::repo_name("git@h:org/x.git/"), "x");
        assert_eq!(super::repo_name(""), "project");
    }
}
