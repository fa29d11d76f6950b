//! Everything Warren accepts is applicable: the registry's devfiles and generated ones (names,
//! environment, annotations, endpoints, volumes, workspace names drawn from pools that mix
//! what Kubernetes accepts with what it refuses) are parsed and rendered as the server does,
//! and every object of every accepted one is created with `dryRun` on a real kube-apiserver.
//! The API server must refuse none of them.

use crate::kube_common;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use kube_common::cluster;
use kube_common::fixtures::unique;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{json, Value};
use warren_devfile::{parse_devfile, render, ProjectSource, RenderRequest};
use warren_types::api::WorkspaceResources;
use warren_types::config::{AgentConfig, ResourceList, ResourceRequirements};
use warren_types::{AgentId, DesiredState, WorkspaceId};

const REGISTRY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/devfiles/registry"
);

/// Agent configurations that change what is rendered: defaults (with the injected editor's
/// init container, `emptyDir` and read-only mount), a cap (adds a ResourceQuota, and the
/// editor's init container must fit it), a NetworkPolicy, extra labels and annotations, no
/// editor.
fn configs() -> Vec<AgentConfig> {
    let capped = AgentConfig {
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
        ..Default::default()
    };
    let mut policed = AgentConfig::default();
    policed.network_policy.enabled = true;
    policed.labels = [("team".to_owned(), "platform".to_owned())].into();
    policed.annotations = [("example.com/owner".to_owned(), "ops team".to_owned())].into();
    let mut no_editor = AgentConfig::default();
    no_editor.editor.name = warren_types::config::EditorName::None;
    vec![AgentConfig::default(), capped, policed, no_editor]
}

fn request<'a>(
    name: &'a str,
    cfg: &'a AgentConfig,
    res: &'a WorkspaceResources,
) -> RenderRequest<'a> {
    RenderRequest {
        workspace_name: name,
        workspace_id: WorkspaceId(42),
        agent_id: AgentId(7),
        agent_config: cfg,
        project: Some(ProjectSource {
            name: "demo",
            git_url: "https://example.com/team/demo.git",
            git_ref: "main",
            credential: None,
        }),
        resources: Some(res),
        machine: None,
        variables: &[],
        desired_state: DesiredState::Running,
        dotfiles_url: None,
        starter: None,
        prebuild: false,
        seed: None,
    }
}

/// Creates `object` in `namespace` with `dryRun: All`: the API server validates and admits
/// it and stores nothing.
async fn dry_run(client: &Client, namespace: &str, object: &Value) -> Result<(), String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let mut object = object.clone();
    object["metadata"]["namespace"] = json!(namespace);
    let dynamic: DynamicObject =
        serde_json::from_value(object).map_err(|e| format!("{kind}: not an object: {e}"))?;
    let params = PostParams {
        dry_run: true,
        field_manager: Some("warren-test".into()),
    };
    api.create(&params, &dynamic)
        .await
        .map(|_| ())
        .map_err(|e| format!("{kind} {}: {e}", dynamic.metadata.name.unwrap_or_default()))
}

async fn namespace(client: &Client) -> String {
    let name = unique("dry");
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace");
    name
}

/// Renders `text` under every configuration and dry-runs every object; the refusals.
async fn check(client: &Client, ns: &str, label: &str, text: &str, name: &str) -> Vec<String> {
    let Ok(devfile) = parse_devfile(text) else {
        return vec![];
    };
    let mut refusals = vec![];
    let res = WorkspaceResources::default();
    for cfg in configs() {
        let Ok(rendered) = render(&devfile, &request(name, &cfg, &res)) else {
            continue;
        };
        for object in &rendered.objects {
            if let Err(e) = dry_run(client, ns, object).await {
                refusals.push(format!("{label}: {e}"));
            }
        }
    }
    refusals
}

