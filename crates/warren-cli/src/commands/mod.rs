//! The commands that talk to a server: each resolves credentials, calls the API, prints.

pub(crate) mod projects;
mod ssh_proxy;
mod users;
mod ws;

pub(crate) use projects::read_credential;

use crate::credentials::{self, Credentials};
use crate::input::{self, read_text};
use crate::open_cmd;
use crate::output::{self, render, Format};
use crate::ssh_cmd;
use crate::wait::{self, Goal};
use crate::{
    AgentCommand, CliError, Command, CredentialArgs, CredentialCommand, DotfilesCommand, LoginArgs,
    MemberCommand, MountCommand, OAuthClientCommand, PasswdArgs, PrebuildCommand, ProjectCommand,
    ScopeArg, SpaceCommand, SpaceMemberCommand, SshKeyCommand, TokenCommand, UserCommand, WaitArgs,
    WorkingHoursCommand, WsCommand, WsCreateArgs,
};
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use warren_client::{Client, WorkspaceQuery};
use warren_types::api::{
    AddSshKeyRequest, ChangePasswordRequest, CreateAgentRequest, CreateOAuthClient,
    CreateProjectRequest, CreateTokenRequest, CreateUserRequest, CreateWorkspaceRequest, Page,
    PasswordLoginRequest, ProjectRole, ProjectVisibility, RebuildWorkspaceRequest, SpaceRole,
    SshEndpoint, TokenScope, UpdateAgentRequest, UpdateProjectRequest, UpdateUserRequest,
    Workspace, WorkspaceResources,
};
use warren_types::config::AgentConfig;
use warren_types::git::GitCredential;
use warren_types::startup::StartupState;
use warren_types::{ActualState, DesiredState};

/// How often `--wait` polls.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

pub async fn run(cmd: Command) -> Result<(), CliError> {
    match cmd {
        Command::Login(args) => login(args).await,
        Command::Logout => logout().await,
        Command::Whoami(out) => {
            let (c, _) = client()?;
            let me = c.me().await?;
            print(out.output, &me, output::user);
            Ok(())
        }
        Command::Token(g) => token(g.out.output, g.cmd).await,
        Command::SshKey(g) => ssh_key(g.out.output, g.cmd).await,
        Command::Agent(g) => agent(g.out.output, g.cmd).await,
        Command::Project(g) => projects::project(g.out.output, g.cmd).await,
        Command::Space(g) => space(g.out.output, g.cmd).await,
        Command::Mount(g) => mount(g.out.output, g.cmd).await,
        Command::Ws(g) => ws::ws(g.out.output, g.cmd).await,
        Command::User(g) => users::user(g.out.output, g.cmd).await,
        Command::Passwd(a) => passwd(a).await,
        Command::Dotfiles(g) => dotfiles(g.out.output, g.cmd).await,
        Command::WorkingHours(g) => working_hours(g.out.output, g.cmd).await,
        Command::Secret(g) => crate::secret_cmd::secret(g.out.output, g.cmd).await,
        Command::Profile(g) => crate::secret_cmd::profile(g.out.output, g.cmd).await,
        Command::GitCredential(g) => crate::secret_cmd::git_credential(g.out.output, g.cmd).await,
        Command::OAuthClient(g) => oauth_client(g.out.output, g.cmd).await,
        Command::Gitops(g) => crate::gitops_cmd::gitops(g.out.output, g.cmd).await,
        Command::Region(g) => crate::region_cmd::region(g.out.output, g.cmd).await,
        Command::Audit(g) => crate::audit_cmd::audit(g.out.output, g.cmd).await,
        Command::Group(g) => crate::group_cmd::group(g.out.output, g.cmd).await,
        Command::Usage(a) => crate::usage_cmd::usage(a).await,
        Command::RotateProxyKey(out) => rotate_proxy_key(out.output).await,
        Command::ListProxies(out) => {
            let (c, _) = client()?;
            let proxies = c.proxies().await?;
            print(out.output, &proxies, |p| output::proxies(p));
            Ok(())
        }
        Command::Devfile(_) | Command::Devcontainer(_) | Command::Completions(_) => {
            Err(CliError::Usage("this command runs without a server".into()))
        }
    }
}

