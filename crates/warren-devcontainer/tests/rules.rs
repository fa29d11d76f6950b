//! The rules of reading a dev container configuration: what is honoured and how, what is
//! accepted with a notice, and what is refused by name, each on the smallest configuration
//! that shows it.

use std::collections::{BTreeMap, BTreeSet};
use warren_devcontainer::{convert, is_config_path, Converted, Input, Problems};
use warren_devfile::{parse_devfile, CommandAction, Devfile};

static NO_SECRETS: BTreeSet<String> = BTreeSet::new();
static NO_FILES: BTreeMap<String, String> = BTreeMap::new();

fn input<'a>(text: &'a str, env: &'a BTreeMap<String, String>) -> Input<'a> {
    Input {
        text,
        path: ".devcontainer/devcontainer.json",
        project: "shop",
        local_env: env,
        secrets: &NO_SECRETS,
        files: &NO_FILES,
    }
}

pub(crate) fn ok(text: &str) -> (Devfile, Converted) {
    let env = BTreeMap::from([("TEAM".to_owned(), "payments".to_owned())]);
    let converted = convert(&input(text, &env)).unwrap_or_else(|e| panic!("{text}\n{e}"));
    let devfile = parse_devfile(&converted.devfile).expect("the devfile parses");
    (devfile, converted)
}

pub(crate) fn refused(text: &str) -> Problems {
    let env = BTreeMap::new();
    match convert(&input(text, &env)) {
        Ok(c) => panic!("accepted {text}:\n{}", c.devfile),
        Err(p) => p,
    }
}

/// The one problem's `path: message`, asserting there is exactly one.
pub(crate) fn one(p: &Problems) -> String {
    assert_eq!(p.0.len(), 1, "{p}");
    p.0[0].to_string()
}

