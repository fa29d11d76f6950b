//! Machine classes (issue 41, item 3) on SQLite and (when configured) PostgreSQL: an agent's
//! admin offers sizes by name with their storage, devices and placement; users pick one at
//! create and resize, from the API and the web UI; a class's weight counts against a quota.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

/// An agent offering `small` (the default) and `gpu`, by class only, with a weight quota.
fn classes_config() -> Value {
    json!({
        "machine_classes": [
            {"name": "small", "description": "1 CPU, 2 GiB", "cpu": "1", "memory": "2Gi",
             "storage": "10Gi"},
            {"name": "gpu", "description": "2 CPUs, 4 GiB, one GPU", "cpu": "2", "memory": "4Gi",
             "storage": "50Gi", "devices": {"example.com/gpu": 1},
             "node_selector": {"warren.dev/pool": "gpu"},
             "tolerations": [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
             "runtime_class": "nvidia", "weight": 4}
        ],
        "default_machine_class": "small",
        "custom_sizes": false,
        "weight_per_user_quota": 5
    })
}

#[tokio::test]
async fn a_class_sizes_equips_and_places_a_workspace() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", classes_config()).await;
        let ann = s.user("ann", &["api", "workspace"]).await;

        // No size named: the agent's default class.
        let w = s.workspace(&ann, json!({"name": "plain"})).await;
        assert_eq!(
            w["resources"],
            json!({"class": "small", "cpu": null, "memory": null}),
            "[{l}] {w}"
        );
        let c = s.config_of(agent, "plain").await;
        assert!(
            c.contains("memory: 2Gi") && c.contains("storage: 10Gi"),
            "[{l}] {c}"
        );
        assert!(
            !c.contains("nodeSelector") && !c.contains("example.com/gpu"),
            "[{l}] {c}"
        );

        // The GPU class: its size, storage, device, node, tolerations and runtime class.
        let w = s
            .workspace(
                &ann,
                json!({"name": "trainer", "resources": {"class": "gpu"}}),
            )
            .await;
        assert_eq!(
            w["resources"],
            json!({"class": "gpu", "cpu": null, "memory": null}),
            "[{l}] {w}"
        );
        let c = s.config_of(agent, "trainer").await;
        for part in [
            "memory: 4Gi",
            "storage: 50Gi",
            "example.com/gpu: '1'",
            "nodeSelector:",
            "warren.dev/pool: gpu",
            "runtimeClassName: nvidia",
            "operator: Exists",
            "effect: NoSchedule",
        ] {
            assert!(c.contains(part), "[{l}] {part} not in {c}");
        }

        // Weight: small (1) + gpu (4) is the quota of 5; one more is refused, by weight.
        let (st, b) = s
            .post(&ann, "/api/v1/workspaces", json!({"name": "third"}))
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(
            msg(&b).contains("weight_per_user_quota of this agent is 5")
                && msg(&b).contains("weigh 5 and this one 1"),
            "[{l}] {b}"
        );

        // Refusals by field, nothing made.
        let bob = s.user("bob", &["api", "workspace"]).await;
        for (body, status, field, words) in [
            (
                json!({"resources": {"cpu": "2"}}),
                400,
                "resources",
                "takes a machine class, not a size in numbers: it offers small, gpu",
            ),
            (
                json!({"resources": {"class": "gpu", "memory": "8Gi"}}),
                400,
                "resources.class",
                "not both",
            ),
            (
                json!({"resources": {"class": "huge"}}),
                422,
                "resources.class",
                "agent a1 offers no machine class \"huge\"; it offers small, gpu",
            ),
        ] {
            let (st, b) = s.post(&bob, "/api/v1/workspaces", body.clone()).await;
            assert_eq!(st, status, "[{l}] {body}: {b}");
            assert!(
                msg(&b).starts_with(field) && msg(&b).contains(words),
                "[{l}] {body}: {b}"
            );
        }
        let (_, list) = s.get(&bob, "/api/v1/workspaces").await;
        assert_eq!(list["items"], json!([]), "[{l}] {list}");

        // Resize: to a bigger class; back to a smaller volume refused; numbers refused.
        let resize = |name: &'static str, body: Value| {
            let (s, ann) = (&s, ann.clone());
            async move {
                let path = format!("/api/v1/workspaces/{name}/resources");
                s.call(
                    Method::PUT,
                    &path,
                    Some(&ann),
                    Some(json!({ "resources": body })),
                )
                .await
            }
        };
        let (st, b) = resize("plain", json!({"class": "gpu"})).await;
        assert_eq!(st, 403, "[{l}] over the weight quota: {b}");
        assert!(
            msg(&b).contains("other workspaces on it weigh 4 and this one would weigh 4"),
            "[{l}] {b}"
        );
        let mut cfg = classes_config();
        cfg["weight_per_user_quota"] = json!(10);
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(json!({"config": cfg.clone()})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = resize("plain", json!({"class": "gpu"})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["resources"]["class"], "gpu", "[{l}] {b}");
        let c = s.config_of(agent, "plain").await;
        assert!(
            c.contains("storage: 50Gi") && c.contains("example.com/gpu"),
            "[{l}] {c}"
        );
        let (st, b) = resize("trainer", json!({"class": "small"})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            msg(&b).contains(
                "a workspace's volume does not shrink: it has 50Gi, and class small has 10Gi"
            ),
            "[{l}] {b}"
        );
        let (st, b) = resize("trainer", json!({"memory": "8Gi"})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            msg(&b).contains("the workspace is of machine class gpu"),
            "[{l}] {b}"
        );

        // The admin withdraws the gpu class: the workspaces of it are stopped, saying why,
        // rather than run as something else; the class is back, they start again.
        cfg["machine_classes"].as_array_mut().unwrap().pop();
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(json!({"config": cfg})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (_, w) = s.get(&ann, "/api/v1/workspaces/trainer").await;
        assert_eq!(w["desired_state"], "Stopped", "[{l}] {w}");
        assert!(
            w.to_string()
                .contains("offers no machine class \\\"gpu\\\""),
            "[{l}] the reason is shown: {w}"
        );
        let (st, b) = s
            .put(
                &ann,
                "/api/v1/workspaces/trainer/desired_state",
                json!({"desired_state": "Running"}),
            )
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(msg(&b).contains("no machine class \"gpu\""), "[{l}] {b}");
        s.stop().await;
    }
}

