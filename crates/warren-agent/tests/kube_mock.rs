//! The Kubernetes runtime against a scripted API server (kube-rs's mock-service pattern), only
//! for answers the real API server in `kube_runtime.rs` cannot be made to give: a conflict on
//! a forced server-side apply (the real server resolves every field conflict in the applier's
//! favour) and an API server that answers but is unavailable (503 from a broken etcd). An API
//! server that does not answer at all is tested for real, with a closed port.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::{RuntimeError, WorkspaceKey, WorkspaceRuntime};
use warren_types::AgentId;

/// One expected request (method and path) and the answer to give.
struct Exchange {
    method: Method,
    path: &'static str,
    status: u16,
    body: Value,
}

/// Requests that differ from the script, and what is left of the script.
type Recorded = (Arc<Mutex<Vec<String>>>, Arc<Mutex<VecDeque<Exchange>>>);

/// Answers the watches' list calls with `watch_lists` in turn and hangs their watch calls (nothing
/// happens), and answers every other request with the next scripted exchange, recording
/// requests that differ from the script.
fn scripted(watch_lists: Vec<(u16, Value)>, script: Vec<Exchange>) -> (Client, Recorded) {
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let watch_lists = Arc::new(Mutex::new(VecDeque::from(watch_lists)));
    let mismatches = Arc::new(Mutex::new(Vec::new()));
    let (s, m) = (script.clone(), mismatches.clone());
    let service = tower::service_fn(move |req: Request<Body>| {
        let (script, mismatches, watch_lists) = (s.clone(), m.clone(), watch_lists.clone());
        async move {
            let query = req.uri().query().unwrap_or("").to_owned();
            let path = req.uri().path().to_owned();
            let cluster_wide = [
                "/apis/apps/v1/deployments",
                "/api/v1/pods",
                "/api/v1/namespaces",
            ];
            if req.method() == Method::GET
                && cluster_wide.contains(&path.as_str())
                && query.contains("labelSelector")
            {
                if query.contains("watch=true") {
                    std::future::pending::<()>().await;
                }
                // The answers in turn, the last one for good.
                let (code, body) = {
                    let mut lists = watch_lists.lock().unwrap();
                    if lists.len() > 1 {
                        lists.pop_front().unwrap()
                    } else {
                        lists[0].clone()
                    }
                };
                return Ok::<_, std::convert::Infallible>(answer(code, &body));
            }
            let next = script.lock().unwrap().pop_front();
            match next {
                Some(e) if e.method == req.method() && e.path == path => {
                    Ok(answer(e.status, &e.body))
                }
                other => {
                    let wanted = other.map(|e| format!("{} {}", e.method, e.path));
                    mismatches.lock().unwrap().push(format!(
                        "got {} {path}, script wanted {wanted:?}",
                        req.method()
                    ));
                    Ok(answer(
                        500,
                        &status(500, "InternalError", "unscripted request"),
                    ))
                }
            }
        }
    });
    (Client::new(service, "default"), (mismatches, script))
}

fn answer(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

fn empty_list() -> (u16, Value) {
    (
        200,
        json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "100"}, "items": []}),
    )
}

fn key() -> WorkspaceKey {
    WorkspaceKey {
        name: "brave-otter-x7k2".into(),
        namespace: "warren-ws-brave-otter-x7k2".into(),
    }
}

fn service_account() -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "brave-otter-x7k2", "labels": {"warren.dev/agent-id": "7"}},
        "automountServiceAccountToken": false})
}

