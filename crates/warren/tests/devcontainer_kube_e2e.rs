//! A dev container whose image is built — its Dockerfile, then a Feature from a private OCI
//! registry on top — running on the one-node Kubernetes cluster through `warren up
//! --runtime kubernetes --build-registry …`: the agent's builder (Podman) builds it, pushes it
//! to the build registry with the push secret, and the kubelet pulls it from there with the
//! workspace's image pull secret (containerd trusts the registry's test CA through its
//! `certs.d`, as Podman does). The workspace is then reached over SSH with a terminal (the
//! postCreateCommand's and the Feature's work visible) and through the proxy, its build's
//! output in `warren ws logs --container warren-build`; a devfile naming the pushed image
//! itself is refused, so no other workspace runs it.
//!
//! Skips with a notice when the cluster, Podman or the registry is missing (fails under the
//! `WARREN_REQUIRE_*` variables).

use crate::kube_common;
use crate::support;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use std::time::Duration;
use support::{ensure_image, podman_available, show, unique_name, wait_for, Up};
use support::{DEBIAN_IMAGE, TOOLS_IMAGE};

const PASSWORD: &str = "dc-kube-pass-5e21";
const REGISTRY_PASSWORD: &str = "kube-build-pass-77";

const DOCKERFILE: &str = "FROM localhost/warren-test:latest
ARG FLAVOUR=unset
RUN echo \"built-for-kube-$FLAVOUR\" > /built.txt
";

/// A `kubernetes.io/dockerconfigjson` Secret for `registry`.
fn registry_secret(name: &str, registry: &str) -> Secret {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("ann:{REGISTRY_PASSWORD}"));
    let config = format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)},
    }))
    .expect("a Secret")
}

