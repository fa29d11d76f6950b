//! Warren's own devfile attributes beyond the schema: names that resolve to the pod
//! (`warren.dev/host-aliases`), a container's healthcheck holding the next ones
//! (`warren.dev/healthcheck`), and the injected editor's extensions and settings
//! (`warren.dev/editor`): each checked by name, and rendered as Kubernetes runs it.

use crate::common;

use common::*;
use warren_devfile::{parse_devfile, render};
use warren_types::config::AgentConfig;

const DEVFILE: &str = r#"
schemaVersion: 2.2.0
metadata: {name: held}
attributes:
  warren.dev/host-aliases: [db, cache.internal]
  warren.dev/editor:
    extensions: [rust-lang.rust-analyzer]
    vsix: [tools/ours.vsix]
    settings: {editor.tabSize: 2}
components:
  - name: db
    attributes:
      warren.dev/healthcheck:
        test: [pg_isready, -U, postgres]
        intervalSeconds: 2
        timeoutSeconds: 1
        retries: 5
        startPeriodSeconds: 10
    container: {image: "postgres:16", mountSources: false}
  - name: tools
    attributes: {warren.dev/main: true}
    container: {image: "localhost/warren-test:latest"}
"#;

fn problems(devfile: &str) -> String {
    parse_devfile(devfile).expect_err("refused").to_string()
}

#[test]
fn the_attributes_are_read_and_rendered() {
    let d = parse_devfile(DEVFILE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.host_aliases, ["db", "cache.internal"]);
    let h = d.container("db").unwrap().healthcheck.clone().unwrap();
    assert_eq!(h.test, ["pg_isready", "-U", "postgres"]);
    let cfg = AgentConfig::default();
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let dep = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostAliases"],
        serde_json::json!([{"ip": "127.0.0.1", "hostnames": ["db", "cache.internal"]}])
    );
    let hook: Vec<&str> = pod["containers"][0]["lifecycle"]["postStart"]["exec"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(
        hook[3..],
        [
            "warren-healthcheck",
            "db",
            "1",
            "20",
            "pg_isready",
            "-U",
            "postgres"
        ]
    );
    assert!(pod["containers"][1]["lifecycle"].is_null());
    // The editor: settings as the machine's, the repository's .vsix installed, and the ids
    // not, without a gallery (said in the log).
    let cm = r.objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let script = cm["data"]["start-tools.sh"].as_str().unwrap();
    assert!(
        script.contains("\"$editor_data/Machine/settings.json\""),
        "{script}"
    );
    assert!(script.contains("\"editor.tabSize\": 2"), "{script}");
    assert!(
        script
            .contains("install_extension 'tools/ours.vsix' \"$PROJECT_SOURCE\"/'tools/ours.vsix'"),
        "{script}"
    );
    assert!(script.contains("names no extension gallery"), "{script}");
    assert!(!script.contains("EXTENSIONS_GALLERY"), "{script}");
    // With a gallery, the ids are installed from it.
    let mut cfg = AgentConfig::default();
    cfg.editor.extensions_gallery = Some("https://open-vsx.example/vscode/gallery".into());
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let cm = r.objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let script = cm["data"]["start-tools.sh"].as_str().unwrap();
    assert!(
        script.contains(
            "export EXTENSIONS_GALLERY='{\"serviceUrl\":\"https://open-vsx.example/vscode/gallery\"}'"
        ),
        "{script}"
    );
    assert!(
        script.contains("for id in 'rust-lang.rust-analyzer'; do install_extension"),
        "{script}"
    );
}

