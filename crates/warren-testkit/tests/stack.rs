//! The in-process stack itself: a user's workspace runs, stops and starts again through
//! the real server, relay, agent connection and reconciler.

use warren_testkit::Stack;

#[tokio::test]
async fn a_workspace_runs_stops_and_starts_through_the_whole_stack() -> anyhow::Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    assert_eq!(ws.agent_id, 1);
    assert!(stack.runtime.workspace(&ws.key()).is_some());
    stack.set_desired(&alice, "alice-web", "Stopped").await?;
    stack.wait_state(&alice, "alice-web", "Stopped").await?;
    stack.set_desired(&alice, "alice-web", "Running").await?;
    stack.wait_state(&alice, "alice-web", "Running").await?;
    assert!(stack
        .host(8080, "alice-web")
        .starts_with("8080-alice-web.ws.localhost:"));
    Ok(())
}

/// Use through the proxy reaches the server as activity (what the idle timeout counts), and
/// shows as the workspace's `last_activity_at`: nothing before the first request, a time
/// after it, a later time after a later request; another user's refused request moves
/// nothing.
#[tokio::test]
async fn use_through_the_proxy_is_reported_as_activity() -> anyhow::Result<()> {
    use warren_testkit::wait_for;
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let mallory = stack.user("mallory").await?;
    let ws = stack.workspace(&alice, "alice-idle").await?;
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    stack.set_endpoint(&ws, 8080, upstream.local_addr()?);
    tokio::spawn(async move {
        while let Ok((sock, _)) = upstream.accept().await {
            let svc = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(b"ok"),
                )))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc),
            );
        }
    });
    let last_used = || async {
        let w = stack
            .api(
                reqwest::Method::GET,
                "/api/v1/workspaces/alice-idle",
                &alice.token,
                None,
            )
            .await
            .expect("workspace");
        w["last_activity_at"]
            .as_str()
            .map(|t| chrono::DateTime::parse_from_rfc3339(t).expect("an RFC 3339 time"))
    };
    assert_eq!(last_used().await, None, "no use yet");

    let url = stack.url(8080, "alice-idle", "/");
    let client = stack.client_for(&[stack.host(8080, "alice-idle")]);
    let refused = client.get(&url).bearer_auth(&mallory.token).send().await?;
    assert_eq!(refused.status(), 404);
    let get = || async {
        let r = client
            .get(&url)
            .bearer_auth(&alice.token)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200);
    };
    get().await;
    wait_for("the first activity report", 30, || async {
        last_used().await.is_some()
    })
    .await?;
    let first = last_used().await.expect("reported");
    // Reports carry millisecond times: a later request gives a later time.
    wait_for("a later activity report", 30, || async {
        get().await;
        last_used().await.is_some_and(|t| t > first)
    })
    .await?;
    Ok(())
}
