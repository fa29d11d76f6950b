//! The mapping of a workspace's Kubernetes objects to engine containers, volumes and files
//! (desired-config.md's table), checked without an engine.

use crate::common;

use anyhow::Result;
use bollard::models::MountType;
use common::Workspace;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use warren_agent::runtime::engine::plan::{self, PlanContext, PlanError, PodPlan, Role};
use warren_types::AgentId;

fn plan_of(ws: &Workspace, objects: &[Value]) -> Result<PodPlan, PlanError> {
    plan_as(ws, objects, None)
}

/// The plan of a pod from Git, run as on Kubernetes (with Podman's user namespaces).
fn git_plan_of(ws: &Workspace, objects: &[Value]) -> Result<PodPlan, PlanError> {
    plan_as(
        ws,
        objects,
        Some(plan::KubernetesPods {
            user_namespace: true,
            remapped_users: false,
        }),
    )
}

/// The plan of a pod from Git on Docker without `userns-remap`: no user namespace at all.
fn git_plan_on_docker(ws: &Workspace, objects: &[Value]) -> Result<PodPlan, PlanError> {
    plan_as(
        ws,
        objects,
        Some(plan::KubernetesPods {
            user_namespace: false,
            remapped_users: false,
        }),
    )
}

fn plan_as(
    ws: &Workspace,
    objects: &[Value],
    kubernetes: Option<plan::KubernetesPods>,
) -> Result<PodPlan, PlanError> {
    plan_on(ws, objects, kubernetes, &plan::CdiDevices::default())
}

fn plan_on(
    ws: &Workspace,
    objects: &[Value],
    kubernetes: Option<plan::KubernetesPods>,
    cdi: &plan::CdiDevices,
) -> Result<PodPlan, PlanError> {
    let parsed = plan::parse_objects(objects)?;
    let labels = BTreeMap::from([("warren.dev/agent-id".to_owned(), "7".to_owned())]);
    let cx = PlanContext {
        workspace: &ws.key,
        files_dir: Path::new("/state/ws/files"),
        labels: &labels,
        kubernetes,
        cdi,
    };
    plan::plan(&parsed, &parsed.secrets, &parsed.config_maps, &cx)
}

fn workspace() -> Workspace {
    Workspace::new("plan", AgentId(7))
}