pub(crate) fn print<T: serde::Serialize + ?Sized>(
    format: Format,
    value: &T,
    human: impl FnOnce(&T) -> String,
) {
    let s = render(format, value, human);
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`warren ws list | head`) is not worth an error.
    let _ = stdout.write_all(s.as_bytes());
}

/// The signed-in client, from the credentials file and the environment.
pub(crate) fn client() -> Result<(Client, Credentials), CliError> {
    let path = credentials::default_path()?;
    let file = credentials::load(&path)?;
    if file.is_some() {
        if let Some(w) = credentials::permission_warning(&path) {
            eprintln!("warning: {w}");
        }
    }
    let creds = credentials::resolve(
        file,
        std::env::var(credentials::URL_ENV).ok(),
        std::env::var(credentials::TOKEN_ENV).ok(),
    )
    .ok_or(CliError::NotLoggedIn)?;
    Ok((Client::new(&creds.url, creds.token.clone())?, creds))
}

/// Names the thing asked for when a 404's message does not already.
pub(crate) fn named<T>(
    kind: &str,
    name: &str,
    r: Result<T, warren_client::Error>,
) -> Result<T, CliError> {
    match r {
        Err(warren_client::Error::Api {
            status: 404,
            code,
            message,
        }) if !message.contains(name) => Err(CliError::Client(warren_client::Error::Api {
            status: 404,
            code,
            message: format!("{kind} {name:?} not found"),
        })),
        r => Ok(r?),
    }
}

/// Prints the named thing a request answered, naming it when it is not found.
pub(crate) fn show<T: serde::Serialize>(
    out: Format,
    kind: &str,
    name: &str,
    r: Result<T, warren_client::Error>,
    human: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    print(out, &named(kind, name, r)?, human);
    Ok(())
}

/// Says on standard error what a request for a named thing did, once it succeeded; the data
/// channel (standard output) stays empty for scripts.
pub(crate) fn done<T>(
    kind: &str,
    name: &str,
    r: Result<T, warren_client::Error>,
    said: &str,
) -> Result<(), CliError> {
    named(kind, name, r)?;
    eprintln!("{said}");
    Ok(())
}

/// One line of standard input, without its line ending.
pub(crate) fn read_stdin_line(what: &str) -> Result<String, CliError> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::Usage(format!("reading the {what} from standard input: {e}")))?;
    let line = line.trim_end_matches(['\n', '\r']).to_owned();
    if line.is_empty() {
        return Err(CliError::Usage(format!("no {what} on standard input")));
    }
    Ok(line)
}

fn prompt_line(prompt: &str) -> Result<String, CliError> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    read_stdin_line(prompt.trim_end_matches([':', ' ']))
}

fn prompt_password(prompt: &str) -> Result<String, CliError> {
    rpassword::prompt_password(prompt)
        .map_err(|e| CliError::Usage(format!("reading the password from the terminal: {e}")))
}

