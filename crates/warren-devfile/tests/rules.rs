//! One test per rule: each refusal, each cap, variable substitution, the main-container rule.

use crate::common;

use common::*;
use warren_devfile::{
    parse_devfile, render, summary, DevfileErrors, RenderError, MAX_DEVFILE_BYTES,
};
use warren_types::api::WorkspaceResources;
use warren_types::config::{AgentConfig, ResourceList, ResourceRequirements};

const BASE: &str =
    "schemaVersion: 2.2.0\ncomponents:\n  - name: dev\n    container:\n      image: busybox\n";

fn errors(text: &str) -> DevfileErrors {
    match parse_devfile(text) {
        Ok(_) => panic!("expected a refusal of:\n{text}"),
        Err(e) => e,
    }
}

/// Asserts an error at `path` whose message contains `needle`.
fn assert_error(text: &str, path: &str, needle: &str) {
    let e = errors(text);
    assert!(
        e.0.iter()
            .any(|x| x.path == path && x.message.contains(needle)),
        "expected `{path}: …{needle}…`, got:\n{e}"
    );
}

#[test]
fn base_devfile_is_accepted_and_summarised() {
    let d = parse_devfile(BASE).unwrap();
    assert_eq!(d.main_container().name, "dev");
    let s = summary(&d);
    assert!(
        s.contains("schemaVersion: 2.2.0")
            && s.contains("main container: dev")
            && s.contains("runs as: uid 5001, gid 0"),
        "{s}"
    );
}

#[test]
fn json_is_accepted_too() {
    let d = parse_devfile(
        r#"{"schemaVersion":"2.3.0","components":[{"name":"a","container":{"image":"x"}}]}"#,
    );
    assert!(d.is_ok(), "{d:?}");
}

#[test]
fn type_errors_name_the_path() {
    let text = format!("{BASE}      memoryLimit: 512\n");
    assert_error(
        &text,
        "components[0].container.memoryLimit",
        "expected a string",
    );
    let text =
        format!("{BASE}      endpoints:\n        - name: web\n          targetPort: \"80\"\n");
    assert_error(
        &text,
        "components[0].container.endpoints[0].targetPort",
        "expected an integer",
    );
}

#[test]
fn size_cap_is_checked_before_parsing() {
    let big = format!("{BASE}#{}\n", "x".repeat(MAX_DEVFILE_BYTES));
    let e = errors(&big);
    assert!(e.to_string().contains("1 MiB"), "{e}");
}

#[test]
fn syntax_errors_and_non_mappings() {
    assert!(errors("schemaVersion: [")
        .to_string()
        .contains("not valid YAML"));
    assert!(errors("- a\n- b")
        .to_string()
        .contains("expected a mapping"));
    assert!(errors("").to_string().contains("empty"));
}

#[test]
fn unsupported_features_are_refused_by_name() {
    assert_error(
        &format!("{BASE}parent: {{id: nodejs}}\n"),
        "parent",
        "must be fetched and merged first",
    );
    let cases = [(
        "attributes: {pod-overrides: {spec: {}}}\n",
        "attributes.pod-overrides",
        "pod-overrides",
    )];
    for (extra, path, needle) in cases {
        let text = format!("{BASE}{extra}");
        let e = errors(&text);
        let hit =
            e.0.iter()
                .find(|x| x.path == path)
                .unwrap_or_else(|| panic!("{path}: {e}"));
        assert!(
            hit.is_unsupported() && hit.message.contains(needle),
            "{hit}"
        );
    }
    assert_error(
        &format!("{BASE}      dedicatedPod: true\n"),
        "components[0].container.dedicatedPod",
        "not supported by Warren",
    );
    assert_error(
        &format!("{BASE}      endpoints: [{{name: web, targetPort: 80, annotation: {{a: b}}}}]\n"),
        "components[0].container.endpoints[0].annotation",
        "not supported by Warren",
    );
    let e = errors(&format!(
        "{BASE}commands:\n  - id: a\n    exec: {{component: dev, commandLine: x}}\nevents:\n  preStop: [a]\n"
    ));
    assert!(
        e.0.iter()
            .any(|x| x.path == "events.preStop" && x.is_unsupported()),
        "{e}"
    );
    assert_error(
        &BASE.replace("2.2.0", "3.0.0"),
        "schemaVersion",
        "not supported by Warren",
    );
}

const OUTER: &str = "  - name: build
    image: {imageName: app:1, dockerfile: {uri: docker/Dockerfile, buildContext: .}}
  - name: deploy
    kubernetes:
      inlined: |
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: app}
      endpoints: [{name: http-8081, targetPort: 8081}]
commands:
  - id: test
    exec: {component: dev, commandLine: make test}
  - id: build-image
    apply: {component: build}
  - id: deployk8s
    apply: {component: deploy}
  - id: deploy
    composite: {commands: [build-image, deployk8s], group: {kind: deploy, isDefault: true}}
  - id: all
    composite: {commands: [test, deploy], parallel: true}
";