#[test]
fn an_image_configuration_runs_as_one_main_container_with_the_sources_at_the_default_folder() {
    let (d, c) = ok(r#"{ "name": "Shop API", "image": "localhost/warren-test:latest" }"#);
    let main = d.main_container();
    assert_eq!(main.name, "devcontainer");
    assert_eq!(main.image, "localhost/warren-test:latest");
    assert!(main.mount_sources);
    // The repository is cloned into <sourceMapping>/<project>: /workspaces/shop, the
    // specification's default folder, with no notice needed.
    assert_eq!(main.source_mapping, "/workspaces");
    assert_eq!(d.metadata_name.as_deref(), Some("shop-api"));
    assert!(c.notices.is_empty(), "{:?}", c.notices);
    assert!(d.post_start.is_empty());
}

#[test]
fn comments_and_trailing_commas_are_accepted_as_the_tools_accept_them() {
    let (d, _) = ok(r#"// a comment before
        {
          /* block */ "image": "busybox", // after
          "forwardPorts": [3000,],
        }"#);
    assert_eq!(d.main_container().endpoints.len(), 1);
}

#[test]
fn ports_become_public_endpoints_named_by_their_labels() {
    let (d, c) = ok(r#"{
        "image": "busybox",
        "forwardPorts": [3000, "8443", 3000],
        "appPort": ["9000:9001"],
        "portsAttributes": {
            "3000": { "label": "Web App", "onAutoForward": "openBrowser" },
            "8443": { "protocol": "https", "requireLocalPort": true },
            "40000-55000": { "onAutoForward": "ignore" }
        }
    }"#);
    let e: Vec<(String, u16, &str)> = d
        .main_container()
        .endpoints
        .iter()
        .map(|e| (e.name.clone(), e.target_port, e.protocol.as_str()))
        .collect();
    assert_eq!(
        e,
        [
            ("port-9001".into(), 9001, "http"),
            ("web-app".into(), 3000, "http"),
            ("port-8443".into(), 8443, "https"),
        ],
        "properties are read in name order; a port listed twice is one endpoint"
    );
    for path in [
        "portsAttributes.3000.onAutoForward",
        "portsAttributes.8443.requireLocalPort",
        "portsAttributes.40000-55000",
        "appPort[0]",
    ] {
        assert!(
            c.notices.iter().any(|n| n.path == path),
            "no notice for {path}: {:?}",
            c.notices
        );
    }
}

#[test]
fn a_port_of_another_host_and_a_port_out_of_range_are_refused_by_name() {
    let p = refused(r#"{ "image": "busybox", "forwardPorts": ["db:5432", 70000, 0] }"#);
    let all = p.to_string();
    assert!(
        all.contains("forwardPorts[0]: forwarding db:5432 (a port of another host or service)"),
        "{all}"
    );
    assert!(all.contains("not supported by Warren"), "{all}");
    assert!(
        all.contains("forwardPorts[1]: 70000 is not a port"),
        "{all}"
    );
    assert!(all.contains("forwardPorts[2]: 0 is not a port"), "{all}");
}

#[test]
fn environment_and_variables_are_substituted_before_the_container_runs() {
    let (d, _) = ok(r#"{
        "image": "busybox",
        "containerEnv": { "TEAM": "${localEnv:TEAM}", "HOMEPAGE": "${localEnv:MISSING:none}", "BASE": "/opt/${localWorkspaceFolderBasename}" },
        "remoteEnv": { "TOOLS": "${containerEnv:BASE}/bin", "TEAM": "override", "GONE": null },
        "postStartCommand": "echo ${containerWorkspaceFolder} ${devcontainerId} ${HOME}"
    }"#);
    let env: BTreeMap<&str, &str> = d
        .main_container()
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(env["TEAM"], "override", "remoteEnv wins over containerEnv");
    assert_eq!(env["HOMEPAGE"], "none");
    assert_eq!(env["BASE"], "/opt/shop");
    assert_eq!(env["TOOLS"], "/opt/shop/bin");
    assert!(!env.contains_key("GONE"));
    let CommandAction::Exec { command_line, .. } = &d.command("post-start").unwrap().action else {
        panic!("not an exec command");
    };
    assert!(
        command_line.starts_with("echo /workspaces/shop "),
        "{command_line}"
    );
    assert!(
        command_line.ends_with(" ${HOME}"),
        "a shell variable is the shell's: {command_line}"
    );
    let id = command_line.split(' ').nth(2).unwrap();
    assert_eq!(id.len(), 32, "{command_line}");
}

#[test]
fn the_devcontainer_id_is_stable_for_one_configuration_and_differs_between_repositories() {
    let env = BTreeMap::new();
    let text = r#"{ "image": "busybox", "containerEnv": { "ID": "${devcontainerId}" } }"#;
    let id = |project: &str| {
        let c = convert(&Input {
            project,
            ..input(text, &env)
        })
        .unwrap();
        let d = parse_devfile(&c.devfile).unwrap();
        d.main_container().env[0].value.clone()
    };
    assert_eq!(id("shop"), id("shop"));
    assert_ne!(id("shop"), id("billing"));
}

#[test]
fn an_image_variable_the_configuration_does_not_set_is_refused_with_the_way_out() {
    let p = refused(
        r#"{ "image": "busybox", "remoteEnv": { "PATH": "${containerEnv:PATH}:/tools" } }"#,
    );
    let msg = one(&p);
    assert!(
        msg.starts_with("remoteEnv.PATH: `${containerEnv:PATH}`"),
        "{msg}"
    );
    assert!(p.0[0].is_unsupported());
    assert!(msg.contains("give a default"), "{msg}");
    let p = refused(r#"{ "image": "busybox", "containerEnv": { "A": "${containerEnv:B}" } }"#);
    assert!(one(&p).starts_with("containerEnv.A: `${containerEnv:B}` cannot be used inside"));
}

#[test]
fn lifecycle_commands_run_in_order_the_creation_ones_once_per_workspace() {
    let (d, c) = ok(r#"{
        "image": "busybox",
        "postStartCommand": ["echo", "it's started"],
        "postCreateCommand": { "deps": "npm ci", "tools": ["make", "tools"] },
        "onCreateCommand": "echo created",
        "updateContentCommand": "echo updated",
        "waitFor": "postCreateCommand"
    }"#);
    assert_eq!(
        d.post_start,
        ["on-create", "update-content", "post-create", "post-start"]
    );
    let line = |id: &str| match &d.command(id).unwrap().action {
        CommandAction::Exec {
            command_line,
            working_dir,
            component,
            ..
        } => {
            assert_eq!(component, "devcontainer");
            assert_eq!(working_dir.as_deref(), Some("/workspaces/shop"));
            command_line.clone()
        }
        other => panic!("{other:?}"),
    };
    let on_create = line("on-create");
    assert!(
        on_create.contains("$HOME/.warren/devcontainer/on-create.done"),
        "{on_create}"
    );
    assert!(on_create.contains("echo created"));
    // New sources since a prebuild run `updateContentCommand` again, never `onCreateCommand`.
    assert!(!on_create.contains("WARREN_SOURCES_UPDATED"), "{on_create}");
    let update = line("update-content");
    assert!(
        update.contains("[ -z \"${WARREN_SOURCES_UPDATED:-}\" ]"),
        "{update}"
    );
    // An array is run without a shell's word splitting: each word quoted.
    assert_eq!(line("post-start"), r#"'echo' 'it'\''s started'"#);
    // An object's commands run at the same time, the whole failing when one does.
    let post_create = line("post-create");
    assert!(
        post_create.contains("( echo 'running deps'; npm ci ) &"),
        "{post_create}"
    );
    assert!(post_create.contains("'make' 'tools'"), "{post_create}");
    assert!(
        post_create.contains("wait \"$p\" || status=1"),
        "{post_create}"
    );
    for path in ["updateContentCommand", "waitFor"] {
        assert!(
            c.notices.iter().any(|n| n.path == path),
            "{path}: {:?}",
            c.notices
        );
    }
    // Each is known by its property's name; the workspace is usable after `waitFor`'s.
    assert_eq!(
        d.command("post-create").unwrap().label.as_deref(),
        Some("postCreateCommand")
    );
    assert_eq!(d.wait_for.as_deref(), Some("post-create"));
    // A prebuild runs what the specification's prebuilds run; postCreate waits for the user.
    assert_eq!(d.prebuild, ["on-create", "update-content"]);
    let (d, _) = ok(r#"{ "image": "busybox", "postCreateCommand": "make" }"#);
    assert!(d.prebuild.is_empty());
}

#[test]
fn wait_for_names_the_last_command_a_workspace_is_usable_after() {
    // By default `updateContentCommand`: here none, nor an `onCreateCommand`, so usable once
    // the sources are in place.
    let (d, _) = ok(r#"{ "image": "busybox", "postCreateCommand": "make" }"#);
    assert_eq!(d.wait_for.as_deref(), Some(""));
    let (d, _) = ok(r#"{ "image": "busybox", "onCreateCommand": "a", "postCreateCommand": "b" }"#);
    assert_eq!(d.wait_for.as_deref(), Some("on-create"));
    // Waiting for the last command is waiting for them all.
    let (d, _) = ok(
        r#"{ "image": "busybox", "onCreateCommand": "a", "postStartCommand": "b", "waitFor": "postStartCommand" }"#,
    );
    assert_eq!(d.wait_for, None);
    let (d, _) =
        ok(r#"{ "image": "busybox", "postCreateCommand": "b", "waitFor": "initializeCommand" }"#);
    assert_eq!(d.wait_for.as_deref(), Some(""));
    let p = refused(r#"{ "image": "busybox", "waitFor": "postAttachCommand" }"#);
    assert!(
        one(&p).starts_with("waitFor: \"postAttachCommand\" is not a lifecycle command"),
        "{}",
        one(&p)
    );
}

#[test]
fn once_per_workspace_commands_really_run_once_and_again_after_a_failure() {
    // The guard is shell: run it twice in one home and count the runs.
    let (d, _) = ok(
        r#"{ "image": "busybox", "postCreateCommand": "echo run >> \"$HOME/runs\"; test -e \"$HOME/ok\"" }"#,
    );
    let CommandAction::Exec { command_line, .. } = &d.command("post-create").unwrap().action else {
        panic!();
    };
    let home = std::env::temp_dir().join(format!("wdc-once-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let run = || {
        std::process::Command::new("/bin/sh")
            .args(["-c", command_line])
            .env("HOME", &home)
            .status()
            .unwrap()
            .success()
    };
    let runs = || {
        std::fs::read_to_string(home.join("runs"))
            .unwrap()
            .lines()
            .count()
    };
    assert!(!run(), "the command's failure is the guard's");
    assert!(!run(), "a failed run is tried again");
    assert_eq!(runs(), 2);
    std::fs::write(home.join("ok"), "").unwrap();
    assert!(run());
    assert!(run(), "once it succeeded it is not run again");
    assert_eq!(runs(), 3);
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn isolation_breaking_properties_are_refused_by_name() {
    let p = refused(
        r#"{
        "image": "busybox",
        "privileged": true,
        "capAdd": ["ALL", "SYS_PTRACE"],
        "securityOpt": ["seccomp=/home/me/profile.json", "label=disable"],
        "runArgs": ["--network=host", "--privileged", "-v", "/:/host"],
        "initializeCommand": "docker login",
        "mounts": ["source=/var/run/docker.sock,target=/var/run/docker.sock,type=bind"]
    }"#,
    );
    let paths: Vec<&str> = p.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "capAdd[0]",
            "initializeCommand",
            "mounts[0]",
            "privileged",
            "runArgs[0]",
            "runArgs[1]",
            "runArgs[2]",
            "securityOpt[0]",
            "securityOpt[1]"
        ]
    );
    assert!(
        p.0.iter()
            .filter(|e| e.path != "capAdd[0]")
            .all(|e| e.is_unsupported()),
        "{p}"
    );
    let text = p.to_string();
    assert!(text.contains("`ALL` is every capability"), "{text}");
    assert!(
        text.contains("a bind mount of \"/var/run/docker.sock\""),
        "{text}"
    );
    assert!(text.contains("profile file"), "{text}");
}

/// The debugger's wishes of the language templates (`--cap-add=SYS_PTRACE --security-opt
/// seccomp=unconfined`), in properties or in `runArgs`, travel to the agent, which gives them
/// when its admin allows them; `runArgs` that have a property of their own become it.
#[test]
fn capabilities_and_security_options_are_asked_of_the_agents_admin() {
    let (d, c) = ok(r#"{
        "image": "busybox",
        "capAdd": ["sys_ptrace"],
        "runArgs": ["--cap-add=SYS_PTRACE", "--cap-add", "NET_ADMIN", "--security-opt", "seccomp:unconfined",
                    "-e", "MODE=debug", "--init", "--name", "mine", "--shm-size=2g"]
    }"#);
    let main = d.main_container();
    assert_eq!(main.isolation.cap_add, ["SYS_PTRACE", "NET_ADMIN"]);
    assert_eq!(main.isolation.security_opt, ["seccomp=unconfined"]);
    assert!(
        main.env
            .iter()
            .any(|e| e.name == "MODE" && e.value == "debug"),
        "{:?}",
        main.env
    );
    let noticed: Vec<&str> = c.notices.iter().map(|n| n.path.as_str()).collect();
    for path in [
        "capAdd[0]",
        "runArgs[1]",
        "runArgs[3]",
        "runArgs[7]",
        "runArgs[8]",
        "runArgs[10]",
    ] {
        assert!(noticed.contains(&path), "{path}: {:?}", c.notices);
    }
    assert!(
        c.notices
            .iter()
            .any(|n| n.message.contains("security.allowed_capabilities")),
        "{:?}",
        c.notices
    );
    // Without a value, or with one of the user's machine, or an option Warren does not know.
    for (args, path, wanted) in [
        (r#"["--cap-add"]"#, "runArgs[0]", "needs a value"),
        (r#"["-e", "TOKEN"]"#, "runArgs[0]", "${localEnv:TOKEN}"),
        (
            r#"["--frobnicate"]"#,
            "runArgs[0]",
            "the `docker run` option --frobnicate",
        ),
        (r#"["busybox"]"#, "runArgs[0]", "not an option"),
        (r#"["--gpus", "all"]"#, "runArgs[0]", "GPU"),
        (r#""--privileged""#, "runArgs", "an array"),
    ] {
        let p = refused(&format!(r#"{{ "image": "busybox", "runArgs": {args} }}"#));
        let e = one(&p);
        assert!(
            e.starts_with(&format!("{path}: ")) && e.contains(wanted),
            "{args}: {e}"
        );
    }
}

#[test]
fn what_warren_does_not_do_yet_is_refused_by_name_not_dropped() {
    for (text, path) in [
        (
            r#"{ "image": "busybox", "features": { "https://example.com/devcontainer-feature-go.tgz": {} } }"#,
            "features.https://example.com/devcontainer-feature-go.tgz",
        ),
        (
            r#"{ "image": "busybox", "overrideCommand": false }"#,
            "overrideCommand",
        ),
    ] {
        let p = refused(text);
        assert!(
            p.0.iter().any(|e| e.path == path && e.is_unsupported()),
            "{text}: {p}"
        );
    }
}

#[test]
fn accepted_properties_warren_handles_its_own_way_each_get_a_notice() {
    let (_, c) = ok(r#"{
        "image": "busybox",
        "remoteUser": "root",
        "containerUser": "vscode",
        "updateRemoteUserUID": true,
        "init": false,
        "shutdownAction": "none",
        "userEnvProbe": "loginShell",
        "secrets": { "TOKEN": {} },
        "otherPortsAttributes": {},
        "workspaceMount": "source=${localWorkspaceFolder},target=/src,type=bind",
        "customizations": { "jetbrains": { "backend": "IntelliJ" } },
        "hostRequirements": { "gpu": { "cores": 1000 } },
        "featurez": {}
    }"#);
    let paths: Vec<&str> = c.notices.iter().map(|n| n.path.as_str()).collect();
    for path in [
        "remoteUser",
        "containerUser",
        "updateRemoteUserUID",
        "init",
        "shutdownAction",
        "userEnvProbe",
        "secrets",
        "otherPortsAttributes",
        "workspaceMount",
        "customizations.jetbrains",
        "hostRequirements.gpu",
        "featurez",
    ] {
        assert!(paths.contains(&path), "no notice for {path}: {paths:?}");
    }
    let root = c.notices.iter().find(|n| n.path == "remoteUser").unwrap();
    assert!(
        root.message.starts_with("root never runs a workspace"),
        "{}",
        root.message
    );
}

#[test]
fn host_requirements_size_the_container_and_volumes_are_mounted() {
    let (d, _) = ok(r#"{
        "image": "busybox",
        "hostRequirements": { "cpus": 2, "memory": "4gb" },
        "mounts": [
            "source=shop-cache,target=/home/dev/.cache,type=volume",
            { "source": "node_modules", "target": "/workspaces/shop/node_modules", "type": "volume" },
            { "target": "/tmp/scratch", "type": "tmpfs" }
        ]
    }"#);
    let c = d.main_container();
    assert_eq!(c.cpu_request.as_deref(), Some("2"));
    assert_eq!(c.memory_limit.as_deref(), Some("4Gi"));
    // What picks the machine class travels with the devfile.
    let needs = d.host_requirements.as_ref().expect("the host requirements");
    assert_eq!(
        (needs.cpus, needs.memory.as_deref()),
        (Some(2), Some("4Gi"))
    );
    assert_eq!(
        needs.gpu,
        warren_types::host_requirements::GpuRequirement::No
    );
    let (roomy, _) = ok(
        r#"{ "image": "busybox", "hostRequirements": { "storage": "64gb", "gpu": "optional" } }"#,
    );
    assert_eq!(
        roomy.host_requirements,
        Some(warren_types::host_requirements::HostRequirements {
            storage: Some("64Gi".into()),
            gpu: warren_types::host_requirements::GpuRequirement::Optional,
            ..Default::default()
        })
    );
    let (gpu, _) = ok(r#"{ "image": "busybox", "hostRequirements": { "gpu": true } }"#);
    assert_eq!(
        gpu.host_requirements.map(|r| r.gpu),
        Some(warren_types::host_requirements::GpuRequirement::Required)
    );
    let mounts: Vec<(&str, &str)> = c
        .volume_mounts
        .iter()
        .map(|m| (m.name.as_str(), m.path.as_str()))
        .collect();
    assert_eq!(
        mounts,
        [
            ("shop-cache", "/home/dev/.cache"),
            ("node-modules", "/workspaces/shop/node_modules"),
            ("tmpfs-2", "/tmp/scratch")
        ]
    );
    let eph: Vec<bool> = d.volumes.iter().map(|v| v.ephemeral).collect();
    assert_eq!(eph, [false, false, true]);
}

#[test]
fn another_workspace_folder_holds_the_repository_and_says_so() {
    let (d, c) =
        ok(r#"{ "image": "busybox", "workspaceFolder": "/src", "postStartCommand": "pwd" }"#);
    assert_eq!(d.main_container().source_mapping, "/src");
    let CommandAction::Exec { working_dir, .. } = &d.command("post-start").unwrap().action else {
        panic!();
    };
    assert_eq!(working_dir.as_deref(), Some("/src/shop"));
    assert!(c
        .notices
        .iter()
        .any(|n| n.path == "workspaceFolder" && n.message.contains("/src/shop")));
    let (d, c) = ok(r#"{ "image": "busybox", "workspaceFolder": "/home/dev/shop" }"#);
    assert_eq!(d.main_container().source_mapping, "/home/dev");
    assert!(c.notices.is_empty());
}

#[test]
fn malformed_configurations_get_a_clear_error_never_a_panic() {
    for (text, want) in [
        ("", "the configuration is empty"),
        ("[1, 2]", "must be a JSON object at its top"),
        ("{ \"image\": ", "not valid JSON with comments"),
        (r#"{ "name": "x" }"#, "a dev container names its `image`"),
        (r#"{ "image": 7 }"#, "image: must be a string, not a number"),
        (
            r#"{ "image": "a b" }"#,
            "image: \"a b\" is not an image name",
        ),
        (
            r#"{ "image": "busybox", "containerEnv": { "1X": "y" } }"#,
            "containerEnv.1X: \"1X\" is not a valid environment variable name",
        ),
        (
            r#"{ "image": "busybox", "workspaceFolder": "relative" }"#,
            "workspaceFolder: \"relative\" must be an absolute path",
        ),
        (
            r#"{ "image": "busybox", "mounts": ["type=volume,target=/x"] }"#,
            "mounts[0]: a volume mount names its volume",
        ),
        (
            r#"{ "image": "busybox", "hostRequirements": { "memory": "lots" } }"#,
            "hostRequirements.memory: \"lots\" is not an amount",
        ),
        (
            r#"{ "image": "busybox", "postCreateCommand": 5 }"#,
            "postCreateCommand: must be a string or an array of strings",
        ),
    ] {
        let p = refused(text);
        assert!(p.to_string().contains(want), "{text:?}: {p}");
    }
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(refused(&deep).to_string().contains("nests deeper than 64"));
    let big = format!(
        "{{\"image\": \"busybox\", \"name\": \"{}\"}}",
        "x".repeat(300 * 1024)
    );
    assert!(refused(&big)
        .to_string()
        .contains("at most 262144 are accepted"));
}

#[test]
fn the_places_a_configuration_is_found() {
    for p in [
        ".devcontainer/devcontainer.json",
        ".devcontainer.json",
        ".devcontainer/python/devcontainer.json",
    ] {
        assert!(is_config_path(p), "{p}");
    }
    for p in [
        "devcontainer.json",
        ".devcontainer/../devcontainer.json",
        ".devcontainer/a/b/devcontainer.json",
        ".devcontainer//devcontainer.json",
    ] {
        assert!(!is_config_path(p), "{p}");
    }
}

#[test]
fn a_secret_variable_is_never_written_into_the_definition() {
    let env = BTreeMap::new();
    let secrets = BTreeSet::from(["TOKEN".to_owned()]);
    let text = r#"{ "image": "busybox", "containerEnv": { "T": "${localEnv:TOKEN}" } }"#;
    let p = convert(&Input {
        secrets: &secrets,
        ..input(text, &env)
    })
    .unwrap_err();
    assert!(
        one(&p).starts_with("containerEnv.T: `${localEnv:TOKEN}` names a secret variable"),
        "{p}"
    );
}

#[test]
fn vscode_customizations_go_to_the_injected_editor() {
    let env = BTreeMap::new();
    let c = convert(&input(
        r#"{
        "image": "x",
        "customizations": {
            "vscode": {
                "extensions": ["rust-lang.rust-analyzer", "ms-python.python@2024.1.0", "tools/ours.vsix",
                    "${containerWorkspaceFolder}/build/theirs.vsix", "-ms-azuretools.vscode-docker"],
                "settings": { "editor.tabSize": 2, "files.trimTrailingWhitespace": true },
                "devPort": 1234
            }
        }
    }"#,
        &env,
    ))
    .unwrap();
    let d = parse_devfile(&c.devfile).unwrap();
    let e = d.editor.expect("the editor's customizations");
    assert_eq!(
        e.extensions,
        ["rust-lang.rust-analyzer", "ms-python.python@2024.1.0"]
    );
    assert_eq!(
        e.vsix,
        [".devcontainer/tools/ours.vsix", "build/theirs.vsix"]
    );
    assert_eq!(e.settings["editor.tabSize"], 2);
    let paths: Vec<&str> = c.notices.iter().map(|n| n.path.as_str()).collect();
    assert!(
        paths.contains(&"customizations.vscode.extensions[4]"),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"customizations.vscode.devPort"),
        "{paths:?}"
    );
    // What is not an extension, or leaves the repository, is named.
    for (bad, want) in [
        (
            r#""extensions": ["not an id"]"#,
            "customizations.vscode.extensions[0]: \"not an id\" is not an extension id",
        ),
        (
            r#""extensions": ["../../up.vsix"]"#,
            "customizations.vscode.extensions[0]: \"../../up.vsix\" leaves the repository",
        ),
        (
            r#""settings": []"#,
            "customizations.vscode.settings: must be an object",
        ),
    ] {
        let text = format!(r#"{{"image": "x", "customizations": {{"vscode": {{ {bad} }}}}}}"#);
        let p = convert(&input(&text, &env)).unwrap_err();
        assert!(p.to_string().contains(want), "{bad}: {p}");
    }
}

#[test]
fn post_attach_runs_in_the_dev_container_whenever_a_session_attaches() {
    let env = BTreeMap::new();
    let c = convert(&input(
        r#"{ "image": "x", "postAttachCommand": ["git", "status"], "postStartCommand": "true" }"#,
        &env,
    ))
    .unwrap();
    let d = parse_devfile(&c.devfile).unwrap();
    assert_eq!(d.post_attach, ["post-attach"]);
    // Not a start command: only run when a session attaches.
    assert_eq!(d.post_start, ["post-start"]);
    match &d.command("post-attach").unwrap().action {
        CommandAction::Exec {
            component,
            command_line,
            ..
        } => {
            assert_eq!(component, "devcontainer");
            assert_eq!(command_line, "'git' 'status'");
        }
        other => panic!("{other:?}"),
    }
}