#[test]
fn the_fixture_maps_to_init_containers_and_app_containers_sharing_a_namespace() -> Result<()> {
    let ws = workspace();
    let name = ws.name().to_owned();
    let p = plan_of(&ws, &ws.objects())?;
    let names: Vec<(Role, &str)> = p
        .containers
        .iter()
        .map(|c| (c.role, c.engine_name.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            (
                Role::Init,
                format!("warren-{name}.c.warren-prestart").as_str()
            ),
            (Role::App, format!("warren-{name}.c.dev").as_str()),
            (Role::App, format!("warren-{name}.c.tools").as_str()),
        ]
    );
    assert_eq!(p.replicas, 1);
    assert_eq!(p.network, format!("warren-{name}"));
    assert_eq!(p.ports, vec!["8080/tcp".to_owned()]);
    assert_eq!(
        p.volumes.keys().cloned().collect::<Vec<_>>(),
        vec![format!("warren-{name}-warren-data")]
    );
    assert_eq!((p.uid, p.gid), (5001, 0));

    // The init container runs on the workspace network, before the pod's namespace exists.
    let init = &p.containers[0].body;
    assert_eq!(
        init.host_config.as_ref().unwrap().network_mode.as_deref(),
        Some(format!("warren-{name}").as_str())
    );
    assert!(init.host_config.as_ref().unwrap().port_bindings.is_none());

    // The first app container owns the namespace and publishes the ports.
    let owner = &p.containers[1].body;
    assert_eq!(owner.hostname.as_deref(), Some(name.as_str()));
    let hc = owner.host_config.as_ref().unwrap();
    assert_eq!(
        hc.network_mode.as_deref(),
        Some(format!("warren-{name}").as_str())
    );
    let binding = &hc.port_bindings.as_ref().unwrap()["8080/tcp"]
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        binding.host_ip.as_deref(),
        Some("127.0.0.1"),
        "published on loopback only"
    );
    assert_eq!(binding.host_port.as_deref(), Some(""), "a random host port");

    let dev = &p.containers[1].body;
    let hc = dev.host_config.as_ref().unwrap();
    assert_eq!(hc.memory, Some(256 << 20));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_owned()][..]));
    assert_eq!(
        hc.security_opt.as_deref(),
        Some(&["no-new-privileges".to_owned()][..])
    );
    assert_eq!(hc.privileged, Some(false));
    assert_eq!(hc.init, Some(true));
    let tools = &p.containers[2].body;
    assert_eq!(
        tools.host_config.as_ref().unwrap().network_mode.as_deref(),
        Some(format!("container:warren-{name}.c.dev").as_str()),
        "the sidecar joins the owner's namespace"
    );
    assert_eq!(dev.user.as_deref(), Some("5001:0"));
    let env = dev.env.clone().unwrap();
    assert!(
        env.contains(&"GREETING=hello from the secret".to_owned()),
        "{env:?}"
    );
    assert!(env.contains(&format!("POD_NAME={name}")), "{env:?}");
    let mounts = hc.mounts.clone().unwrap();
    let data = mounts
        .iter()
        .find(|m| m.target.as_deref() == Some("/projects"))
        .unwrap();
    assert_eq!(data.typ, Some(MountType::VOLUME));
    assert_eq!(
        data.source.as_deref(),
        Some(format!("warren-{name}-warren-data").as_str())
    );
    let files = mounts
        .iter()
        .find(|m| m.target.as_deref() == Some("/.warren/files"))
        .unwrap();
    assert_eq!(files.typ, Some(MountType::BIND));
    assert_eq!(files.read_only, Some(true));
    assert_eq!(
        files.source.as_deref(),
        Some("/state/ws/files/warren-files")
    );

    let labels = dev.labels.clone().unwrap();
    assert_eq!(labels["warren.dev/pod-hash"], p.hash);
    assert_eq!(labels["warren.dev/agent-id"], "7");
    assert_eq!(labels["warren.dev/container"], "dev");

    let token = p
        .files
        .iter()
        .find(|f| f.path == Path::new("warren-files/token"))
        .unwrap();
    assert_eq!(token.contents, b"s3cret-token");
    assert!(p
        .files
        .iter()
        .any(|f| f.path == Path::new("warren-scripts/start.sh")));
    Ok(())
}

/// A capability or an unconfined profile is in a workspace's objects only when the agent's
/// admin allowed it (the server's renderer refuses the rest); the engine gets them as its
/// options, with every other capability still dropped.
#[test]
fn the_exceptions_an_admin_allows_reach_the_engine_as_its_options() -> Result<()> {
    let ws = workspace();
    let mut objects = ws.objects();
    let dep = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    let sc = &mut dep["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    sc["capabilities"]["add"] = json!(["SYS_PTRACE"]);
    sc["seccompProfile"] = json!({"type": "Unconfined"});
    sc["appArmorProfile"] = json!({"type": "Unconfined"});
    let p = plan_of(&ws, &objects)?;
    let dev = p.containers.iter().find(|c| c.role == Role::App).unwrap();
    let hc = dev.body.host_config.as_ref().unwrap();
    assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_owned()][..]));
    assert_eq!(hc.cap_add.as_deref(), Some(&["SYS_PTRACE".to_owned()][..]));
    assert_eq!(
        hc.security_opt.clone().unwrap_or_default(),
        [
            "no-new-privileges",
            "seccomp=unconfined",
            "apparmor=unconfined"
        ]
    );
    assert_eq!(hc.privileged, Some(false));
    // The other container asked for nothing and gets nothing.
    let tools = p.containers.iter().rfind(|c| c.role == Role::App).unwrap();
    let hc = tools.body.host_config.as_ref().unwrap();
    assert_eq!(hc.cap_add, None);
    assert_eq!(
        hc.security_opt.clone().unwrap_or_default(),
        ["no-new-privileges"]
    );
    Ok(())
}

#[test]
fn the_hash_follows_the_pod_spec_not_the_replicas() -> Result<()> {
    let ws = workspace();
    let a = plan_of(&ws, &ws.objects())?;
    assert_eq!(a.hash, plan_of(&ws, &ws.objects())?.hash, "deterministic");
    let stopped = common::with_replicas(ws.objects(), 0);
    let b = plan_of(&ws, &stopped)?;
    assert_eq!(b.replicas, 0);
    assert_eq!(a.hash, b.hash, "stopping is not a new pod spec");
    let mut resized = ws.objects();
    common::pod_spec(&mut resized)["containers"][0]["resources"]["limits"]["cpu"] = json!("1");
    assert_ne!(a.hash, plan_of(&ws, &resized)?.hash);
    Ok(())
}

