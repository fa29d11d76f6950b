//! `warren devfile validate|render`: the server's own devfile library, run locally.

use crate::input::{self, read_text, KeyValue};
use crate::{CliError, DevfileCommand};
use std::path::PathBuf;
use warren_devfile::{ProjectSource, RenderRequest, ResolvedVariable};
use warren_types::api::{VariableKind, WorkspaceResources};
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
    #[arg(long, value_parser = input::cpu)]
    pub cpu: Option<String>,
    #[arg(long, value_parser = input::memory)]
    pub memory: Option<String>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = input::key_value)]
    pub vars: Vec<KeyValue>,
    /// Render the stopped form (replicas 0).
    #[arg(long)]
    pub stopped: bool,
    /// Print the objects as a JSON array instead of YAML documents.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: DevfileCommand) -> Result<(), CliError> {
    match cmd {
        DevfileCommand::Validate { file } => {
            let text = read_text("devfile", &file)?;
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

fn render(a: RenderArgs) -> Result<(), CliError> {
    let text = read_text("devfile", &a.file)?;
    let devfile = parse(&a.file, &text)?;
    let agent_config = match &a.agent_config {
        Some(p) => crate::commands::read_agent_config(p)?,
        None => AgentConfig::default(),
    };
    let resources = (a.cpu.is_some() || a.memory.is_some()).then(|| WorkspaceResources {
        cpu: a.cpu.clone(),
        memory: a.memory.clone(),
    });
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
        variables: &variables,
        desired_state: if a.stopped {
            DesiredState::Stopped
        } else {
            DesiredState::Running
        },
        dotfiles_url: None,
        starter: None,
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