#[test]
fn image_and_kubernetes_components_with_apply_and_composite_commands_are_accepted() {
    let d = parse_devfile(&format!("{BASE}{OUTER}")).unwrap();
    assert_eq!(d.images.len(), 1);
    assert_eq!(d.images[0].image_name, "app:1");
    assert_eq!(d.images[0].dockerfile, "docker/Dockerfile");
    assert_eq!(d.manifests.len(), 1);
    assert_eq!(d.manifests[0].kind, "kubernetes");
    let leaves: Vec<&str> = d
        .leaf_commands("all")
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(leaves, ["test", "build-image", "deployk8s"]);
    let notices: Vec<String> = d.notices.iter().map(|n| n.to_string()).collect();
    assert!(
        notices
            .iter()
            .any(|n| n.starts_with("commands: run on demand") && n.contains("deploy, all")),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|n| n.contains("http-8081") && n.contains("not routed")),
        "{notices:?}"
    );
    // The workspace itself renders as before: nothing of the outer loop runs at start.
    render(&d, &request(&AgentConfig::default(), &[])).unwrap();
}

#[test]
fn outer_loop_parts_are_checked() {
    let with = |extra: &str| format!("{BASE}{OUTER}{extra}");
    // An exec command needs a container.
    assert_error(
        &with("  - id: x\n    exec: {component: build, commandLine: ls}\n"),
        "commands[5].exec.component",
        "an image component; only apply commands can build it",
    );
    // Composites: unknown references, cycles, emptiness.
    assert_error(
        &with("  - id: x\n    composite: {commands: [nope]}\n"),
        "commands[5].composite.commands[0]",
        "\"nope\", which the devfile does not define",
    );
    assert_error(
        &with("  - id: x\n    composite: {commands: [y]}\n  - id: y\n    composite: {commands: [x]}\n"),
        "commands[5].composite.commands",
        "cycle: x → y → x",
    );
    assert_error(
        &with("  - id: x\n    composite: {commands: []}\n"),
        "commands[5].composite.commands",
        "lists no command",
    );
    // Deploying at start is not done (yet), and says so by name; building at start is
    // (`image_builds_at_start_are_listed_on_the_pod`), unless the engine could not be given
    // the Dockerfile.
    let e = errors(&format!(
        "{BASE}{}",
        OUTER.replace(
            "imageName: app:1, dockerfile: {uri: docker/Dockerfile, buildContext: .}",
            "imageName: app:1, autoBuild: true, dockerfile: {uri: docker/Dockerfile, buildContext: web}"
        )
    ));
    assert!(
        e.0.iter().any(|x| x.path == "components[1].image.autoBuild"
            && x.message.contains("outside the build context")),
        "{e}"
    );
    let e = errors(&format!(
        "{BASE}{}",
        OUTER.replace(
            "    kubernetes:\n",
            "    kubernetes:\n      deployByDefault: true\n"
        )
    ));
    assert!(
        e.0.iter()
            .any(|x| x.path == "components[2].kubernetes.deployByDefault" && x.is_unsupported()),
        "{e}"
    );
    let e = errors(&with("events:\n  postStart: [deploy]\n"));
    assert!(
        e.0.iter().any(|x| x.path == "events.postStart[0]"
            && x.is_unsupported()
            && x.message.contains("builds image component \"build\"")),
        "{e}"
    );
    // Locations stay inside the sources; inlined manifests are objects.
    assert_error(
        &format!(
            "{BASE}{}",
            OUTER.replace("uri: docker/Dockerfile", "uri: ../../etc/passwd")
        ),
        "components[1].image.dockerfile.uri",
        "`..` is not allowed",
    );
    assert_error(
        &format!(
            "{BASE}{}",
            OUTER.replace("buildContext: .", "buildContext: /etc")
        ),
        "components[1].image.dockerfile.buildContext",
        "not an absolute path",
    );
    assert_error(
        &format!(
            "{BASE}{}",
            OUTER.replace("metadata: {name: app}", "metadata: {}")
        ),
        "components[2].kubernetes.inlined",
        "document 1: `metadata.name` is missing",
    );
}

#[test]
fn composite_commands_in_events_run_their_commands_in_order() {
    let d = parse_devfile(&format!(
        "{BASE}commands:\n  - id: a\n    exec: {{component: dev, commandLine: 'echo a'}}\n  - id: b\n    exec: {{component: dev, commandLine: 'echo b'}}\n  - id: both\n    composite: {{commands: [a, b], parallel: true}}\nevents:\n  postStart: [both]\n"
    ))
    .unwrap();
    assert_eq!(d.post_start, ["a", "b"]);
    assert!(
        d.notices
            .iter()
            .any(|n| n.path == "events.postStart[0]" && n.message.contains("one after another")),
        "{:?}",
        d.notices
    );
}

#[test]
fn container_overrides_may_set_resources_only() {
    let d = parse_devfile(&format!(
        "{BASE}    attributes:\n      container-overrides: {{resources: {{limits: {{cpu: 1500m, memory: 2Gi}}, requests: {{memory: 1Gi}}}}}}\n"
    ))
    .unwrap();
    let c = d.main_container();
    assert_eq!(c.cpu_limit.as_deref(), Some("1500m"));
    assert_eq!(c.memory_limit.as_deref(), Some("2Gi"));
    assert_eq!(c.memory_request.as_deref(), Some("1Gi"));
    let e = errors(&format!(
        "{BASE}    attributes:\n      container-overrides: {{securityContext: {{privileged: true}}}}\n"
    ));
    assert!(
        e.0.iter().any(|x| x.path
            == "components[0].attributes.container-overrides.securityContext"
            && x.is_unsupported()),
        "{e}"
    );
    assert_error(
        &format!("{BASE}    attributes:\n      container-overrides: {{resources: {{limits: {{memory: lots}}}}}}\n"),
        "components[0].container.memoryLimit",
        "lots",
    );
}