async fn login(args: LoginArgs) -> Result<(), CliError> {
    let path = credentials::default_path()?;
    let anonymous = Client::anonymous(&args.url)?;
    let url = anonymous.base_url().to_owned();
    // A Warren server always has these routes: a 404 means something else answered (the
    // proxy, a workspace, another web server), which is exit code 3, not a refusal.
    let not_warren = |e: warren_client::Error| match e {
        warren_client::Error::Api {
            status: 404 | 405,
            message,
            ..
        } => CliError::NotWarren {
            url: url.clone(),
            detail: format!("the sign-in route answers: {message}"),
        },
        warren_client::Error::Decode { status, .. } => CliError::NotWarren {
            url: url.clone(),
            detail: format!(
                "the sign-in route answers HTTP {status} with something else than Warren's JSON"
            ),
        },
        other => CliError::Client(other),
    };
    let creds = if args.token_stdin {
        let token = read_stdin_line("token")?;
        let me = Client::new(&url, token.clone())?
            .me()
            .await
            .map_err(not_warren)?;
        Credentials {
            url,
            token,
            username: Some(me.username),
            token_id: None,
        }
    } else {
        let tty = std::io::stdin().is_terminal();
        let username = match args.username {
            Some(u) => u,
            None if tty && !args.password_stdin => prompt_line("Username: ")?,
            None => {
                return Err(CliError::Usage(
                    "--username is required with --password-stdin or without a terminal".into(),
                ))
            }
        };
        let password = if args.password_stdin {
            read_stdin_line("password")?
        } else if tty {
            prompt_password("Password: ")?
        } else {
            return Err(CliError::Usage(
                "no terminal to ask for a password; use --password-stdin or --token-stdin".into(),
            ));
        };
        let created = anonymous
            .login(&PasswordLoginRequest {
                username: username.clone(),
                password,
                token_name: Some("warren login".into()),
            })
            .await
            .map_err(not_warren)?;
        Credentials {
            url,
            token: created.secret,
            username: Some(username),
            token_id: Some(created.token.id),
        }
    };
    // The token an earlier `warren login` created for this server is now useless: revoke it
    // so it does not linger until it expires. Best effort — the new sign-in already worked.
    if let Ok(Some(old)) = credentials::load(&path) {
        if let (Some(id), true) = (old.token_id, old.url == creds.url) {
            if let Ok(c) = Client::new(&old.url, old.token) {
                let _ = c.revoke_token(&id.to_string()).await;
            }
        }
    }
    credentials::save(&path, &creds)?;
    println!(
        "Logged in to {} as {}; credentials saved in {}.",
        creds.url,
        creds.username.as_deref().unwrap_or("?"),
        path.display()
    );
    Ok(())
}

async fn logout() -> Result<(), CliError> {
    let path = credentials::default_path()?;
    let Some(creds) = credentials::load(&path)? else {
        println!("Not logged in.");
        return Ok(());
    };
    if let Some(id) = creds.token_id {
        let revoked = match Client::new(&creds.url, creds.token.clone()) {
            Ok(c) => c
                .revoke_token(&id.to_string())
                .await
                .map_err(CliError::from),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = revoked {
            eprintln!(
                "warning: could not revoke the token on the server: {}",
                e.report()
            );
        }
    }
    credentials::remove(&path)?;
    println!("Logged out of {}.", creds.url);
    Ok(())
}

async fn token(out: Format, cmd: TokenCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        TokenCommand::Create {
            name,
            scopes,
            expires_in_days,
        } => {
            let mut scopes: Vec<TokenScope> = scopes
                .into_iter()
                .map(|s| match s {
                    ScopeArg::Api => TokenScope::Api,
                    ScopeArg::ReadApi => TokenScope::ReadApi,
                    ScopeArg::Workspace => TokenScope::Workspace,
                })
                .collect();
            if scopes.is_empty() {
                scopes.push(TokenScope::Api);
            }
            scopes.dedup();
            let created = c
                .create_token(&CreateTokenRequest {
                    name,
                    scopes,
                    expires_in_days,
                })
                .await?;
            if out == Format::Table {
                // Details on stderr, the secret alone on stdout: `T=$(warren token create ci)`.
                eprintln!("{}", output::token(&created.token));
                eprintln!("The secret below is shown only this once:");
                println!("{}", created.secret);
            } else {
                print(out, &created, |_| String::new());
            }
        }
        TokenCommand::List => print(out, &c.list_tokens().await?, |t| output::tokens(t)),
        TokenCommand::Revoke { id } => {
            let id = id.to_string();
            done(
                "token",
                &id,
                c.revoke_token(&id).await,
                &format!("Token {id} revoked."),
            )?;
        }
    }
    Ok(())
}

