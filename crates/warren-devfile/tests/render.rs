//! Rendering: golden YAML of representative devfiles, and the YAML read back into k8s-openapi
//! types to check the spec's table (security context, labels, mounts, ports).

use crate::common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Deserialize;
use warren_devfile::{
    default_devfile, objects_to_yaml, parse_devfile, render, set_replicas, ResolvedVariable,
};
use warren_types::api::VariableKind;
use warren_types::config::{AgentConfig, ResourceList, ResourceRequirements};
use warren_types::reconcile::ImagePullSecretRef;

const MULTI: &str = r#"
schemaVersion: 2.2.0
metadata: {name: multi}
variables: {tag: "20"}
components:
  - name: tools
    attributes: {warren.dev/main: true}
    container:
      image: node:{{tag}}
      memoryLimit: 2Gi
      endpoints:
        - {name: web, targetPort: 3000}
        - {name: debug, targetPort: 9229, exposure: none}
      volumeMounts: [{name: cache, path: /home/user/.npm}]
      env: [{name: NODE_ENV, value: development}]
  - name: db
    container:
      image: postgres:16
      mountSources: false
      endpoints: [{name: pg, targetPort: 5432, exposure: internal, protocol: tcp}]
      volumeMounts: [{name: pgdata, path: /var/lib/postgresql/data}]
  - name: migrate
    container: {image: "busybox:1.36", command: [sh, -c, "echo migrate"]}
  - name: cache
    volume: {size: 2Gi}
  - name: pgdata
    volume: {ephemeral: true}
commands:
  - id: install
    exec: {component: tools, commandLine: npm ci, workingDir: "${PROJECT_SOURCE}"}
  - id: prepare
    exec: {component: tools, commandLine: "mkdir -p /projects/.cache"}
  - id: run-migrations
    apply: {component: migrate}
events:
  preStart: [prepare, run-migrations]
  postStart: [install]
"#;

fn config() -> AgentConfig {
    let mut c = AgentConfig {
        workspace_domain: "ws.example.com".into(),
        max_resources_per_workspace: Some(ResourceRequirements {
            requests: ResourceList {
                cpu: Some("4".into()),
                memory: Some("8Gi".into()),
            },
            limits: ResourceList {
                cpu: Some("8".into()),
                memory: Some("16Gi".into()),
            },
        }),
        default_resources_per_workspace_container: ResourceRequirements {
            requests: ResourceList {
                cpu: Some("100m".into()),
                memory: Some("256Mi".into()),
            },
            limits: ResourceList {
                cpu: Some("1".into()),
                memory: Some("1Gi".into()),
            },
        },
        image_pull_secrets: vec![ImagePullSecretRef {
            name: "regcred".into(),
            namespace: "warren".into(),
        }],
        ..AgentConfig::default()
    };
    c.labels.insert("team".into(), "blue".into());
    c.annotations
        .insert("example.com/owner".into(), "platform".into());
    c
}

fn variables() -> Vec<ResolvedVariable> {
    vec![
        ResolvedVariable {
            key: "API_TOKEN".into(),
            value: "s3cret".into(),
            kind: VariableKind::Env,
        },
        ResolvedVariable {
            key: "kubeconfig".into(),
            value: "apiVersion: v1\n".into(),
            kind: VariableKind::File,
        },
    ]
}

fn render_yaml(text: &str) -> String {
    let d = parse_devfile(text).unwrap_or_else(|e| panic!("{e}"));
    let cfg = config();
    let vars = variables();
    let r = render(&d, &request(&cfg, &vars)).expect("render");
    objects_to_yaml(&r.objects)
}

#[test]
fn golden_default_devfile() {
    insta::assert_snapshot!("default", render_yaml(default_devfile()));
}

#[test]
fn golden_udi() {
    insta::assert_snapshot!("udi", render_yaml(&registry_file("udi.devfile.yaml")));
}

