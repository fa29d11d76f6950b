//! `warren user`: accounts, for admins.

use super::*;

pub(super) async fn user(out: Format, cmd: UserCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        UserCommand::Create {
            username,
            admin,
            password_stdin,
        } => {
            let password = if password_stdin {
                read_stdin_line("password")?
            } else if std::io::stdin().is_terminal() {
                let p = prompt_password("Password: ")?;
                if prompt_password("Again: ")? != p {
                    return Err(CliError::Usage("the passwords differ".into()));
                }
                p
            } else {
                return Err(CliError::Usage(
                    "no terminal to ask for a password; use --password-stdin".into(),
                ));
            };
            let u = c
                .create_user(&CreateUserRequest {
                    username,
                    password,
                    is_admin: admin,
                })
                .await?;
            print(out, &u, output::user);
        }
        UserCommand::List => print(out, &c.list_users().await?, |u| output::users(u)),
        UserCommand::Show { username } => show(
            out,
            "user",
            &username,
            c.get_user(&username).await,
            output::user,
        )?,
        UserCommand::Disable { username } => {
            update_user(&c, out, &username, |r| r.disabled = Some(true)).await?
        }
        UserCommand::Enable { username } => {
            update_user(&c, out, &username, |r| r.disabled = Some(false)).await?
        }
        UserCommand::Promote { username } => {
            update_user(&c, out, &username, |r| r.is_admin = Some(true)).await?
        }
        UserCommand::Demote { username } => {
            update_user(&c, out, &username, |r| r.is_admin = Some(false)).await?
        }
        UserCommand::ResetPassword {
            username,
            password_stdin,
        } => {
            let password = new_password(password_stdin, "New password: ")?;
            update_user(&c, out, &username, |r| r.password = Some(password)).await?
        }
        UserCommand::Delete {
            username,
            yes,
            no_wait,
        } => delete_user(&c, &username, yes, no_wait).await?,
    }
    Ok(())
}

pub(super) async fn update_user(
    c: &Client,
    out: Format,
    username: &str,
    change: impl FnOnce(&mut UpdateUserRequest),
) -> Result<(), CliError> {
    let mut req = UpdateUserRequest::default();
    change(&mut req);
    let u = named("user", username, c.update_user(username, &req).await)?;
    print(out, &u, output::user);
    Ok(())
}

/// A new password: prompted for twice on a terminal, else one line of standard input.
pub(super) fn new_password(stdin: bool, prompt: &str) -> Result<String, CliError> {
    if stdin {
        return read_stdin_line("password");
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(
            "no terminal to ask for a password; use --password-stdin".into(),
        ));
    }
    let p = prompt_password(prompt)?;
    if prompt_password("Again: ")? != p {
        return Err(CliError::Usage("the passwords differ".into()));
    }
    Ok(p)
}

/// Deletes an account: names the workspaces that will be terminated and asks before, then
/// waits until the account is gone (the server deletes it once they are).
pub(super) async fn delete_user(
    c: &Client,
    username: &str,
    yes: bool,
    no_wait: bool,
) -> Result<(), CliError> {
    let user = named("user", username, c.get_user(username).await)?;
    let query = WorkspaceQuery {
        owner: Some(user.id.to_string()),
        ..Default::default()
    };
    let live = c.list_all_workspaces(&query).await?;
    if !live.is_empty() && !yes {
        let names: Vec<_> = live.iter().map(|w| w.name.as_str()).collect();
        if !std::io::stdin().is_terminal() {
            return Err(CliError::Usage(format!(
                "{username:?} has {} workspace(s) ({}) that deleting it terminates, volumes \
                 included; pass --yes to confirm",
                names.len(),
                names.join(", ")
            )));
        }
        eprintln!(
            "Deleting {username:?} terminates its {} workspace(s), volumes included: {}",
            names.len(),
            names.join(", ")
        );
        let typed = prompt_line(&format!("Type {username} to confirm: "))?;
        if typed != username {
            return Err(CliError::Usage("not confirmed; nothing was changed".into()));
        }
    }
    let pending = named("user", username, c.delete_user(username, true).await)?;
    if pending.is_none() {
        eprintln!("User {username:?} deleted.");
        return Ok(());
    }
    if no_wait {
        eprintln!("User {username:?} disabled; it is deleted once its workspaces are terminated.");
        return Ok(());
    }
    eprintln!("User {username:?} disabled; waiting for its workspaces to terminate…");
    // The account disappears once the agent reports its workspaces gone; each workspace's
    // long-poll returns as soon as it changes.
    for w in &live {
        let mut version = w.version;
        loop {
            match c.watch_workspace(&w.name, version, 60).await {
                Ok(now) if now.actual_state == ActualState::Terminated => break,
                Ok(now) => version = now.version,
                Err(e) if e.status() == Some(404) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    loop {
        match c.get_user(username).await {
            Err(e) if e.status() == Some(404) => break,
            Ok(u) if u.deletion_requested_at.is_some() => tokio::time::sleep(POLL_INTERVAL).await,
            Ok(_) => break,
            Err(e) => return Err(e.into()),
        }
    }
    eprintln!("User {username:?} deleted.");
    Ok(())
}