async fn ssh_key(out: Format, cmd: SshKeyCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        SshKeyCommand::Add { file, name } => {
            let text = read_text("public key", &file)?;
            let public_key = text.trim().to_owned();
            if public_key.is_empty() {
                return Err(CliError::Usage(format!("{} is empty", file.display())));
            }
            if public_key.contains("PRIVATE KEY") {
                return Err(CliError::Usage(format!(
                    "{} is a private key; give the .pub file",
                    file.display()
                )));
            }
            let key = c
                .add_ssh_key(&AddSshKeyRequest { public_key, name })
                .await?;
            print(out, &key, |k| {
                format!(
                    "SSH key {:?} added ({}), id {}.",
                    k.name, k.fingerprint, k.id
                )
            });
        }
        SshKeyCommand::List => print(out, &c.list_ssh_keys().await?, |k| output::ssh_keys(k)),
        SshKeyCommand::Rm { id } => {
            let id = id.to_string();
            done(
                "SSH key",
                &id,
                c.delete_ssh_key(&id).await,
                &format!("SSH key {id} removed."),
            )?;
        }
    }
    Ok(())
}

/// An agent configuration file: TOML for `.toml`, JSON for `.json`, YAML otherwise.
pub(crate) fn read_agent_config(path: &Path) -> Result<AgentConfig, CliError> {
    let text = read_text("agent configuration", path)?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let parsed = match ext {
        "toml" => toml::from_str(&text).map_err(|e| e.to_string()),
        "json" => serde_json::from_str(&text).map_err(|e| e.to_string()),
        _ => serde_yaml::from_str(&text).map_err(|e| e.to_string()),
    };
    parsed.map_err(|e| {
        let e = e.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        CliError::Usage(format!(
            "{} is not a valid agent configuration: {e}",
            path.display()
        ))
    })
}

async fn agent(out: Format, cmd: AgentCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        AgentCommand::Gitops { cmd } => crate::gitops_cmd::agent_gitops(&c, out, cmd).await?,
        AgentCommand::Create { name, config } => {
            let config = config.as_deref().map(read_agent_config).transpose()?;
            let created = c.create_agent(&CreateAgentRequest { name, config }).await?;
            if out == Format::Table {
                eprintln!(
                    "Agent {:?} created (id {}). Its token is shown only this once:",
                    created.agent.name, created.agent.id
                );
                println!("{}", created.token);
                eprintln!(
                    "Start the agent next to the workspace runtime (Docker/Podman or \
                     Kubernetes), connected to a relay of {}:\n  \
                     WARREN_AGENT_TOKEN=<the token above> warren agent --relay-url <relay agent URL>\n\
                     or keep the token in a file (mode 600) and pass --token-file FILE.",
                    c.base_url()
                );
            } else {
                print(out, &created, |_| String::new());
            }
        }
        AgentCommand::ResetToken { name } => {
            let created = named("agent", &name, c.reset_agent_token(&name).await)?;
            if out == Format::Table {
                eprintln!(
                    "Agent {:?} has a new token; the old one no longer works (relays may \
                     accept new connections with it for up to their auth cache). It is shown \
                     only this once:",
                    created.agent.name
                );
                println!("{}", created.token);
                eprintln!("Restart the agent with it (WARREN_AGENT_TOKEN or --token-file).");
            } else {
                print(out, &created, |_| String::new());
            }
        }
        AgentCommand::Rm { name } => done(
            "agent",
            &name,
            c.delete_agent(&name).await,
            &format!("Agent {name:?} deleted; its token no longer works."),
        )?,
        AgentCommand::List => print(out, &c.list_agents().await?, |a| output::agents(a)),
        AgentCommand::Show { name } => {
            show(out, "agent", &name, c.get_agent(&name).await, output::agent)?
        }
        AgentCommand::Update { name, config } => {
            let config = read_agent_config(&config)?;
            let a = named(
                "agent",
                &name,
                c.update_agent(&name, &UpdateAgentRequest { config }).await,
            )?;
            print(out, &a, output::agent);
        }
    }
    Ok(())
}