/// A value the environment takes from a Secret (a user's secret, say) is read when the pod is
/// made, as on Kubernetes: changing it alone is not a new pod spec (a running pod stays),
/// but changes the hash a starting pod is compared with.
#[test]
fn values_from_objects_are_the_next_starts_not_a_new_pod_spec() -> Result<()> {
    let ws = workspace();
    let objects = ws.objects();
    let a = plan_of(&ws, &objects)?;
    let secret_env = |objects: &mut Vec<Value>, value: &str| {
        for o in objects.iter_mut() {
            if o["kind"] == "Secret"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-env"))
            {
                o["stringData"]["GREETING"] = json!(value);
            }
        }
    };
    let mut changed = ws.objects();
    secret_env(&mut changed, "hello again");
    let b = plan_of(&ws, &changed)?;
    assert_eq!(a.hash, b.hash, "the pod spec is the same");
    assert_ne!(a.env_hash, b.env_hash, "a starting pod takes the new value");
    let app = |p: &PodPlan| {
        p.containers
            .iter()
            .find(|c| c.role == Role::App)
            .and_then(|c| c.body.env.clone())
            .unwrap_or_default()
    };
    assert!(
        app(&b).contains(&"GREETING=hello again".to_owned()),
        "{:?}",
        app(&b)
    );
    let labels = b.containers[0].body.labels.clone().unwrap_or_default();
    assert_eq!(labels["warren.dev/objects-env-hash"], b.env_hash);
    // A literal value in the spec is the pod spec's.
    let literal = |value: &str| -> Result<PodPlan> {
        let mut objects = ws.objects();
        let env = &mut common::pod_spec(&mut objects)["containers"][0]["env"];
        env.as_array_mut()
            .expect("env")
            .push(json!({"name": "GREETING", "value": value}));
        Ok(plan_of(&ws, &objects)?)
    };
    assert_ne!(literal("one")?.hash, literal("two")?.hash);
    Ok(())
}

#[test]
fn host_aliases_reach_every_network_namespace_and_exec_post_start_hooks_are_kept() -> Result<()> {
    let ws = workspace();
    let mut objects = ws.objects();
    common::pod_spec(&mut objects)["hostAliases"] =
        json!([{"ip": "127.0.0.1", "hostnames": ["db", "cache"]}]);
    common::pod_spec(&mut objects)["containers"][1]["lifecycle"] = json!({"postStart": {"exec": {"command": ["/bin/sh", "-c", "until ready; do sleep 1; done"]}}});
    let plan = plan_of(&ws, &objects)?;
    let hosts = |c: &plan::ContainerPlan| {
        c.body
            .host_config
            .as_ref()
            .and_then(|h| h.extra_hosts.clone())
            .unwrap_or_default()
    };
    let apps: Vec<&plan::ContainerPlan> = plan
        .containers
        .iter()
        .filter(|c| c.role == Role::App)
        .collect();
    // The namespace's owner has the names; a joiner shares its hosts file (Podman and
    // Docker refuse `--add-host` beside `--network container:`).
    assert_eq!(hosts(apps[0]), ["db:127.0.0.1", "cache:127.0.0.1"]);
    assert!(hosts(apps[1]).is_empty());
    for init in plan.containers.iter().filter(|c| c.role == Role::Init) {
        assert_eq!(
            hosts(init),
            ["db:127.0.0.1", "cache:127.0.0.1"],
            "{}",
            init.name
        );
    }
    assert_eq!(
        apps[1].post_start.as_deref(),
        Some(
            &[
                "/bin/sh".to_owned(),
                "-c".into(),
                "until ready; do sleep 1; done".into()
            ][..]
        )
    );
    assert!(apps[0].post_start.is_none());
    // The hook is part of what the pod is: changing it makes a new pod.
    let before = plan.hash.clone();
    common::pod_spec(&mut objects)["containers"][1]["lifecycle"]["postStart"]["exec"]["command"] =
        json!(["true"]);
    assert_ne!(plan_of(&ws, &objects)?.hash, before);
    // A hook the engine cannot run is refused, not skipped.
    common::pod_spec(&mut objects)["containers"][1]["lifecycle"] =
        json!({"postStart": {"httpGet": {"port": 80}}});
    let err = plan_of(&ws, &objects)
        .expect_err("an HTTP hook")
        .to_string();
    assert!(err.contains("only an exec postStart hook"), "{err}");
    Ok(())
}

