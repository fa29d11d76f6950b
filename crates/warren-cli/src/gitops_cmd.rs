//! `warren gitops …` and `warren agent gitops …`: repositories, the policy, an agent's sources.

use crate::commands::{client, named, print, read_credential, read_stdin_line};
use crate::input::read_text;
use crate::output::{self, Format};
use crate::webhook_secret::new_webhook_secret;
use crate::{
    AgentGitopsCommand, CliError, CredentialCommand, GitopsCommand, PolicyCommand, RepoCommand,
};
use serde::de::DeserializeOwned;
use std::path::Path;
use warren_client::Client;
use warren_types::gitops::{AgentGitops, CreateRepositoryRequest, Policy};

/// Prints a generated secret once, on standard output, with how to use it on standard error.
fn show_secret(repository: &str, secret: &str) {
    eprintln!(
        "Webhook secret of {repository:?}, shown only this once: give it to the forge's push \
         webhook (POST …/api/v1/gitops/webhooks/{repository}):"
    );
    println!("{secret}");
}

/// A YAML (or, by extension, JSON) file of type `T`; `-` reads standard input.
fn read_file<T: DeserializeOwned>(what: &'static str, path: &Path) -> Result<T, CliError> {
    let text = read_text(what, path)?;
    let parsed = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_yaml::from_str(&text).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| {
        CliError::Usage(format!(
            "{} is not a valid {what}: {}",
            path.display(),
            e.lines().map(str::trim).collect::<Vec<_>>().join(" ")
        ))
    })
}

pub(crate) async fn gitops(out: Format, cmd: GitopsCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        GitopsCommand::Repo { cmd } => match cmd {
            RepoCommand::Add {
                name,
                url,
                credential,
                webhook_secret_stdin,
                generate_webhook_secret,
            } => {
                let webhook_secret = if webhook_secret_stdin {
                    Some(read_stdin_line("webhook secret")?)
                } else {
                    generate_webhook_secret.then(new_webhook_secret)
                };
                let r = c
                    .create_repository(&CreateRepositoryRequest {
                        name,
                        url,
                        credential: read_credential(&credential)?,
                        webhook_secret: webhook_secret.clone(),
                    })
                    .await?;
                if let (true, Some(s)) = (generate_webhook_secret, &webhook_secret) {
                    show_secret(&r.name, s);
                }
                if out == Format::Table {
                    eprintln!("Repository {:?} registered (id {}).", r.name, r.id);
                } else {
                    print(out, &r, |_| String::new());
                }
            }
            RepoCommand::List => print(out, &c.list_repositories().await?, |r| {
                output::repositories(r)
            }),
            RepoCommand::Show { name } => {
                let r = named("repository", &name, c.get_repository(&name).await)?;
                print(out, &r, output::repository);
            }
            RepoCommand::Rm { name } => {
                named("repository", &name, c.delete_repository(&name).await)?;
                eprintln!("Repository {name:?} removed.");
            }
            RepoCommand::Credential { cmd } => {
                let (name, credential) = match cmd {
                    CredentialCommand::Set { name, credential } => {
                        let c = read_credential(&credential)?.ok_or_else(|| {
                            CliError::Usage(
                                "give the credential: --token-stdin, --password-stdin or --ssh-key"
                                    .into(),
                            )
                        })?;
                        (name, Some(c))
                    }
                    CredentialCommand::Rm { name } => (name, None),
                };
                let r = named(
                    "repository",
                    &name,
                    c.set_repository_credential(&name, credential.as_ref())
                        .await,
                )?;
                print(out, &r, output::repository);
            }
            RepoCommand::WebhookSecret { name, choice } => {
                let secret = choice.secret()?;
                let generate = choice.generate;
                let r = named(
                    "repository",
                    &name,
                    c.set_webhook_secret(&name, secret.as_deref()).await,
                )?;
                if let (true, Some(s)) = (generate, &secret) {
                    show_secret(&r.name, s);
                }
                if out == Format::Table {
                    eprintln!(
                        "Webhook secret of {:?} {}.",
                        r.name,
                        if r.webhook { "set" } else { "removed" }
                    );
                } else {
                    print(out, &r, |_| String::new());
                }
            }
        },
        GitopsCommand::Policy { cmd } => match cmd {
            PolicyCommand::Show => print(out, &c.gitops_policy().await?, output::gitops_policy),
            PolicyCommand::Set { file } => {
                let policy: Policy = read_file("GitOps policy", &file)?;
                let p = c.set_gitops_policy(&policy).await?;
                print(out, &p, output::gitops_policy);
            }
        },
    }
    Ok(())
}

pub(crate) async fn agent_gitops(
    c: &Client,
    out: Format,
    cmd: AgentGitopsCommand,
) -> Result<(), CliError> {
    match cmd {
        AgentGitopsCommand::Set { agent, file } => {
            let config: AgentGitops = read_file("GitOps sources file", &file)?;
            let got = named("agent", &agent, c.set_agent_gitops(&agent, &config).await)?;
            if out == Format::Table {
                eprintln!(
                    "Agent {agent:?} has {} GitOps source(s).",
                    got.sources.len()
                );
            }
            print(out, &got, output::sources);
        }
        AgentGitopsCommand::Show { agent } => {
            let got = named("agent", &agent, c.agent_gitops(&agent).await)?;
            print(out, &got, output::sources);
        }
        AgentGitopsCommand::Status { agent } => {
            let got = named("agent", &agent, c.gitops_status(&agent).await)?;
            print(out, &got, |s| output::gitops_status(s));
        }
    }
    Ok(())
}
