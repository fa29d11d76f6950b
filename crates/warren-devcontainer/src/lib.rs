//! warren-devcontainer: a Development Container configuration (`devcontainer.json`, the
//! containers.dev specification) read as Warren reads a devfile, and turned into the devfile
//! the workspace runs.
//!
//! The pipeline is [`convert`]: size cap and JSONC syntax ([`jsonc`]) → the variables
//! substituted in every string ([`variables`]) → every property of the specification looked at
//! ([`properties`]): honoured, accepted with a [`Notice`] that says what Warren does instead, or
//! refused by name with the reason (the message then holds "not supported by Warren") → a
//! devfile ([`devfile`]), which then goes through `warren_devfile::parse_devfile` like any other, so
//! everything after (render, stop and start, resize, SSH, the editor, isolation) is the same
//! for both definitions.
//!
//! Nothing here reads files or the network: the caller hands in the text and says where it
//! was found; the Dockerfile and the build context are paths relative to that place. The
//! other files a configuration reads (its Compose files) are handed in too, after
//! [`needed_files`] has said which.

pub mod build;
pub mod compose;
mod customizations;
pub mod devfile;
pub mod features;
mod isolation;
pub mod jsonc;
pub mod lifecycle;
pub mod properties;
pub mod variables;

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

pub use warren_devfile::Notice;

/// Configurations larger than this are refused before any parsing (published ones are a few
/// KiB; the cap bounds what one request can make the server parse).
pub const MAX_CONFIG_BYTES: usize = 256 * 1024;

/// At most this many other files of the repository are read for one configuration (its
/// Compose files, `.env` and `env_file`s): a bound on what one create makes the server read.
pub const MAX_FILES: usize = 32;

/// Where the specification has tools look for a configuration, first match first. A third
/// form, `.devcontainer/<folder>/devcontainer.json`, names one of several configurations.
pub const LOCATIONS: [&str; 2] = [".devcontainer/devcontainer.json", ".devcontainer.json"];

/// Whether `path` (relative to a repository's root) is where a dev container configuration
/// lives: one of [`LOCATIONS`] or `.devcontainer/<folder>/devcontainer.json`.
pub fn is_config_path(path: &str) -> bool {
    if LOCATIONS.contains(&path) {
        return true;
    }
    let parts: Vec<&str> = path.split('/').collect();
    matches!(
        parts.as_slice(),
        [".devcontainer", folder, "devcontainer.json"]
            if !folder.is_empty() && *folder != "." && *folder != ".."
    )
}

/// One problem, with the path of the offending value (`build.dockerfile`, `forwardPorts[1]`;
/// empty for the document as a whole): the devfile's own error type, so a refusal reads the
/// same for both definitions and [`Problem::is_unsupported`] tells a refusal from a mistake.
pub use warren_devfile::{DevfileError as Problem, DevfileErrors as Problems};

/// A problem at `path`.
pub(crate) fn problem(path: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        path: path.into(),
        message: message.into(),
    }
}

/// A property Warren does not honour, refused with `why` (the message holds the devfile's
/// "not supported by Warren", which [`Problem::is_unsupported`] looks for).
pub(crate) fn unsupported(path: impl Into<String>, what: &str, why: &str) -> Problem {
    problem(path, format!("{what} is not supported by Warren: {why}"))
}

/// What a conversion knows besides the text.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// The configuration (JSON with comments and trailing commas, as the tools accept).
    pub text: &'a str,
    /// Where it was found, relative to the repository's root (one of [`LOCATIONS`] or
    /// `.devcontainer/<folder>/devcontainer.json`); relative paths in it start from its folder.
    pub path: &'a str,
    /// The repository's name: the folder its sources are in (`/workspaces/<project>`),
    /// `${localWorkspaceFolderBasename}`.
    pub project: &'a str,
    /// `${localEnv:NAME}`: on Warren the values the user gives when creating the workspace
    /// (a workspace's variables), since the user's own machine is not where it runs.
    pub local_env: &'a BTreeMap<String, String>,
    /// The names of the workspace's secret variables: `${localEnv:NAME}` of one is refused,
    /// since the definition is stored as text and a secret is kept encrypted (the workspace
    /// has it in its environment anyway).
    pub secrets: &'a BTreeSet<String>,
    /// The other files of the repository the configuration reads, by path from the
    /// repository's root, as [`needed_files`] names them; a missing one is a problem.
    pub files: &'a BTreeMap<String, String>,
}

/// The files of the repository a configuration reads besides itself, as far as
/// `input.files` tells (a Compose file names its services' `env_file`s): a caller reads
/// these, adds them to `files` and asks again until no new one is named. None for a
/// configuration that is not valid (its conversion says why).
pub fn needed_files(input: &Input<'_>) -> Vec<compose::Needed> {
    let Ok(value) = jsonc::parse(input.text) else {
        return vec![];
    };
    let Ok(value) = variables::substitute(value, input) else {
        return vec![];
    };
    compose::needed_files(&value, input)
}

/// A configuration as Warren runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Converted {
    /// The devfile (YAML), valid for `warren_devfile::parse_devfile`.
    pub devfile: String,
    /// The properties accepted without acting on them as the specification says, and what
    /// Warren does instead; shown by `warren devcontainer validate` and with the workspace.
    pub notices: Vec<Notice>,
}

/// Turns a dev container configuration into the devfile its workspace runs. Every problem is
/// reported, each with its path; nothing of the specification is dropped in silence.
pub fn convert(input: &Input<'_>) -> Result<Converted, Problems> {
    let value = jsonc::parse(input.text).map_err(|p| Problems(vec![p]))?;
    let value = variables::substitute(value, input)?;
    let mut notices = Vec::new();
    let config = properties::read(&value, input, &mut notices)?;
    let mut devfile = devfile::build(&config, input.project, &mut notices);
    // The notices travel with the devfile, so the workspace shows them as a devfile's own.
    devfile["attributes"][warren_devfile::DEVCONTAINER_ATTRIBUTE] =
        serde_json::json!({"path": input.path, "notices": notices});
    // The devfile's own checks are the last word: a conversion that produced something they
    // refuse is reported with their paths, prefixed so the reader knows whose words they are.
    let text = serde_yaml::to_string(&devfile).map_err(|e| {
        Problems(vec![problem(
            "",
            format!("the devfile could not be written: {e}"),
        )])
    })?;
    if let Err(errors) = warren_devfile::parse_devfile(&text) {
        return Err(Problems(
            errors
                .0
                .into_iter()
                .map(|e| problem("", format!("in the devfile made of it: {e}")))
                .collect(),
        ));
    }
    Ok(Converted {
        devfile: text,
        notices,
    })
}