#[test]
fn reserved_names() {
    assert_error(
        &BASE.replace("name: dev", "name: warren-dev"),
        "components[0].name",
        "reserved",
    );
    assert_error(
        &format!(
            "{BASE}commands:\n  - id: warren-x\n    exec: {{component: dev, commandLine: x}}\n"
        ),
        "commands[0].id",
        "reserved",
    );
    assert_error(
        &format!("{BASE}      env: [{{name: PROJECT_SOURCE, value: x}}]\n"),
        "components[0].container.env[0].name",
        "set by Warren",
    );
    assert_error(
        &format!("{BASE}      env: [{{name: WARREN_X, value: x}}]\n"),
        "components[0].container.env[0].name",
        "reserved",
    );
    assert_error(
        &format!("{BASE}      volumeMounts: [{{name: v, path: /warren/x}}]\n  - name: v\n    volume: {{}}\n"),
        "components[0].container.volumeMounts[0].path",
        "reserved",
    );
}

#[test]
fn main_container_rule() {
    // Several containers and none marked: the one with the most endpoints, else the first;
    // said in a notice.
    let two = format!("{BASE}  - name: side\n    container: {{image: busybox}}\n");
    let d = parse_devfile(&two).unwrap();
    assert_eq!(d.main_container().name, "dev");
    assert!(
        d.notices.iter().any(|n| n.path == "components"
            && n.message.contains("Warren chose \"dev\" (it is the first")),
        "{:?}",
        d.notices
    );
    let served = format!(
        "{BASE}  - name: web\n    container:\n      image: busybox\n      endpoints: [{{name: http, targetPort: 8080}}]\n"
    );
    let d = parse_devfile(&served).unwrap();
    assert_eq!(d.main_container().name, "web");
    assert!(summary(&d).contains("notice: components: 2 containers (dev, web) and none is marked as the main one: Warren chose \"web\" (it has the most endpoints)"), "{}", summary(&d));
    let unmounted = served.replace(
        "      image: busybox\n      endpoints",
        "      image: busybox\n      mountSources: false\n      endpoints",
    );
    assert_eq!(
        parse_devfile(&unmounted).unwrap().main_container().name,
        "dev",
        "the main container must mount the sources"
    );
    let marked = two.replace(
        "  - name: side\n",
        "  - name: side\n    attributes: {warren.dev/main: true}\n",
    );
    let d = parse_devfile(&marked).unwrap();
    assert_eq!(d.main_container().name, "side");
    let both = marked.replace(
        "  - name: dev\n",
        "  - name: dev\n    attributes: {warren.dev/main: \"true\"}\n",
    );
    assert_error(&both, "components", "exactly one must be");
    assert_error(
        "schemaVersion: 2.2.0\ncomponents:\n  - name: v\n    volume: {}\n",
        "components",
        "no container component",
    );
    assert_error(
        &format!("{BASE}      mountSources: false\n"),
        "components[0].container.mountSources",
        "must mount",
    );
}

#[test]
fn names_ports_and_references() {
    assert_error(
        &format!("{BASE}  - name: dev\n    volume: {{}}\n"),
        "components[1].name",
        "more than once",
    );
    assert_error(
        &format!(
            "{BASE}      endpoints: [{{name: a, targetPort: 0}}, {{name: b, targetPort: 70000}}]\n"
        ),
        "components[0].container.endpoints[0].targetPort",
        "not a port number",
    );
    assert_error(
        &format!("{BASE}      endpoints: [{{name: a, targetPort: 18446744073709551615}}]\n"),
        "components[0].container.endpoints[0].targetPort",
        "not a port number",
    );
    assert_error(
        &format!(
            "{BASE}      endpoints: [{{name: a, targetPort: 80}}, {{name: a, targetPort: 81}}]\n"
        ),
        "components[0].container.endpoints[1].name",
        "already used",
    );
    // One container may serve two endpoints on one port (the specification allows it);
    // two containers of one pod cannot share a port.
    let shared = format!(
        "{BASE}      endpoints: [{{name: a, targetPort: 80}}, {{name: b, targetPort: 80, path: api}}]\n"
    );
    let d = parse_devfile(&shared).expect("two endpoints on one port of one container");
    let eps = &d.main_container().endpoints;
    assert_eq!(
        eps[1].path.as_deref(),
        Some("/api"),
        "a path gets its leading /"
    );
    assert_error(
        &format!(
            "{BASE}      endpoints: [{{name: a, targetPort: 80}}]\n  - name: side\n    container:\n      image: busybox\n      endpoints: [{{name: b, targetPort: 80}}]\n"
        ),
        "components[1].container.endpoints[0].targetPort",
        "share one network",
    );
    assert_error(
        &format!("{BASE}commands:\n  - id: a\n    exec: {{component: nope, commandLine: x}}\n"),
        "commands[0].exec.component",
        "does not define",
    );
    assert_error(
        &format!("{BASE}events:\n  postStart: [nope]\n"),
        "events.postStart[0]",
        "does not define",
    );
    assert_error(
        &format!("{BASE}      volumeMounts: [{{name: nope}}]\n"),
        "components[0].container.volumeMounts[0].name",
        "does not define",
    );
    assert_error(
        &BASE.replace("name: dev", "name: Dev"),
        "components[0].name",
        "not a valid name",
    );
    assert_error(
        &format!("{BASE}      memoryLimit: lots\n"),
        "components[0].container.memoryLimit",
        "not a resource quantity",
    );
    assert_error(
        &format!("{BASE}      memoryLimit: 1Gi\n      memoryRequest: 2Gi\n"),
        "components[0].container.memoryRequest",
        "more than memoryLimit",
    );
    assert_error(
        &format!("{BASE}commands:\n  - id: a\n    apply: {{component: dev}}\nevents:\n  postStart: [a]\n"),
        "events.postStart[0]",
        "exec commands only",
    );
}