#[test]
fn on_kubernetes_a_dev_containers_build_and_features_are_pushed_pulled_and_reached() {
    use warren_testkit::registry;
    if !podman_available()
        || !registry::available()
        || !support::tools_available(&["ssh", "ssh-keygen"])
    {
        return;
    }
    let Some(node) = kube_common::node::node_with_images(&[TOOLS_IMAGE, DEBIAN_IMAGE]) else {
        return;
    };
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // One private registry over TLS for the Feature and the builds, trusted by Podman and
    // by the node's containerd (both read certs.d), with one user.
    let (registry, greet_ref) = support::registry_with_feature(&rt, REGISTRY_PASSWORD, "");
    let config = format!(
        r#"{{
  "build": {{ "dockerfile": "Dockerfile", "args": {{ "FLAVOUR": "spicy" }} }},
  "features": {{ "{greet_ref}": {{ "greeting": "hi-on-kube" }} }},
  "forwardPorts": [8080],
  "postCreateCommand": "cat /built.txt /usr/local/share/greet.txt > \"$HOME/created.txt\"",
  "postStartCommand": "mkdir -p /tmp/www && cp /built.txt /tmp/www/index.html && httpd -p 8080 -h /tmp/www",
}}"#
    );
    let git = support::git_server_for_workspaces(&rt, "ann", PASSWORD);
    git.create_repo(
        "kubebuilt",
        &[
            (".devcontainer/devcontainer.json", config.as_str()),
            (".devcontainer/Dockerfile", DOCKERFILE),
        ],
    )
    .expect("repository");

    let kube = rt.block_on(node.client());
    let secret = unique_name("builds");
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), "default");
    rt.block_on(secrets.create(
        &PostParams::default(),
        &registry_secret(&secret, &registry.addr),
    ))
    .expect("the registry's Secret");
    let builds = format!("{}/builds", registry.addr);
    let push_secret = format!("default/{secret}");
    let kubeconfig = node.kubeconfig().display().to_string();
    let outbound = format!("127.0.0.1/32,{}/32", node.gateway);
    let mut up = Up::start_with(
        tempfile::tempdir().expect("temp home"),
        &[
            ("WARREN_UP_RUNTIME", "kubernetes"),
            ("KUBECONFIG", kubeconfig.as_str()),
            ("WARREN_UP_BUILD_REGISTRY", builds.as_str()),
            ("WARREN_UP_BUILD_PUSH_SECRET", push_secret.as_str()),
            // The repositories are served on the node's address, which pods reach.
            ("WARREN_OUTBOUND_ALLOW", outbound.as_str()),
        ],
    );
    // The pods pull from the registry, and the builder fetches the Feature, with it.
    up.update_agent_config(|config| {
        config["image_pull_secrets"] =
            serde_json::json!([{"name": secret, "namespace": "default"}]);
    });
    let project = project_on_node(&up, &git, "kubebuilt", &node.gateway);
    let ws = unique_name("dckube");
    let _cleanup = support::Workspaces(vec![ws.clone()]);
    git.create_repo(
        "kubecomposed",
        &[
            (
                ".devcontainer/devcontainer.json",
                crate::devcontainer_e2e::COMPOSE_CONFIG,
            ),
            (
                ".devcontainer/docker-compose.yml",
                // The node has the dev container's image under this name (no registry
                // serves it); the database's is built.
                &crate::devcontainer_e2e::COMPOSE_FILE.replace(
                    "image: localhost/warren-test:latest",
                    &format!("image: {}", kube_common::node::WORKSPACE_IMAGE),
                ),
            ),
            (".devcontainer/.env", "GREETING=from-the-env-file\n"),
            (
                ".devcontainer/db.Dockerfile",
                "FROM localhost/warren-test:latest\nRUN echo built > /built.txt\n",
            ),
        ],
    )
    .expect("repository");
    up.create_of_project(&project, &ws);

    // The pod runs the pushed image, by a reference of the build registry.
    let pushed = pushed_image(&rt, &kube, &ws, "devcontainer", &builds);
    let build_log = up.build_log(&ws);
    assert!(
        build_log.contains("installing in this order")
            && build_log.contains(&format!("as {pushed}")),
        "{build_log}"
    );

    // SSH with a terminal: the Dockerfile's file, the Feature's, the postCreateCommand's.
    let keys = up.ssh_key();
    wait_for(
        "the postCreateCommand",
        Duration::from_secs(120),
        || {
            let (out, _) = up.ssh_terminal(keys.path(), &ws, "cat \"$HOME/created.txt\"");
            (out == "built-for-kube-spicy\nhi-on-kube").then_some(())
        },
        || {
            let (out, err) = up.ssh_terminal(
                keys.path(),
                &ws,
                "cat \"$PROJECTS_ROOT\"/.warren/logs/*.log; cat \"$HOME/created.txt\"",
            );
            format!("{out}\n{err}")
        },
    );
    // The startup through, as the pod's own output says: its lifecycle commands ran.
    up.startup_done(&ws);
    // The forwarded port through the proxy, with a token and not without.
    let ((status, body), anonymous) = up.get_endpoint(&rt, &ws, "port-8080");
    assert_eq!((status, body.as_str()), (200, "built-for-kube-spicy\n"));
    assert_eq!(anonymous, 401);

    // A Compose dev container: the database's image built and pushed too, healthy before
    // the dev container starts (the kubelet runs the hold), reached by name and through the
    // proxy.
    let compose = unique_name("dckcompose");
    let on = Setup {
        up: &up,
        rt: &rt,
        git: &git,
        keys: &keys,
        builds: &builds,
        kube: &kube,
        gateway: &node.gateway,
    };
    compose_workspace(&on, &compose);

    // Another workspace naming the pushed image itself is refused: only its own runs it.
    let thief = unique_name("dcthief");
    let devfile = format!(
        "schemaVersion: 2.2.0\nmetadata: {{name: thief}}\ncomponents:\n- name: dev\n  container:\n    image: {pushed}\n"
    );
    let path = up.home.path().join("thief.devfile.yaml");
    std::fs::write(&path, devfile).expect("devfile");
    let stolen = up.cli(&[
        "ws",
        "create",
        "--name",
        &thief,
        "--devfile",
        path.to_str().unwrap(),
        "--wait",
        "--timeout",
        "2m",
    ]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&stolen.stdout),
        String::from_utf8_lossy(&stolen.stderr)
    );
    assert!(!stolen.status.success(), "{said}");
    let refused = show(up.home.path(), &thief).expect("the refused workspace");
    assert!(
        refused
            .to_string()
            .contains("only the workspace it was built for"),
        "{refused}\n{said}"
    );
    assert!(rt
        .block_on(kube_common::live_pods(&kube, &format!("warren-ws-{thief}")))
        .is_empty());

    up.cli_ok(&["ws", "rm", &thief, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "rm", &compose, "--wait", "--timeout", "3m"]);
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "3m"]);
    let log = up.log();
    assert!(
        !log.contains(REGISTRY_PASSWORD),
        "the registry password shows in the log"
    );
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
    let _ = rt.block_on(secrets.delete(&secret, &DeleteParams::default()));
}

