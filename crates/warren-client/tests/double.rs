//! The client against a tiny axum double of the API: auth header, error bodies, pagination,
//! undecodable answers and an unreachable server.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use axum::{Json, Router};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use warren_client::{Client, Error, WorkspaceQuery};

#[derive(Default)]
struct Seen {
    auth: Vec<String>,
    queries: Vec<HashMap<String, String>>,
}

type Shared = Arc<Mutex<Seen>>;

fn ws_json(name: &str) -> serde_json::Value {
    serde_json::json!({
        "id": 1, "name": name, "namespace": format!("warren-ws-{name}"),
        "owner": 1, "owner_username": "admin", "agent": 1, "agent_name": "a",
        "project": null, "project_name": null,
        "desired_state": "Running", "actual_state": "CreationRequested",
        "desired_state_updated_at": "2026-01-01T00:00:00Z",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "url": null, "endpoints": {}, "failure_reason": null,
        "resources": {"cpu": null, "memory": null}, "variables": []
    })
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn app(seen: Shared) -> Router {
    Router::new()
        .route(
            "/api/v1/users/me",
            get(|State(s): State<Shared>, headers: HeaderMap| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                s.lock().unwrap().auth.push(auth.clone());
                if auth != "Bearer good" {
                    return Err((
                        StatusCode::UNAUTHORIZED,
                        Json(serde_json::json!({"error": {"code": "unauthorized",
                            "message": "the token is invalid, expired or revoked"}})),
                    ));
                }
                Ok(Json(
                    serde_json::json!({"id": 7, "username": "ann", "is_admin": false,
                    "created_at": "2026-01-01T00:00:00Z"}),
                ))
            }),
        )
        .route(
            "/api/v1/workspaces",
            get(
                |State(s): State<Shared>, Query(q): Query<HashMap<String, String>>| async move {
                    s.lock().unwrap().queries.push(q.clone());
                    let body = match q.get("cursor").map(String::as_str) {
                        None => serde_json::json!({"items": [ws_json("one")], "next_cursor": "c2"}),
                        Some("c2") => {
                            serde_json::json!({"items": [ws_json("two")], "next_cursor": "c3"})
                        }
                        Some("c3") => {
                            serde_json::json!({"items": [ws_json("three")], "next_cursor": null})
                        }
                        Some(_) => serde_json::json!({"items": [], "next_cursor": "again"}),
                    };
                    Json(body)
                },
            ),
        )
        .route(
            "/api/v1/workspaces/{name}/desired_state",
            put(|| async {
                (
                    StatusCode::CONFLICT,
                    Json(serde_json::json!({"error": {"code": "invalid_state",
                        "message": "workspace \"x\" is Terminated; allowed: nothing"}})),
                )
            }),
        )
        .route("/api/v1/agents", get(|| async { "not json" }))
        .with_state(seen)
}

#[tokio::test]
async fn sends_the_bearer_token_and_surfaces_api_messages() {
    let seen = Shared::default();
    let base = serve(app(seen.clone())).await;

    let me = Client::new(&base, "good").unwrap().me().await.unwrap();
    assert_eq!(me.username, "ann");

    let err = Client::new(&base, "bad").unwrap().me().await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert_eq!(err.to_string(), "the token is invalid, expired or revoked");
    assert_eq!(seen.lock().unwrap().auth, vec!["Bearer good", "Bearer bad"]);

    let err = Client::new(&base, "good")
        .unwrap()
        .set_desired_state("x", warren_types::state::DesiredState::Running)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("invalid_state"));
    assert_eq!(
        err.to_string(),
        "workspace \"x\" is Terminated; allowed: nothing"
    );
}

#[tokio::test]
async fn follows_cursors_and_passes_filters() {
    let seen = Shared::default();
    let base = serve(app(seen.clone())).await;
    let c = Client::new(&base, "good").unwrap();
    let q = WorkspaceQuery {
        state: Some("Running".into()),
        ..Default::default()
    };
    let all = c.list_all_workspaces(&q).await.unwrap();
    let names: Vec<_> = all.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["one", "two", "three"]);
    let queries = seen.lock().unwrap().queries.clone();
    assert_eq!(queries.len(), 3);
    assert!(queries
        .iter()
        .all(|q| q.get("state").map(String::as_str) == Some("Running")));

    let looping = WorkspaceQuery {
        cursor: Some("again".into()),
        ..Default::default()
    };
    let err = c.list_all_workspaces(&looping).await.unwrap_err();
    assert!(matches!(err, Error::CursorLoop { .. }), "{err}");
}

#[tokio::test]
async fn undecodable_answers_and_unknown_routes_are_errors_not_panics() {
    let base = serve(app(Shared::default())).await;
    let c = Client::new(&base, "good").unwrap();
    let err = c.list_agents().await.unwrap_err();
    assert!(matches!(err, Error::Decode { status: 200, .. }), "{err}");
    assert!(err.to_string().contains("/api/v1/agents"), "{err}");

    let err = c.list_projects().await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.to_string(), "HTTP 404 Not Found");
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error() {
    // Bind then drop, so the port is very likely closed.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let c = Client::new(&format!("http://{addr}"), "t").unwrap();
    let err = c.me().await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}