#[test]
fn objects_an_engine_cannot_honour_are_refused_by_name() {
    let ws = workspace();
    let refuse = |change: &dyn Fn(&mut Vec<Value>), want: &str| {
        let mut objects = ws.objects();
        change(&mut objects);
        let err = plan_of(&ws, &objects).expect_err(want).to_string();
        assert!(err.contains(want), "{err:?} should contain {want:?}");
    };
    refuse(
        &|o| o.push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})),
        "kind Pod",
    );
    refuse(
        &|o| common::pod_spec(o)["containers"][0]["securityContext"]["privileged"] = json!(true),
        "privileged",
    );
    refuse(
        &|o| common::pod_spec(o)["securityContext"]["runAsUser"] = json!(0),
        "runAsUser is 0",
    );
    refuse(
        &|o| common::pod_spec(o)["containers"][0]["volumeMounts"][0]["subPath"] = json!("../etc"),
        "subPath",
    );
    refuse(
        &|o| {
            common::pod_spec(o)["volumes"][1]["secret"]["items"] =
                json!([{"key": "token", "path": "../../x"}])
        },
        "stay inside the volume",
    );
    refuse(
        &|o| common::pod_spec(o)["containers"][0]["resources"]["limits"]["cpu"] = json!("-1"),
        "limits.cpu",
    );
    refuse(&|o| common::with_replicas_in_place(o, 3), "replicas is 3");
    refuse(
        &|o| o.retain(|x| x["kind"] != "Secret"),
        "not among the objects",
    );
    refuse(
        &|o| o.retain(|x| x["kind"] != "Deployment"),
        "no Deployment",
    );
    refuse(
        &|o| {
            common::pod_spec(o)["volumes"][0] =
                json!({"name": "warren-data", "hostPath": {"path": "/"}})
        },
        "only persistentVolumeClaim",
    );
}