/// A devfile asking `cpus`, `memory`, `storage` and `gpu` of its machine.
fn needing(needs: Value) -> String {
    format!(
        "schemaVersion: 2.2.0\nmetadata: {{name: needs}}\nattributes:\n  warren.dev/host-requirements: {needs}\ncomponents:\n  - name: dev\n    container: {{image: busybox}}\n"
    )
}

/// A definition's host requirements (a dev container's `hostRequirements`, carried as the
/// devfile attribute) pick the class when the creator names none: the default when it meets
/// them, else the smallest that does, with a notice; a named class that does not meet them,
/// a GPU no class has, and requirements no class meets are refused saying what is missing.
#[tokio::test]
async fn host_requirements_choose_the_class() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let mut cfg = classes_config();
        cfg["weight_per_user_quota"] = json!(100);
        cfg["machine_classes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "medium", "cpu": "4", "memory": "8Gi", "weight": 2}));
        s.agent("a1", cfg).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let create = |name: &str, needs: Value, resources: Option<Value>| {
            let mut body = json!({"name": name, "devfile": needing(needs)});
            if let Some(r) = resources {
                body["resources"] = r;
            }
            let (s, ann) = (&s, ann.clone());
            async move { s.post(&ann, "/api/v1/workspaces", body).await }
        };
        // The default meets them: no notice.
        let (st, w) = create("fits", json!({"cpus": 1}), None).await;
        assert_eq!(st, 201, "[{l}] {w}");
        assert_eq!(w["resources"]["class"], "small", "[{l}] {w}");
        assert!(!w.to_string().contains("hostRequirements"), "[{l}] {w}");
        // More than the default: the smallest that meets them (medium weighs less than gpu).
        let (st, w) = create("bigger", json!({"cpus": 2, "memory": "4Gi"}), None).await;
        assert_eq!(st, 201, "[{l}] {w}");
        assert_eq!(w["resources"]["class"], "medium", "[{l}] {w}");
        assert!(
            w["notices"]
                .to_string()
                .contains("machine class medium chosen"),
            "[{l}] {w}"
        );
        // A GPU: the class with one; optional, the same, as there is one.
        for gpu in ["required", "optional"] {
            let name = format!("gpu-{gpu}");
            let (st, w) = create(&name, json!({"gpu": gpu}), None).await;
            assert_eq!(st, 201, "[{l}] {w}");
            assert_eq!(w["resources"]["class"], "gpu", "[{l}] {gpu}: {w}");
        }
        // Storage: only the gpu class's volume is large enough.
        let (st, w) = create("roomy", json!({"storage": "40Gi"}), None).await;
        assert_eq!(st, 201, "[{l}] {w}");
        assert_eq!(w["resources"]["class"], "gpu", "[{l}] {w}");

        // Refusals, nothing made.
        let before = s.get(&ann, "/api/v1/workspaces").await.1["items"]
            .as_array()
            .map(Vec::len);
        for (needs, resources, field, words) in [
            (
                json!({"cpus": 2}),
                Some(json!({"class": "small"})),
                "resources.class",
                "machine class small does not meet the definition's host requirements (2 CPUs): it lacks 2 CPUs (it has 1); gpu, medium would",
            ),
            (
                json!({"cpus": 64}),
                None,
                "resources",
                "no machine class meets them: small lacks 64 CPUs (it has 1)",
            ),
            (
                json!({"gpu": "required"}),
                Some(json!({"class": "medium"})),
                "resources.class",
                "it lacks a GPU (it has none); gpu would",
            ),
        ] {
            let (st, b) = create("refused", needs.clone(), resources).await;
            assert_eq!(st, 400, "[{l}] {needs}: {b}");
            assert!(
                msg(&b).starts_with(field) && msg(&b).contains(words),
                "[{l}] {needs}: {b}"
            );
        }
        let (st, b) = create("bad", json!({"memory": "lots", "gpu": "maybe"}), None).await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(
            b.to_string().contains("warren.dev/host-requirements"),
            "[{l}] the attribute is named: {b}"
        );
        let after = s.get(&ann, "/api/v1/workspaces").await.1["items"]
            .as_array()
            .map(Vec::len);
        assert_eq!(before, after, "[{l}] nothing made");

        // An agent with no classes: a GPU cannot be had; the rest sizes the container.
        s.agent("plain", json!({})).await;
        let mut body = json!({"name": "no-gpu", "agent": "plain", "devfile": needing(json!({"gpu": "required"}))});
        let (st, b) = s.post(&ann, "/api/v1/workspaces", body.clone()).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            msg(&b).contains("agent plain does not give: it has no machine class with one"),
            "[{l}] {b}"
        );
        body["devfile"] = json!(needing(json!({"storage": "500Gi"})));
        let (st, w) = s.post(&ann, "/api/v1/workspaces", body).await;
        assert_eq!(st, 201, "[{l}] {w}");
        assert!(
            w["notices"]
                .to_string()
                .contains("hostRequirements.storage: the workspace's volume is 20Gi"),
            "[{l}] {w}"
        );
        s.stop().await;
    }
}