#[test]
fn golden_go_stripped() {
    insta::assert_snapshot!(
        "go_stripped",
        render_yaml(&strip_unsupported(&registry_file("go-2.6.0.devfile.yaml")))
    );
}

#[test]
fn golden_multi_container() {
    insta::assert_snapshot!("multi", render_yaml(MULTI));
}

/// The YAML split into documents and each read by `kind`.
struct Objects {
    docs: Vec<serde_yaml::Value>,
}

impl Objects {
    fn of(yaml: &str) -> Self {
        let docs = serde_yaml::Deserializer::from_str(yaml)
            .map(|d| serde_yaml::Value::deserialize(d).expect("yaml document"))
            .collect();
        Objects { docs }
    }
    fn kind<T: serde::de::DeserializeOwned>(&self, kind: &str) -> Vec<T> {
        self.docs
            .iter()
            .filter(|d| d.get("kind").and_then(|k| k.as_str()) == Some(kind))
            .map(|d| serde_yaml::from_value(d.clone()).expect("typed object"))
            .collect()
    }
}

#[test]
fn objects_read_back_satisfy_the_spec_table() {
    let yaml = render_yaml(MULTI);
    let objs = Objects::of(&yaml);
    let kinds: Vec<&str> = objs
        .docs
        .iter()
        .filter_map(|d| d.get("kind")?.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Secret",
            "Secret",
            "ConfigMap",
            "PersistentVolumeClaim",
            "PersistentVolumeClaim",
            "Service",
            "NetworkPolicy",
            "ResourceQuota",
            "Deployment"
        ]
    );
    // Labels and annotations on every object.
    for d in &objs.docs {
        let meta = d.get("metadata").expect("metadata");
        assert_eq!(
            meta["namespace"].as_str(),
            Some("warren-ws-brave-otter-x7k2")
        );
        assert_eq!(meta["labels"]["warren.dev/agent-id"].as_str(), Some("7"));
        assert_eq!(
            meta["labels"]["warren.dev/workspace-id"].as_str(),
            Some("42")
        );
        assert_eq!(meta["labels"]["team"].as_str(), Some("blue"));
        assert_eq!(
            meta["annotations"]["warren.dev/host-template"].as_str(),
            Some("{port}-brave-otter-x7k2.ws.example.com")
        );
        assert_eq!(
            meta["annotations"]["warren.dev/workspace-id"].as_str(),
            Some("42")
        );
        assert_eq!(
            meta["annotations"]["example.com/owner"].as_str(),
            Some("platform")
        );
    }

    let sa: ServiceAccount = objs.kind("ServiceAccount").remove(0);
    assert_eq!(sa.automount_service_account_token, Some(false));
    // Where the agent finds it: copied from `warren/regcred` on Kubernetes.
    assert_eq!(
        sa.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(warren_types::reconcile::PULL_SECRET_SOURCES_ANNOTATION))
            .map(String::as_str),
        Some("warren/regcred")
    );
    assert_eq!(
        sa.image_pull_secrets.expect("pull secrets")[0].name,
        "regcred"
    );

    let secrets: Vec<Secret> = objs.kind("Secret");
    assert_eq!(
        secrets[0].metadata.name.as_deref(),
        Some("brave-otter-x7k2-env")
    );
    let env = secrets[0].data.as_ref().expect("env data");
    assert_eq!(env["API_TOKEN"].0, b"s3cret");
    assert_eq!(
        env["WARREN_PROJECT_GIT_URL"].0,
        b"https://example.com/team/demo.git"
    );
    assert_eq!(
        secrets[1].metadata.name.as_deref(),
        Some("brave-otter-x7k2-files")
    );
    assert_eq!(
        secrets[1].data.as_ref().expect("files")["kubeconfig"].0,
        b"apiVersion: v1\n"
    );

    let cm: ConfigMap = objs.kind("ConfigMap").remove(0);
    let scripts = cm.data.expect("scripts");
    let main_script = &scripts["start-tools.sh"];
    assert!(
        main_script.contains("git clone --quiet --depth 1"),
        "{main_script}"
    );
    assert!(main_script.contains("--unshallow"));
    assert!(main_script.contains("npm ci"));
    assert!(main_script.contains(".warren/logs"));

    let pvcs: Vec<PersistentVolumeClaim> = objs.kind("PersistentVolumeClaim");
    let names: Vec<_> = pvcs
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["brave-otter-x7k2-warren-data", "brave-otter-x7k2-cache"]
    );
    let size = |p: &PersistentVolumeClaim| {
        p.spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0
            .clone()
    };
    assert_eq!(size(&pvcs[0]), "20Gi");
    assert_eq!(size(&pvcs[1]), "2Gi");

    let svc: Service = objs.kind("Service").remove(0);
    let ports: Vec<(i32, String)> = svc
        .spec
        .as_ref()
        .unwrap()
        .ports
        .clone()
        .unwrap()
        .into_iter()
        .map(|p| (p.port, p.protocol.unwrap_or_default()))
        .collect();
    // The exposure-none endpoint stays inside the pod; the editor's port is one more.
    assert_eq!(
        ports,
        [
            (3000, "TCP".to_string()),
            (5432, "TCP".to_string()),
            (13337, "TCP".to_string())
        ]
    );

    let np: NetworkPolicy = objs.kind("NetworkPolicy").remove(0);
    let spec = np.spec.unwrap();
    let egress = spec.egress.unwrap();
    assert_eq!(
        egress[0].ports.as_ref().unwrap()[0].port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(53))
    );
    // The workspace's own namespace: its pods (a component's too) reach each other.
    assert!(egress[1].to.as_ref().unwrap()[0].pod_selector.is_some());
    assert_eq!(
        egress[2].to.as_ref().unwrap()[0]
            .ip_block
            .as_ref()
            .unwrap()
            .cidr,
        "0.0.0.0/0"
    );
    // Attack: the default allow-list excepted only RFC 1918, so a workspace reached the
    // cloud's metadata service (instance credentials) and CGNAT-addressed provider services.
    let except = egress[2].to.as_ref().unwrap()[0]
        .ip_block
        .as_ref()
        .unwrap()
        .except
        .clone()
        .unwrap_or_default();
    for protected in [
        "169.254.0.0/16",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "224.0.0.0/4",
    ] {
        assert!(
            except.iter().any(|e| e == protected),
            "{protected} is excepted from 0.0.0.0/0: {except:?}"
        );
    }

    let dep: Deployment = objs.kind("Deployment").remove(0);
    let spec = dep.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.strategy.unwrap().type_.as_deref(), Some("Recreate"));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("brave-otter-x7k2")
    );
    let psc = pod.security_context.unwrap();
    assert_eq!(
        (
            psc.run_as_non_root,
            psc.run_as_user,
            psc.run_as_group,
            psc.fs_group
        ),
        (Some(true), Some(5001), Some(0), Some(0))
    );
    // The editor's tools first (see the editor test), then the devfile's preStart.
    let mut init = pod.init_containers.unwrap();
    assert_eq!(init.remove(0).name, "warren-tools");
    assert_eq!(
        init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["warren-prestart-prepare", "migrate"]
    );
    // preStart runs before the clone: by default in the sources root, not the project.
    assert!(init[0].args.as_ref().unwrap()[0].starts_with("cd \"${PROJECTS_ROOT}\""));
    assert_eq!(
        init[1].command.as_deref(),
        Some(&["sh".to_string(), "-c".into(), "echo migrate".into()][..])
    );
    let containers = pod.containers;
    assert_eq!(
        containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["tools", "db"]
    );
    for c in init.iter().chain(containers.iter()) {
        let sc = c
            .security_context
            .as_ref()
            .expect("container security context");
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.run_as_user, Some(5001));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.privileged, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        let from = c.env_from.as_ref().unwrap()[0].secret_ref.as_ref().unwrap();
        assert_eq!(from.name, "brave-otter-x7k2-env");
        let mounts = c.volume_mounts.as_ref().unwrap();
        let files = mounts
            .iter()
            .find(|m| m.name == "warren-variables")
            .expect("files mount");
        assert_eq!(files.read_only, Some(true));
    }
    let tools = &containers[0];
    assert_eq!(
        tools.image.as_deref(),
        Some("node:20"),
        "variables are substituted"
    );
    assert_eq!(
        tools.command.as_deref(),
        Some(
            &[
                "/bin/sh".to_string(),
                "/warren/scripts/start-tools.sh".to_string()
            ][..]
        )
    );
    let mounts: Vec<(&str, &str)> = tools
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(
        mounts,
        [
            ("warren-data", "/projects"),
            ("cache", "/home/user/.npm"),
            ("warren-scripts", "/warren/scripts"),
            ("warren-variables", "/warren/variables"),
            ("warren-tools", "/warren/tools")
        ]
    );
    let ports: Vec<i32> = tools
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [3000, 9229, 13337]);
    let res = tools.resources.as_ref().unwrap();
    assert_eq!(
        res.limits.as_ref().unwrap()["memory"].0,
        "2Gi",
        "devfile wins"
    );
    assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "1", "default fills");
    let db = &containers[1];
    assert_eq!(
        db.command, None,
        "an unwrapped container keeps the image's entrypoint"
    );
    assert!(
        db.volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.name != "warren-data"),
        "mountSources: false"
    );
    let vols = pod.volumes.unwrap();
    let pg = vols.iter().find(|v| v.name == "pgdata").unwrap();
    assert!(pg.empty_dir.is_some(), "ephemeral volume");
}

