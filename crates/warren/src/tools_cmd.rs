//! `warren tools build`: builds the tools image of the injected editor (code-server with its
//! Node.js) on a machine that reaches the npm registry, with the script shipped in this binary
//! (`tools/build-editor.sh`), and `warren up`'s preparation of it on first use.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use warren_types::config::{default_tools_image, DEFAULT_EDITOR_VERSION};

/// The build script; see its header for what it makes and caches.
const BUILD_SCRIPT: &str = include_str!("../tools/build-editor.sh");

#[derive(Debug, clap::Args)]
pub struct ToolsArgs {
    #[command(subcommand)]
    pub cmd: ToolsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ToolsCommand {
    /// Build the editor's tools image (code-server from the npm registry, with the Node.js
    /// that runs it) and import it into the local Docker or Podman; about two minutes the
    /// first time, then cached. Agents copy it into workspaces without touching their images.
    Build(BuildArgs),
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// code-server version (the newest that runs on Node.js 20 is the default).
    #[arg(long, default_value = DEFAULT_EDITOR_VERSION)]
    pub code_server_version: String,
    /// Image to tag [default: localhost/warren-tools:code-server-<version>, what agents use
    /// unless their configuration names another].
    #[arg(long)]
    pub image: Option<String>,
    /// Engine to import the image into: podman, docker, or none (only build the directory)
    /// [default: podman if installed, else docker].
    #[arg(long)]
    pub engine: Option<String>,
    /// Where the built directory is cached [default: WARREN_HOME/tools/code-server-<version>].
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// State directory (for the default cache).
    #[arg(long, env = "WARREN_HOME")]
    pub home: Option<PathBuf>,
}

pub async fn run(args: ToolsArgs) -> anyhow::Result<()> {
    match args.cmd {
        ToolsCommand::Build(b) => {
            let home = match b.home.clone() {
                Some(h) => h,
                None => {
                    warren_cli::credentials::warren_home(None).context("finding WARREN_HOME")?
                }
            };
            let image = b
                .image
                .clone()
                .unwrap_or_else(|| default_tools_image(&b.code_server_version));
            build(
                &home,
                &b.code_server_version,
                &image,
                b.engine.as_deref(),
                b.cache.as_deref(),
                |line| println!("{line}"),
            )
            .await
        }
    }
}

/// Runs the build script, handing each line it prints to `progress`.
pub async fn build(
    home: &Path,
    version: &str,
    image: &str,
    engine: Option<&str>,
    cache: Option<&Path>,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<()> {
    let valid = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'));
    if !valid {
        bail!("--code-server-version {version:?} is not a version");
    }
    let cache = cache
        .map(Path::to_path_buf)
        .unwrap_or_else(|| home.join("tools").join(format!("code-server-{version}")));
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-s")
        .arg("--")
        .args(["--version", version, "--image", image])
        .arg("--cache")
        .arg(&cache);
    if let Some(e) = engine {
        cmd.args(["--engine", e]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting bash for the build script")?;
    let mut stdin = child.stdin.take().context("the script's input")?;
    tokio::io::AsyncWriteExt::write_all(&mut stdin, BUILD_SCRIPT.as_bytes())
        .await
        .context("handing the build script to bash")?;
    drop(stdin);
    let stdout = BufReader::new(child.stdout.take().context("the script's output")?);
    let stderr = BufReader::new(child.stderr.take().context("the script's errors")?);
    let mut out = stdout.lines();
    let mut err = stderr.lines();
    let mut last = Vec::new();
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        tokio::select! {
            // Cancel-safe: `next_line` keeps partial lines in its reader between polls.
            line = out.next_line(), if out_open => match line {
                Ok(Some(l)) => progress(&l),
                _ => out_open = false,
            },
            // Cancel-safe, as above.
            line = err.next_line(), if err_open => match line {
                Ok(Some(l)) => {
                    progress(&l);
                    if last.len() == 20 {
                        last.remove(0);
                    }
                    last.push(l);
                }
                _ => err_open = false,
            },
        }
    }
    let status = child.wait().await.context("waiting for the build script")?;
    if !status.success() {
        bail!(
            "building the editor's tools image failed ({status}); the last errors:\n{}",
            last.join("\n")
        );
    }
    Ok(())
}
