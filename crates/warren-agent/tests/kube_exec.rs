//! Kubernetes exec against an in-test API server that speaks `v4.channel.k8s.io` over a
//! WebSocket. The real kube-apiserver of `kube_runtime.rs` has no kubelet, so no exec can run
//! there; this server checks what the runtime asks for (pod, container, command, tty, which
//! streams) and plays the kubelet's side of the channels: stdout, stderr, stdin, resize
//! (channel 4) and the exit status (channel 3).

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use warren_agent::runtime::kubernetes::{exit_from_status, KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::{
    ExecOutput, ExecSession, ExecSpec, RuntimeError, WorkspaceKey, WorkspaceRuntime,
};
use warren_types::relay::TerminalSize;
use warren_types::AgentId;

const NAME: &str = "brave-otter-x7k2";
const NAMESPACE: &str = "warren-ws-brave-otter-x7k2";

fn key(name: &str) -> WorkspaceKey {
    WorkspaceKey {
        name: name.into(),
        namespace: NAMESPACE.into(),
    }
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "100"}, "items": items})
}

fn deployment() -> Value {
    let labels = json!({"warren.dev/agent-id": "7", "warren.dev/workspace-id": "42"});
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "5", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"warren.dev/workspace-id": "42"}},
            "template": {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "dev", "image": "x"}, {"name": "sidecar", "image": "y"}]}}}})
}

fn pod(phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{NAME}-abc"), "namespace": NAMESPACE, "resourceVersion": "6",
            "labels": {"warren.dev/agent-id": "7", "warren.dev/workspace-id": "42"}},
        "spec": {"containers": [{"name": "dev", "image": "x"}]},
        "status": {"phase": phase, "podIP": "10.0.0.9"}})
}

/// What the kubelet side saw of one exec.
#[derive(Debug, Default, Clone)]
struct Seen {
    path: String,
    query: Vec<(String, String)>,
    stdin: Vec<u8>,
    resizes: Vec<Value>,
}

#[derive(Clone)]
struct Mock {
    phase: &'static str,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn api(mock: Mock, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    if query.contains("watch=true") {
        std::future::pending::<()>().await;
    }
    match path.as_str() {
        "/apis/apps/v1/deployments" => {
            return axum::Json(list("DeploymentList", vec![deployment()])).into_response()
        }
        "/api/v1/pods" => {
            return axum::Json(list("PodList", vec![pod(mock.phase)])).into_response()
        }
        "/api/v1/namespaces" => return axum::Json(list("NamespaceList", vec![])).into_response(),
        _ => {}
    }
    if path.ends_with("/log") {
        // The kubelet's container log, as the API server passes it on.
        mock.seen.lock().unwrap().push(Seen {
            path,
            query: url::form_urlencoded::parse(query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            ..Default::default()
        });
        return "booting\nerror: config.yml not found\n".into_response();
    }
    if !path.ends_with("/exec") {
        return (axum::http::StatusCode::NOT_FOUND, "not scripted").into_response();
    }
    let seen = Seen {
        path,
        query: url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
        ..Default::default()
    };
    let (mut parts, _) = req.into_parts();
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws,
        Err(e) => return e.into_response(),
    };
    ws.protocols(["v4.channel.k8s.io"])
        .on_upgrade(move |socket| kubelet(socket, seen, mock.seen))
}

fn frame(channel: u8, payload: &[u8]) -> Message {
    let mut v = vec![channel];
    v.extend_from_slice(payload);
    Message::Binary(v.into())
}

/// Plays the kubelet: with a tty, echo stdin until `exit 7` and both resizes came, then a
/// NonZeroExitCode status; without, stdout and stderr and a Success status.
async fn kubelet(mut socket: WebSocket, mut seen: Seen, all: Arc<Mutex<Vec<Seen>>>) {
    let tty = seen.query.iter().any(|(k, v)| k == "tty" && v == "true");
    let _ = socket.send(frame(1, b"")).await;
    let status = if tty {
        let _ = socket.send(frame(1, b"$ ")).await;
        while !(String::from_utf8_lossy(&seen.stdin).contains("exit 7\n")
            && seen.resizes.len() >= 2)
        {
            match socket.recv().await {
                Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                    seen.stdin.extend_from_slice(&b[1..]);
                    let _ = socket.send(frame(1, &b[1..])).await;
                }
                Some(Ok(Message::Binary(b))) if b.first() == Some(&4) => {
                    seen.resizes.push(serde_json::from_slice(&b[1..]).unwrap());
                }
                Some(Ok(_)) => {}
                _ => break,
            }
        }
        json!({"metadata": {}, "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command [/bin/sh], exit code 7",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "7"}]}})
    } else {
        let _ = socket.send(frame(1, b"to stdout\n")).await;
        let _ = socket.send(frame(2, b"to stderr\n")).await;
        json!({"metadata": {}, "status": "Success"})
    };
    let _ = socket
        .send(frame(3, &serde_json::to_vec(&status).unwrap()))
        .await;
    all.lock().unwrap().push(seen);
    let _ = socket.close().await;
}