/// A registry devfile without what Warren refuses by design (parents, projects, non-container
/// components, override attributes, stop events), so its containers reach the renderer.
fn strip_unsupported(text: &str) -> Option<String> {
    let mut v: Value = serde_yaml::from_str(text).ok()?;
    let obj = v.as_object_mut()?;
    for k in [
        "starterProjects",
        "projects",
        "dependentProjects",
        "parent",
        "events",
    ] {
        obj.remove(k);
    }
    if let Some(Value::Array(cs)) = obj.get_mut("components") {
        cs.retain(|c| c.get("container").is_some() || c.get("volume").is_some());
        for c in cs.iter_mut() {
            if let Some(Value::Object(a)) = c.get_mut("attributes") {
                a.remove("pod-overrides");
                a.remove("container-overrides");
            }
        }
    }
    obj.remove("commands");
    serde_yaml::to_string(&v).ok()
}

#[tokio::test]
async fn every_registry_devfile_warren_accepts_is_accepted_by_the_api_server() {
    let Some(cluster) = cluster() else { return };
    let client = cluster.client().await;
    let ns = namespace(&client).await;
    let mut entries: Vec<_> = std::fs::read_dir(REGISTRY)
        .expect("testdata/devfiles/registry")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    let (mut accepted, mut refusals) = (0, vec![]);
    for path in &entries {
        let text = std::fs::read_to_string(path).expect("read devfile");
        let label = path.file_name().unwrap().to_string_lossy().into_owned();
        for candidate in [Some(text.clone()), strip_unsupported(&text)]
            .into_iter()
            .flatten()
        {
            if parse_devfile(&candidate).is_ok() {
                accepted += 1;
            }
            refusals.extend(check(&client, &ns, &label, &candidate, "brave-otter-x7k2").await);
        }
    }
    assert!(
        refusals.is_empty(),
        "the API server refused:\n{}",
        refusals.join("\n")
    );
    assert!(
        accepted > entries.len() / 2,
        "only {accepted} of {} accepted",
        entries.len()
    );
}

/// Mostly values Kubernetes accepts, sometimes ones it refuses.
fn pick<T: Clone + std::fmt::Debug + 'static>(good: Vec<T>, bad: Vec<T>) -> BoxedStrategy<T> {
    prop_oneof![12 => prop::sample::select(good), 1 => prop::sample::select(bad)].boxed()
}

/// One generated container: name, env, endpoints, annotations, resources, mounts.
fn container() -> impl Strategy<Value = Value> {
    let names = pick(vec!["dev", "tools", "a", "web-1"], vec!["Web", "a_b", "x-"]);
    let env_names = pick(
        vec!["A", "_b", "my.var-2", "x-y", "PATH"],
        vec!["1BAD", "MY VAR", "a=b", "É"],
    );
    let env = prop::collection::vec((env_names, "[ -~]{0,12}"), 0..3);
    let endpoint = (
        pick(
            vec!["web", "http-api", "metrics", "VeryLongEndpointName", "x"],
            vec!["a_b", "-x"],
        ),
        pick(vec![80u32, 8080, 3000, 65535], vec![0, 70000]),
        prop::sample::select(vec!["public", "internal", "none"]),
        prop::sample::select(vec!["http", "https", "ws", "wss", "tcp", "udp"]),
        prop::option::of(prop::sample::select(vec!["api", "/x", "/a b", ""])),
    );
    let endpoints = prop::collection::vec(endpoint, 0..3);
    let keys = pick(
        vec![
            "example.com/a",
            "a",
            "A.b_c-1",
            "sub.example.com/long-name_1",
        ],
        vec!["x/y/z", "bad key!", "-bad", "warren.dev/x", "Example.com/a"],
    );
    let annotations = prop::collection::btree_map(keys, "[ -~]{0,10}", 0..2);
    let memory = prop::option::of(pick(vec!["64Mi", "1Gi", "0.5Gi"], vec!["bad", "100000Ti"]));
    let cpu = prop::option::of(pick(vec!["100m", "2", "0.25"], vec!["x"]));
    let mount = prop::option::of(pick(
        vec!["/data", "/home/user/data"],
        vec!["data", "/", "/warren/x"],
    ));
    (names, env, endpoints, annotations.clone(), annotations, memory, cpu, mount).prop_map(
        |(name, env, endpoints, dep, svc, memory, cpu, mount)| {
            let mut c = json!({"image": "busybox"});
            if !env.is_empty() {
                c["env"] = env
                    .iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect();
            }
            if !endpoints.is_empty() {
                c["endpoints"] = endpoints
                    .iter()
                    .map(|(n, port, exposure, protocol, path)| {
                        let mut e = json!({"name": n, "targetPort": port, "exposure": exposure, "protocol": protocol});
                        if let Some(p) = path {
                            e["path"] = json!(p);
                        }
                        e
                    })
                    .collect();
            }
            if !dep.is_empty() || !svc.is_empty() {
                c["annotation"] = json!({"deployment": dep, "service": svc});
            }
            if let Some(m) = memory {
                c["memoryLimit"] = json!(m);
            }
            if let Some(cpu) = cpu {
                c["cpuLimit"] = json!(cpu);
            }
            if let Some(path) = mount {
                c["volumeMounts"] = json!([{"name": "data", "path": path}]);
            }
            json!({"name": name, "container": c})
        },
    )
}