#[test]
fn a_wrong_attribute_is_named() {
    let cases = [
        (
            "warren.dev/host-aliases: [localhost]",
            "attributes.warren.dev/host-aliases[0]: \"localhost\" is not a host name",
        ),
        (
            "warren.dev/host-aliases: [\"Not_A_Name\"]",
            "is not a host name",
        ),
        (
            "warren.dev/host-aliases: db",
            "attributes.warren.dev/host-aliases: expected a list",
        ),
        (
            "warren.dev/editor: {extensions: [\"rm -rf\"]}",
            "attributes.warren.dev/editor.extensions[0]: \"rm -rf\" is not an extension id",
        ),
        (
            "warren.dev/editor: {vsix: [../up.vsix]}",
            "attributes.warren.dev/editor.vsix[0]: \"../up.vsix\" is not the path of a .vsix file",
        ),
        (
            "warren.dev/editor: {themes: []}",
            "attributes.warren.dev/editor: expected",
        ),
    ];
    for (attr, want) in cases {
        let text = format!(
            "schemaVersion: 2.2.0\nmetadata: {{name: x}}\nattributes:\n  {attr}\ncomponents:\n  - name: dev\n    container: {{image: x}}\n"
        );
        let p = problems(&text);
        assert!(p.contains(want), "{attr}: {p}");
    }
    let held = |h: &str| {
        format!(
            "schemaVersion: 2.2.0\nmetadata: {{name: x}}\ncomponents:\n  - name: dev\n    attributes:\n      warren.dev/healthcheck: {h}\n    container: {{image: x}}\n"
        )
    };
    let p = problems(&held(
        "{test: [], intervalSeconds: 1, timeoutSeconds: 1, retries: 1}",
    ));
    assert!(
        p.contains("warren.dev/healthcheck.test: must name the program"),
        "{p}"
    );
    let p = problems(&held(
        "{test: [x], intervalSeconds: 0, timeoutSeconds: 1, retries: 1}",
    ));
    assert!(
        p.contains("warren.dev/healthcheck.intervalSeconds: 0 is not within 1..=3600"),
        "{p}"
    );
    let p = problems(&held("{test: [x], interval: 1}"));
    assert!(p.contains("warren.dev/healthcheck: expected"), "{p}");
}

const ATTACHED: &str = r#"
schemaVersion: 2.2.0
metadata: {name: attached}
attributes:
  warren.dev/post-attach: [status]
components:
  - name: tools
    container: {image: "localhost/warren-test:latest"}
commands:
  - id: status
    exec: {component: tools, commandLine: "git status", workingDir: "${PROJECT_SOURCE}"}
"#;

#[test]
fn post_attach_commands_become_a_script_the_agent_and_the_editor_run() {
    let d = parse_devfile(ATTACHED).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.post_attach, ["status"]);
    let cfg = AgentConfig::default();
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let cm = r.objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let script = cm["data"]["post-attach.sh"]
        .as_str()
        .expect("the post-attach script");
    assert!(
        script.contains("running postAttach command status"),
        "{script}"
    );
    assert!(script.contains("git status"), "{script}");
    assert!(script.contains(">>\"$logs/post-attach.log\""), "{script}");
    // The editor starting is a session attaching.
    let start = cm["data"]["start-tools.sh"].as_str().unwrap();
    assert!(
        start.contains("/bin/sh /warren/scripts/post-attach.sh &"),
        "{start}"
    );
    // Without post-attach commands, neither is there.
    let plain =
        parse_devfile(&ATTACHED.replace("attributes:\n  warren.dev/post-attach: [status]\n", ""))
            .unwrap();
    let r = render(&plain, &request(&cfg, &[])).unwrap();
    let cm = r.objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert!(cm["data"]["post-attach.sh"].is_null());
    assert!(!cm["data"]["start-tools.sh"]
        .as_str()
        .unwrap()
        .contains("post-attach"));
    // Only exec commands of the main container.
    for bad in ["[nope]", "[status, 3]", "status"] {
        let text = ATTACHED.replace("[status]", bad);
        let p = problems(&text);
        assert!(
            p.contains("attributes.warren.dev/post-attach"),
            "{bad}: {p}"
        );
    }
}

#[test]
fn wait_for_names_a_post_start_command_of_the_main_container_or_the_sources() {
    let text = r#"
schemaVersion: 2.2.0
metadata: {name: waits}
attributes:
  warren.dev/wait-for: setup
components:
  - name: tools
    container: {image: "localhost/warren-test:latest"}
commands:
  - id: setup
    exec: {component: tools, commandLine: "make setup"}
  - id: later
    exec: {component: tools, commandLine: "make later"}
  - id: not-started
    exec: {component: tools, commandLine: "make other"}
events:
  postStart: [setup, later]
"#;
    let d = parse_devfile(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.wait_for.as_deref(), Some("setup"));
    let d = parse_devfile(&text.replace("wait-for: setup", "wait-for: ''")).unwrap();
    assert_eq!(d.wait_for.as_deref(), Some(""));
    for bad in ["not-started", "nope", "[setup]", "3"] {
        let p = problems(&text.replace("wait-for: setup", &format!("wait-for: {bad}")));
        assert!(p.contains("attributes.warren.dev/wait-for"), "{bad}: {p}");
    }
}