async fn mount(out: Format, cmd: MountCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        MountCommand::Create {
            name,
            mount_type,
            reference,
            url,
            via,
            connector,
            space,
        } => {
            let m = c
                .create_mount(&warren_types::api::CreateMountRequest {
                    name,
                    mount_type,
                    reference,
                    url,
                    via,
                    connector,
                    space,
                })
                .await?;
            print(out, &m, output::mount);
            if let (Some(_), Format::Table) = (&m.connector_token, out) {
                // The token goes to stdout once; the how-to to stderr, so `-o json` and
                // scripts see only data.
                eprintln!(
                    "\nThe connector token above is shown once. On the machine, as the user \
                     whose machine it is:\n  WARREN_CONNECTOR_TOKEN=<token> warren connect \
                     --relay-url <the relay's agent URL> --mount {} --port 22 --port 8080",
                    m.name
                );
            }
        }
        MountCommand::List => print(out, &c.list_mounts().await?, |m| output::mounts(m)),
        MountCommand::Show { name } => {
            show(out, "mount", &name, c.get_mount(&name).await, output::mount)?
        }
        MountCommand::Rm { name } => done(
            "mount",
            &name,
            c.delete_mount(&name).await,
            &format!("Mount {name:?} removed."),
        )?,
    }
    Ok(())
}

/// An entry of the tree by name: a workspace, else a mount of that name.
enum Entry {
    Workspace(Box<Workspace>),
    Mount(Box<warren_types::api::Mount>),
}

async fn space(out: Format, cmd: SpaceCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        SpaceCommand::Create { path } => {
            let s = c.create_space(&path).await?;
            print(out, &s, output::space);
        }
        SpaceCommand::List => print(out, &c.list_spaces().await?, |s| output::spaces(s)),
        SpaceCommand::Show { path } => {
            show(out, "space", &path, c.get_space(&path).await, output::space)?
        }
        SpaceCommand::Rm { path } => done(
            "space",
            &path,
            c.delete_space(&path).await,
            &format!("Space {path:?} removed."),
        )?,
        SpaceCommand::Member { cmd } => match cmd {
            SpaceMemberCommand::List { path } => {
                show(out, "space", &path, c.space_members(&path).await, |m| {
                    output::space_members(m)
                })?
            }
            SpaceMemberCommand::Add { path, user, role } => {
                let role = SpaceRole::parse(&role).unwrap_or(SpaceRole::Developer);
                let m = named("space", &path, c.set_space_member(&path, &user, role).await)?;
                print(out, &m, |m| {
                    format!(
                        "{} is {} of {path} and everything below it.",
                        m.username,
                        m.role.as_str()
                    )
                });
            }
            SpaceMemberCommand::Rm { path, user } => done(
                "space",
                &path,
                c.remove_space_member(&path, &user).await,
                &format!("{user:?} no longer holds a role on space {path:?}."),
            )?,
        },
        SpaceCommand::Group { cmd } => crate::group_cmd::space_group(out, cmd).await?,
        SpaceCommand::Budget { cmd } => crate::usage_cmd::budget(out, cmd).await?,
    }
    Ok(())
}

/// `warren proxy rotate-key`: a new cookie-signing key for every proxy replica.
async fn rotate_proxy_key(out: Format) -> Result<(), CliError> {
    let (c, _) = client()?;
    let r = c.rotate_proxy_cookie_key().await?;
    print(out, &r, |r| {
        format!(
            "Rotated the proxies' cookie key (generation {}). Every replica signs with it from {} \
             (unix time, in {} s); sessions signed with the previous key stay valid for one \
             session lifetime after that.\n",
            r.generation,
            r.signing_from,
            warren_types::internal::PROXY_KEY_PUBLISH_SECS,
        )
    });
    Ok(())
}