#[test]
fn replicas_follow_desired_state_and_static_objects_are_marked() {
    let d = parse_devfile(default_devfile()).unwrap();
    let cfg = AgentConfig::default();
    let mut req = request(&cfg, &[]);
    req.desired_state = warren_types::DesiredState::Stopped;
    let mut r = render(&d, &req).unwrap();
    let dep = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(dep["spec"]["replicas"], 0);
    set_replicas(&mut r.objects, 1);
    let dep = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(dep["spec"]["replicas"], 1);
    for o in &r.objects {
        assert_eq!(
            warren_devfile::is_static_object(o),
            o["kind"] != "Deployment"
        );
    }
    // No cap configured: no ResourceQuota.
    assert!(r.objects.iter().all(|o| o["kind"] != "ResourceQuota"));
    // Rendered survives a JSON round trip (the server stores it).
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(
        serde_json::from_str::<warren_devfile::Rendered>(&json).unwrap(),
        r
    );
}

fn pod_of(r: &warren_devfile::Rendered) -> k8s_openapi::api::core::v1::PodSpec {
    let dep = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let dep: Deployment = serde_json::from_value(dep.clone()).unwrap();
    dep.spec.unwrap().template.spec.unwrap()
}

#[test]
fn the_editor_is_injected_into_the_main_container() {
    let d = parse_devfile(MULTI).unwrap();
    let cfg = config();
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let editor = r
        .endpoints
        .iter()
        .find(|e| e.name == "warren-editor")
        .expect("an editor endpoint");
    assert_eq!(
        (
            editor.port,
            editor.container.as_str(),
            editor.exposure.as_str()
        ),
        (13337, "tools", "public")
    );
    let pod = pod_of(&r);
    // The init container copies the tools; it runs first, locked down and bounded (the
    // agent caps this workspace, so everything needs limits).
    let init = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.name, "warren-tools");
    assert_eq!(
        init.image.as_deref(),
        Some("localhost/warren-tools:code-server-4.100.3")
    );
    assert_eq!(
        init.command.clone().unwrap(),
        ["/bin/sh", "/warren-tools/install", "/warren/tools"]
    );
    assert!(init.resources.as_ref().unwrap().limits.is_some());
    let sc = init.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    // Only the main container sees the tools, read-only, and listens on the editor's port.
    let tools = pod.containers.iter().find(|c| c.name == "tools").unwrap();
    let mount = tools
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == "warren-tools")
        .expect("tools mounted");
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/warren/tools", Some(true))
    );
    assert!(tools
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .any(|p| p.container_port == 13337));
    let db = pod.containers.iter().find(|c| c.name == "db").unwrap();
    assert!(db
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .all(|m| m.name != "warren-tools"));
    let vol = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "warren-tools")
        .unwrap();
    assert!(vol.empty_dir.is_some());
    // The editor starts after the postStart commands, in the main container only.
    let cm = r.objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let script = cm["data"]["start-tools.sh"].as_str().unwrap();
    let post_start = script.find("running postStart command install").unwrap();
    let editor = script.find("entry.js").unwrap();
    assert!(post_start < editor, "{script}");
    for flag in [
        "--auth none",
        // The pod's loopback unless the runtime says otherwise (the engine does).
        "--bind-addr \"${WARREN_EDITOR_ADDRESS:-127.0.0.1}:13337\"",
        "--disable-telemetry",
        "--disable-update-check",
        "--user-data-dir \"$editor_data\"",
    ] {
        assert!(script.contains(flag), "{flag} in {script}");
    }
    assert!(script.contains("has no glibc"), "{script}");
}

