//! `warren devcontainer validate|render`: the server's dev container reader, run locally on a
//! repository's `devcontainer.json`.

use crate::input::{self, read_text, KeyValue};
use crate::CliError;
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct DevcontainerGroup {
    #[command(subcommand)]
    pub cmd: DevcontainerCommand,
}

#[derive(Debug, Subcommand)]
pub enum DevcontainerCommand {
    /// Check that Warren can run a dev container configuration: every property it does not
    /// honour is named, and what it does its own way is said.
    Validate(DevcontainerArgs),
    /// Print the devfile Warren runs a dev container configuration as (`warren devfile
    /// render` then shows its objects).
    Render(DevcontainerArgs),
}

#[derive(Debug, Args)]
pub struct DevcontainerArgs {
    /// The configuration (`.devcontainer/devcontainer.json`; `-` for stdin).
    pub file: PathBuf,
    /// The repository's name, the folder its sources are in [default: the folder holding
    /// `.devcontainer`].
    #[arg(long)]
    pub project: Option<String>,
    /// A value for `${localEnv:KEY}` (repeatable): on Warren the workspace's variables.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = input::key_value)]
    pub vars: Vec<KeyValue>,
}

pub fn run(cmd: DevcontainerCommand) -> Result<(), CliError> {
    let (args, render) = match cmd {
        DevcontainerCommand::Validate(a) => (a, false),
        DevcontainerCommand::Render(a) => (a, true),
    };
    let text = read_text("dev container configuration", &args.file)?;
    let project = args
        .project
        .clone()
        .unwrap_or_else(|| project_of(&args.file));
    let local_env: BTreeMap<String, String> = args
        .vars
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    let path = relative_path(&args.file);
    let secrets = Default::default();
    let files = named_files(&args.file, &text, &path, &project, &local_env);
    let input = warren_devcontainer::Input {
        text: &text,
        path: &path,
        project: &project,
        local_env: &local_env,
        secrets: &secrets,
        files: &files,
    };
    let file = args.file.display();
    let converted = warren_devcontainer::convert(&input).map_err(|problems| {
        for p in &problems.0 {
            eprintln!("{file}: {p}");
        }
        CliError::Failed(format!(
            "{file} is not a dev container Warren can run ({} problem{})",
            problems.0.len(),
            if problems.0.len() == 1 { "" } else { "s" }
        ))
    })?;
    for n in &converted.notices {
        eprintln!("{file}: note: {n}");
    }
    if render {
        print!("{}", converted.devfile);
    } else {
        println!("{file}: Warren can run this dev container.");
        // What it becomes, as `warren devfile validate` says it of a devfile.
        if let Ok(d) = warren_devfile::parse_devfile(&converted.devfile) {
            print!("{}", warren_devfile::summary(&d));
        }
    }
    Ok(())
}

/// The repository a configuration belongs to: the folder above `.devcontainer` (or holding
/// `.devcontainer.json`); `workspace` when that cannot be told.
fn project_of(file: &Path) -> String {
    let absolute = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_owned());
    let mut dir = absolute.parent();
    while let Some(d) = dir {
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
        match name.as_deref() {
            Some(".devcontainer") => dir = d.parent(),
            Some(n) if !n.is_empty() => return n.to_owned(),
            _ => break,
        }
    }
    "workspace".into()
}

/// The other files of the repository the configuration names (its Compose files and what
/// they name), read from the folders around `file` as the server reads them from the
/// repository; one that cannot be read is left out, for the conversion to name.
fn named_files(
    file: &Path,
    text: &str,
    path: &str,
    project: &str,
    local_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    // The repository's root: the configuration's folder, up as many levels as `path` has.
    let mut root = file.parent().map(Path::to_path_buf).unwrap_or_default();
    for _ in 1..path.split('/').count() {
        root = root.join("..");
    }
    let secrets = Default::default();
    let mut files = BTreeMap::new();
    let mut tried = std::collections::BTreeSet::new();
    loop {
        let input = warren_devcontainer::Input {
            text,
            path,
            project,
            local_env,
            secrets: &secrets,
            files: &files,
        };
        let wanted: Vec<String> = warren_devcontainer::needed_files(&input)
            .into_iter()
            .map(|n| n.path)
            .filter(|p| tried.insert(p.clone()))
            .collect();
        if wanted.is_empty() || tried.len() > warren_devcontainer::MAX_FILES {
            return files;
        }
        for p in wanted {
            if let Ok(t) = std::fs::read_to_string(root.join(&p)) {
                files.insert(p, t);
            }
        }
    }
}

/// The configuration's path from its repository's root (its folder decides where a
/// Dockerfile's path starts), as the server would see it.
fn relative_path(file: &Path) -> String {
    let parts: Vec<String> = file
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.iter().position(|p| p == ".devcontainer") {
        Some(i) => parts[i..].join("/"),
        None => warren_devcontainer::LOCATIONS[1].to_owned(),
    }
}