/// A generated devfile and workspace name. Containers get distinct names and ports (a
/// devfile repeating them is refused by Warren, which is not what this test is about).
fn devfile() -> impl Strategy<Value = (String, &'static str)> {
    let containers = prop::collection::vec(container(), 1..3);
    let volume_size = prop::option::of(pick(vec!["1Gi", "512Mi"], vec!["bad"]));
    let ws_names = pick(
        vec![
            "brave-otter-x7k2",
            "a",
            "ws-1",
            "a-very-long-workspace-name-of-forty-chars",
        ],
        vec!["1abc", "Abc", "x-"],
    );
    (containers, volume_size, ws_names).prop_map(|(mut components, size, ws)| {
        for (i, c) in components.iter_mut().enumerate().skip(1) {
            let name = format!("{}{i}", c["name"].as_str().unwrap_or("c"));
            c["name"] = json!(name);
            if let Some(Value::Array(eps)) = c["container"].get_mut("endpoints") {
                for e in eps {
                    let port = e["targetPort"].as_u64().unwrap_or(0);
                    e["targetPort"] = json!(port + i as u64 * 7);
                    let n = format!("{}{i}", e["name"].as_str().unwrap_or("e"));
                    e["name"] = json!(n);
                }
            }
        }
        let mut volume = json!({});
        if let Some(s) = size {
            volume["size"] = json!(s);
        }
        components.push(json!({"name": "data", "volume": volume}));
        let d = json!({"schemaVersion": "2.2.0", "components": components});
        (serde_yaml::to_string(&d).expect("yaml"), ws)
    })
}

#[tokio::test]
async fn generated_devfiles_warren_accepts_are_accepted_by_the_api_server() {
    let Some(cluster) = cluster() else { return };
    let client = cluster.client().await;
    let ns = namespace(&client).await;
    let strategy = devfile();
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut refused, mut refusals) = (0, 0, vec![]);
    for case in 0..160 {
        let (text, name) = strategy
            .new_tree(&mut runner)
            .expect("generate a devfile")
            .current();
        let rendered = parse_devfile(&text).ok().and_then(|d| {
            render(
                &d,
                &request(
                    name,
                    &AgentConfig::default(),
                    &WorkspaceResources::default(),
                ),
            )
            .ok()
        });
        if rendered.is_some() {
            accepted += 1;
        } else {
            refused += 1;
        }
        for r in check(
            &client,
            &ns,
            &format!("case {case} (name {name})"),
            &text,
            name,
        )
        .await
        {
            refusals.push(format!("{r}\n--- devfile:\n{text}"));
        }
    }
    assert!(
        refusals.is_empty(),
        "the API server refused what Warren accepted:\n{}",
        refusals.join("\n")
    );
    // Both sides are exercised.
    assert!(
        accepted >= 10 && refused >= 10,
        "accepted {accepted}, refused {refused}"
    );
}