#[test]
fn the_editor_moves_off_a_port_the_devfile_uses_and_can_be_turned_off() {
    let text = r#"
schemaVersion: 2.2.0
components:
  - name: dev
    container:
      image: debian
      endpoints: [{name: app, targetPort: 13337}, {name: next, targetPort: 13338}]
"#;
    let d = parse_devfile(text).unwrap();
    let mut cfg = AgentConfig::default();
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let editor = r
        .endpoints
        .iter()
        .find(|e| e.name == "warren-editor")
        .unwrap();
    assert_eq!(editor.port, 13339);

    cfg.editor.name = warren_types::config::EditorName::None;
    let r = render(&d, &request(&cfg, &[])).unwrap();
    assert!(r.endpoints.iter().all(|e| e.name != "warren-editor"));
    let pod = pod_of(&r);
    assert!(pod.init_containers.is_none());
    assert!(pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .all(|v| v.name != "warren-tools"));
    let text = serde_json::to_string(&r.objects).unwrap();
    assert!(!text.contains("code-server"), "{text}");

    // A tools image of the operator's choosing.
    cfg.editor.name = warren_types::config::EditorName::CodeServer;
    cfg.editor.image = Some("registry.example.com/tools/editor:7".into());
    let r = render(&d, &request(&cfg, &[])).unwrap();
    assert_eq!(
        pod_of(&r).init_containers.unwrap()[0].image.as_deref(),
        Some("registry.example.com/tools/editor:7")
    );
}