/// A Deployment as public examples write it: no securityContext at all.
/// A machine class's devices (extended resources in the main container's limits) become
/// the host's CDI devices of that kind, their specification's edits applied; a kind the host lacks, or too few, is refused
/// naming it (issue 41, item 3); a specification with hooks goes to an engine that applies
/// it whole, or is refused naming the engine.
#[test]
fn devices_are_the_hosts_cdi_devices_of_their_kind() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("dongle.yaml"),
        "cdiVersion: 0.5.0\nkind: example.com/dongle\ncontainerEdits:\n  env: [DONGLE_LIB=/opt/dongle]\ndevices:\n  - name: first\n    containerEdits:\n      deviceNodes:\n        - {path: /dev/dongle-first, hostPath: /dev/null}\n  - name: second\n    containerEdits:\n      deviceNodes:\n        - {path: /dev/dongle-second, hostPath: /dev/zero}\n",
    )?;
    let cdi = plan::CdiDevices::read(&[dir.path().to_owned()]);
    let ws = workspace();
    // The workspace's objects with its main container asking for `count` devices of `kind`.
    let asking = |kind: &str, count: &str| {
        let mut objects = ws.objects();
        let dep = objects
            .iter_mut()
            .find(|o| o["kind"] == "Deployment")
            .expect("a Deployment");
        dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][kind] =
            json!(count);
        objects
    };
    let with = |count: &str| asking("example.com/dongle", count);
    let p = plan_on(&ws, &with("2"), None, &cdi)?;
    let dev = p.containers.iter().find(|c| c.role == Role::App).unwrap();
    let devices: Vec<(String, String)> = (dev.body.host_config.as_ref().unwrap().devices.iter())
        .flatten()
        .map(|d| {
            (
                d.path_on_host.clone().unwrap_or_default(),
                d.path_in_container.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            ("/dev/null".to_owned(), "/dev/dongle-first".to_owned()),
            ("/dev/zero".to_owned(), "/dev/dongle-second".to_owned())
        ]
    );
    assert!(
        dev.body
            .env
            .iter()
            .flatten()
            .any(|e| e == "DONGLE_LIB=/opt/dongle"),
        "{:?}",
        dev.body.env
    );
    let others = p.containers.iter().filter(|c| c.role == Role::App).skip(1);
    for c in others {
        assert_eq!(c.body.host_config.as_ref().unwrap().devices, None);
    }

    let too_many = plan_on(&ws, &with("3"), None, &cdi)
        .unwrap_err()
        .to_string();
    assert!(
        too_many.contains("has 2 example.com/dongle device(s)"),
        "{too_many}"
    );
    let none = plan_of(&ws, &with("1")).unwrap_err().to_string();
    assert!(
        none.contains("this host has no example.com/dongle devices"),
        "{none}"
    );
    let half = plan_on(&ws, &with("500m"), None, &cdi)
        .unwrap_err()
        .to_string();
    assert!(half.contains("whole number of devices"), "{half}");

    // A device whose specification runs hooks: requested from the engine by name where it
    // applies such requests (hooks and all), refused naming the engine elsewhere.
    std::fs::write(
        dir.path().join("gpu.yaml"),
        "cdiVersion: 0.6.0\nkind: example.com/gpu\ncontainerEdits:\n  env: [GPU_LIB=1]\n  hooks:\n    - {hookName: createContainer, path: /usr/bin/vendor-ctk, args: [vendor-ctk, hook, update-ldcache]}\ndevices:\n  - name: '0'\n    containerEdits:\n      deviceNodes: [{path: /dev/gpu0, hostPath: /dev/null}]\n",
    )?;
    let gpu = |count: &str| asking("example.com/gpu", count);
    let cdi = plan::CdiDevices::read(&[dir.path().to_owned()]);
    let refused = plan_on(&ws, &gpu("1"), None, &cdi).unwrap_err().to_string();
    assert!(
        refused.contains("example.com/gpu=0 runs hooks")
            && refused.contains("Podman 5.4 or later, or Docker 25 or later with CDI enabled"),
        "{refused}"
    );
    let old_podman = cdi
        .clone()
        .on_engine(plan::cdi::EngineCdi::of(true, "4.3.1", &[]));
    let refused = plan_on(&ws, &gpu("1"), None, &old_podman)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("which Podman 4.3.1 cannot apply"),
        "{refused}"
    );
    let applies = cdi.clone().on_engine(plan::cdi::EngineCdi::Applies);
    let p = plan_on(&ws, &gpu("1"), None, &applies)?;
    let dev = p.containers.iter().find(|c| c.role == Role::App).unwrap();
    let host = dev.body.host_config.as_ref().unwrap();
    let requests: Vec<(Option<&str>, Option<&Vec<String>>)> = (host.device_requests.iter())
        .flatten()
        .map(|r| (r.driver.as_deref(), r.device_ids.as_ref()))
        .collect();
    assert_eq!(
        requests,
        [(Some("cdi"), Some(&vec!["example.com/gpu=0".to_owned()]))],
        "one request by name, which the engine applies whole"
    );
    assert_eq!(host.devices, None, "no device node applied by the agent");
    assert!(
        !dev.body
            .env
            .iter()
            .flatten()
            .any(|e| e.starts_with("GPU_LIB=")),
        "the specification's edits are the engine's to apply, once"
    );
    let p = plan_on(&ws, &with("1"), None, &applies)?;
    let dev = p.containers.iter().find(|c| c.role == Role::App).unwrap();
    let host = dev.body.host_config.as_ref().unwrap();
    assert_eq!(
        (host.devices.as_ref().map(Vec::len), &host.device_requests),
        (Some(1), &None),
        "a specification without hooks is still applied by the agent, on every engine"
    );

    // A pod from Git never reaches the host's devices, whatever its manifest asks.
    let git = git_deployment(
        json!([{"name": "web", "image": "nginx",
                "resources": {"limits": {"example.com/dongle": "1"}}}]),
        json!({}),
    );
    let user_namespace = Some(plan::KubernetesPods {
        user_namespace: true,
        remapped_users: false,
    });
    let refused = plan_on(&ws, &git, user_namespace, &cdi)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("only a workspace's machine class gives devices"),
        "{refused}"
    );
    Ok(())
}

fn git_deployment(containers: Value, pod_extra: Value) -> Vec<Value> {
    let mut spec = json!({"containers": containers});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), pod_extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    vec![json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}}
    })]
}

