//! The "reconcile now" push: a desired-state change makes the server POST to each relay's
//! signal endpoint with a JWT the relay can verify, without holding up the API call.

use crate::common;

use axum::extract::Path;
use axum::routing::post;
use common::*;
use http::HeaderMap;
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use warren_types::internal::{RELAY_JWT_AUDIENCE, SERVER_JWT_ISSUER};

/// The next signal the stand-in relay got, waiting up to 10 s.
async fn recv(rx: &mut mpsc::UnboundedReceiver<(String, String)>) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(m) = rx.try_recv() {
            return m;
        }
        assert!(Instant::now() < deadline, "no signal reached the relay");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn desired_state_changes_signal_every_relay() {
    // A stand-in relay that records the signals it gets.
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, String)>();
    let app = axum::Router::new().route(
        "/internal/agents/{agent_id}/signal",
        post(move |Path(agent): Path<String>, headers: HeaderMap| {
            let tx = tx.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default()
                    .to_owned();
                let _ = tx.send((agent, auth));
                http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay = format!("http://{}", listener.local_addr().unwrap());
    let relay_task = tokio::spawn(async move { axum::serve(listener, app).await });

    let s = TestServer::start_with(&DbChoice::Sqlite, |c| c.relay_urls = vec![relay.clone()]).await;
    let agent = s.agent("a1", json!({})).await;
    s.workspace(&s.admin_token, json!({"name": "w1"})).await;
    let (got, jwt) = recv(&mut rx).await;
    assert_eq!(got, agent.to_string(), "creation signals the agent");
    let claims = warren_server::relay::jwt::verify(
        RELAY_SECRET.as_bytes(),
        &jwt,
        SERVER_JWT_ISSUER,
        RELAY_JWT_AUDIENCE,
        chrono::Utc::now().timestamp(),
    )
    .expect("the relay can verify the server's JWT");
    assert_eq!(claims.sub.as_deref(), Some(agent.to_string().as_str()));
    assert!(claims.exp - claims.iat <= 30);
    while rx.try_recv().is_ok() {}
    let (st, _) = s
        .admin(
            Method::PUT,
            "/api/v1/workspaces/w1/desired_state",
            Some(json!({"desired_state": "Stopped"})),
        )
        .await;
    assert_eq!(st, 200);
    let (got, _) = recv(&mut rx).await;
    assert_eq!(
        got,
        agent.to_string(),
        "a desired-state change signals the agent"
    );
    s.stop().await;
    relay_task.abort();
}

#[tokio::test]
async fn an_unreachable_relay_does_not_hold_up_the_api() {
    // Nothing listens on this port (bound, then closed).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let s =
        TestServer::start_with(&DbChoice::Sqlite, |c| c.relay_urls = vec![closed.clone()]).await;
    s.agent("a1", json!({})).await;
    s.workspace(&s.admin_token, json!({"name": "w1"})).await;
    let (st, b) = s
        .admin(
            Method::PUT,
            "/api/v1/workspaces/w1/desired_state",
            Some(json!({"desired_state": "Stopped"})),
        )
        .await;
    assert_eq!((st, b["desired_state"].as_str()), (200, Some("Stopped")));
    s.stop().await;
}