/// What the workspaces of the test share.
#[derive(Clone, Copy)]
struct Setup<'a> {
    up: &'a Up,
    rt: &'a tokio::runtime::Runtime,
    git: &'a warren_testkit::git_http::GitHttpServer,
    keys: &'a tempfile::TempDir,
    /// The build registry (`host:port/path`).
    builds: &'a str,
    kube: &'a kube::Client,
    /// The node's address on the host, which pods reach.
    gateway: &'a str,
}

/// Creates Compose workspace `ws` of repository `kubecomposed` and checks it: its database
/// runs the pushed build, was healthy before the dev container started, is reached by name
/// over SSH and through the proxy.
fn compose_workspace(on: &Setup, ws: &str) {
    let Setup {
        up,
        rt,
        git,
        keys,
        builds,
        kube,
        gateway,
    } = *on;
    let project = project_on_node(up, git, "kubecomposed", gateway);
    up.create_of_project(&project, ws);
    pushed_image(rt, kube, ws, "db", builds);
    let (out, err) = up.ssh_terminal(
        keys.path(),
        ws,
        "cat /tmp/at-start.txt; wget -qO- http://db:5432/; [ -e /built.txt ] || echo its-own-image",
    );
    assert_eq!(
        out, "db-says-from-the-env-file\ndb-says-from-the-env-file\nits-own-image",
        "{err}"
    );
    let ((status, body), anonymous) = up.get_endpoint(rt, ws, "port-5432");
    assert_eq!(
        (status, body.as_str()),
        (200, "db-says-from-the-env-file\n")
    );
    assert_eq!(anonymous, 401);
}

/// The image container `container` of workspace `ws`'s pod runs, checked to be a reference
/// of the build registry `builds`.
fn pushed_image(
    rt: &tokio::runtime::Runtime,
    kube: &kube::Client,
    ws: &str,
    container: &str,
    builds: &str,
) -> String {
    let pods = rt.block_on(kube_common::live_pods(kube, &format!("warren-ws-{ws}")));
    let image = pods
        .iter()
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .find(|c| c.name == container)
        .and_then(|c| c.image.clone())
        .unwrap_or_else(|| panic!("no container {container} in the pods of {ws}"));
    assert!(
        image.starts_with(&format!("{builds}/warren-ws/")),
        "{container} runs {image}, not a push to {builds}"
    );
    image
}

/// A project of repository `repo` of `git`, reached at the node's address `gateway` (where
/// pods reach the host) with `ann`'s password.
fn project_on_node(
    up: &Up,
    git: &warren_testkit::git_http::GitHttpServer,
    repo: &str,
    gateway: &str,
) -> String {
    let project = unique_name(repo);
    up.create_private_project(
        &project,
        &git.url_via(gateway, repo),
        ("ann", PASSWORD),
        &[],
    );
    project
}