#[tokio::test]
async fn a_conflict_on_apply_is_an_apply_error_with_the_servers_message() {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "warren-ws-brave-otter-x7k2", "resourceVersion": "5",
                     "labels": {"warren.dev/agent-id": "7",
                                "pod-security.kubernetes.io/enforce": "restricted",
                                "pod-security.kubernetes.io/enforce-version": "latest"}},
        "status": {"phase": "Active"}});
    let inventory = "/api/v1/namespaces/warren-ws-brave-otter-x7k2/configmaps/warren-inventory-brave-otter-x7k2";
    let conflict = "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: \
                    .automountServiceAccountToken";
    let (client, (mismatches, rest)) = scripted(
        vec![empty_list()],
        vec![
            Exchange {
                method: Method::GET,
                path: "/api/v1/namespaces/warren-ws-brave-otter-x7k2",
                status: 200,
                body: ns,
            },
            Exchange {
                method: Method::GET,
                path: inventory,
                status: 404,
                body: status(
                    404,
                    "NotFound",
                    "configmaps \"warren-inventory-brave-otter-x7k2\" not found",
                ),
            },
            Exchange {
                method: Method::PATCH,
                path: inventory,
                status: 200,
                body: json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "warren-inventory-brave-otter-x7k2", "resourceVersion": "6"}}),
            },
            Exchange {
                method: Method::PATCH,
                path:
                    "/api/v1/namespaces/warren-ws-brave-otter-x7k2/serviceaccounts/brave-otter-x7k2",
                status: 409,
                body: status(409, "Conflict", conflict),
            },
        ],
    );
    let runtime = KubernetesRuntime::new(client, AgentId(7), KubernetesOptions::default());
    let err = runtime
        .apply(&key(), &[service_account()])
        .await
        .unwrap_err();
    assert!(
        mismatches.lock().unwrap().is_empty(),
        "{:?}",
        mismatches.lock().unwrap()
    );
    assert!(
        rest.lock().unwrap().is_empty(),
        "not every scripted request was made"
    );
    match err {
        RuntimeError::Apply { workspace, message } => {
            assert_eq!(workspace, "warren-ws-brave-otter-x7k2/brave-otter-x7k2");
            assert_eq!(
                message,
                format!("ServiceAccount brave-otter-x7k2: {conflict}")
            );
        }
        other => panic!("expected an apply error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unavailable_api_server_is_a_runtime_error() {
    let unavailable = status(503, "ServiceUnavailable", "etcdserver: request timed out");
    let (client, (mismatches, _)) = scripted(
        vec![(503, unavailable.clone())],
        vec![Exchange {
            method: Method::GET,
            path: "/api/v1/namespaces/warren-ws-brave-otter-x7k2",
            status: 503,
            body: unavailable,
        }],
    );
    let options = KubernetesOptions {
        ready_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let runtime = KubernetesRuntime::new(client, AgentId(7), options);

    let err = runtime
        .apply(&key(), &[service_account()])
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Runtime { .. }), "{err:?}");
    let err = runtime.list().await.unwrap_err();
    let RuntimeError::Runtime { context, source } = &err else {
        panic!("expected a runtime error, got {err:?}");
    };
    assert!(context.contains("did not answer"), "{context}");
    assert!(
        source.to_string().contains("etcdserver: request timed out"),
        "{source}"
    );
    assert!(
        mismatches.lock().unwrap().is_empty(),
        "{:?}",
        mismatches.lock().unwrap()
    );
}

#[tokio::test]
async fn an_unreachable_api_server_is_a_runtime_error() {
    // Real, not mocked: a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_secs(1));
    let client = Client::try_from(config).unwrap();
    let options = KubernetesOptions {
        ready_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let runtime = KubernetesRuntime::new(client, AgentId(7), options);
    let err = runtime
        .apply(&key(), &[service_account()])
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Runtime { .. }), "{err:?}");
    assert!(matches!(
        runtime.list().await.unwrap_err(),
        RuntimeError::Runtime { .. }
    ));
    assert!(matches!(
        runtime.delete(&key()).await.unwrap_err(),
        RuntimeError::Runtime { .. }
    ));
}

#[tokio::test]
async fn the_watches_recover_after_the_api_server_failed() {
    // The real API server in kube_runtime.rs cannot be made to fail on demand while the
    // shared cluster serves other tests; here the first list calls fail with 503.
    let unavailable = status(503, "ServiceUnavailable", "etcdserver: leader changed");
    let lists = vec![
        (503, unavailable.clone()),
        (503, unavailable.clone()),
        (503, unavailable),
        empty_list(),
    ];
    let (client, (mismatches, _)) = scripted(lists, vec![]);
    let options = KubernetesOptions {
        ready_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let runtime = KubernetesRuntime::new(client, AgentId(7), options);
    let changes = runtime.changes();
    assert_eq!(runtime.list().await.expect("list after recovery"), vec![]);
    assert!(
        *changes.borrow() >= 3,
        "each watch reports its first complete listing"
    );
    assert!(
        mismatches.lock().unwrap().is_empty(),
        "{:?}",
        mismatches.lock().unwrap()
    );
}
