//! `warren project`: projects, their repository credential and their members.

use super::*;

pub(super) async fn project(out: Format, cmd: ProjectCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        ProjectCommand::Create {
            name,
            git_url,
            git_ref,
            devfile_path,
            devfile,
            visibility,
            credential,
        } => {
            let devfile = devfile
                .as_deref()
                .map(|p| read_text("devfile", p))
                .transpose()?;
            let p = c
                .create_project(&CreateProjectRequest {
                    name,
                    git_url,
                    default_ref: git_ref,
                    devfile_path,
                    devfile,
                    visibility: visibility.as_deref().map(parse_visibility),
                    credential: read_credential(&credential)?,
                })
                .await?;
            print(out, &p, |p| {
                format!(
                    "Project {:?} created (id {}, {} at {}, {}{}).",
                    p.name,
                    p.id,
                    p.git_url,
                    p.default_ref,
                    p.visibility.as_str(),
                    p.credential
                        .as_deref()
                        .map(|k| format!(", {k} credential"))
                        .unwrap_or_default()
                )
            });
        }
        ProjectCommand::Update {
            name,
            git_ref,
            devfile_path,
            visibility,
        } => {
            let req = UpdateProjectRequest {
                visibility: visibility.as_deref().map(parse_visibility),
                default_ref: git_ref,
                devfile_path,
            };
            let p = named("project", &name, c.update_project(&name, &req).await)?;
            print(out, &p, output::project);
        }
        ProjectCommand::Credential { cmd } => match cmd {
            CredentialCommand::Set { name, credential } => {
                let Some(cred) = read_credential(&credential)? else {
                    return Err(CliError::Usage(
                        "give one of --token-stdin, --password-stdin (with --username) or --ssh-key"
                            .into(),
                    ));
                };
                let p = named(
                    "project",
                    &name,
                    c.set_project_credential(&name, &cred).await,
                )?;
                eprintln!("Project {:?}: {} credential stored.", p.name, cred.kind());
            }
            CredentialCommand::Rm { name } => done(
                "project",
                &name,
                c.delete_project_credential(&name).await,
                &format!("Project {name:?}: credential removed."),
            )?,
        },
        ProjectCommand::Member { cmd } => match cmd {
            MemberCommand::List { project } => show(
                out,
                "project",
                &project,
                c.list_project_members(&project).await,
                |m| output::members(m),
            )?,
            MemberCommand::Add {
                project,
                user,
                role,
            } => {
                let role = if role == "maintainer" {
                    ProjectRole::Maintainer
                } else {
                    ProjectRole::Developer
                };
                let m = named(
                    "project",
                    &project,
                    c.set_project_member(&project, &user, role).await,
                )?;
                print(out, &m, |m| output::members(m));
            }
            MemberCommand::Rm { project, user } => {
                named(
                    "project",
                    &project,
                    c.remove_project_member(&project, &user).await,
                )?;
                eprintln!("{user:?} is no longer a member of project {project:?}.");
            }
        },
        ProjectCommand::Prebuild { cmd } => prebuild(out, &c, cmd).await?,
        ProjectCommand::List => print(out, &c.list_projects().await?, |p| output::projects(p)),
        ProjectCommand::Show { name } => show(
            out,
            "project",
            &name,
            c.get_project(&name).await,
            output::project,
        )?,
        ProjectCommand::Rm { name } => done(
            "project",
            &name,
            c.delete_project(&name).await,
            &format!("Project {name:?} deleted."),
        )?,
    }
    Ok(())
}