#[test]
fn prebuild_names_post_start_exec_commands_kept_in_their_order() {
    let text = r#"
schemaVersion: 2.2.0
metadata: {name: prebuilt}
attributes:
  warren.dev/prebuild: [later, setup]
components:
  - name: tools
    container: {image: "localhost/warren-test:latest"}
  - name: db
    container: {image: "localhost/warren-test:latest"}
commands:
  - id: setup
    exec: {component: tools, commandLine: "make setup"}
  - id: seed
    exec: {component: db, commandLine: "make seed"}
  - id: later
    exec: {component: tools, commandLine: "make later"}
  - id: not-started
    exec: {component: tools, commandLine: "make other"}
events:
  postStart: [setup, seed, later]
"#;
    let d = parse_devfile(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.prebuild, ["setup", "later"], "postStart's order");
    let d = parse_devfile(&text.replace("[later, setup]", "[seed]")).unwrap();
    assert_eq!(d.prebuild, ["seed"], "any container's");
    for bad in ["[not-started]", "[nope]", "setup", "[3]"] {
        let p = problems(&text.replace("[later, setup]", bad));
        assert!(p.contains("attributes.warren.dev/prebuild"), "{bad}: {p}");
    }
}

const ISOLATED: &str = r#"
schemaVersion: 2.2.0
metadata: {name: debug}
components:
  - name: tools
    attributes:
      warren.dev/isolation: {capAdd: [cap_sys_ptrace], securityOpt: ["seccomp:unconfined"]}
    container: {image: "localhost/warren-test:latest"}
  - name: db
    container: {image: "postgres:16", mountSources: false}
"#;

/// A container's `warren.dev/isolation` is refused at render unless the agent's admin allows
/// each value; allowed, it is in that container's security context only, every other
/// capability still dropped.
#[test]
fn capabilities_and_security_options_are_the_agents_admin_to_allow() {
    let d = parse_devfile(ISOLATED).unwrap_or_else(|e| panic!("{e}"));
    let tools = d.container("tools").unwrap();
    assert_eq!(tools.isolation.cap_add, ["SYS_PTRACE"]);
    assert_eq!(tools.isolation.security_opt, ["seccomp=unconfined"]);

    let mut cfg = AgentConfig::default();
    let e = render(&d, &request(&cfg, &[])).unwrap_err().to_string();
    assert!(
        e.contains("container \"tools\" asks for the capability SYS_PTRACE, which this agent does not allow")
            && e.contains("security.allowed_capabilities"),
        "{e}"
    );
    cfg.security.allowed_capabilities = vec!["CAP_SYS_PTRACE".into()];
    let e = render(&d, &request(&cfg, &[])).unwrap_err().to_string();
    assert!(
        e.contains("the security option seccomp=unconfined")
            && e.contains("security.allowed_security_options"),
        "{e}"
    );
    cfg.security.allowed_security_options = vec!["seccomp=unconfined".into()];
    let r = render(&d, &request(&cfg, &[])).unwrap_or_else(|e| panic!("{e}"));
    let dep = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let containers = dep["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let sc = |name: &str| {
        containers
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name}"))["securityContext"]
            .clone()
    };
    let tools = sc("tools");
    assert_eq!(tools["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(
        tools["capabilities"]["add"],
        serde_json::json!(["SYS_PTRACE"])
    );
    assert_eq!(tools["seccompProfile"]["type"], "Unconfined");
    assert_eq!(tools["privileged"], false);
    assert_eq!(tools["allowPrivilegeEscalation"], false);
    let db = sc("db");
    assert!(db["capabilities"]["add"].is_null(), "{db}");
    assert!(db["seccompProfile"].is_null(), "{db}");

    for (attr, wanted) in [
        ("{capAdd: [ALL]}", "capAdd[0]: `ALL` is every capability"),
        (
            "{capAdd: [PTRACE]}",
            "capAdd[0]: \"PTRACE\" is not a Linux capability",
        ),
        (
            "{securityOpt: [label=disable]}",
            "securityOpt[0]: \"label=disable\"",
        ),
        ("{privileged: true}", "expected {capAdd"),
    ] {
        let text = ISOLATED.replace(
            "{capAdd: [cap_sys_ptrace], securityOpt: [\"seccomp:unconfined\"]}",
            attr,
        );
        let e = problems(&text);
        assert!(e.contains(wanted), "{attr}: {e}");
    }
}