async fn start(phase: &'static str) -> (KubernetesRuntime, Mock) {
    let mock = Mock {
        phase,
        seen: Arc::default(),
    };
    let m = mock.clone();
    let app = Router::new().fallback(move |req: Request| api(m.clone(), req));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let runtime = KubernetesRuntime::new(client, AgentId(7), KubernetesOptions::default());
    (runtime, mock)
}

fn query_values<'a>(seen: &'a Seen, key: &str) -> Vec<&'a str> {
    seen.query
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[tokio::test]
async fn a_terminal_exec_carries_stdin_resizes_and_the_exit_code() {
    let (runtime, mock) = start("Running").await;
    let spec = ExecSpec {
        container: None,
        command: vec!["/bin/sh".into(), "-l".into()],
        env: vec![("TERM".into(), "xterm-256color".into())],
        tty: true,
        size: Some(TerminalSize {
            cols: 100,
            rows: 30,
        }),
    };
    let ExecSession {
        stdin: mut input,
        mut output,
        resize,
        exit,
    } = runtime.exec(&key(NAME), spec).await.unwrap();
    resize
        .send(TerminalSize {
            cols: 120,
            rows: 40,
        })
        .await
        .unwrap();
    input.write_all(b"echo hi; exit 7\n").await.unwrap();
    input.flush().await.unwrap();
    let mut out = Vec::new();
    let collect = async {
        while let Some(item) = output.next().await {
            match item.unwrap() {
                ExecOutput::Stdout(b) => out.extend_from_slice(&b),
                ExecOutput::Stderr(b) => panic!("stderr with a tty: {b:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), collect)
        .await
        .expect("the output ends");
    let exit = tokio::time::timeout(Duration::from_secs(20), exit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.code, Some(7), "{exit:?}");
    assert_eq!(String::from_utf8(out).unwrap(), "$ echo hi; exit 7\n");

    let seen = mock.seen.lock().unwrap()[0].clone();
    assert_eq!(
        seen.path,
        format!("/api/v1/namespaces/{NAMESPACE}/pods/{NAME}-abc/exec")
    );
    assert_eq!(query_values(&seen, "container"), vec!["dev"]);
    assert_eq!(query_values(&seen, "tty"), vec!["true"]);
    assert_eq!(query_values(&seen, "stdin"), vec!["true"]);
    assert_eq!(query_values(&seen, "stdout"), vec!["true"]);
    assert!(
        !query_values(&seen, "stderr").contains(&"true"),
        "no stderr with a tty: {:?}",
        seen.query
    );
    let command = query_values(&seen, "command");
    assert_eq!(command[0], "/bin/sh");
    assert!(command[2].contains("stty rows 30 cols 100"), "{command:?}");
    assert_eq!(command[3..5], ["warren-exec", "TERM=xterm-256color"]);
    assert!(
        command[5].starts_with("WARREN_EXEC_SESSION="),
        "the hang-up marker: {command:?}"
    );
    assert_eq!(command[6..], ["--", "/bin/sh", "-l"]);
    assert_eq!(
        seen.resizes,
        vec![
            json!({"Width": 100, "Height": 30}),
            json!({"Width": 120, "Height": 40})
        ]
    );
}

#[tokio::test]
async fn a_plain_exec_keeps_stderr_apart_and_can_name_a_container() {
    let (runtime, mock) = start("Running").await;
    let spec = ExecSpec {
        container: Some("sidecar".into()),
        command: vec!["ls".into()],
        env: vec![],
        tty: false,
        size: None,
    };
    let ExecSession {
        stdin: mut input,
        mut output,
        exit,
        ..
    } = runtime.exec(&key(NAME), spec).await.unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(item) = output.next().await {
        match item.unwrap() {
            ExecOutput::Stdout(b) => out.extend_from_slice(&b),
            ExecOutput::Stderr(b) => err.extend_from_slice(&b),
        }
    }
    let _ = input.shutdown().await;
    assert_eq!(exit.await.unwrap().code, Some(0));
    assert_eq!(out, b"to stdout\n");
    assert_eq!(err, b"to stderr\n");
    let seen = mock.seen.lock().unwrap()[0].clone();
    assert_eq!(query_values(&seen, "container"), vec!["sidecar"]);
    let command = query_values(&seen, "command");
    assert_eq!(command[0..2], ["/bin/sh", "-c"]);
    assert!(
        command[4].starts_with("WARREN_EXEC_SESSION="),
        "{command:?}"
    );
    assert_eq!(command[5..], ["--", "ls"], "the command itself, unchanged");
    assert_eq!(query_values(&seen, "stderr"), vec!["true"]);
}

#[tokio::test]
async fn exec_needs_a_running_pod_of_a_known_workspace() {
    let (runtime, _) = start("Pending").await;
    let spec = ExecSpec {
        container: None,
        command: vec!["true".into()],
        env: vec![],
        tty: false,
        size: None,
    };
    match runtime.exec(&key(NAME), spec.clone()).await {
        Err(RuntimeError::Runtime { source, .. }) => {
            assert!(source.to_string().contains("not running"), "{source}")
        }
        other => panic!("expected a runtime error, got {other:?}"),
    }
    match runtime.exec(&key("other-ws"), spec.clone()).await {
        Err(RuntimeError::NotFound(what)) => assert!(what.contains("other-ws"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let mut bad_env = spec;
    bad_env.env.push(("NOT-A-NAME".into(), "x".into()));
    let (runtime, _) = start("Running").await;
    match runtime.exec(&key(NAME), bad_env).await {
        Err(RuntimeError::Runtime { source, .. }) => {
            assert!(source.to_string().contains("NOT-A-NAME"), "{source}")
        }
        other => panic!("expected a runtime error, got {other:?}"),
    }
}

#[test]
fn exit_codes_come_from_the_status() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
    let parse = |v: Value| exit_from_status(Some(serde_json::from_value::<Status>(v).unwrap()));
    assert_eq!(parse(json!({"status": "Success"})).code, Some(0));
    assert_eq!(
        parse(json!({"status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "130"}]}}))
        .code,
        Some(130)
    );
    let other = parse(json!({"status": "Failure", "message": "container not found (\"x\")"}));
    assert_eq!(other.code, None);
    assert!(other.message.unwrap().contains("container not found"));
    assert_eq!(exit_from_status(None).code, None);
}

/// A session dropped before its exit status (the client went away) is hung up: a second
/// exec in the same container runs the hang-up script for the first one's marker.
#[tokio::test]
async fn a_dropped_session_is_hung_up_by_its_marker() {
    let (runtime, mock) = start("Running").await;
    let spec = ExecSpec {
        container: None,
        command: vec!["/bin/sh".into()],
        env: vec![],
        tty: true,
        size: None,
    };
    let session = runtime.exec(&key(NAME), spec).await.unwrap();
    drop(session);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let seen = mock.seen.lock().unwrap().clone();
        if seen.len() >= 2 {
            break seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no hang-up exec: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let is_hang_up = |s: &Seen| query_values(s, "command").contains(&"warren-hang-up");
    let first = seen
        .iter()
        .find(|s| !is_hang_up(s))
        .expect("the session's exec");
    let second = seen
        .iter()
        .find(|s| is_hang_up(s))
        .expect("the hang-up exec");
    let first = query_values(first, "command");
    let marker = first
        .iter()
        .find_map(|a| a.strip_prefix("WARREN_EXEC_SESSION="))
        .expect("the first exec carries a marker");
    let hang_up = query_values(second, "command");
    assert_eq!(hang_up[0..2], ["/bin/sh", "-c"]);
    assert!(hang_up[2].contains("kill -HUP"), "{hang_up:?}");
    assert_eq!(hang_up[3..], ["warren-hang-up", marker]);
    assert_eq!(query_values(second, "container"), vec!["dev"]);
    assert!(!query_values(second, "tty").contains(&"true"));
}

/// Logs are read from the workspace's pod even when it is not running (a crash is when they
/// are wanted), from the main container unless another is named, with the tail and the byte
/// bound passed on.
#[tokio::test]
async fn logs_come_from_the_pods_main_or_named_container() {
    let (runtime, mock) = start("Failed").await;
    let text = runtime.logs(&key(NAME), None, 50).await.unwrap();
    assert_eq!(text, b"booting\nerror: config.yml not found\n");
    runtime.logs(&key(NAME), Some("sidecar"), 5).await.unwrap();
    let seen = mock.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].path,
        format!("/api/v1/namespaces/{NAMESPACE}/pods/{NAME}-abc/log")
    );
    assert_eq!(query_values(&seen[0], "container"), ["dev"]);
    assert_eq!(query_values(&seen[0], "tailLines"), ["50"]);
    assert_eq!(
        query_values(&seen[0], "limitBytes"),
        [warren_types::relay::MAX_LOG_BYTES.to_string().as_str()]
    );
    assert_eq!(query_values(&seen[1], "container"), ["sidecar"]);
    assert_eq!(query_values(&seen[1], "tailLines"), ["5"]);
    let err = runtime.logs(&key("unknown"), None, 5).await.unwrap_err();
    assert!(matches!(err, RuntimeError::NotFound(_)), "{err}");

    // Following asks the API server to follow, without the byte bound, and streams the body.
    use futures::StreamExt;
    let mut stream = runtime.follow_logs(&key(NAME), None, 3).await.unwrap();
    let mut got = Vec::new();
    while let Some(chunk) = stream.next().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(got, b"booting\nerror: config.yml not found\n");
    let seen = mock.seen.lock().unwrap().clone();
    let follow = seen.last().unwrap();
    assert_eq!(query_values(follow, "follow"), ["true"]);
    assert_eq!(query_values(follow, "tailLines"), ["3"]);
    assert!(query_values(follow, "limitBytes").is_empty());
}