fn caps(c: &plan::ContainerPlan) -> Vec<String> {
    c.body
        .host_config
        .as_ref()
        .and_then(|h| h.cap_add.clone())
        .unwrap_or_default()
}

#[test]
fn a_pod_from_git_runs_as_its_image_user_with_the_baseline_capabilities_in_a_user_namespace(
) -> Result<()> {
    let ws = workspace();
    let objects = git_deployment(
        json!([
            {"name": "web", "image": "example/web:1", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "example/side:1",
             "securityContext": {"capabilities": {"drop": ["NET_RAW", "CAP_MKNOD"], "add": ["SYS_TIME"]}}},
            {"name": "tight", "image": "example/tight:1",
             "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}},
        ]),
        json!({}),
    );
    let p = git_plan_of(&ws, &objects)?;
    let web = &p.containers[0];
    // The image's user: nothing set, and checked at create.
    assert_eq!(web.body.user, None);
    let image_user = web
        .image_user
        .expect("the image's user is checked at create");
    assert!(!image_user.non_root && image_user.root_allowed);
    assert_eq!(
        web.body.host_config.as_ref().unwrap().cap_drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    let baseline: Vec<String> = warren_admission::BASELINE_CAPABILITIES
        .iter()
        .map(|c| (*c).to_owned())
        .collect();
    assert_eq!(
        caps(web),
        baseline,
        "the container runtime's defaults, Kubernetes' baseline"
    );
    assert!(caps(web).contains(&"NET_BIND_SERVICE".to_owned()));
    // Drops take away from the baseline; adds add (the GitOps admission bounds adds).
    let side = caps(&p.containers[1]);
    assert!(!side.contains(&"NET_RAW".to_owned()) && !side.contains(&"MKNOD".to_owned()));
    assert!(side.contains(&"SYS_TIME".to_owned()) && side.contains(&"CHOWN".to_owned()));
    assert_eq!(caps(&p.containers[2]), vec!["NET_BIND_SERVICE".to_owned()]);
    assert_eq!(p.containers[2].body.user.as_deref(), Some("1000"));
    assert!(p.containers[2].image_user.is_none());

    // One user namespace for the pod's app containers, shared as its network is.
    let userns = |i: usize| {
        p.containers[i]
            .body
            .host_config
            .as_ref()
            .unwrap()
            .userns_mode
            .clone()
    };
    assert_eq!(userns(0).as_deref(), Some(plan::AUTO_USER_NAMESPACE));
    let owner = &p.containers[0].engine_name;
    assert_eq!(userns(1), Some(format!("container:{owner}")));
    assert_eq!(userns(2), Some(format!("container:{owner}")));

    // A workspace's pod is unchanged: Warren's user, no capability it does not ask for,
    // no user namespace.
    let w = plan_of(&ws, &objects)?;
    assert_eq!(w.containers[0].body.user.as_deref(), Some("5001:0"));
    assert!(caps(&w.containers[0]).is_empty());
    assert!(w.containers[0].image_user.is_none());
    assert_eq!(
        w.containers[0]
            .body
            .host_config
            .as_ref()
            .unwrap()
            .userns_mode,
        None
    );
    assert_ne!(w.hash, p.hash);
    Ok(())
}

#[test]
fn run_as_non_root_and_groups_of_a_pod_from_git_are_carried_to_the_create() -> Result<()> {
    let ws = workspace();
    let p = git_plan_of(
        &ws,
        &git_deployment(
            json!([{"name": "web", "image": "example/web:1"}]),
            json!({"securityContext": {"runAsNonRoot": true, "runAsGroup": 3000}}),
        ),
    )?;
    let u = p.containers[0].image_user.expect("checked at create");
    assert!(u.non_root);
    assert_eq!(u.group, Some(3000));
    let refused = git_plan_of(
        &ws,
        &git_deployment(
            json!([{"name": "web", "image": "example/web:1"}]),
            json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 0}}),
        ),
    );
    let message = refused.expect_err("root with runAsNonRoot").to_string();
    assert!(message.contains("runAsNonRoot"), "{message}");
    Ok(())
}