#[test]
fn yaml_quirks_are_errors_not_silent() {
    let dup = format!("{BASE}      image: alpine\n");
    assert!(
        errors(&dup).to_string().contains("duplicate entry"),
        "{}",
        errors(&dup)
    );
    assert_error(
        &format!("{BASE}      !tagged x: y\n"),
        "components[0].container",
        "keys must be strings",
    );
    assert_error(
        &BASE.replace("image: busybox", "image: !custom busybox"),
        "components[0].container.image",
        "YAML tags (!custom)",
    );
    assert_error(
        &format!("{BASE}      bogus: 1\n"),
        "components[0].container.bogus",
        "unknown field `bogus`",
    );
    assert!(errors(&format!("{BASE}      1: x\n"))
        .to_string()
        .contains("keys must be strings"));
    // JSON Schema treats 8080.0 as an integer; so does Warren.
    let d = parse_devfile(&format!(
        "{BASE}      endpoints: [{{name: web, targetPort: 8080.0}}]\n"
    ))
    .unwrap();
    assert_eq!(d.main_container().endpoints[0].target_port, 8080);
}

#[test]
fn init_only_containers_cannot_serve_or_run_post_start() {
    let text = format!(
        "{BASE}  - name: job\n    container: {{image: x, endpoints: [{{name: web, targetPort: 80}}]}}\ncommands:\n  - id: run-job\n    apply: {{component: job}}\n  - id: in-job\n    exec: {{component: job, commandLine: x}}\nevents:\n  preStart: [run-job]\n  postStart: [in-job]\n"
    );
    assert_error(
        &text,
        "components[1].container.endpoints",
        "never be reachable",
    );
    assert_error(
        &text,
        "events.postStart[0]",
        "only runs as an init container",
    );
}