/// The seam end to end: a repository holding only a dev container configuration with
/// `hostRequirements`, opened by URL on an agent with classes, gets the class that meets
/// them — the configuration read from a real Git server, turned into a devfile, its
/// requirements carried and used.
#[tokio::test]
async fn a_dev_containers_host_requirements_pick_the_class() {
    if !warren_testkit::git_http::have_git() {
        return;
    }
    let git = warren_testkit::git_http::GitHttpServer::start("", "")
        .await
        .unwrap();
    git.create_repo(
        "trainer",
        &[(
            ".devcontainer/devcontainer.json",
            r#"{ "image": "alpine:3", "hostRequirements": { "cpus": 2, "gpu": true } }"#,
        )],
    )
    .unwrap();
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", classes_config()).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let w = s
            .workspace(
                &ann,
                json!({"name": "t1", "repository": git.url("trainer")}),
            )
            .await;
        assert_eq!(w["resources"]["class"], "gpu", "[{l}] {w}");
        assert!(
            w["notices"]
                .to_string()
                .contains("machine class gpu chosen"),
            "[{l}] {w}"
        );
        let c = s.config_of(agent, "t1").await;
        assert!(c.contains("example.com/gpu: '1'"), "[{l}] {c}");
        s.stop().await;
    }
}

#[tokio::test]
async fn attack_bad_machine_classes_are_refused_by_field() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    s.agent("a1", json!({})).await;
    let class = |extra: Value| {
        let mut c = json!({"name": "c"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    for (config, field, words) in [
        (
            json!({"machine_classes": [{"name": "a"}, {"name": "a"}]}),
            "config.machine_classes[1].name",
            "named twice",
        ),
        (
            json!({"machine_classes": [{"name": "a"}], "default_machine_class": "b"}),
            "config.default_machine_class",
            "not one of machine_classes",
        ),
        (
            json!({"machine_classes": [class(json!({"devices": {"gpu": 1}}))]}),
            "config.machine_classes[0].devices",
            "a vendor's domain and a name",
        ),
        (
            json!({"machine_classes": [class(json!({"devices": {"kubernetes.io/cpu": 1}}))]}),
            "config.machine_classes[0].devices",
            "Kubernetes' own",
        ),
        (
            json!({"machine_classes": [class(json!({"devices": {"example.com/gpu": 1000}}))]}),
            "config.machine_classes[0].devices",
            "ask for 1 to 64",
        ),
        (
            json!({"machine_classes": [class(json!({"memory": "lots"}))]}),
            "config.machine_classes[0].memory",
            "",
        ),
        (
            json!({"machine_classes": [class(json!({"tolerations": [{"key": "k", "operator": "Maybe"}]}))]}),
            "config.machine_classes[0].tolerations[0]",
            "not Equal or Exists",
        ),
        (
            json!({"machine_classes": [class(json!({"node_selector": {"bad key!": "x"}}))]}),
            "config.machine_classes[0].node_selector",
            "not a label key",
        ),
        (
            json!({"machine_classes": [class(json!({"weight": 0}))]}),
            "config.machine_classes[0].weight",
            "at least 1",
        ),
        (
            json!({"machine_classes": [class(json!({"description": "a\nb"}))]}),
            "config.machine_classes[0].description",
            "one line",
        ),
        (
            json!({"weight_per_user_quota": -5}),
            "config.weight_per_user_quota",
            "-1",
        ),
    ] {
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(json!({"config": config})),
            )
            .await;
        assert_eq!(st, 400, "{config}: {b}");
        assert!(
            msg(&b).starts_with(field) && msg(&b).contains(words),
            "{config}: {b}"
        );
    }
    // A user cannot offer themselves a class.
    let eve = s.user("eve", &["api", "workspace"]).await;
    let (st, _) = s
        .call(
            Method::PUT,
            "/api/v1/agents/a1",
            Some(&eve),
            Some(json!({"config": classes_config()})),
        )
        .await;
    assert_eq!(st, 403);
    s.stop().await;
}

#[tokio::test]
async fn the_web_ui_offers_the_classes_at_create_and_resize() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    s.agent("a1", classes_config()).await;
    s.user("ann", &["api"]).await;
    let mut b = crate::ui::signed_in(&s, "ann", "password-123").await;
    let page = b.get("/workspaces/new").await;
    assert!(
        page.body.contains("Machine class")
            && page
                .body
                .contains("<option value=\"gpu\">gpu — 2 CPUs, 4 GiB, one GPU</option>"),
        "{}",
        page.body
    );
    let csrf = crate::ui::csrf_of(&page);
    let form = |pairs: &[(&str, &str)]| crate::ui::form_with(&csrf, pairs);
    let p = b
        .post_form(
            "/workspaces/new",
            &form(&[("name", "w1"), ("agent", "a1"), ("class", "huge")]),
        )
        .await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert!(
        p.body.contains("id=\"class-error\"") || p.body.contains("offers no machine class"),
        "the error by the select: {}",
        p.body
    );
    let p = b
        .post_form(
            "/workspaces/new",
            &form(&[("name", "w1"), ("agent", "a1"), ("class", "small")]),
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let page = b.get("/workspaces/w1").await;
    assert!(page.body.contains("class small"), "{}", page.body);
    assert!(
        page.body.contains("<option value=\"small\" selected>"),
        "the resize select shows the class: {}",
        page.body
    );
    assert!(
        !page.body.contains("id=\"cpu\""),
        "numbers are not offered where the agent takes classes only: {}",
        page.body
    );
    let csrf = crate::ui::csrf_of(&page);
    let p = b
        .post_form(
            "/workspaces/w1/resize",
            &[
                ("class".to_owned(), "gpu".to_owned()),
                ("csrf_token".to_owned(), csrf),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let page = b.get("/workspaces/w1").await;
    assert!(page.body.contains("class gpu"), "{}", page.body);
    s.stop().await;
}