async fn prebuild(out: Format, c: &Client, cmd: PrebuildCommand) -> Result<(), CliError> {
    match cmd {
        PrebuildCommand::On {
            project,
            agent,
            refs,
            every,
            pool,
        } => {
            let req = warren_types::prebuild::SetPrebuildsRequest {
                agent,
                refs,
                every_hours: every,
                pool,
            };
            let p = named(
                "project",
                &project,
                c.set_prebuilds(&project, Some(req)).await,
            )?;
            print(out, &p, |p| {
                format!(
                    "Project {:?}: prebuilds of {} on agent {}; the next read of the refs starts them (or `warren project prebuild run {}`).",
                    p.name,
                    p.prebuild_refs.join(", "),
                    p.prebuild_agent.as_deref().unwrap_or("?"),
                    p.name
                )
            });
        }
        PrebuildCommand::Off { project } => {
            let p = named("project", &project, c.set_prebuilds(&project, None).await)?;
            print(out, &p, |p| {
                format!(
                    "Project {:?}: prebuilds off; their volumes are removed.",
                    p.name
                )
            });
        }
        PrebuildCommand::Run { project, git_ref } => {
            let ran = c.run_prebuild(&project, git_ref.as_deref()).await;
            let b = named("project", &project, ran)?;
            print(out, &b, |b| {
                format!(
                    "Prebuild {} of project {:?} at {} ({}): {}.",
                    b.id,
                    b.project,
                    b.git_ref,
                    b.commit.get(..12).unwrap_or(&b.commit),
                    output::prebuild_state(b)
                )
            });
        }
        PrebuildCommand::List { project } => show(
            out,
            "project",
            &project,
            c.list_prebuilds(&project).await,
            |b| output::prebuilds(b),
        )?,
        PrebuildCommand::Log { project, id } => {
            let all = named("project", &project, c.list_prebuilds(&project).await)?;
            let found = match id {
                Some(id) => all.iter().find(|b| b.id == id),
                None => all.iter().find(|b| b.log.is_some()),
            };
            let Some(b) = found else {
                return Err(CliError::Usage(match id {
                    Some(id) => format!("project {project:?} has no prebuild {id}"),
                    None => format!("project {project:?} has no finished prebuild yet"),
                }));
            };
            print(out, b, |b| {
                b.log.clone().unwrap_or_else(|| {
                    format!(
                        "Prebuild {} has no output kept ({}).",
                        b.id,
                        output::prebuild_state(b)
                    )
                })
            });
        }
        PrebuildCommand::WebhookSecret { project, choice } => {
            let secret = choice.secret()?;
            let generate = choice.generate;
            named(
                "project",
                &project,
                c.set_prebuild_webhook_secret(&project, secret.as_deref())
                    .await,
            )?;
            if let (true, Some(s)) = (generate, &secret) {
                eprintln!(
                    "Webhook secret of project {project:?}, shown only this once: give it to the \
                     forge's push webhook (POST …/api/v1/projects/{project}/prebuilds/webhook):"
                );
                println!("{s}");
            }
            eprintln!(
                "Prebuild webhook secret of project {project:?} {}.",
                if secret.is_some() { "set" } else { "removed" }
            );
        }
    }
    Ok(())
}

fn parse_visibility(s: &str) -> ProjectVisibility {
    if s == "internal" {
        ProjectVisibility::Internal
    } else {
        ProjectVisibility::Private
    }
}

/// The credential the options give, read from standard input or files; `None` for none.
pub(crate) fn read_credential(a: &CredentialArgs) -> Result<Option<GitCredential>, CliError> {
    if a.token_stdin {
        return Ok(Some(GitCredential::Token {
            token: read_stdin_line("token")?,
            username: a.username.clone(),
        }));
    }
    if a.password_stdin {
        return Ok(Some(GitCredential::Basic {
            username: a.username.clone().unwrap_or_default(),
            password: read_stdin_line("password")?,
        }));
    }
    if let Some(key) = &a.ssh_key {
        let known_hosts = a
            .known_hosts
            .as_deref()
            .map(|p| read_text("known_hosts", p))
            .transpose()?;
        return Ok(Some(GitCredential::SshKey {
            private_key: read_text("SSH key", key)?,
            known_hosts,
        }));
    }
    if a.username.is_some() {
        return Err(CliError::Usage(
            "--username goes with --password-stdin or --token-stdin".into(),
        ));
    }
    Ok(None)
}