/// An admin's broad egress block never opens the protected ranges; one they name by itself
/// (inside a protected range) is kept as written, and exceptions are added only once.
#[test]
fn protected_ranges_are_excepted_from_broad_blocks_only() {
    use warren_devfile::protected_egress;
    use warren_types::config::EgressRule;
    let rule = |allow: &str, except: &[&str]| EgressRule {
        allow: allow.into(),
        except: except.iter().map(|e| e.to_string()).collect(),
    };
    let out = protected_egress(&[
        rule("0.0.0.0/0", &["169.254.0.0/16"]),
        rule("169.254.169.254/32", &[]),
        rule("100.0.0.0/8", &[]),
        rule("::/0", &[]),
        rule("not-a-cidr", &[]),
    ]);
    let broad = &out[0].except;
    assert_eq!(
        broad.iter().filter(|e| *e == "169.254.0.0/16").count(),
        1,
        "{broad:?}"
    );
    for p in [
        "0.0.0.0/8",
        "127.0.0.0/8",
        "100.64.0.0/10",
        "224.0.0.0/4",
        "240.0.0.0/4",
    ] {
        assert!(broad.iter().any(|e| e == p), "{p} in {broad:?}");
    }
    assert!(
        !broad.iter().any(|e| e.contains(':')),
        "no IPv6 in an IPv4 block: {broad:?}"
    );
    assert!(out[1].except.is_empty(), "named by itself: {:?}", out[1]);
    assert_eq!(out[2].except, vec!["100.64.0.0/10".to_owned()]);
    for p in ["::1/128", "fe80::/10", "fd00:ec2::254/128", "ff00::/8"] {
        assert!(out[3].except.iter().any(|e| e == p), "{p} in {:?}", out[3]);
    }
    assert!(out[4].except.is_empty());
}