#[test]
fn variables_are_substituted_and_unknown_ones_named() {
    let d = parse_devfile(&format!(
        "variables: {{img: alpine}}\n{}",
        BASE.replace("busybox", "'{{img}}:3'")
    ))
    .unwrap();
    assert_eq!(d.main_container().image, "alpine:3");
    assert_error(
        &BASE.replace("busybox", "'{{nope}}'"),
        "components[0].container.image",
        "{{nope}}",
    );
    // Elsewhere an undefined variable is left as written, with a notice.
    let d = parse_devfile(&format!(
        "{BASE}      env: [{{name: A, value: 'x{{{{nope}}}}'}}]\n"
    ))
    .unwrap();
    assert_eq!(d.main_container().env[0].value, "x{{nope}}");
    assert!(
        d.notices
            .iter()
            .any(|n| n.path == "components[0].container.env[0].value"
                && n.message.contains("left as written")),
        "{:?}",
        d.notices
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let text = format!("{BASE}      memoryLimit: lots\n      cpuLimit: lots\nparent: {{id: x}}\n");
    assert!(errors(&text).0.len() >= 3);
}

fn capped(cpu: &str, memory: &str) -> AgentConfig {
    AgentConfig {
        max_resources_per_workspace: Some(ResourceRequirements {
            requests: ResourceList::default(),
            limits: ResourceList {
                cpu: Some(cpu.into()),
                memory: Some(memory.into()),
            },
        }),
        ..AgentConfig::default()
    }
}

#[test]
fn cap_on_the_sum_is_enforced_and_named() {
    let two = "schemaVersion: 2.2.0\ncomponents:\n  - name: a\n    attributes: {warren.dev/main: true}\n    container: {image: x, cpuLimit: '3', memoryLimit: 1Gi}\n  - name: b\n    container: {image: y, cpuLimit: '3', memoryLimit: 1Gi}\n";
    let d = parse_devfile(two).unwrap();
    let cfg = capped("4", "8Gi");
    let e = render(&d, &request(&cfg, &[])).unwrap_err();
    assert!(
        matches!(
            e,
            RenderError::ExceedsCap {
                resource: "cpu",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "workspace asks for cpu limits 6 in total, more than the agent's max_resources_per_workspace limits cpu 4"
    );
    assert!(render(&d, &request(&capped("6", "2Gi"), &[])).is_ok());
    let e = render(&d, &request(&capped("6", "1Gi"), &[])).unwrap_err();
    assert!(e.to_string().contains("memory limits 2Gi"), "{e}");
    // A container without a limit under a cap is unbounded.
    let d = parse_devfile(BASE).unwrap();
    let e = render(&d, &request(&capped("6", "1Gi"), &[])).unwrap_err();
    assert!(matches!(e, RenderError::Unbounded { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("container \"dev\" has no cpu limits"),
        "{e}"
    );
}

#[test]
fn request_caps_count_a_missing_request_as_its_limit() {
    let cfg = AgentConfig {
        max_resources_per_workspace: Some(ResourceRequirements {
            requests: ResourceList {
                cpu: Some("1".into()),
                memory: None,
            },
            limits: ResourceList::default(),
        }),
        ..AgentConfig::default()
    };
    let d = parse_devfile(&format!("{BASE}      cpuLimit: '2'\n")).unwrap();
    let e = render(&d, &request(&cfg, &[])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "workspace asks for cpu requests 2 in total, more than the agent's max_resources_per_workspace requests cpu 1"
    );
    let d = parse_devfile(&format!(
        "{BASE}      cpuLimit: '2'\n      cpuRequest: 500m\n"
    ))
    .unwrap();
    assert!(render(&d, &request(&cfg, &[])).is_ok());
    let d = parse_devfile(BASE).unwrap();
    assert!(matches!(
        render(&d, &request(&cfg, &[])),
        Err(RenderError::Unbounded {
            kind: "requests",
            ..
        })
    ));
}

#[test]
fn requested_size_sets_main_limits_and_clamps_requests() {
    let d = parse_devfile(&format!(
        "{BASE}      cpuRequest: '2'\n      cpuLimit: '4'\n"
    ))
    .unwrap();
    let cfg = AgentConfig::default();
    let size = WorkspaceResources {
        class: None,
        cpu: Some("1".into()),
        memory: Some("3Gi".into()),
    };
    let mut req = request(&cfg, &[]);
    req.resources = Some(&size);
    let r = render(&d, &req).unwrap();
    let dep = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let res = &dep["spec"]["template"]["spec"]["containers"][0]["resources"];
    assert_eq!(res["limits"]["cpu"], "1");
    assert_eq!(res["limits"]["memory"], "3Gi");
    assert_eq!(res["requests"]["cpu"], "1", "request clamped to the limit");
    // The cap applies to the requested size too.
    let cfg = capped("500m", "8Gi");
    let mut req = request(&cfg, &[]);
    req.resources = Some(&size);
    assert!(matches!(
        render(&d, &req),
        Err(RenderError::ExceedsCap { .. })
    ));
    // A bad requested quantity is named.
    let bad = WorkspaceResources {
        class: None,
        cpu: Some("lots".into()),
        memory: None,
    };
    let cfg = AgentConfig::default();
    let mut req = request(&cfg, &[]);
    req.resources = Some(&bad);
    assert!(render(&d, &req)
        .unwrap_err()
        .to_string()
        .contains("requested workspace cpu"));
}

#[test]
fn shared_namespace_has_no_quota_and_long_names_are_hashed() {
    let d = parse_devfile(BASE).unwrap();
    let mut cfg = capped("8", "8Gi");
    cfg.default_resources_per_workspace_container.limits = ResourceList {
        cpu: Some("1".into()),
        memory: Some("1Gi".into()),
    };
    cfg.shared_namespace = Some("dev-workspaces".into());
    let r = render(&d, &request(&cfg, &[])).unwrap();
    assert_eq!(r.namespace, "dev-workspaces");
    assert!(r.objects.iter().all(|o| o["kind"] != "ResourceQuota"));
    let long = format!("{BASE}  - name: {}\n    volume: {{}}\n", "v".repeat(60));
    let long = long.replace(
        "      image: busybox\n",
        &format!(
            "      image: busybox\n      volumeMounts: [{{name: {}}}]\n",
            "v".repeat(60)
        ),
    );
    let d = parse_devfile(&long).unwrap();
    let r = render(&d, &request(&cfg, &[])).unwrap();
    for o in &r.objects {
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 63 && !name.ends_with('-'), "{name}");
    }
}

#[test]
fn bad_variables_and_requests_are_refused() {
    let d = parse_devfile(BASE).unwrap();
    let cfg = AgentConfig::default();
    let vars = [warren_devfile::ResolvedVariable {
        key: "1BAD".into(),
        value: "x".into(),
        kind: warren_types::api::VariableKind::Env,
    }];
    assert!(matches!(
        render(&d, &request(&cfg, &vars)),
        Err(RenderError::Variable { .. })
    ));
    let mut req = request(&cfg, &[]);
    req.workspace_name = "Not_DNS";
    assert!(matches!(
        render(&d, &req),
        Err(RenderError::WorkspaceName(_))
    ));
    let mut req = request(&cfg, &[]);
    req.project = Some(warren_devfile::ProjectSource {
        name: "../x",
        git_url: "u",
        git_ref: "",
        credential: None,
    });
    assert!(matches!(render(&d, &req), Err(RenderError::ProjectName(_))));
}

#[test]
fn security_options_from_config() {
    let d = parse_devfile(BASE).unwrap();
    let mut cfg = AgentConfig::default();
    cfg.security.use_user_namespaces = true;
    cfg.security.runtime_class_name = Some("gvisor".into());
    cfg.security.run_as_user = 7000;
    cfg.network_policy.enabled = false;
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let pod = &r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["hostUsers"], false);
    assert_eq!(pod["runtimeClassName"], "gvisor");
    assert_eq!(pod["containers"][0]["securityContext"]["runAsUser"], 7000);
    assert!(r.objects.iter().all(|o| o["kind"] != "NetworkPolicy"));
}

/// A devfile of 22,000 environment variables was accepted and ended in the runtime's
/// "argument list too long"; now the list is refused up front, by count, by total size and
/// per variable, naming where.
#[test]
fn environment_lists_are_bounded_by_what_a_process_can_be_given() {
    use warren_devfile::{MAX_ENV_BYTES, MAX_ENV_VARS, MAX_ENV_VAR_BYTES};
    let with_env = |vars: &[(String, String)]| {
        let mut t = format!("{BASE}      env:\n");
        for (n, v) in vars {
            t.push_str(&format!("        - name: {n}\n          value: \"{v}\"\n"));
        }
        t
    };
    let many: Vec<_> = (0..22_000).map(|i| (format!("V{i}"), "x".into())).collect();
    let text = with_env(&many);
    assert!(text.len() < MAX_DEVFILE_BYTES, "fits the size cap");
    assert_error(
        &text,
        "components[0].container.env",
        &format!("22000 environment variables; at most {MAX_ENV_VARS}"),
    );
    let big: Vec<_> = (0..4)
        .map(|i| (format!("B{i}"), "y".repeat(MAX_ENV_BYTES / 3)))
        .collect();
    assert_error(
        &with_env(&big),
        "components[0].container.env",
        &format!("at most {MAX_ENV_BYTES} are allowed"),
    );
    let one = [("HUGE".to_owned(), "z".repeat(MAX_ENV_VAR_BYTES))];
    assert_error(
        &with_env(&one),
        "components[0].container.env[0].value",
        "HUGE: longer than",
    );
    // Just within every bound: accepted.
    let fine: Vec<_> = (0..MAX_ENV_VARS)
        .map(|i| (format!("F{i}"), "v".into()))
        .collect();
    assert!(parse_devfile(&with_env(&fine)).is_ok());
}

#[test]
fn limits_below_what_a_runtime_accepts_are_refused() {
    assert_error(
        &format!("{BASE}      memoryLimit: 1Mi\n"),
        "components[0].container.memoryLimit",
        "1Mi is below 6Mi",
    );
    assert_error(
        &format!("{BASE}      cpuLimit: 1m\n"),
        "components[0].container.cpuLimit",
        "1m is below 10m",
    );
    assert!(parse_devfile(&format!(
        "{BASE}      memoryLimit: 6Mi\n      cpuLimit: 10m\n"
    ))
    .is_ok());
}

#[test]
fn deep_flow_nesting_is_refused_before_parsing_naming_the_limit() {
    let depth = 100_000;
    let text = format!(
        "{BASE}attributes:\n  x: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let e = errors(&text).to_string();
    assert!(
        e.contains("nested more than 64 deep") && e.contains("line 7"),
        "{e}"
    );
    // Quoted brackets are text: a devfile with them is fine.
    let quoted = format!("{BASE}attributes:\n  x: '{}'\n", "[".repeat(depth));
    assert!(parse_devfile(&quoted).is_ok());
}

#[test]
fn syntax_errors_point_at_the_offending_line_in_the_devfiles_words() {
    let dup = format!("{BASE}      image: other\n");
    let e = errors(&dup).to_string();
    assert!(
        e.contains("line 6, column 7") && e.contains("duplicate entry with key \"image\""),
        "{e}"
    );
    let e = errors("schemaVersion: 2.2.0\nprojects:\n  - name: p\n    git: 5\n").to_string();
    assert!(
        e.contains("expected a mapping") && !e.contains("Raw"),
        "{e}"
    );
    let e = errors(&format!(
        "{BASE}      memoryLimit: 99999999999999999999999999999\n"
    ))
    .to_string();
    assert!(
        e.contains("too large for a 64-bit integer") && !e.contains("u128"),
        "{e}"
    );
}

#[test]
fn kubernetes_rules_are_checked_before_anything_is_stored() {
    assert_error(
        &format!("{BASE}      env: [{{name: 1BAD, value: x}}]\n"),
        "components[0].container.env[0].name",
        "not a valid environment variable name",
    );
    assert_error(
        &format!("{BASE}      env: [{{name: MY VAR, value: x}}]\n"),
        "components[0].container.env[0].name",
        "not a valid environment variable name",
    );
    assert_error(
        &format!("{BASE}      annotation:\n        deployment: {{\"x/y/z\": a}}\n"),
        "components[0].container.annotation.deployment.x/y/z",
        "not a valid key",
    );
    assert_error(
        &format!("{BASE}      annotation:\n        service: {{\"bad key!\": a}}\n"),
        "components[0].container.annotation.service.bad key!",
        "not a valid key",
    );
    // Names Kubernetes accepts stay accepted.
    let fine = format!(
        "{BASE}      env: [{{name: my.var-2, value: x}}]\n      annotation:\n        deployment: {{example.com/x: a}}\n"
    );
    assert!(parse_devfile(&fine).is_ok());
    // A Service name must start with a letter.
    let d = parse_devfile(BASE).unwrap();
    let cfg = AgentConfig::default();
    let mut req = request(&cfg, &[]);
    req.workspace_name = "1abc";
    let e = render(&d, &req).unwrap_err();
    assert!(
        matches!(e, RenderError::WorkspaceName(_))
            && e.to_string().contains("starting with a letter"),
        "{e}"
    );
}

#[test]
fn what_the_specification_allows_is_followed_or_named_unsupported() {
    // A path without its leading `/` is a path.
    let d = parse_devfile(&format!(
        "{BASE}      endpoints: [{{name: web, targetPort: 80, path: ui/}}]\n"
    ))
    .unwrap();
    assert_eq!(
        d.main_container().endpoints[0].path.as_deref(),
        Some("/ui/")
    );
    // Relative mount paths are valid devfiles Warren cannot run: said so, with the reason.
    assert_error(
        &format!("{BASE}      sourceMapping: projects\n"),
        "components[0].container.sourceMapping",
        "not supported by Warren",
    );
    assert_error(
        &format!(
            "{BASE}      volumeMounts: [{{name: v, path: data}}]\n  - name: v\n    volume: {{}}\n"
        ),
        "components[0].container.volumeMounts[0].path",
        "not supported by Warren",
    );
    // Endpoints sharing a port render one container port and one Service port.
    let d = parse_devfile(&format!(
        "{BASE}      endpoints: [{{name: a, targetPort: 80}}, {{name: b, targetPort: 80, path: /api}}]\n"
    ))
    .unwrap();
    let mut cfg = AgentConfig::default();
    cfg.editor.name = warren_types::config::EditorName::None;
    let r = render(&d, &request(&cfg, &[])).unwrap();
    assert_eq!(r.endpoints.len(), 2);
    let service = r.objects.iter().find(|o| o["kind"] == "Service").unwrap();
    assert_eq!(
        service["spec"]["ports"].as_array().unwrap().len(),
        1,
        "{service}"
    );
    let deployment = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(ports.as_array().unwrap().len(), 1, "{ports}");
}

#[test]
fn the_deployment_says_when_a_workspace_is_usable() {
    let cfg = AgentConfig::default();
    let deployment = |text: &str| {
        let d = parse_devfile(text).unwrap();
        let r = render(&d, &request(&cfg, &[])).unwrap();
        r.objects
            .into_iter()
            .find(|o| o["kind"] == "Deployment")
            .unwrap()
    };
    // Keep-alive only (Warren's own, or the registry's `tail -f /dev/null`): nothing to wait for.
    for text in [
        format!("{BASE}      endpoints: [{{name: web, targetPort: 3000}}]\n"),
        format!("{BASE}      args: [tail, -f, /dev/null]\n      endpoints: [{{name: web, targetPort: 3000}}]\n"),
    ] {
        let d = deployment(&text);
        assert!(d["spec"].get("minReadySeconds").is_none(), "{d}");
        assert!(d.pointer("/spec/template/spec/containers/0/readinessProbe").is_none(), "{d}");
    }
    // A server: probed on its first TCP endpoint.
    let d = deployment(&format!(
        "{BASE}      command: [httpd, -f, -p, \"8080\"]\n      endpoints: [{{name: dns, targetPort: 53, protocol: udp}}, {{name: web, targetPort: 8080}}]\n"
    ));
    assert_eq!(
        d.pointer("/spec/template/spec/containers/0/readinessProbe/tcpSocket/port"),
        Some(&serde_json::json!(8080)),
        "{d}"
    );
    // A command with nothing to probe: it must run a moment before it counts.
    let d = deployment(&format!(
        "{BASE}      command: [sh, -c, \"exec my-daemon\"]\n"
    ));
    assert_eq!(d["spec"]["minReadySeconds"], 1, "{d}");
}

#[test]
fn projects_and_starter_projects_are_accepted_and_checked() {
    let text = format!(
        "{BASE}projects:\n  - name: app\n    git:\n      remotes: {{origin: https://example.com/app.git, fork: https://example.com/fork.git}}\n      checkoutFrom: {{remote: fork, revision: v1.2}}\n  - name: docs\n    clonePath: extra/docs\n    zip: {{location: https://example.com/docs.zip}}\ndependentProjects:\n  - name: lib\n    git: {{remotes: {{origin: git@example.com:lib.git}}}}\nstarterProjects:\n  - name: hello\n    description: a greeting\n    subDir: src/hello\n    git: {{remotes: {{origin: https://example.com/starters.git}}}}\n"
    );
    let d = parse_devfile(&text).unwrap_or_else(|e| panic!("{e}"));
    let paths: Vec<&str> = d.projects.iter().map(|p| p.clone_path.as_str()).collect();
    assert_eq!(paths, ["app", "extra/docs", "lib"]);
    assert_eq!(
        d.projects[0].origin,
        warren_devfile::ProjectOrigin::Git {
            url: "https://example.com/fork.git".into(),
            revision: Some("v1.2".into())
        }
    );
    assert_eq!(d.starter_projects[0].sub_dir.as_deref(), Some("src/hello"));
    let s = summary(&d);
    assert!(s.contains("projects (fetched at the first start): app from https://example.com/fork.git at v1.2, extra/docs from https://example.com/docs.zip (zip), lib from git@example.com:lib.git"), "{s}");
    assert!(s.contains("starter project (cloned when the workspace has no project repository): hello from https://example.com/starters.git, keeping src/hello"), "{s}");
    assert!(
        s.contains("notice: projects[0].git.remotes: project \"app\": only the remote checked out"),
        "{s}"
    );
    assert!(s.contains("notice: starterProjects[0].description"), "{s}");

    let p = |body: &str| format!("{BASE}projects:\n  - name: p\n{body}");
    assert_error(
        &p("    git: {remotes: {a: https://x/a, b: https://x/b}}\n"),
        "projects[0].git.checkoutFrom.remote",
        "several remotes",
    );
    assert_error(
        &p("    git: {remotes: {a: https://x/a}, checkoutFrom: {remote: b}}\n"),
        "projects[0].git.checkoutFrom.remote",
        "not among",
    );
    assert_error(
        &p("    git: {remotes: {a: /srv/repo}}\n"),
        "projects[0].git.remotes",
        "not a Git URL",
    );
    assert_error(
        &p("    git: {remotes: {a: https://x/a}, checkoutFrom: {revision: --upload-pack=x}}\n"),
        "projects[0].git.checkoutFrom.revision",
        "not starting with `-`",
    );
    assert_error(
        &p("    clonePath: ../outside\n    git: {remotes: {a: https://x/a}}\n"),
        "projects[0].clonePath",
        "`..`",
    );
    assert_error(
        &p("    clonePath: /etc\n    git: {remotes: {a: https://x/a}}\n"),
        "projects[0].clonePath",
        "relative",
    );
    assert_error(
        &p("    zip: {location: ftp://x/a.zip}\n"),
        "projects[0].zip.location",
        "http",
    );
    assert_error(
        &format!("{BASE}projects:\n  - name: a\n    git: {{remotes: {{o: https://x/a}}}}\n  - name: b\n    clonePath: a\n    git: {{remotes: {{o: https://x/b}}}}\n"),
        "projects[1]",
        "same directory",
    );
}

#[test]
fn projects_decide_project_source_when_the_workspace_has_none() {
    let text = format!("{BASE}starterProjects:\n  - name: hello\n    git: {{remotes: {{origin: https://example.com/s.git}}}}\n");
    let d = parse_devfile(&text).unwrap();
    let config = AgentConfig::default();
    // With a project repository the starter is not used.
    let with_project =
        warren_devfile::objects_to_yaml(&render(&d, &request(&config, &[])).unwrap().objects);
    assert!(
        with_project.contains("value: /projects/demo") && !with_project.contains("project hello"),
        "{with_project}"
    );
    let mut req = request(&config, &[]);
    req.project = None;
    let y = warren_devfile::objects_to_yaml(&render(&d, &req).unwrap().objects);
    assert!(
        y.contains("value: /projects/hello"),
        "PROJECT_SOURCE is the starter's directory:\n{y}"
    );
    assert!(
        y.contains("cloning project hello (shallow)"),
        "the startup script clones the starter:\n{y}"
    );
}

#[test]
fn fields_warren_does_not_use_are_listed_not_dropped() {
    let text = "schemaVersion: 2.2.0\nmetadata:\n  name: app\n  displayName: App\n  icon: https://example.com/i.svg\n  tags: [a]\n  custom: 1\ncomponents:\n  - name: dev\n    container:\n      image: busybox\ncommands:\n  - id: run\n    exec: {component: dev, commandLine: make, hotReloadCapable: true}\n";
    let d = parse_devfile(text).unwrap_or_else(|e| panic!("{e}"));
    let s = summary(&d);
    assert!(
        s.contains("notice: metadata: displayName, icon, tags, custom describe the devfile for registries and are not used by Warren"),
        "{s}"
    );
    assert!(
        s.contains("notice: commands[0].exec.hotReloadCapable: command \"run\": Warren does not restart commands when files change"),
        "{s}"
    );
    assert!(
        parse_devfile(BASE).unwrap().notices.is_empty(),
        "a plain devfile has no notices"
    );
}

/// The builds at start the rendered pod template lists, if any.
fn pod_builds(d: &warren_devfile::Devfile) -> Option<String> {
    let agent = warren_types::config::AgentConfig::default();
    let rendered = warren_devfile::render_preview(d, "ws", &agent).unwrap();
    let deployment = rendered
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    deployment["spec"]["template"]["metadata"]["annotations"]
        .get(warren_types::relay::IMAGE_BUILDS_ANNOTATION)
        .and_then(|b| b.as_str())
        .map(str::to_owned)
}

#[test]
fn image_builds_at_start_are_listed_on_the_pod() {
    let text = format!(
        "{BASE}{}",
        OUTER
            .replace(
                "imageName: app:1, dockerfile: {uri: docker/Dockerfile, buildContext: .}",
                "imageName: app:1, autoBuild: true, dockerfile: {uri: ./docker/Dockerfile, buildContext: docker, args: [A=1]}"
            )
            .replace(
                "  - name: build\n",
                "  - name: build\n    attributes: {warren.dev/build-target: dev}\n"
            )
    );
    let d = parse_devfile(&text).unwrap_or_else(|e| panic!("{e}"));
    let im = &d.images[0];
    assert!(im.auto_build);
    assert_eq!(im.target.as_deref(), Some("dev"));
    let builds = pod_builds(&d).expect("the builds are on the pod template");
    let builds: Vec<warren_types::relay::BuildImageTask> = serde_json::from_str(&builds).unwrap();
    assert_eq!(
        builds,
        [warren_types::relay::BuildImageTask {
            image: "app:1".into(),
            dockerfile: "Dockerfile".into(),
            args: vec!["A=1".into()],
            target: Some("dev".into()),
            features: None,
        }]
    );
    // Without autoBuild, nothing is built at start.
    let d = parse_devfile(&format!("{BASE}{OUTER}")).unwrap();
    assert!(pod_builds(&d).is_none());
    // A stage name that is not one is an error, not a flag.
    let e = errors(&text.replace("build-target: dev", "build-target: '--network=host'"));
    assert!(
        e.0.iter()
            .any(|x| x.path.ends_with("warren.dev/build-target")),
        "{e}"
    );
}