async fn oauth_client(out: Format, cmd: OAuthClientCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        OAuthClientCommand::Create {
            client_id,
            name,
            redirect_uris,
            first_party,
            public,
        } => {
            let created = c
                .create_oauth_client(&CreateOAuthClient {
                    client_id,
                    name,
                    redirect_uris,
                    first_party,
                    confidential: !public,
                })
                .await?;
            if out != Format::Table {
                print(out, &created, |_| String::new());
            } else if let Some(secret) = &created.client_secret {
                eprintln!(
                    "OAuth client {:?} created. Its secret is shown only this once:",
                    created.client.client_id
                );
                println!("{secret}");
            } else {
                eprintln!(
                    "Public OAuth client {:?} created (no secret: it must use PKCE).",
                    created.client.client_id
                );
                println!("{}", created.client.client_id);
            }
        }
        OAuthClientCommand::List => print(out, &c.list_oauth_clients().await?, |l| {
            output::oauth_clients(l)
        }),
        OAuthClientCommand::Delete { client_id } => {
            done(
                "oauth client",
                &client_id,
                c.delete_oauth_client(&client_id).await,
                &format!("OAuth client {client_id:?} deleted."),
            )?;
        }
    }
    Ok(())
}

async fn dotfiles(out: Format, cmd: DotfilesCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    let u = match cmd {
        DotfilesCommand::Set { url } => c.set_dotfiles(Some(&url)).await?,
        DotfilesCommand::Unset => c.set_dotfiles(None).await?,
        DotfilesCommand::Show => c.me().await?,
    };
    print(out, &u, |u| match &u.dotfiles_url {
        Some(url) => format!("Dotfiles: {url} (installed at the first start of new workspaces)"),
        None => "No dotfiles repository.".into(),
    });
    Ok(())
}

/// This machine's IANA time zone: `$TZ`, else `/etc/timezone`, else where `/etc/localtime`
/// links in the zone database.
fn local_timezone() -> Option<String> {
    if let Ok(tz) = std::env::var("TZ") {
        let tz = tz.trim_start_matches(':').trim().to_owned();
        if !tz.is_empty() {
            return Some(tz);
        }
    }
    if let Ok(tz) = std::fs::read_to_string("/etc/timezone") {
        let tz = tz.trim().to_owned();
        if !tz.is_empty() {
            return Some(tz);
        }
    }
    let link = std::fs::read_link("/etc/localtime").ok()?;
    let path = link.to_string_lossy().into_owned();
    path.split_once("zoneinfo/").map(|(_, tz)| tz.to_owned())
}

async fn working_hours(out: Format, cmd: WorkingHoursCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    let u = match cmd {
        WorkingHoursCommand::Set {
            days,
            start,
            stop,
            timezone,
        } => {
            let timezone = timezone.or_else(local_timezone).ok_or_else(|| {
                CliError::Usage(
                    "this machine's time zone is not known; give --timezone (e.g. Europe/Paris)"
                        .into(),
                )
            })?;
            let hours = warren_types::schedule::WorkingHours {
                timezone,
                days,
                start,
                stop,
            };
            c.set_working_hours(Some(&hours)).await?
        }
        WorkingHoursCommand::Clear => c.set_working_hours(None).await?,
        WorkingHoursCommand::Show => c.me().await?,
    };
    print(out, &u, |u| match &u.working_hours {
        Some(h) => format!(
            "Working hours: {} — your running workspaces stop at {}{}.",
            h.describe(),
            h.stop,
            match &h.start {
                Some(s) => format!(", and those they stopped start again at {s}"),
                None => String::new(),
            }
        ),
        None => "No working hours: your workspaces run until the agents' limits.".into(),
    });
    Ok(())
}

async fn passwd(args: PasswdArgs) -> Result<(), CliError> {
    let (c, _) = client()?;
    let (current, new) = if args.password_stdin {
        (
            read_stdin_line("current password")?,
            read_stdin_line("new password")?,
        )
    } else {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::Usage(
                "no terminal to ask for passwords; use --password-stdin".into(),
            ));
        }
        let current = prompt_password("Current password: ")?;
        (current, users::new_password(false, "New password: ")?)
    };
    c.change_password(&ChangePasswordRequest {
        current_password: current,
        new_password: new,
        revoke_sessions: args.revoke_sessions,
    })
    .await?;
    if args.revoke_sessions {
        eprintln!("Password changed; every other token and browser session was revoked.");
    } else {
        eprintln!("Password changed.");
    }
    Ok(())
}
