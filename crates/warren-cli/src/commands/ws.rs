//! `warren ws`: workspaces, and the entries (mounts) that lead to them.

use super::*;

/// Looks `name` up as a workspace, then as a mount; when it is neither, the workspace's
/// "not found".
pub(super) async fn entry(c: &Client, name: &str) -> Result<Entry, CliError> {
    let first = c.get_workspace(name).await;
    if matches!(first, Err(warren_client::Error::Api { status: 404, .. })) {
        if let Ok(m) = c.get_mount(name).await {
            return Ok(Entry::Mount(Box::new(m)));
        }
    }
    Ok(Entry::Workspace(Box::new(named("workspace", name, first)?)))
}

/// The name `warren ws ssh NAME` logs in as: a workspace's, a softlink's or a connector's
/// own (the proxy finds what serves it), or where a redirect leads.
pub(super) async fn ssh_target(
    c: &Client,
    name: &str,
) -> Result<(String, Option<warren_types::api::WorkspaceRegion>), CliError> {
    match entry(c, name).await? {
        Entry::Workspace(w) => Ok((w.name, w.region)),
        Entry::Mount(m)
            if m.mount_type == warren_types::api::MountType::Workspace || m.connector =>
        {
            Ok((m.name, None))
        }
        Entry::Mount(m) => {
            let w = followed(c, &m).await?;
            Ok((w.name, w.region))
        }
    }
}

/// The SSH front door of a workspace: its region's proxy when that serves SSH and says
/// where, else `central` (the same host keys: every proxy shares them).
pub(super) fn regional_endpoint(
    central: &SshEndpoint,
    region: Option<&warren_types::api::WorkspaceRegion>,
) -> SshEndpoint {
    let mut e = central.clone();
    let door = region
        .filter(|r| r.regional)
        .and_then(|r| r.ssh_address.as_deref())
        .and_then(warren_types::parse_ssh_address);
    if let Some((host, port)) = door {
        e.host = host.to_owned();
        e.port = port;
    }
    e
}

/// The workspace `name`, or — when `name` is a redirect mount — the workspace it leads to,
/// saying so on stderr (`ws ssh`, `ws open` and `ssh-config` follow redirects).
pub(super) async fn workspace_following(c: &Client, name: &str) -> Result<Workspace, CliError> {
    match entry(c, name).await? {
        Entry::Workspace(w) => Ok(*w),
        Entry::Mount(m) => followed(c, &m).await,
    }
}