/// Every pod Warren renders meets Kubernetes' `restricted` Pod Security Standard — the level
/// the agent labels a workspace's namespace with and holds devfile components to — for every
/// golden devfile (init containers, sidecars, the editor's tools container and all).
#[test]
fn every_rendered_pod_meets_the_restricted_pod_security_standard() {
    let cfg = config();
    let vars = variables();
    for (name, text) in [
        ("default", default_devfile().to_owned()),
        ("udi", registry_file("udi.devfile.yaml")),
        (
            "go",
            strip_unsupported(&registry_file("go-2.6.0.devfile.yaml")),
        ),
        ("multi", MULTI.to_owned()),
    ] {
        let d = parse_devfile(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = render(&d, &request(&cfg, &vars)).expect("render");
        let deployment = r
            .objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("a Deployment");
        let violations =
            warren_admission::pod_security(deployment, warren_admission::Level::Restricted);
        assert!(
            violations.is_empty(),
            "{name}: {}",
            warren_admission::describe(&violations)
        );
        // The NetworkPolicy admits the agent by its namespace and label only, and covers the
        // whole (own) namespace so a component's pods are held to it too.
        let policy = r
            .objects
            .iter()
            .find(|o| o["kind"] == "NetworkPolicy")
            .expect("a NetworkPolicy");
        assert_eq!(
            policy["spec"]["podSelector"],
            serde_json::json!({}),
            "{name}"
        );
        let agent = &policy["spec"]["ingress"][0]["from"][0];
        assert_eq!(
            agent["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], "warren",
            "{name}: {policy}"
        );
        assert_eq!(
            agent["podSelector"]["matchLabels"]["warren.dev/component"],
            "agent"
        );
    }
    // An admin who allows privilege escalation gets pods that meet only `baseline`.
    let mut loose = config();
    loose.security.allow_privilege_escalation = true;
    let d = parse_devfile(MULTI).unwrap();
    let r = render(&d, &request(&loose, &vars)).unwrap();
    let deployment = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert!(
        !warren_admission::pod_security(deployment, warren_admission::Level::Restricted).is_empty()
    );
    assert!(
        warren_admission::pod_security(deployment, warren_admission::Level::Baseline).is_empty()
    );
}

/// In a shared namespace the policy covers the workspace's own pods only, and lets no
/// neighbour in.
#[test]
fn a_shared_namespaces_policy_selects_the_workspace_alone() {
    let mut cfg = config();
    cfg.shared_namespace = Some("team".into());
    let d = parse_devfile(MULTI).unwrap();
    let r = render(&d, &request(&cfg, &[])).unwrap();
    let policy = r
        .objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .unwrap();
    assert!(
        policy["spec"]["podSelector"]["matchLabels"]["warren.dev/workspace-id"].is_string(),
        "{policy}"
    );
    let from = policy["spec"]["ingress"][0]["from"].as_array().unwrap();
    assert_eq!(from.len(), 1, "{policy}");
    let to_pods = policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["to"].as_array().into_iter().flatten())
        .any(|p| p.get("podSelector").is_some());
    assert!(!to_pods, "{policy}");
}