#[test]
fn a_pod_from_git_has_its_files_as_kubernetes_projects_them() -> Result<()> {
    let ws = workspace();
    let mut objects = git_deployment(
        json!([{"name": "web", "image": "example/web:1",
                "volumeMounts": [{"name": "conf", "mountPath": "/etc/web"},
                                 {"name": "key", "mountPath": "/etc/key"}]}]),
        json!({"securityContext": {"fsGroup": 2000},
               "volumes": [{"name": "conf", "configMap": {"name": "conf"}},
                           {"name": "key", "secret": {"secretName": "key", "defaultMode": 0o440,
                            "items": [{"key": "k", "path": "k"}, {"key": "p", "path": "p", "mode": 0o400}]}}]}),
    );
    objects.push(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf"},
                        "data": {"a.conf": "x"}}),
    );
    objects.push(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "key"},
                        "stringData": {"k": "1", "p": "2"}}),
    );
    let p = git_plan_of(&ws, &objects)?;
    assert!(p.kubernetes);
    assert_eq!((p.uid, p.gid), (0, 2000), "root's, and the fsGroup's");
    let mode = |path: &str| {
        p.files
            .iter()
            .find(|f| f.path == Path::new(path))
            .and_then(|f| f.mode)
    };
    assert_eq!(mode("conf/a.conf"), Some(0o644));
    // In a user namespace their owner (the host's root) is no one: what it may read, the
    // pod's users may.
    assert_eq!(mode("key/k"), Some(0o444));
    assert_eq!(mode("key/p"), Some(0o444));
    let docker = git_plan_on_docker(&ws, &objects)?;
    let mode = |path: &str| {
        docker
            .files
            .iter()
            .find(|f| f.path == Path::new(path))
            .and_then(|f| f.mode)
    };
    assert_eq!(mode("key/k"), Some(0o440));
    assert_eq!(mode("key/p"), Some(0o400));
    // The fsGroup is among the processes' groups, as on Kubernetes.
    let groups = docker.containers[0]
        .body
        .host_config
        .as_ref()
        .and_then(|h| h.group_add.clone());
    assert_eq!(groups, Some(vec!["2000".to_owned()]));
    // A workspace's stay private to its user.
    let w = plan_of(&ws, &objects)?;
    assert!(w.files.iter().all(|f| f.mode.is_none()));
    assert_eq!((w.uid, w.gid), (5001, 0));
    Ok(())
}

#[test]
fn a_pod_from_git_that_must_not_restart_or_probes_by_grpc_is_refused_by_name() {
    let ws = workspace();
    let never = git_plan_of(
        &ws,
        &git_deployment(
            json!([{"name": "web", "image": "example/web:1"}]),
            json!({"restartPolicy": "Never"}),
        ),
    );
    let message = never.expect_err("a Deployment always restarts").to_string();
    assert!(message.contains("restartPolicy \"Never\""), "{message}");
    let grpc = git_plan_of(
        &ws,
        &git_deployment(
            json!([{"name": "web", "image": "example/web:1",
                    "livenessProbe": {"grpc": {"port": 9000}}}]),
            json!({}),
        ),
    );
    let message = grpc.expect_err("no grpc probes on an engine").to_string();
    assert!(message.contains("livenessProbe.grpc"), "{message}");
}

#[test]
fn without_a_user_namespace_a_pod_from_git_never_runs_as_root_or_escalates() {
    let ws = workspace();
    let root = git_plan_on_docker(
        &ws,
        &git_deployment(
            json!([{"name": "web", "image": "example/web:1",
                    "securityContext": {"runAsUser": 0}}]),
            json!({}),
        ),
    );
    let message = root.expect_err("root on the host").to_string();
    assert!(message.contains("runAsUser 0 is not allowed"), "{message}");
    let p = git_plan_on_docker(
        &ws,
        &git_deployment(
            json!([{"name": "web", "image": "example/web:1"}]),
            json!({}),
        ),
    )
    .expect("a plan");
    let c = &p.containers[0];
    // The image's user is checked at create, and refused there if it is root or a name.
    assert!(!c.image_user.expect("checked at create").root_allowed);
    // A set-user-id binary of the image cannot make it root.
    let opts = c
        .body
        .host_config
        .as_ref()
        .and_then(|h| h.security_opt.clone())
        .unwrap_or_default();
    assert!(opts.contains(&"no-new-privileges".to_owned()), "{opts:?}");
    assert_eq!(c.body.host_config.as_ref().unwrap().userns_mode, None);
}
