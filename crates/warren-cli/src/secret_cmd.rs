//! `warren secret`, `warren git-credential` and `warren profile`: your own secrets —
//! environment variables and files given to your workspaces —, your credentials for forges,
//! and the name and email address your commits are made with
//! there (issue 41, item 5).

use crate::commands::{client, named, print};
use crate::output::Format;
use crate::{CliError, OutputArgs};
use clap::{Args, Subcommand};
use comfy_table::{presets, Table};
use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use warren_types::api::{
    SetGitCredentialRequest, SetProfileRequest, SetSecretRequest, UserGitCredential, UserSecret,
    VariableKind,
};

#[derive(Debug, Args)]
pub struct SecretGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: SecretCommand,
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret (replacing one of the same name): an environment variable of your
    /// workspaces, or with --file a file under /warren/variables/. The value is read from
    /// --from-file, else standard input (never an argument, which shell history and the
    /// process list would keep). Sealed on the server and never shown again. Your running
    /// workspaces get a file at once and an environment variable at their next start.
    #[command(after_long_help = "Examples:
  warren secret set NPM_TOKEN < token.txt
  printf %s \"$TOKEN\" | warren secret set GITHUB_TOKEN --projects 'web-*,api'
  warren secret set npmrc --file --from-file ~/.npmrc
  warren secret set SENTRY_DSN --shared-workspaces < dsn.txt")]
    Set {
        name: String,
        /// A file (`/warren/variables/NAME`) rather than an environment variable.
        #[arg(long)]
        file: bool,
        /// Read the value from this file (`-`: standard input, the default).
        #[arg(long, value_name = "PATH")]
        from_file: Option<PathBuf>,
        /// Only workspaces of these projects (comma-separated globs of project names; a
        /// workspace opened by URL: its repository's folder name).
        #[arg(long, value_name = "GLOBS")]
        projects: Option<String>,
        /// Also workspaces others may use (in a team space, or granted for a softlink), who
        /// could read it there.
        #[arg(long)]
        shared_workspaces: bool,
    },
    /// List your secrets (never their values).
    #[command(visible_alias = "ls")]
    List,
    /// Remove a secret from the server and from your workspaces.
    #[command(visible_alias = "rm")]
    Remove { name: String },
}

#[derive(Debug, Args)]
pub struct GitCredentialGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: GitCredentialCommand,
}

#[derive(Debug, Subcommand)]
pub enum GitCredentialCommand {
    /// Add (or replace) your credential for a forge: a token or password for an https://
    /// host, a private key for an ssh:// one. Your workspaces' Git uses it instead of the
    /// project's, so pushes are yours, and a repository opened by URL (`warren ws create
    /// --repo`) is read with it. Sealed on the server and never shown again.
    #[command(after_long_help = "Examples:
  printf %s \"$GITHUB_TOKEN\" | warren git-credential add https://github.com --token-stdin
  warren git-credential add git@git.example.com:team/app.git --ssh-key ~/.ssh/id_ed25519
  warren git-credential add https://git.example.com --username ann --password-stdin < pass.txt")]
    Add {
        /// The host (https://git.example.com, ssh://git.example.com) or a repository's URL.
        host: String,
        #[command(flatten)]
        credential: crate::space_args::CredentialArgs,
        /// Also workspaces others may use (in a team space, or granted for a softlink), who
        /// could read it there.
        #[arg(long)]
        shared_workspaces: bool,
    },
    /// List your Git credentials (never the secrets).
    #[command(visible_alias = "ls")]
    List,
    /// Remove your credential for a host (or a repository's URL on it).
    #[command(visible_alias = "rm")]
    Remove { host: String },
}

#[derive(Debug, Args)]
pub struct ProfileGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: ProfileCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Set the name and email address your commits are made with in your workspaces
    /// (GIT_AUTHOR_* and GIT_COMMITTER_*; a workspace variable or secret of the same name
    /// wins). One left out is cleared; without a name, your username is used.
    Set {
        #[arg(long)]
        full_name: Option<String>,
        #[arg(long)]
        email: Option<String>,
    },
    /// Show them.
    Show,
}

fn table(secrets: &[UserSecret]) -> String {
    if secrets.is_empty() {
        return "No secrets.\n".into();
    }
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(["NAME", "KIND", "PROJECTS", "SHARED WORKSPACES", "UPDATED"]);
    for s in secrets {
        t.add_row(vec![
            s.name.clone(),
            match s.kind {
                VariableKind::Env => "env".to_owned(),
                VariableKind::File => "file".to_owned(),
            },
            s.projects.clone().unwrap_or_else(|| "all".into()),
            if s.shared_workspaces { "yes" } else { "no" }.to_owned(),
            crate::output::time(&s.updated_at),
        ]);
    }
    let lines: Vec<String> = t
        .to_string()
        .lines()
        .map(|l| {
            l.trim_end()
                .strip_prefix(' ')
                .unwrap_or(l.trim_end())
                .to_owned()
        })
        .collect();
    format!("{}\n", lines.join("\n"))
}