/// The workspace the redirect mount `m` leads to.
pub(super) async fn followed(
    c: &Client,
    m: &warren_types::api::Mount,
) -> Result<Workspace, CliError> {
    let name = &m.name;
    if m.mount_type != warren_types::api::MountType::Redirect {
        return Err(CliError::Failed(format!(
            "{name} is a {} mount: open its address (`warren mount show {name}`) or `warren ws \
             ssh {name}`",
            m.mount_type.as_str()
        )));
    }
    match (&m.status.resolved, &m.url) {
        (Some(target), _) => {
            eprintln!("{name} redirects to {target}");
            named("workspace", target, c.get_workspace(target).await)
        }
        (None, Some(url)) => Err(CliError::Failed(format!(
            "{name} redirects to {url}, outside this Warren: log in there (`warren login --url …`)"
        ))),
        (None, None) => Err(CliError::Failed(format!(
            "{name} redirects nowhere: {}",
            m.status
                .conditions
                .iter()
                .map(|c| c.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ))),
    }
}

pub(super) fn state_line(w: &Workspace) -> String {
    let mut s = format!(
        "Workspace {:?}: desired {}, actual {}.",
        w.name, w.desired_state, w.actual_state
    );
    if let Some(url) = &w.url {
        s.push_str(&format!(" URL: {url}"));
    }
    s
}

/// Waits when asked, then prints the workspace (one line for people, the object for scripts).
pub(super) async fn finish_action(
    c: &Client,
    out: Format,
    w: Workspace,
    goal: Goal,
    wait_args: &WaitArgs,
) -> Result<(), CliError> {
    let w = if wait_args.wait {
        // The action's own write on the server's clock: failures reported before it are
        // the previous attempt's.
        let since = Some(w.updated_at);
        match wait::wait(c, &w.name, goal, since, wait_args.timeout, POLL_INTERVAL).await? {
            // What the action's answer said (a prebuild or a warm pool it started from) is
            // still said: a later read of the workspace does not repeat it.
            Some(done) if done.notices.is_empty() => Workspace {
                notices: w.notices,
                ..done
            },
            Some(done) => done,
            None => {
                eprintln!("Workspace {:?} is gone.", w.name);
                return Ok(());
            }
        }
    } else {
        w
    };
    print(out, &w, state_line);
    Ok(())
}

/// `ws resize`: a class, or numbers.
async fn resize_command(c: &Client, out: Format, cmd: WsCommand) -> Result<(), CliError> {
    let WsCommand::Resize {
        name,
        class,
        cpu,
        memory,
        wait,
    } = cmd
    else {
        return Ok(());
    };
    let size = WorkspaceResources { class, cpu, memory };
    ws_resize(c, out, &name, size, &wait).await
}

pub(super) async fn ws(out: Format, cmd: WsCommand) -> Result<(), CliError> {
    let c = match client() {
        Ok((c, _)) => c,
        Err(e) => return super::ssh_proxy::unless_signed_in(e, cmd).await,
    };
    match cmd {
        WsCommand::Create(args) => ws_create(&c, out, *args).await,
        WsCommand::Classes { agent } => crate::classes_cmd::run(&c, out, agent.as_deref()).await,
        WsCommand::List {
            state,
            agent,
            project,
            owner,
            space,
            recursive,
            limit,
            all,
        } => {
            let query = WorkspaceQuery {
                state: state.map(|s| s.to_string()),
                agent,
                project,
                owner,
                space,
                recursive: recursive.then_some(true),
                limit: limit.map(i64::from),
                cursor: None,
            };
            ws_list(&c, out, &query, all).await
        }
        WsCommand::Grant { name, user } => {
            let g = named("workspace", &name, c.grant_workspace(&name, &user).await)?;
            eprintln!("{user} may now make softlinks to {name}.");
            print(out, &g, |g| output::grants(g));
            Ok(())
        }
        WsCommand::Revoke { name, user } => done(
            "workspace",
            &name,
            c.revoke_workspace_grant(&name, &user).await,
            &format!("{user} may no longer make softlinks to {name}; theirs stop serving."),
        ),
        WsCommand::Grants { name } => show(
            out,
            "workspace",
            &name,
            c.workspace_grants(&name).await,
            |g| output::grants(g),
        ),
        WsCommand::Tree { path } => {
            let t = match &path {
                Some(p) => named("space", p, c.tree(Some(p)).await)?,
                None => c.tree(None).await?,
            };
            print(out, &t, output::tree);
            Ok(())
        }
        WsCommand::Show { name } => ws_show(&c, out, &name).await,
        WsCommand::Start(a) => {
            let w = named(
                "workspace",
                &a.name,
                c.set_desired_state(&a.name, DesiredState::Running).await,
            )?;
            // Starting a failed workspace is a new attempt, which the server runs as a
            // restart.
            let goal = match w.desired_state {
                DesiredState::RestartRequested => Goal::Restarted,
                _ => Goal::Running,
            };
            finish_action(&c, out, w, goal, &a.wait).await
        }
        WsCommand::Stop(a) => {
            let w = named(
                "workspace",
                &a.name,
                c.set_desired_state(&a.name, DesiredState::Stopped).await,
            )?;
            finish_action(&c, out, w, Goal::Stopped, &a.wait).await
        }
        WsCommand::Restart(a) => {
            let w = named(
                "workspace",
                &a.name,
                c.set_desired_state(&a.name, DesiredState::RestartRequested)
                    .await,
            )?;
            finish_action(&c, out, w, Goal::Restarted, &a.wait).await
        }
        WsCommand::Rm(a) => {
            let w = named("workspace", &a.name, c.delete_workspace(&a.name).await)?;
            finish_action(&c, out, w, Goal::Terminated, &a.wait).await
        }
        WsCommand::Ssh {
            name,
            ssh_options,
            command,
        } => ws_ssh(&c, &name, ssh_options, &command).await,
        WsCommand::SshConfig { names, write } => ws_ssh_config(&c, names, write).await,
        WsCommand::SshProxy { name, host, port } => {
            super::ssh_proxy::run(Ok(&c), &name, host, port).await
        }
        WsCommand::Run { name, command } => {
            let run = c.run_workspace_command(&name, &command).await;
            match crate::run_cmd::follow(named("workspace", &name, run)?).await? {
                0 => Ok(()),
                code => Err(CliError::Exited(code)),
            }
        }
        WsCommand::PortForward {
            name,
            ports,
            address,
        } => crate::port_forward_cmd::run(&c, &name, &ports, address).await,
        WsCommand::Logs {
            name,
            tail,
            container,
            follow,
        } => ws_logs(&c, &name, tail, container.as_deref(), follow).await,
        WsCommand::Open {
            name,
            endpoint,
            terminal,
            main,
            vscode,
            jetbrains,
            print,
        } => {
            let w = workspace_following(&c, &name).await?;
            if vscode || jetbrains {
                return ws_open_ide(&c, &w, vscode, print).await;
            }
            let url = open_cmd::address(&w, endpoint.as_deref(), terminal, main)?;
            open_cmd::hand_over(&url, print);
            Ok(())
        }
        resize @ WsCommand::Resize { .. } => resize_command(&c, out, resize).await,
        WsCommand::Port(a) => crate::share_cmd::run(&c, out, *a).await,
        WsCommand::Rebuild {
            name,
            devfile,
            dry_run,
            yes,
            wait,
        } => ws_rebuild(&c, out, &name, devfile.as_deref(), dry_run, yes, &wait).await,
    }
}

/// `warren ws list`: a page, or with `--all` every page.
async fn ws_list(
    c: &Client,
    out: Format,
    query: &WorkspaceQuery,
    all: bool,
) -> Result<(), CliError> {
    let page = if all {
        Page {
            items: c.list_all_workspaces(query).await?,
            next_cursor: None,
        }
    } else {
        c.list_workspaces(query).await?
    };
    print(out, &page, |p| output::workspaces(&p.items));
    if out == Format::Table && page.next_cursor.is_some() {
        eprintln!("(more workspaces: use --all)");
    }
    Ok(())
}

/// `warren ws show NAME`: a workspace, with its startup and whether its editor runs; a mount
/// is an entry too.
async fn ws_show(c: &Client, out: Format, name: &str) -> Result<(), CliError> {
    let w = match entry(c, name).await? {
        Entry::Workspace(w) => *w,
        Entry::Mount(m) => {
            print(out, &*m, output::mount);
            return Ok(());
        }
    };
    // How its startup went and whether the editor runs, or why not, only the workspace's own
    // output says.
    let running = out == Format::Table && w.actual_state == ActualState::Running;
    let startup = if running {
        c.workspace_startup(name)
            .await
            .ok()
            .filter(|s| !matches!(s.state, StartupState::Unknown | StartupState::Untold))
            .map(|s| s.describe())
    } else {
        None
    };
    let editor = if running && w.editor_url.is_some() {
        c.workspace_logs(name, Some(500), None)
            .await
            .ok()
            .and_then(|b| output::editor_status(&b))
    } else {
        None
    };
    let update = if out == Format::Table {
        definition_update(c, &w).await
    } else {
        None
    };
    print(out, &w, |w| {
        output::workspace_with_status(w, startup.as_deref(), editor.as_deref(), update)
    });
    Ok(())
}

/// How many parts of a project's or repository's workspace would change if rebuilt now (the
/// "update available" mark the web UI's page shows): a dry run of the rebuild, asked only by
/// who may rebuild it and waited for a few seconds at most (it reads the repository).
async fn definition_update(c: &Client, w: &Workspace) -> Option<usize> {
    let from_repository = w.project_name.is_some() || w.repository.is_some();
    if !from_repository
        || w.your_right < Some(warren_types::api::WorkspaceRight::Manage)
        || w.desired_state == DesiredState::Terminated
    {
        return None;
    }
    let req = RebuildWorkspaceRequest {
        devfile: None,
        dry_run: true,
    };
    // Said only when known: a slow or failing read leaves the row out, as the page does.
    let plan = tokio::time::timeout(Duration::from_secs(5), c.rebuild_workspace(&w.name, &req))
        .await
        .ok()?
        .ok()?;
    (!plan.changes.is_empty()).then_some(plan.changes.len())
}

/// `warren ws ssh NAME [-- COMMAND]`: OpenSSH to the proxy, its host key pinned.
async fn ws_ssh(
    c: &Client,
    name: &str,
    ssh_options: Vec<String>,
    command: &[String],
) -> Result<(), CliError> {
    let central = c.access().await?.ssh.ok_or_else(ssh_cmd::no_ssh)?;
    let (target, region) = ssh_target(c, name).await?;
    let endpoint = regional_endpoint(&central, region.as_ref());
    // The user's own options come first, so they win over the pin (OpenSSH takes the first
    // value it sees).
    let mut options = ssh_options;
    let pinned = ssh_cmd::default_ssh_dir().and_then(|dir| ssh_cmd::pin_host_keys(&dir, &endpoint));
    match pinned {
        Ok(Some(file)) => options.extend(ssh_cmd::pin_options(&file)),
        Ok(None) => {}
        // A read-only home must not stop the login: ssh checks the key its own way.
        Err(e) => eprintln!("warning: {e}; ssh checks the host key itself"),
    }
    // Works on first use: the CLI's own key, registered when it is not yet. Without it
    // (no ssh-keygen, a token that may not add keys), the user's own keys may still work.
    match crate::ssh_identity::ensure(c).await {
        Ok(key) => options.extend(crate::ssh_identity::options(&key)),
        Err(e) => eprintln!("warning: {e}; ssh offers your own keys"),
    }
    // In a region, the door is chosen again when ssh connects: a proxy that died since the
    // server last heard of it is passed over for the central one.
    if let (Some(_), Some(line)) = (&region, ssh_cmd::own_proxy_command(&target)) {
        options.push(format!("ProxyCommand={line}"));
    }
    let args = ssh_cmd::ssh_args(&endpoint, &target, &options, command);
    match ssh_cmd::exec_ssh(&args)? {
        0 => Ok(()),
        code => Err(CliError::Exited(code)),
    }
}

/// `warren ws logs NAME [-f]`.
async fn ws_logs(
    c: &Client,
    name: &str,
    tail: u32,
    container: Option<&str>,
    follow: bool,
) -> Result<(), CliError> {
    let mut stdout = std::io::stdout();
    // Flushed per write: when following, the point is to see it when it happens.
    let mut print = |bytes: &[u8]| {
        stdout
            .write_all(bytes)
            .and_then(|_| stdout.flush())
            .map_err(|e| CliError::Failed(format!("writing the output: {e}")))
    };
    if follow {
        let following = c.follow_workspace_logs(name, Some(tail), container).await;
        let mut chunks = named("workspace", name, following)?;
        while let Some(chunk) = chunks.next().await? {
            print(&chunk)?;
        }
    } else {
        let text = c.workspace_logs(name, Some(tail), container).await;
        print(&named("workspace", name, text)?)?;
    }
    Ok(())
}

/// `warren ws resize NAME`: waits for what the server made of the new size.
async fn ws_resize(
    c: &Client,
    out: Format,
    name: &str,
    resources: WorkspaceResources,
    wait: &WaitArgs,
) -> Result<(), CliError> {
    let w = named("workspace", name, c.resize_workspace(name, resources).await)?;
    // The server restarts a running workspace to apply a new size (desired RestartRequested)
    // and keeps a stopped one stopped; a server that rolls the new size out in place keeps
    // desired Running, and then only a report newer than the request (the server's own
    // clock, never ours) says the new size is running.
    let goal = match w.desired_state {
        DesiredState::RestartRequested => Goal::Restarted,
        DesiredState::Stopped => Goal::Stopped,
        _ => Goal::Resized {
            requested_at: w.updated_at,
        },
    };
    finish_action(c, out, w, goal, wait).await
}

/// `warren ws rebuild NAME`: shows what would change, asks, applies, and waits when asked.
async fn ws_rebuild(
    c: &Client,
    out: Format,
    name: &str,
    devfile: Option<&Path>,
    dry_run: bool,
    yes: bool,
    wait: &WaitArgs,
) -> Result<(), CliError> {
    let devfile = devfile.map(|p| read_text("devfile", p)).transpose()?;
    let mut req = RebuildWorkspaceRequest {
        devfile,
        dry_run: true,
    };
    let plan = named("workspace", name, c.rebuild_workspace(name, &req).await)?;
    if dry_run {
        print(out, &plan, output::rebuild_plan);
        return Ok(());
    }
    if !yes {
        eprintln!("{}", output::rebuild_plan(&plan));
        if !std::io::stdin().is_terminal() {
            return Err(CliError::Usage(
                "not rebuilt: pass --yes to rebuild without being asked".into(),
            ));
        }
        let running = plan.workspace.desired_state != DesiredState::Stopped;
        let question = if running {
            format!("Rebuild {name} (it restarts; its volume is kept)? [y/N] ")
        } else {
            format!("Rebuild {name} (it starts with this next time)? [y/N] ")
        };
        if !matches!(prompt_line(&question)?.trim(), "y" | "Y" | "yes") {
            return Err(CliError::Failed(
                "not confirmed; nothing was changed".into(),
            ));
        }
    }
    req.dry_run = false;
    let done = named("workspace", name, c.rebuild_workspace(name, &req).await)?;
    if out == Format::Table && yes {
        eprintln!("{}", output::rebuild_plan(&done));
    }
    let goal = match done.workspace.desired_state {
        DesiredState::Stopped => Goal::Stopped,
        _ => Goal::Restarted,
    };
    finish_action(c, out, done.workspace, goal, wait).await
}

/// The `Host` blocks of `workspaces`. Every block pins the published host keys, printed
/// ones too (they are pasted into a config as they are): the keys go to
/// ~/.ssh/warren_known_hosts, which only Warren's blocks name, as `warren ws ssh` does. The
/// blocks name the CLI's own key, so an IDE connects with no key set up.
async fn host_blocks(
    c: &Client,
    endpoint: &SshEndpoint,
    workspaces: &[Workspace],
    say_pinned: bool,
) -> Result<std::collections::BTreeMap<String, String>, CliError> {
    let doors: Vec<SshEndpoint> = workspaces
        .iter()
        .map(|w| regional_endpoint(endpoint, w.region.as_ref()))
        .collect();
    // What the server answers lands in ~/.ssh, where a line break would start a new option
    // (a ProxyCommand, say): a name or host that is not one plain word is refused.
    let words = workspaces.iter().map(|w| w.name.as_str());
    if let Some(bad) = words
        .chain(doors.iter().map(|d| d.host.as_str()))
        .find(|w| !ssh_cmd::plain_word(w))
    {
        return Err(CliError::Failed(format!(
            "the server named {bad:?} for an SSH config, which is not a plain host or workspace name; nothing was written"
        )));
    }
    let dir = ssh_cmd::default_ssh_dir()?;
    let mut known_hosts = ssh_cmd::pin_host_keys(&dir, endpoint)?;
    for d in doors
        .iter()
        .filter(|d| (&d.host, d.port) != (&endpoint.host, endpoint.port))
    {
        known_hosts = ssh_cmd::pin_host_keys(&dir, d)?;
    }
    if let (Some(file), true) = (&known_hosts, say_pinned) {
        eprintln!(
            "pinned the proxy's SSH host keys in {} (the blocks below name it)",
            file.display()
        );
    }
    let identity = match crate::ssh_identity::ensure(c).await {
        Ok(key) => crate::ssh_identity::block_lines(&key),
        Err(e) => {
            eprintln!("warning: {e}; the blocks leave the key to your SSH configuration");
            String::new()
        }
    };
    // A workspace in a region: the door is chosen at connect time, so the block survives
    // the region failing over (or coming back).
    Ok(workspaces
        .iter()
        .zip(&doors)
        .map(|(w, door)| {
            let block = ssh_cmd::host_block(door, &w.name, known_hosts.as_deref());
            let proxy = match w.region {
                Some(_) => ssh_cmd::own_proxy_command(&w.name)
                    .map(|line| format!("    ProxyCommand {line}\n"))
                    .unwrap_or_default(),
                None => String::new(),
            };
            (w.name.clone(), format!("{block}{identity}{proxy}"))
        })
        .collect())
}

/// `warren ws open NAME --vscode|--jetbrains`: installs the workspace's `Host` block (as
/// `ws ssh-config --write NAME` does; nothing changes when it is there), then hands the IDE's
/// link to the desktop.
async fn ws_open_ide(c: &Client, w: &Workspace, vscode: bool, print: bool) -> Result<(), CliError> {
    let endpoint = c.access().await?.ssh.ok_or_else(ssh_cmd::no_ssh)?;
    let blocks = host_blocks(c, &endpoint, std::slice::from_ref(w), false).await?;
    let dir = ssh_cmd::default_ssh_dir()?;
    let written = ssh_cmd::write_config(&dir, blocks, false)?;
    if written.changed {
        eprintln!(
            "wrote the SSH host {}{} in {}",
            ssh_cmd::HOST_PREFIX,
            w.name,
            written.file.display()
        );
    }
    if written.include_added {
        eprintln!(
            "added `Include warren.config` to {}",
            dir.join("config").display()
        );
    }
    let folder = SshEndpoint::folder(w);
    let url = if vscode {
        SshEndpoint::vscode_url(&w.name, &folder)
    } else {
        endpoint.gateway_url(&w.name, &folder)
    };
    open_cmd::hand_over(&url, print);
    Ok(())
}

/// `warren ws ssh-config [NAME…] [--write]`.
pub(super) async fn ws_ssh_config(
    c: &Client,
    names: Vec<String>,
    write: bool,
) -> Result<(), CliError> {
    let endpoint = c.access().await?.ssh.ok_or_else(ssh_cmd::no_ssh)?;
    let all = names.is_empty();
    let workspaces: Vec<Workspace> = if all {
        let me = c.me().await?;
        let query = WorkspaceQuery {
            owner: Some(me.username.clone()),
            ..WorkspaceQuery::default()
        };
        let mut ws = c.list_all_workspaces(&query).await?;
        // Without names: the caller's own (admins could list everyone's); a colleague's
        // workspace, which a developer of its space may use too, is added by naming it.
        ws.retain(|w| {
            w.owner_username == me.username
                && w.actual_state != warren_types::ActualState::Terminated
        });
        ws
    } else {
        let mut ws = Vec::new();
        for n in &names {
            ws.push(workspace_following(c, n).await?);
        }
        ws
    };
    let blocks = host_blocks(c, &endpoint, &workspaces, !write).await?;
    if !write {
        let text: Vec<&str> = blocks.values().map(String::as_str).collect();
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.join("\n").as_bytes());
        if blocks.is_empty() {
            eprintln!("(no workspaces)");
        }
        return Ok(());
    }
    let dir = ssh_cmd::default_ssh_dir()?;
    let count = blocks.len();
    let written = ssh_cmd::write_config(&dir, blocks, all)?;
    let verb = if written.changed {
        "wrote"
    } else {
        "unchanged:"
    };
    eprintln!(
        "{verb} {} ({count} host{})",
        written.file.display(),
        if count == 1 { "" } else { "s" }
    );
    if written.include_added {
        eprintln!(
            "added `Include warren.config` to {}",
            dir.join("config").display()
        );
    }
    if let Some(w) = workspaces.first() {
        eprintln!("connect with: ssh {}{}", ssh_cmd::HOST_PREFIX, w.name);
    }
    Ok(())
}

