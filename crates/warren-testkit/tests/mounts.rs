//! Redirect mounts through the real proxy (issue 21): a request to a moved workspace's old
//! name is answered `308` to the new host with the same port (or terminal), path and query,
//! and the client that follows it is served; an external redirect keeps the path; a stranger
//! gets the usual 404; a redirect whose target is gone is a 503 page naming it.

use warren_testkit::{wait_for, Stack};

#[tokio::test]
async fn a_moved_workspace_is_found_through_its_redirect() -> anyhow::Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let mallory = stack.user("mallory").await?;
    let ws = stack.workspace(&alice, "new-home").await?;
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    stack.set_endpoint(&ws, 8080, upstream.local_addr()?);
    tokio::spawn(async move {
        while let Ok((sock, _)) = upstream.accept().await {
            let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| {
                let path = req.uri().to_string();
                async move {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from(format!("served {path}"))),
                    ))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc),
            );
        }
    });
    let mount = |name: &'static str, body: serde_json::Value| {
        let stack = &stack;
        let token = alice.token.clone();
        async move {
            let mut body = body;
            body["name"] = name.into();
            body["type"] = "redirect".into();
            stack
                .api(reqwest::Method::POST, "/api/v1/mounts", &token, Some(body))
                .await
        }
    };
    mount("old-home", serde_json::json!({"ref": "new-home"})).await?;
    mount("older-home", serde_json::json!({"ref": "old-home"})).await?;
    mount(
        "elsewhere",
        serde_json::json!({"url": "https://8080-ws.other.example/"}),
    )
    .await?;

    let hosts: Vec<String> = ["old-home", "older-home", "new-home", "elsewhere"]
        .iter()
        .flat_map(|n| [stack.host(8080, n), format!("terminal-{n}.ws.localhost")])
        .collect();
    let client = stack.client_for(&hosts);
    let get = |url: String, token: String| {
        let client = client.clone();
        async move { client.get(url).bearer_auth(token).send().await }
    };

    // Through a chain of two redirects: one 308 to the final entry, same port, path, query.
    for from in ["old-home", "older-home"] {
        let r = get(stack.url(8080, from, "/docs/a?b=1"), alice.token.clone()).await?;
        assert_eq!(r.status(), 308, "{from}");
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert_eq!(
            location.as_deref(),
            Some(stack.url(8080, "new-home", "/docs/a?b=1").as_str()),
            "{from}"
        );
        let followed = get(location.unwrap(), alice.token.clone()).await?;
        assert_eq!(followed.status(), 200);
        assert_eq!(followed.text().await?, "served /docs/a?b=1");
    }
    // The terminal host goes to the target's terminal host.
    let r = get(stack.terminal_url("old-home", "/"), alice.token.clone()).await?;
    assert_eq!(r.status(), 308);
    assert_eq!(
        r.headers().get("location").and_then(|v| v.to_str().ok()),
        Some(stack.terminal_url("new-home", "/").as_str())
    );
    // Outside this Warren: the URL with the path appended.
    let r = get(stack.url(8080, "elsewhere", "/x?y=2"), alice.token.clone()).await?;
    assert_eq!(r.status(), 308);
    assert_eq!(
        r.headers().get("location").and_then(|v| v.to_str().ok()),
        Some("https://8080-ws.other.example/x?y=2")
    );
    // A stranger learns nothing.
    let r = get(stack.url(8080, "old-home", "/"), mallory.token.clone()).await?;
    assert_eq!(r.status(), 404);
    assert!(r.headers().get("location").is_none());

    // The target terminated: a 503 naming it, not a bare error.
    stack
        .api(
            reqwest::Method::DELETE,
            "/api/v1/workspaces/new-home",
            &alice.token,
            None,
        )
        .await?;
    wait_for("the redirect to report its target gone", 30, || async {
        let r = get(stack.url(8080, "older-home", "/"), alice.token.clone())
            .await
            .expect("request");
        r.status() == 503 && r.text().await.unwrap_or_default().contains("new-home")
    })
    .await?;
    Ok(())
}

/// A softlink through the real proxy: served by the target workspace under the softlink's
/// own host to a developer of the softlink's space, 404 to anyone else, and turned away
/// (within the proxy's authorisation-cache bound) once the target's owner takes the grant
/// back.
#[tokio::test]
async fn a_softlink_serves_the_target_under_its_own_name_while_granted() -> anyhow::Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let bob = stack.user("bob").await?;
    let carol = stack.user("carol").await?;
    let mallory = stack.user("mallory").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    stack.set_endpoint(&ws, 8080, upstream.local_addr()?);
    tokio::spawn(async move {
        while let Ok((sock, _)) = upstream.accept().await {
            let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| {
                let host = req
                    .headers()
                    .get("host")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("?")
                    .to_owned();
                async move {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from(format!(
                            "alice-web for {host}"
                        ))),
                    ))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc),
            );
        }
    });
    let admin = stack.admin.token.clone();
    let post = reqwest::Method::POST;
    let put = reqwest::Method::PUT;
    stack
        .api(
            post.clone(),
            "/api/v1/spaces",
            &admin,
            Some(serde_json::json!({"path": "pairs"})),
        )
        .await?;
    for who in ["bob", "carol"] {
        stack
            .api(
                put.clone(),
                &format!("/api/v1/spaces/pairs/members/{who}"),
                &admin,
                Some(serde_json::json!({"role": "developer"})),
            )
            .await?;
    }
    let softlink = serde_json::json!({"name": "pairing", "type": "workspace", "ref": "alice-web", "space": "pairs"});
    let refused = stack
        .api(
            post.clone(),
            "/api/v1/mounts",
            &bob.token,
            Some(softlink.clone()),
        )
        .await;
    assert!(refused.is_err(), "no softlink without the grant");
    stack
        .api(
            put.clone(),
            "/api/v1/workspaces/alice-web/grants/bob",
            &alice.token,
            None,
        )
        .await?;
    stack
        .api(post.clone(), "/api/v1/mounts", &bob.token, Some(softlink))
        .await?;

    let url = stack.url(8080, "pairing", "/");
    let client = stack.client_for(&[stack.host(8080, "pairing")]);
    let get = |token: String| {
        let client = client.clone();
        let url = url.clone();
        async move { client.get(url).bearer_auth(token).send().await }
    };
    let r = get(carol.token.clone()).await?;
    assert_eq!(r.status(), 200);
    let body = r.text().await?;
    assert!(
        body.starts_with("alice-web for 8080-pairing."),
        "served by alice-web under the softlink's name: {body}"
    );
    assert_eq!(get(mallory.token.clone()).await?.status(), 404);

    stack
        .api(
            reqwest::Method::DELETE,
            "/api/v1/workspaces/alice-web/grants/bob",
            &alice.token,
            None,
        )
        .await?;
    wait_for("the revoked softlink to be turned away", 120, || async {
        get(carol.token.clone())
            .await
            .is_ok_and(|r| r.status() == 404)
    })
    .await?;
    Ok(())
}
