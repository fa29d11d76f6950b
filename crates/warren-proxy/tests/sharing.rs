//! Sharing a port through the whole in-process stack (issue 41, item 4): the authorisation
//! matrix's rows for visibilities and share links, with real HTTP clients. A port made public
//! answers someone not signed in and only that port; `authenticated` lets another user in
//! after signing in; a share link opens its port in a browser (cookie for that host only, the
//! secret out of the address at once, never forwarded to the workspace), and a revoked link
//! stops working within the authorisation cache's bound.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::json;
use warren_testkit::{wait_for, Stack, StackOptions};

async fn stack() -> Stack {
    Stack::start_with(StackOptions {
        ssh: false,
        authorization_cache_secs: 1,
        ..StackOptions::default()
    })
    .await
    .expect("stack")
}

async fn set_port(s: &Stack, token: &str, ws: &str, port: u16, visibility: &str) {
    s.api(
        Method::PUT,
        &format!("/api/v1/workspaces/{ws}/ports/{port}"),
        token,
        Some(json!({"visibility": visibility})),
    )
    .await
    .expect("set the port's visibility");
}

fn host_only(h: &str) -> String {
    h.split(':').next().unwrap().to_owned()
}

/// What a client without any credentials gets (status, body).
async fn anonymous(http: &reqwest::Client, url: &str) -> (u16, String) {
    let r = http.get(url).send().await.expect("request");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn public_and_authenticated_ports_let_in_whom_they_say() {
    let s = stack().await;
    // The configuration is replaced whole: the stack's, with public ports allowed.
    let agent = s
        .api(Method::GET, "/api/v1/agents/local", &s.admin.token, None)
        .await
        .expect("the agent");
    let mut config = agent["config"].clone();
    config["ports"] = json!({"max_visibility": "public"});
    s.api(
        Method::PUT,
        "/api/v1/agents/local",
        &s.admin.token,
        Some(json!({ "config": config })),
    )
    .await
    .expect("allow public ports");
    let alice = s.user("alice").await.unwrap();
    let bob = s.user("bob").await.unwrap();
    let ws = s.workspace(&alice, "alice-web").await.unwrap();
    let up = upstream("alice-web").await;
    s.set_endpoint(&ws, 8080, up.addr);
    s.set_endpoint(&ws, 3000, up.addr);
    let hosts = [
        s.host(8080, "alice-web"),
        s.host(3000, "alice-web"),
        format!("terminal-alice-web.ws.localhost:{}", s.proxy_addr.port()),
        format!("auth.ws.localhost:{}", s.proxy_addr.port()),
    ];
    let http = s.client_for(&hosts);
    let web = s.url(8080, "alice-web", "/");
    let app = s.url(3000, "alice-web", "/");

    // Private to the space by default: no one else, not signed in, gets in.
    assert_eq!(anonymous(&http, &web).await.0, 401);

    // Public: anyone, without signing in, on that port only; never the terminal.
    set_port(&s, &alice.token, "alice-web", 8080, "public").await;
    wait_for("the public port to answer", 10, || {
        let (h, u) = (http.clone(), web.clone());
        async move { anonymous(&h, &u).await == (200, "hello from alice-web".into()) }
    })
    .await
    .unwrap();
    assert_eq!(
        anonymous(&http, &app).await.0,
        401,
        "the other port stays closed"
    );
    let terminal = format!("http://{}/", hosts[2]);
    assert_eq!(
        anonymous(&http, &terminal).await.0,
        401,
        "never the terminal"
    );
    // The stopped page's start button is not for strangers.
    let r = http
        .post(s.url(8080, "alice-web", "/.warren/start"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);

    // Authenticated: bob signs in through the browser flow and gets in; strangers do not.
    set_port(&s, &alice.token, "alice-web", 3000, "authenticated").await;
    let mut b = Browser::new(http.clone());
    let page = b.sign_in(&app, "bob", "password-123").await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web"),
        "{page:?}"
    );
    assert_eq!(anonymous(&http, &app).await.0, 401);
    let with_token = http
        .get(&app)
        .bearer_auth(&bob.token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(with_token, 200, "bob's workspace-scoped token too");

    // Back to private: the stranger is out again within the cache's bound.
    set_port(&s, &alice.token, "alice-web", 8080, "private").await;
    wait_for("the port to close", 10, || {
        let (h, u) = (http.clone(), web.clone());
        async move { anonymous(&h, &u).await.0 == 401 }
    })
    .await
    .unwrap();
    let r = http.get(&web).bearer_auth(&bob.token).send().await.unwrap();
    assert_eq!(r.status(), 404, "private: not even another signed-in user");
}

#[tokio::test]
async fn a_share_link_opens_one_port_in_a_browser_until_revoked() {
    let s = stack().await;
    let alice = s.user("alice").await.unwrap();
    let ws = s.workspace(&alice, "alice-web").await.unwrap();
    let up = upstream("alice-web").await;
    s.set_endpoint(&ws, 8080, up.addr);
    s.set_endpoint(&ws, 3000, up.addr);
    let hosts = [
        s.host(8080, "alice-web"),
        s.host(3000, "alice-web"),
        format!("auth.ws.localhost:{}", s.proxy_addr.port()),
    ];
    let http = s.client_for(&hosts);
    let link = s
        .api(
            Method::POST,
            "/api/v1/workspaces/alice-web/ports/8080/share-links",
            &alice.token,
            Some(json!({"expires_in_secs": 600})),
        )
        .await
        .expect("a share link");
    let url = link["url"].as_str().unwrap().to_owned();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    assert_eq!(
        url,
        s.url(8080, "alice-web", &format!("/.warren/share?token={token}"))
    );

    let mut b = Browser::new(http.clone());
    let first = b.once(http.get(&url), &url).await;
    assert_eq!(first.status, 303, "{first:?}");
    assert_eq!(
        first.location.as_deref(),
        Some(s.url(8080, "alice-web", "/").as_str())
    );
    let cookie = first
        .set_cookies
        .iter()
        .find(|c| c.starts_with("warren_share="))
        .expect("a share cookie");
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Lax")
            && !cookie.contains("Domain"),
        "{cookie}"
    );
    let page = b.get(&s.url(8080, "alice-web", "/")).await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web")
    );
    // The workspace never sees the secret or the cookie.
    let headers = b.get(&s.url(8080, "alice-web", "/headers")).await;
    assert_eq!(headers.status, 200);
    assert!(!headers.body.contains("warren_share"), "{}", headers.body);
    assert!(
        up.seen()
            .iter()
            .all(|r| !r.contains(&token) && !r.contains("/.warren/share")),
        "{:?}",
        up.seen()
    );
    // Its port only: the cookie is for 8080's host, and 3000 asks to sign in.
    let other = b
        .once(
            http.get(s.url(3000, "alice-web", "/")),
            &s.url(3000, "alice-web", "/"),
        )
        .await;
    assert_eq!(other.status, 302, "{other:?}");
    // A wrong or used-up secret opens nothing.
    let bad = url.replace(&token, "wrn_share_not-it");
    let mut stranger = Browser::new(http.clone());
    let seen = stranger.once(http.get(&bad), &bad).await;
    assert_eq!(seen.status, 404, "{seen:?}");
    assert!(seen.set_cookies.is_empty());

    // Revoked: the browser holding the cookie is sent to sign in within the cache's bound.
    let id = link["id"].as_i64().unwrap();
    s.api(
        Method::DELETE,
        &format!("/api/v1/workspaces/alice-web/share-links/{id}"),
        &alice.token,
        None,
    )
    .await
    .expect("revoke");
    let root = s.url(8080, "alice-web", "/");
    let cookie = b
        .cookie(&host_only(&hosts[0]), "warren_share")
        .expect("the browser keeps its cookie");
    wait_for("the revoked link to be refused", 10, || {
        let (h, u, c) = (http.clone(), root.clone(), cookie.clone());
        async move {
            let r = h
                .get(&u)
                .header("accept", "text/html")
                .header("cookie", format!("warren_share={c}"))
                .send()
                .await
                .unwrap();
            r.status().as_u16() == 302
        }
    })
    .await
    .unwrap();
    let again = stranger.once(http.get(&url), &url).await;
    assert_eq!(again.status, 404, "a revoked link is not redeemed");
}