pub(super) async fn ws_create(c: &Client, out: Format, a: WsCreateArgs) -> Result<(), CliError> {
    let devfile = a
        .devfile
        .as_deref()
        .map(|p| read_text("devfile", p))
        .transpose()?;
    let variables = input::variables(&a.vars, &a.secret_vars, &a.file_vars)?;
    let resources = match &a.class {
        Some(class) => Some(WorkspaceResources {
            class: Some(class.clone()),
            ..Default::default()
        }),
        None => a.limits.resources(),
    };
    let split = a
        .repo
        .as_deref()
        .map(warren_types::git::split_repository_ref)
        .map(|(url, r)| (url.to_owned(), r.map(str::to_owned)));
    let (repository, git_ref) = match split {
        Some((url, Some(r))) if a.git_ref.is_none() => (Some(url), Some(r)),
        Some((_, Some(_))) => {
            return Err(CliError::Usage(
                "give the ref once: as --repo URL#REF or as --ref REF".into(),
            ))
        }
        Some((url, None)) => (Some(url), a.git_ref),
        None => (None, a.git_ref),
    };
    let w = c
        .create_workspace(&CreateWorkspaceRequest {
            project: a.project,
            repository,
            devfile,
            agent: a.agent,
            name: a.name,
            resources,
            variables,
            git_ref,
            definition: a.definition,
            starter: a.starter,
            space: a.space,
        })
        .await?;
    if out == Format::Table {
        eprintln!(
            "Workspace {:?} created on agent {:?}.",
            w.name, w.agent_name
        );
        for n in &w.notices {
            eprintln!("notice: {n}");
        }
    }
    finish_action(c, out, w, Goal::Running, &a.wait).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_types::api::WorkspaceRegion;

    fn region(regional: bool, ssh: &str) -> WorkspaceRegion {
        WorkspaceRegion {
            name: "eu".into(),
            regional,
            ssh_address: Some(ssh.into()),
            notice: None,
        }
    }

    #[test]
    fn a_regions_ssh_door_is_used_only_while_it_serves_and_when_well_formed() {
        let central = SshEndpoint {
            host: "ssh.example".into(),
            port: 2222,
            host_keys: vec!["ssh-ed25519 AAAA".into()],
        };
        let e = regional_endpoint(&central, Some(&region(true, "[::1]:22")));
        assert_eq!((e.host.as_str(), e.port), ("::1", 22));
        assert_eq!(
            e.host_keys, central.host_keys,
            "every proxy shares the host keys"
        );
        for (regional, ssh) in [
            (false, "ssh.eu.example:22"),
            (true, "-oProxyCommand=x:22"),
            (true, "ssh.eu.example"),
        ] {
            let e = regional_endpoint(&central, Some(&region(regional, ssh)));
            assert_eq!((e.host.as_str(), e.port), ("ssh.example", 2222), "{ssh}");
        }
        let e = regional_endpoint(&central, None);
        assert_eq!(e.host, "ssh.example");
    }
}