/// The value from `path`, else standard input — refused when that is a terminal, as the
/// value would be echoed there.
fn read_value(path: Option<PathBuf>) -> Result<String, CliError> {
    match path.filter(|p| p.as_os_str() != "-") {
        Some(p) => Ok(crate::input::read_text("the secret's value", &p)?),
        None => {
            if std::io::stdin().is_terminal() {
                return Err(CliError::Usage(
                    "give the value on standard input (`warren secret set NAME < FILE`) or with --from-file".into(),
                ));
            }
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|source| crate::input::ReadError {
                    what: "the secret's value",
                    path: "-".into(),
                    source,
                })?;
            // `echo value |` adds a newline no one means as part of a token.
            if s.ends_with('\n') && s.matches('\n').count() == 1 {
                s.pop();
            }
            Ok(s)
        }
    }
}

pub(crate) async fn secret(out: Format, cmd: SecretCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        SecretCommand::Set {
            name,
            file,
            from_file,
            projects,
            shared_workspaces,
        } => {
            let req = SetSecretRequest {
                value: read_value(from_file)?,
                kind: if file {
                    VariableKind::File
                } else {
                    VariableKind::Env
                },
                projects,
                shared_workspaces,
            };
            let s = c.set_secret(&name, &req).await?;
            print(out, &s, |s| {
                let r#where = match s.kind {
                    VariableKind::Env => "your workspaces get it at their next start",
                    VariableKind::File => "in /warren/variables/ of your workspaces",
                };
                format!("Secret {} set ({where}).\n", s.name)
            });
        }
        SecretCommand::List => {
            let list = c.list_secrets().await?;
            print(out, &list, |l| table(l));
        }
        SecretCommand::Remove { name } => {
            named("secret", &name, c.delete_secret(&name).await)?;
            if matches!(out, Format::Table) {
                println!("Secret {name} removed.");
            }
        }
    }
    Ok(())
}

fn credential_table(list: &[UserGitCredential]) -> String {
    if list.is_empty() {
        return "No Git credentials.\n".into();
    }
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(["HOST", "KIND", "SHARED WORKSPACES", "UPDATED"]);
    for c in list {
        t.add_row(vec![
            c.host.clone(),
            c.kind.clone(),
            if c.shared_workspaces { "yes" } else { "no" }.to_owned(),
            crate::output::time(&c.updated_at),
        ]);
    }
    let lines: Vec<String> = t
        .to_string()
        .lines()
        .map(|l| l.trim_end().trim_start_matches(' ').to_owned())
        .collect();
    format!("{}\n", lines.join("\n"))
}

pub(crate) async fn git_credential(out: Format, cmd: GitCredentialCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        GitCredentialCommand::Add {
            host,
            credential,
            shared_workspaces,
        } => {
            let Some(credential) = crate::commands::projects::read_credential(&credential)? else {
                return Err(CliError::Usage(
                    "give the credential: --token-stdin, --username U --password-stdin, or --ssh-key PATH".into(),
                ));
            };
            let req = SetGitCredentialRequest {
                host,
                credential,
                shared_workspaces,
            };
            let added = c.set_git_credential(&req).await?;
            print(out, &added, |a| {
                format!(
                    "Git credential for {} set ({}); your workspaces use it instead of a project's.\n",
                    a.host, a.kind
                )
            });
        }
        GitCredentialCommand::List => {
            let list = c.list_git_credentials().await?;
            print(out, &list, |l| credential_table(l));
        }
        GitCredentialCommand::Remove { host } => {
            let wanted = warren_types::git::credential_host(&host).map_err(CliError::Usage)?;
            let list = c.list_git_credentials().await?;
            let Some(found) = list.iter().find(|c| c.host == wanted) else {
                return Err(CliError::Usage(format!(
                    "you have no Git credential for {wanted}"
                )));
            };
            c.delete_git_credential(found.id).await?;
            if matches!(out, Format::Table) {
                println!("Git credential for {wanted} removed.");
            }
        }
    }
    Ok(())
}

pub(crate) async fn profile(out: Format, cmd: ProfileCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    let u = match cmd {
        ProfileCommand::Set { full_name, email } => {
            c.set_profile(&SetProfileRequest { full_name, email })
                .await?
        }
        ProfileCommand::Show => c.me().await?,
    };
    print(out, &u, |u| {
        format!(
            "Commits in your workspaces: {} <{}>\n",
            u.full_name.as_deref().unwrap_or(&u.username),
            u.email.as_deref().unwrap_or("no email address set")
        )
    });
    Ok(())
}
