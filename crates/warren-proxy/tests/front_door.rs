//! The HTTP front door through the whole in-process stack (server, relay, agent on the
//! simulated runtime, proxy): browser sign-in (a cookie-keeping client and real curl),
//! the authorisation matrix, WebSocket (tokio-tungstenite and websocat), HTTP/2, large
//! streamed uploads, the stopped page's start button, forwarded headers, key rotation.
//!
//! Anonymous non-browser clients (no `text/html` in `Accept`) get 401 with
//! `WWW-Authenticate: Bearer`; browsers are redirected to sign in.

use crate::common;

use common::*;
use std::process::Stdio;
use std::time::Duration;
use warren_testkit::process::output_ok;
use warren_testkit::{wait_for, Stack, StackOptions, TestUser, TestWorkspace};

struct Env {
    stack: Stack,
    alice: TestUser,
    ws: TestWorkspace,
    up: Upstream,
}

async fn env_with(options: StackOptions) -> Env {
    let stack = Stack::start_with(options).await.expect("stack");
    let alice = stack.user("alice").await.expect("alice");
    let ws = stack
        .workspace(&alice, "alice-web")
        .await
        .expect("workspace");
    let up = upstream("alice-web").await;
    stack.set_endpoint(&ws, 8080, up.addr);
    stack.set_endpoint(&ws, 3000, up.addr);
    Env {
        stack,
        alice,
        ws,
        up,
    }
}

async fn env() -> Env {
    env_with(StackOptions {
        ssh: false,
        ..StackOptions::default()
    })
    .await
}

fn auth_host(stack: &Stack) -> String {
    format!("auth.ws.localhost:{}", stack.proxy_addr.port())
}

fn browser(stack: &Stack, hosts: &[String]) -> Browser {
    let mut all = hosts.to_vec();
    all.push(auth_host(stack));
    Browser::new(stack.client_for(&all))
}

fn host_only(h: &str) -> String {
    h.split(':').next().unwrap().to_owned()
}

fn require_tools() -> bool {
    std::env::var_os("WARREN_REQUIRE_TOOLS").is_some()
}

fn have(tool: &str) -> bool {
    let found = std::process::Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            !require_tools(),
            "{tool} is required (WARREN_REQUIRE_TOOLS=1) but missing"
        );
        eprintln!("NOTICE: {tool} is not installed; skipping this part of the test (.ci/setup-tools.sh installs it)");
    }
    found
}

/// The whole browser sign-in, hop by hop, with every redirect's exact target.
#[tokio::test]
async fn browser_sign_in_lands_on_the_workspace_page() {
    let e = env().await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    let mut b = browser(s, std::slice::from_ref(&host));
    let page = b
        .sign_in(&s.url(8080, "alice-web", "/?x=1"), "alice", "password-123")
        .await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web")
    );
    assert_eq!(page.url, s.url(8080, "alice-web", "/?x=1"));

    // The hops: workspace → auth start → authorize (login page) → login post → callback
    // → hand-off → original path.
    let hops: Vec<(u16, String)> = b
        .hops
        .iter()
        .map(|h| (h.status, h.url.split('?').next().unwrap().to_owned()))
        .collect();
    let auth = format!("http://{}", auth_host(s));
    assert_eq!(
        hops,
        vec![
            (302, s.url(8080, "alice-web", "/")),
            (302, format!("{auth}/oauth/start")),
            (303, format!("{}/oauth/login", s.api_url)),
            (302, format!("{}/oauth/authorize", s.api_url)),
            (302, format!("{auth}/oauth/callback")),
            (303, s.url(8080, "alice-web", "/.warren/session")),
        ],
        "{:#?}",
        b.hops
    );
    // The bind cookie is host-only on the workspace host, the session cookie too.
    let first = &b.hops[0];
    let bind = first
        .set_cookies
        .iter()
        .find(|c| c.starts_with("warren_bind="))
        .unwrap();
    assert!(
        bind.ends_with("Path=/; Max-Age=600; HttpOnly; SameSite=Lax"),
        "{bind}"
    );
    assert!(!bind.contains("Domain"), "{bind}");
    let handoff = &b.hops[5];
    let session = handoff
        .set_cookies
        .iter()
        .find(|c| c.starts_with("warren_session="))
        .unwrap();
    assert!(
        session.ends_with("Path=/; Max-Age=3600; HttpOnly; SameSite=Lax"),
        "{session}"
    );
    assert!(
        !session.contains("Domain") && !session.contains("Secure"),
        "{session}"
    );
    assert_eq!(
        handoff.location.as_deref(),
        Some(s.url(8080, "alice-web", "/?x=1").as_str())
    );
    assert!(
        b.cookie(&host_only(&host), "warren_bind").is_none(),
        "bind cookie cleared"
    );

    // The authorize request carries PKCE S256, the fixed redirect URI and the state.
    let authorize = b.hops[1].location.clone().unwrap();
    let q: std::collections::HashMap<String, String> = url::Url::parse(&authorize)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    assert_eq!(q["client_id"], warren_testkit::OAUTH_CLIENT_ID);
    assert_eq!(q["redirect_uri"], format!("{auth}/oauth/callback"));
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["response_type"], "code");
    assert!(
        b.cookie("auth.ws.localhost", &format!("warren_st_{}", q["state"]))
            .is_none(),
        "state cookie used up"
    );

    // A hand-off is single-use and bound to the browser.
    let handoff_url = b.hops[4].location.clone().unwrap();
    let again = b.once(b.http.get(&handoff_url), &handoff_url).await;
    assert_eq!(again.status, 400, "replayed hand-off: {again:?}");
    let mut other = browser(s, std::slice::from_ref(&host));
    let stolen = other.once(other.http.get(&handoff_url), &handoff_url).await;
    assert_eq!(
        stolen.status, 400,
        "hand-off in another browser: {stolen:?}"
    );

    // A second workspace host of the same user needs its own sign-in (no login form this
    // time: the server remembers the browser).
    let host3000 = s.host(3000, "alice-web");
    let mut b2 = browser(s, &[host.clone(), host3000.clone()]);
    b2.jar = b.jar.clone();
    let p = b2.get(&s.url(3000, "alice-web", "/")).await;
    assert_eq!(
        (p.status, p.body.as_str()),
        (200, "hello from alice-web"),
        "{:#?}",
        b2.hops
    );
}

/// The same sign-in with real curl and a cookie jar, posting the login form.
#[tokio::test]
async fn curl_sign_in_with_a_cookie_jar() {
    if !have("curl") {
        return;
    }
    let e = env().await;
    let s = &e.stack;
    let dir = tempfile::tempdir().unwrap();
    let jar = dir.path().join("jar.txt");
    let port = s.proxy_addr.port();
    let resolve = |h: &str| format!("{h}:{port}:127.0.0.1");
    let curl = |extra: &[String]| {
        let mut c = tokio::process::Command::new("curl");
        c.args(["-sS", "-L", "-H", "Accept: text/html", "-c"])
            .arg(&jar)
            .arg("-b")
            .arg(&jar)
            .args(["--resolve", &resolve("8080-alice-web.ws.localhost")])
            .args(["--resolve", &resolve("auth.ws.localhost")])
            .args(["-w", "\n%{http_code} %{url_effective}"])
            .args(extra)
            .kill_on_drop(true);
        c
    };
    let out = curl(&[s.url(8080, "alice-web", "/")])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (page, last) = text.rsplit_once('\n').unwrap();
    assert!(
        last.starts_with("200 ") && last.contains("/oauth/authorize?"),
        "{last}"
    );
    let mut form = hidden_inputs(page);
    form.push(("username".into(), "alice".into()));
    form.push(("password".into(), "password-123".into()));
    let mut args = vec![];
    for (k, v) in &form {
        args.push("--data-urlencode".to_owned());
        args.push(format!("{k}={v}"));
    }
    args.push(format!("{}/oauth/login", s.api_url));
    let out = curl(&args).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text,
        format!(
            "hello from alice-web\n200 {}",
            s.url(8080, "alice-web", "/")
        )
    );
    let jar_text = std::fs::read_to_string(&jar).unwrap();
    let session_line = jar_text
        .lines()
        .find(|l| l.contains("\twarren_session\t"))
        .expect("session cookie in the jar");
    // Netscape format: host-only cookies have "FALSE" in the subdomain column; HttpOnly
    // ones are prefixed.
    assert!(
        session_line.starts_with("#HttpOnly_8080-alice-web.ws.localhost\tFALSE\t/\tFALSE\t"),
        "{session_line}"
    );
    // The jar now opens the page directly.
    let out = curl(&[s.url(8080, "alice-web", "/")])
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "hello from alice-web\n200 {}",
            s.url(8080, "alice-web", "/")
        )
    );
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Mints a session cookie with the proxy's own key (for expiry and replay cases).
async fn forge_session(s: &Stack, claims: serde_json::Value, key_b64: Option<&str>) -> String {
    use base64::Engine;
    let key_b64 = match key_b64 {
        Some(k) => k.to_owned(),
        None => signing_key(s).await,
    };
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&key_b64)
        .unwrap();
    let kid = {
        use sha2::Digest;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&sha2::Sha256::digest(&key)[..9])
    };
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    h.kid = Some(kid);
    jsonwebtoken::encode(&h, &claims, &jsonwebtoken::EncodingKey::from_secret(&key)).unwrap()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Every way in, each with its exact answer.
#[tokio::test]
async fn authorisation_matrix() {
    let e = env_with(StackOptions {
        ssh: false,
        authorization_cache_secs: 1,
        ..StackOptions::default()
    })
    .await;
    let s = &e.stack;
    let bob = s.user("bob").await.unwrap();
    let other_ws = s.workspace(&e.alice, "alice-other").await.unwrap();
    let up2 = upstream("alice-other").await;
    s.set_endpoint(&other_ws, 8080, up2.addr);
    let host = s.host(8080, "alice-web");
    let hosts = [
        host.clone(),
        s.host(3000, "alice-web"),
        s.host(8080, "alice-other"),
        s.host(5005, "alice-web"),
        s.host(9999, "alice-web"),
        s.host(8080, "nobody-here"),
        format!("elsewhere.example.com:{}", s.proxy_addr.port()),
        format!("ws.localhost:{}", s.proxy_addr.port()),
        auth_host(s),
    ];
    let url = s.url(8080, "alice-web", "/");
    let http = s.client_for(&hosts);
    let json_404 =
        serde_json::json!({"error": {"code": "not_found", "message": "There is nothing here."}});
    let get_json = |u: String, token: Option<String>| {
        let http = http.clone();
        async move {
            let mut r = http.get(u).header("accept", "application/json");
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            let resp = r.send().await.unwrap();
            let st = resp.status().as_u16();
            let www = resp
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned());
            let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
            (st, body, www)
        }
    };

    // Owner, by session: 200.
    let mut alice_b = browser(s, &hosts);
    let p = alice_b.sign_in(&url, "alice", "password-123").await;
    assert_eq!((p.status, p.body.as_str()), (200, "hello from alice-web"));
    let alice_cookie = alice_b.cookie(&host_only(&host), "warren_session").unwrap();
    // Owner, by token: 200.
    let (st, _, _) = get_json(url.clone(), Some(e.alice.token.clone())).await;
    assert_eq!(st, 200);

    // Another user signs in on alice's host: 404, the same 404 as an unknown workspace.
    let mut bob_b = browser(s, &hosts);
    let p = bob_b.sign_in(&url, "bob", "password-123").await;
    assert_eq!(p.status, 404, "{p:?}");
    assert!(bob_b.cookie(&host_only(&host), "warren_session").is_none());
    let (st, b, _) = get_json(url.clone(), Some(bob.token.clone())).await;
    assert_eq!((st, &b), (404, &json_404), "bob's token");
    // The admin too.
    let mut admin_b = browser(s, &hosts);
    let p = admin_b.sign_in(&url, "admin", &s.admin.password).await;
    assert_eq!(p.status, 404, "admin: {p:?}");
    let (st, b, _) = get_json(url.clone(), Some(s.admin.token.clone())).await;
    assert_eq!((st, &b), (404, &json_404), "admin's token");

    // Anonymous browser → sign in; anonymous API client → 401.
    let mut anon = browser(s, &hosts);
    let p = anon
        .once(anon.http.get(s.url(8080, "alice-web", "/a?b=c")), &url)
        .await;
    assert_eq!(p.status, 302);
    let loc = p.location.unwrap();
    let expected_prefix = format!(
        "http://{}/oauth/start?return={}&bind=",
        auth_host(s),
        enc(&s.url(8080, "alice-web", "/a?b=c"))
    );
    assert!(loc.starts_with(&expected_prefix), "{loc}");
    let (st, b, www) = get_json(url.clone(), None).await;
    assert_eq!(st, 401, "{b}");
    assert_eq!(b["error"]["code"], "unauthenticated");
    assert_eq!(www.as_deref(), Some("Bearer realm=\"warren\""));

    let try_cookie = |cookie: String, u: String| {
        let http = http.clone();
        async move {
            let resp = http
                .get(&u)
                .header("accept", "text/html")
                .header("cookie", format!("warren_session={cookie}"))
                .send()
                .await
                .unwrap();
            let st = resp.status().as_u16();
            let loc = resp
                .headers()
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned());
            (st, loc)
        }
    };
    let sign_in_again = |target: &str| {
        format!(
            "http://{}/oauth/start?return={}&bind=",
            auth_host(s),
            enc(target)
        )
    };
    let (st, _) = try_cookie(alice_cookie.clone(), url.clone()).await;
    assert_eq!(st, 200, "the real cookie");

    // Expired cookie (signed with the real key): sign in again.
    let claims = |exp: i64, host: &str| {
        serde_json::json!({"aud": "warren-session", "sub": e.alice.id, "ws": e.ws.id,
            "host": host, "iat": now() - 7200, "exp": exp})
    };
    let expired = forge_session(s, claims(now() - 5, &host_only(&host)), None).await;
    let (st, loc) = try_cookie(expired, url.clone()).await;
    assert_eq!(st, 302);
    assert!(loc.unwrap().starts_with(&sign_in_again(&url)));
    // A correctly signed cookie proves the forging helper matches the real format.
    let fresh = forge_session(s, claims(now() + 600, &host_only(&host)), None).await;
    assert_eq!(try_cookie(fresh, url.clone()).await.0, 200);

    // Tampered cookie (claims changed, signature kept): sign in again.
    let parts: Vec<&str> = alice_cookie.split('.').collect();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut payload: serde_json::Value =
        serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    payload["sub"] = serde_json::json!(bob.id);
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        b64.encode(payload.to_string()),
        parts[2]
    );
    let (st, loc) = try_cookie(tampered, url.clone()).await;
    assert_eq!(st, 302);
    assert!(loc.unwrap().starts_with(&sign_in_again(&url)));
    // Garbage.
    assert_eq!(try_cookie("garbage".into(), url.clone()).await.0, 302);

    // Replayed on another host of the same owner (another workspace, another port): not
    // accepted there — sign in again.
    for other in [
        s.url(8080, "alice-other", "/"),
        s.url(3000, "alice-web", "/"),
    ] {
        let (st, loc) = try_cookie(alice_cookie.clone(), other.clone()).await;
        assert_eq!(st, 302, "{other}");
        assert!(loc.unwrap().starts_with(&sign_in_again(&other)), "{other}");
    }

    // The sign-in start refuses return addresses off the workspace domain.
    let bind = "A".repeat(43);
    for ret in [
        "http://evil.example.com/".to_owned(),
        "https://evil.example.com/8080-alice-web.ws.localhost".to_owned(),
        format!("http://{}/", auth_host(s)),
        format!("http://user:pw@{}/", host),
        "javascript:alert(1)".to_owned(),
        format!("https://{host}/"),
        "/relative".to_owned(),
    ] {
        let u = format!(
            "http://{}/oauth/start?return={}&bind={bind}",
            auth_host(s),
            enc(&ret)
        );
        let resp = http.get(&u).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{ret}");
        assert!(resp.headers().get("location").is_none());
    }
    let ok = format!(
        "http://{}/oauth/start?return={}&bind={bind}",
        auth_host(s),
        enc(&url)
    );
    assert_eq!(http.get(&ok).send().await.unwrap().status().as_u16(), 302);

    // Wrong token: 404. Revoked token: refused once the cached answer lapses (≤ 1 s here).
    let (st, b, _) = get_json(url.clone(), Some("wrn_pat_wrongwrongwrong".into())).await;
    assert_eq!((st, &b), (404, &json_404));
    let created = s
        .api(
            reqwest::Method::POST,
            "/api/v1/users/me/tokens",
            &e.alice.token,
            Some(serde_json::json!({"name": "t", "scopes": ["workspace"]})),
        )
        .await
        .unwrap();
    let t = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(get_json(url.clone(), Some(t.clone())).await.0, 200);
    // `warren token create`'s default scope is `api`: such a token is told what it lacks.
    let api_only = s
        .api(
            reqwest::Method::POST,
            "/api/v1/users/me/tokens",
            &e.alice.token,
            Some(serde_json::json!({"name": "api", "scopes": ["api"]})),
        )
        .await
        .unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let (st, b, _) = get_json(url.clone(), Some(api_only)).await;
    assert_eq!(st, 403, "{b}");
    assert_eq!(b["error"]["code"], "insufficient_scope", "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--scope workspace"),
        "{b}"
    );
    let id = created["token"]["id"].as_i64().unwrap();
    s.api(
        reqwest::Method::DELETE,
        &format!("/api/v1/users/me/tokens/{id}"),
        &e.alice.token,
        None,
    )
    .await
    .unwrap();
    wait_for("the revoked token to be refused", 10, || {
        let f = get_json(url.clone(), Some(t.clone()));
        async move { f.await.0 == 404 }
    })
    .await
    .unwrap();

    // Undeclared and internal ports, unknown workspaces and hosts: the same 404.
    for u in [
        s.url(5005, "alice-web", "/"),
        s.url(9999, "alice-web", "/"),
        s.url(8080, "nobody-here", "/"),
        format!("http://elsewhere.example.com:{}/", s.proxy_addr.port()),
        format!("http://ws.localhost:{}/", s.proxy_addr.port()),
    ] {
        let (st, b, _) = get_json(u.clone(), Some(e.alice.token.clone())).await;
        assert_eq!((st, &b), (404, &json_404), "{u}");
    }
    // And for browsers: a session holder on an undeclared port is not sent anywhere.
    let (st, _, _) = get_json(s.url(8080, "alice-web", "/"), None).await;
    assert_eq!(st, 401);
}

/// What the workspace sees: X-Forwarded-*, no proxy cookies, no token, no hop-by-hop.
#[tokio::test]
async fn upstream_sees_forwarded_headers_and_no_proxy_secrets() {
    let e = env().await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    let mut b = browser(s, std::slice::from_ref(&host));
    b.sign_in(&s.url(8080, "alice-web", "/"), "alice", "password-123")
        .await;
    b.set_cookie(&host_only(&host), "app", "kept");
    let seen = b.get(&s.url(8080, "alice-web", "/headers")).await;
    assert_eq!(seen.status, 200, "{seen:?}");
    let h: serde_json::Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(h["cookie"], serde_json::json!(["app=kept"]));
    assert_eq!(h["host"], serde_json::json!([host]));
    assert_eq!(h["x-forwarded-host"], serde_json::json!([host]));
    assert_eq!(h["x-forwarded-proto"], serde_json::json!(["http"]));
    assert_eq!(h["x-forwarded-for"], serde_json::json!(["127.0.0.1"]));

    // With a token: the Authorization header stays with the proxy; Connection-listed
    // headers are dropped.
    let http = s.client_for(std::slice::from_ref(&host));
    let h: serde_json::Value = http
        .get(s.url(8080, "alice-web", "/headers"))
        .bearer_auth(&e.alice.token)
        .header("connection", "x-secret-hop")
        .header("x-secret-hop", "1")
        .header("x-forwarded-for", "10.1.2.3")
        .header("cookie", "warren_session=junk; a=1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(h.get("authorization").is_none(), "{h}");
    assert!(h.get("x-secret-hop").is_none(), "{h}");
    assert_eq!(h["cookie"], serde_json::json!(["a=1"]));
    assert_eq!(
        h["x-forwarded-for"],
        serde_json::json!(["10.1.2.3, 127.0.0.1"])
    );
}

/// WebSocket echo through the proxy with tokio-tungstenite and with websocat.
#[tokio::test]
async fn websocket_echo() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let e = env().await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    let mut req = format!("ws://{host}/ws").into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", e.alice.token).parse().unwrap(),
    );
    let tcp = tokio::net::TcpStream::connect(s.proxy_addr).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    for i in 0..20 {
        ws.send(Message::Text(format!("m{i}").into()))
            .await
            .unwrap();
        let m = ws.next().await.unwrap().unwrap();
        assert_eq!(m.into_text().unwrap().as_str(), format!("echo: m{i}"));
    }
    let big = vec![7u8; 1 << 20];
    ws.send(Message::Binary(big.clone().into())).await.unwrap();
    let m = ws.next().await.unwrap().unwrap();
    assert_eq!(m.into_data().as_ref(), big.as_slice());
    ws.close(None).await.unwrap();

    // Without credentials the upgrade is refused, not passed on.
    let req = format!("ws://{host}/ws").into_client_request().unwrap();
    let tcp = tokio::net::TcpStream::connect(s.proxy_addr).await.unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 401),
        other => panic!("expected 401, got {other:?}"),
    }

    if !have("websocat") {
        return;
    }
    let mut child = tokio::process::Command::new("websocat")
        .args([
            "-t",
            "--no-close",
            "-H",
            &format!("Authorization: Bearer {}", e.alice.token),
            &format!("--ws-c-uri=ws://{host}/ws"),
            "-",
            &format!("ws-c:tcp:{}", s.proxy_addr),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for word in ["hello", "websocat"] {
        stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("websocat answered")
            .unwrap()
            .unwrap();
        assert_eq!(line, format!("echo: {word}"));
    }
    drop(stdin);
    let _ = child.kill().await;
}

/// The editor's WebSockets (a window holds several) make one editor session in the audit
/// log, opened and closed, by whom, from where and how long; another port's do not.
#[tokio::test]
async fn the_editors_websockets_are_one_audited_editor_session() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    use warren_types::config::DEFAULT_EDITOR_PORT;
    let e = env().await;
    let s = &e.stack;
    s.set_endpoint(&e.ws, DEFAULT_EDITOR_PORT, e.up.addr);
    let connect = |port: u16| {
        let mut req = format!("ws://{}/ws", s.host(port, "alice-web"))
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", e.alice.token).parse().unwrap(),
        );
        async move {
            let tcp = tokio::net::TcpStream::connect(s.proxy_addr).await.unwrap();
            let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
            assert_eq!(resp.status().as_u16(), 101);
            ws.send(Message::Text("hi".into())).await.unwrap();
            let m = ws.next().await.unwrap().unwrap();
            assert_eq!(m.into_text().unwrap().as_str(), "echo: hi");
            ws
        }
    };
    let first = connect(DEFAULT_EDITOR_PORT).await;
    let second = connect(DEFAULT_EDITOR_PORT).await;
    let app = connect(8080).await;
    // Each closed, and its connection with it.
    for mut ws in [first, second, app] {
        ws.close(None).await.unwrap();
        while ws.next().await.is_some() {}
    }

    let http = reqwest::Client::new();
    let url = format!(
        "{}/api/v1/audit?action=editor.*&target=alice-web",
        s.api_url
    );
    let entries = || async {
        let page: serde_json::Value = http
            .get(&url)
            .bearer_auth(&s.admin.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        page["items"].as_array().cloned().unwrap_or_default()
    };
    wait_for("the editor session's end in the audit log", 30, || async {
        entries()
            .await
            .iter()
            .any(|en| en["action"] == "editor.close")
    })
    .await
    .unwrap();
    let entries = entries().await;
    let actions: Vec<&str> = entries
        .iter()
        .map(|en| en["action"].as_str().unwrap())
        .collect();
    // Newest first: one session, not one per WebSocket, and none for port 8080.
    assert_eq!(actions, ["editor.close", "editor.open"], "{entries:#?}");
    for en in &entries {
        assert_eq!(en["actor"], "alice", "{en}");
        assert_eq!(en["source"], "127.0.0.1", "{en}");
        assert_eq!(en["channel"], "proxy", "{en}");
    }
    assert!(
        entries[0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("lasted "),
        "{entries:#?}"
    );
}

/// HTTP/2 (prior knowledge, as curl does it) and a large streamed upload both ways.
#[tokio::test]
async fn http2_and_large_streamed_upload() {
    let e = env().await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    // ~50 MB, produced chunk by chunk (never whole in memory on the client).
    let chunk = bytes::Bytes::from(vec![0x5au8; 1 << 20]);
    let mut expected = sha2::Sha256::new();
    use sha2::Digest;
    for _ in 0..50 {
        expected.update(&chunk);
    }
    let want = format!("{} {}", 50u64 << 20, hex(&expected.finalize()));
    // HTTP/1.1 (chunked).
    let http = s.client_for(std::slice::from_ref(&host));
    let c = chunk.clone();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(
        (0..50).map(move |_| Ok::<_, std::io::Error>(c.clone())),
    ));
    let resp = http
        .post(s.url(8080, "alice-web", "/upload"))
        .bearer_auth(&e.alice.token)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.text().await.unwrap(), want);
    // HTTP/2 with prior knowledge (h2c), the body as a stream of DATA frames.
    let tcp = tokio::net::TcpStream::connect(s.proxy_addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let c = chunk.clone();
    let body = http_body_util::StreamBody::new(futures::stream::iter(
        (0..50)
            .map(move |_| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(c.clone()))),
    ));
    let req = http::Request::post(s.url(8080, "alice-web", "/upload"))
        .header("authorization", format!("Bearer {}", e.alice.token))
        .body(body)
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status().as_u16(), 200);
    use http_body_util::BodyExt;
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(String::from_utf8(got.to_vec()).unwrap(), want);

    if !have("curl") {
        return;
    }
    let port = s.proxy_addr.port();
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "-H"])
        .arg(format!("Authorization: Bearer {}", e.alice.token))
        .args([
            "--resolve",
            &format!("8080-alice-web.ws.localhost:{port}:127.0.0.1"),
        ])
        .args(["-w", "\n%{http_version} %{http_code}"])
        .arg(s.url(8080, "alice-web", "/"))
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "hello from alice-web\n2 200"
    );
}

/// A stopped workspace: a 503 page with a start button that works (and refuses forgeries).
#[tokio::test]
async fn stopped_workspace_page_and_start_button() {
    // A running answer is reused for the cache lifetime; 1 s keeps the wait short.
    let e = env_with(StackOptions {
        ssh: false,
        authorization_cache_secs: 1,
        ..StackOptions::default()
    })
    .await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    let url = s.url(8080, "alice-web", "/");
    let mut b = browser(s, std::slice::from_ref(&host));
    b.sign_in(&url, "alice", "password-123").await;
    s.set_desired(&e.alice, "alice-web", "Stopped")
        .await
        .unwrap();
    s.wait_state(&e.alice, "alice-web", "Stopped")
        .await
        .unwrap();
    let mut page = b.get(&url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while page.status == 200 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        page = b.get(&url).await;
    }
    assert_eq!(page.status, 503, "{page:?}");
    assert!(
        page.body.contains("Workspace alice-web is not running"),
        "{}",
        page.body
    );
    assert!(page
        .body
        .contains("<form method=\"post\" action=\"/.warren/start\">"));
    let form = page.hidden();
    assert_eq!(form.len(), 1);
    assert_eq!(form[0].0, "csrf");
    // API clients get JSON.
    let http = s.client_for(std::slice::from_ref(&host));
    let resp = http
        .get(&url)
        .bearer_auth(&e.alice.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let j: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(j["error"]["code"], "workspace_not_running");

    let start = s.url(8080, "alice-web", "/.warren/start");
    // Forged: no token, wrong token, cross-site origin.
    type Form = Vec<(String, String)>;
    let bad: [(Form, Option<&str>); 3] = [
        (vec![], None),
        (vec![("csrf".into(), "x".repeat(43))], None),
        (form.clone(), Some("http://evil.example.com")),
    ];
    for (f, origin) in bad {
        let mut req = b.http.post(&start).form(&f);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let r = b.once(req, &start).await;
        assert_eq!(r.status, 403, "{f:?} {origin:?}");
    }
    assert_eq!(
        s.api(
            reqwest::Method::GET,
            "/api/v1/workspaces/alice-web",
            &e.alice.token,
            None
        )
        .await
        .unwrap()["desired_state"],
        "Stopped"
    );
    // The real button, posted from the page's own origin.
    let origin = format!("http://{host}");
    let r = b
        .once(
            b.http.post(&start).header("origin", &origin).form(&form),
            &start,
        )
        .await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some(url.as_str())));
    s.wait_state(&e.alice, "alice-web", "Running")
        .await
        .unwrap();
    let p = b.get(&url).await;
    assert_eq!((p.status, p.body.as_str()), (200, "hello from alice-web"));
}

/// An unreachable endpoint (nothing listening) is a page that says so, not a bare error.
#[tokio::test]
async fn unreachable_endpoint_is_a_502_page() {
    let e = env().await;
    let s = &e.stack;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    s.set_endpoint(&e.ws, 3000, dead);
    let host = s.host(3000, "alice-web");
    let http = s.client_for(std::slice::from_ref(&host));
    let resp = http
        .get(s.url(3000, "alice-web", "/"))
        .bearer_auth(&e.alice.token)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 502);
    let body = resp.text().await.unwrap();
    assert!(
        body.contains("Could not reach port 3000 of workspace alice-web"),
        "{body}"
    );
}

/// Rotating the cookie key (an admin, through the server) while two replicas serve signs
/// nobody out: both learn the new key before it signs, the previous one still verifies on
/// both, and a generation the server no longer keeps verifies on neither.
#[tokio::test]
async fn key_rotation_keeps_sessions_signed_with_the_previous_key() {
    // Two replicas: each learns the rotation from the server.
    let e = env_with(StackOptions {
        ssh: false,
        proxies: 2,
        ..StackOptions::default()
    })
    .await;
    let s = &e.stack;
    let steer = s.proxy_balancers.clone().unwrap().0;
    let host = s.host(8080, "alice-web");
    let url = s.url(8080, "alice-web", "/");
    let mut b = browser(s, std::slice::from_ref(&host));
    b.sign_in(&url, "alice", "password-123").await;
    let old = b.cookie(&host_only(&host), "warren_session").unwrap();
    let old_kid = jwt_kid(&old);

    // Only an admin rotates.
    const ROTATE: &str = "/api/v1/proxy/cookie-keys/rotate";
    let post = reqwest::Method::POST;
    let refused = s.api(post.clone(), ROTATE, &e.alice.token, None).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("403")),
        "{refused:?}"
    );
    let rotated = s
        .api(post.clone(), ROTATE, &s.admin.token, None)
        .await
        .unwrap();
    assert_eq!(rotated["generation"], 2, "{rotated}");
    let signing_from = rotated["signing_from"].as_i64().unwrap();
    assert!(signing_from > now(), "published before it signs: {rotated}");
    let keys = cookie_keys(s).await;
    assert_eq!(keys.len(), 2);
    let new_key = keys[1].secret.clone();

    // A new connection per request, through the replica the balancer is pointed at.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .resolve(&host_only(&host), s.proxy_addr)
        .build()
        .unwrap();
    let on = |replica: usize, cookie: String| {
        let http = http.clone();
        let url = url.clone();
        let steer = steer.clone();
        async move {
            steer.prefer(Some(replica));
            http.get(&url)
                .header("accept", "text/html")
                .header("cookie", format!("warren_session={cookie}"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let status = |cookie: String| {
        let on = &on;
        async move { (on(0, cookie.clone()).await, on(1, cookie).await) }
    };
    // A cookie signed with the new key is accepted once the proxy polled, before it signs.
    let claims = serde_json::json!({"aud": "warren-session", "sub": e.alice.id, "ws": e.ws.id,
        "host": host_only(&host), "iat": now(), "exp": now() + 600});
    let new_key_cookie = forge_session(s, claims, Some(&new_key)).await;
    wait_for("both replicas to learn the published key", 15, || {
        let f = status(new_key_cookie.clone());
        async move { f.await == (200, 200) }
    })
    .await
    .unwrap();
    assert_eq!(
        status(old.clone()).await,
        (200, 200),
        "the previous key still verifies"
    );

    // From `signing_from`, sign-ins get cookies signed with the new key.
    steer.prefer(None);
    wait_for("a sign-in signed with the new key", 40, || {
        let mut b2 = browser(s, std::slice::from_ref(&host));
        let (url, host) = (url.clone(), host.clone());
        let old_kid = old_kid.clone();
        async move {
            assert_eq!(b2.sign_in(&url, "alice", "password-123").await.status, 200);
            let c = b2.cookie(&host_only(&host), "warren_session").unwrap();
            jwt_kid(&c) != old_kid
        }
    })
    .await
    .unwrap();
    assert_eq!(
        status(old.clone()).await,
        (200, 200),
        "the previous key still verifies"
    );

    // Two more rotations: the server keeps three generations, so the first is gone and its
    // cookies are refused (a browser is sent to sign in again).
    for _ in 0..2 {
        s.api(post.clone(), ROTATE, &s.admin.token, None)
            .await
            .unwrap();
    }
    wait_for("the first generation to be forgotten", 15, || {
        let f = status(old.clone());
        async move { f.await == (302, 302) }
    })
    .await
    .unwrap();
    assert_eq!(status(new_key_cookie).await, (200, 200));
}

/// TLS on the proxy's listener (a self-signed wildcard certificate made with openssl):
/// HTTP/2 by ALPN with curl, and cookies become `Secure`.
#[tokio::test]
async fn tls_with_alpn_http2_and_secure_cookies() {
    if !have("openssl") || !have("curl") {
        return;
    }
    let e = env().await;
    let s = &e.stack;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    output_ok(
        std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=ws.localhost",
            ])
            .args(["-addext", "subjectAltName=DNS:*.ws.localhost"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = warren_proxy::ProxyConfig {
        public_scheme: "https".into(),
        public_port: Some(port),
        tls_cert_file: Some(cert.clone()),
        tls_key_file: Some(key),
        ..s.another_proxy(dir.path().join("state")).unwrap()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let _guard = stop.clone().drop_guard();
    tokio::spawn(warren_proxy::run(
        config,
        warren_proxy::ProxyListeners {
            http: listener,
            ssh: None,
            metrics: None,
        },
        stop,
    ));
    let curl = |extra: &[&str]| {
        let mut c = tokio::process::Command::new("curl");
        c.args(["-sS", "--cacert"])
            .arg(&cert)
            .args([
                "--resolve",
                &format!("8080-alice-web.ws.localhost:{port}:127.0.0.1"),
            ])
            .args(extra)
            .kill_on_drop(true);
        c
    };
    let url = format!("https://8080-alice-web.ws.localhost:{port}/");
    let auth = format!("Authorization: Bearer {}", e.alice.token);
    let out = curl(&[
        "--http2",
        "-H",
        &auth,
        "-w",
        "\n%{http_version} %{http_code}",
        &url,
    ])
    .output()
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "hello from alice-web\n2 200"
    );
    let out = curl(&[
        "--http1.1",
        "-H",
        &auth,
        "-w",
        "\n%{http_version} %{http_code}",
        &url,
    ])
    .output()
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "hello from alice-web\n1.1 200"
    );
    // An anonymous browser gets a Secure bind cookie and an https sign-in address.
    let out = curl(&[
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-H",
        "Accept: text/html",
        &url,
    ])
    .output()
    .await
    .unwrap();
    let head = String::from_utf8(out.stdout).unwrap();
    assert!(head.contains("; HttpOnly; SameSite=Lax; Secure"), "{head}");
    // Under https the proxy's cookies carry `__Host-`: no other host can set or shadow them.
    assert!(head.contains("set-cookie: __Host-warren_bind="), "{head}");
    assert!(
        head.contains(&format!("location: https://auth.ws.localhost:{port}/oauth/start?return=https%3A%2F%2F8080-alice-web")),
        "{head}"
    );
}

/// An endpoint that drops every connection right after answering (without saying so, as
/// dev servers with short keep-alive timeouts do): every request still gets its answer.
#[tokio::test]
async fn endpoint_dropping_kept_connections_is_transparent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let e = env().await;
    let s = &e.stack;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = 0;
                while !buf[..seen].windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf[seen..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen += n,
                    }
                }
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            });
        }
    });
    s.set_endpoint(&e.ws, 3000, addr);
    let host = s.host(3000, "alice-web");
    let http = s.client_for(std::slice::from_ref(&host));
    for i in 0..30 {
        let resp = http
            .get(s.url(3000, "alice-web", "/"))
            .bearer_auth(&e.alice.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "request {i}");
        assert_eq!(resp.text().await.unwrap(), "ok");
    }
}

/// Requests one after another reuse one kept connection to the endpoint, whether answers
/// carry a length or stream in chunks; an answer the client abandons half-way costs that
/// connection (it is mid-message), and the next request opens a fresh one and works.
#[tokio::test]
async fn kept_connections_are_reused_after_complete_answers() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let e = env().await;
    let s = &e.stack;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let svc = hyper::service::service_fn(
                |req: hyper::Request<hyper::body::Incoming>| async move {
                    let body = match req.uri().path() {
                        // Streamed in chunks, no length.
                        "/chunked" => {
                            let chunks = (0..8).map(|i| {
                                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                    bytes::Bytes::from(format!("part{i};")),
                                ))
                            });
                            http_body_util::BodyExt::boxed(http_body_util::StreamBody::new(
                                futures::stream::iter(chunks),
                            ))
                        }
                        // Large enough that a client reading only the head leaves it unfinished.
                        "/large" => http_body_util::BodyExt::boxed(http_body_util::Full::new(
                            bytes::Bytes::from(vec![b'x'; 8 << 20]),
                        )),
                        _ => http_body_util::BodyExt::boxed(http_body_util::Full::new(
                            bytes::Bytes::from_static(b"ok"),
                        )),
                    };
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
                },
            );
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc),
            );
        }
    });
    s.set_endpoint(&e.ws, 3000, addr);
    let host = s.host(3000, "alice-web");
    let http = s.client_for(std::slice::from_ref(&host));
    let get = |path: &'static str| {
        http.get(s.url(3000, "alice-web", path))
            .bearer_auth(&e.alice.token)
            .send()
    };
    let streamed: String = (0..8).map(|i| format!("part{i};")).collect();
    for i in 0..10 {
        let r = get("/").await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "request {i}");
        assert_eq!(r.text().await.unwrap(), "ok");
        let r = get("/chunked").await.unwrap();
        assert_eq!(r.text().await.unwrap(), streamed, "request {i}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one kept connection");

    // Abandon a large answer after its head.
    let r = get("/large").await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    drop(r);
    let r = get("/").await.unwrap();
    assert_eq!(r.text().await.unwrap(), "ok");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the abandoned connection is not reused"
    );
}

/// A request of an attack test: method, a name for it, extra headers.
type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>);

/// Sends `method url` as the browser `b` (with its cookies), plus `headers`.
async fn send_as(b: &mut Browser, method: &str, url: &str, headers: &[(&str, &str)]) -> Seen {
    let mut req = b
        .http
        .request(method.parse().unwrap(), url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("x=1");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    b.once(req, url).await
}

/// Issue 37: every workspace host is the same site, so a page of another workspace (or any
/// site) must not post, fetch with credentials or open WebSockets to a victim's workspace
/// with the victim's session cookie — refused with 403 before the workspace sees anything;
/// its own pages, other ports of the same workspace, navigations and tokens are unaffected.
#[tokio::test]
async fn cross_site_requests_with_the_session_cookie_never_reach_the_workspace() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let e = env().await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    let mut b = browser(s, std::slice::from_ref(&host));
    let p = b
        .sign_in(&s.url(8080, "alice-web", "/"), "alice", "password-123")
        .await;
    assert_eq!(p.status, 200, "{p:?}");
    let own = format!("http://{host}");
    let sibling = format!("http://{}", s.host(3000, "alice-web"));
    let other = format!("http://{}", s.host(8080, "mallory-site"));
    let terminal = format!(
        "http://terminal-alice-web.ws.localhost:{}",
        s.proxy_addr.port()
    );
    let url = |case: &str| s.url(8080, "alice-web", &format!("/headers?case={case}"));

    let refused: [Case; 7] = [
        ("POST", "same-site", vec![("sec-fetch-site", "same-site")]),
        (
            "POST",
            "same-site-other",
            vec![("sec-fetch-site", "same-site"), ("origin", &other)],
        ),
        ("POST", "origin-other", vec![("origin", &other)]),
        ("POST", "origin-null", vec![("origin", "null")]),
        (
            "PUT",
            "cross-site",
            vec![
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://evil.example.com"),
            ],
        ),
        ("DELETE", "terminal-origin", vec![("origin", &terminal)]),
        // A GET that upgrades is no navigation.
        (
            "GET",
            "get-upgrade",
            vec![
                ("sec-fetch-site", "same-site"),
                ("origin", &other),
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
            ],
        ),
    ];
    for (method, case, headers) in &refused {
        let r = send_as(&mut b, method, &url(case), headers).await;
        assert_eq!(r.status, 403, "{case}: {r:?}");
        assert!(
            r.body.contains("cross-site request refused"),
            "{case}: {}",
            r.body
        );
    }

    let allowed: [Case; 5] = [
        (
            "POST",
            "same-origin",
            vec![("sec-fetch-site", "same-origin"), ("origin", &own)],
        ),
        ("POST", "own-origin", vec![("origin", &own)]),
        // Another port of the same workspace: the same tenant's page.
        (
            "POST",
            "sibling",
            vec![("sec-fetch-site", "same-site"), ("origin", &sibling)],
        ),
        // Neither header: not a browser.
        ("POST", "no-headers", vec![]),
        // A navigation from another site changes nothing.
        ("GET", "navigation", vec![("sec-fetch-site", "cross-site")]),
    ];
    for (method, case, headers) in &allowed {
        let r = send_as(&mut b, method, &url(case), headers).await;
        assert_eq!(r.status, 200, "{case}: {r:?}");
    }

    // A token is not ambient: whatever the page headers say, it is the client's own choice.
    let http = s.client_for(std::slice::from_ref(&host));
    let r = http
        .post(url("token"))
        .bearer_auth(&e.alice.token)
        .header("sec-fetch-site", "cross-site")
        .header("origin", &other)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // WebSockets with the cookie: only from the workspace's own origin.
    let cookie = format!(
        "warren_session={}",
        b.cookie(&host_only(&host), "warren_session").unwrap()
    );
    let ws_request = |case: &str, extra: &[(&'static str, &str)]| {
        let mut req = format!("ws://{host}/ws?case={case}")
            .into_client_request()
            .unwrap();
        req.headers_mut().insert("cookie", cookie.parse().unwrap());
        for (k, v) in extra {
            req.headers_mut().insert(*k, v.parse().unwrap());
        }
        req
    };
    for (case, extra) in [
        ("ws-origin", vec![("origin", other.as_str())]),
        (
            "ws-site",
            vec![
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://evil.example.com"),
            ],
        ),
    ] {
        let tcp = tokio::net::TcpStream::connect(s.proxy_addr).await.unwrap();
        match tokio_tungstenite::client_async(ws_request(case, &extra), tcp).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
                assert_eq!(r.status().as_u16(), 403, "{case}")
            }
            other => panic!("{case}: expected 403, got {other:?}"),
        }
    }
    let tcp = tokio::net::TcpStream::connect(s.proxy_addr).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(
        ws_request(
            "ws-own",
            &[("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
        ),
        tcp,
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    ws.send(Message::Text("hi".into())).await.unwrap();
    let m = ws.next().await.unwrap().unwrap();
    assert_eq!(m.into_text().unwrap().as_str(), "echo: hi");
    ws.close(None).await.unwrap();

    // The workspace saw exactly the allowed requests, never a refused one.
    let seen = e.up.seen();
    for (method, case, _) in &refused {
        assert!(
            !seen.iter().any(|r| r.ends_with(&format!("case={case}"))),
            "{method} {case} reached the workspace: {seen:#?}"
        );
    }
    for case in ["ws-origin", "ws-site"] {
        assert!(
            !seen.iter().any(|r| r.ends_with(&format!("case={case}"))),
            "{case} reached the workspace: {seen:#?}"
        );
    }
    for want in [
        "POST /headers?case=same-origin",
        "POST /headers?case=own-origin",
        "POST /headers?case=sibling",
        "POST /headers?case=no-headers",
        "GET /headers?case=navigation",
        "POST /headers?case=token",
        "GET /ws?case=ws-own",
    ] {
        assert!(seen.iter().any(|r| r == want), "{want}: {seen:#?}");
    }
}

/// Issue 37: a workspace's `Set-Cookie` reaches the browser only for its own host and never
/// under one of the proxy's names, and a cookie of the proxy's name planted in front of the
/// real one (by script, or by an older proxy) neither shadows it nor loops its holder
/// through sign-in.
#[tokio::test]
async fn workspaces_cannot_plant_or_shadow_the_proxys_cookies() {
    let e = env().await;
    let s = &e.stack;
    let host = s.host(8080, "alice-web");
    let url = s.url(8080, "alice-web", "/");
    let mut b = browser(s, std::slice::from_ref(&host));
    b.sign_in(&url, "alice", "password-123").await;
    let real = b.cookie(&host_only(&host), "warren_session").unwrap();

    let toss = b.get(&s.url(8080, "alice-web", "/toss")).await;
    assert_eq!((toss.status, toss.body.as_str()), (200, "tossed"));
    assert_eq!(
        toss.set_cookies,
        ["other=1; Path=/", "app=2; Path=/; HttpOnly"],
        "no cookie of the proxy's names, no Domain"
    );
    // The same through a token.
    let http = s.client_for(std::slice::from_ref(&host));
    let resp = http
        .get(s.url(8080, "alice-web", "/toss"))
        .bearer_auth(&e.alice.token)
        .send()
        .await
        .unwrap();
    let set: Vec<&str> = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(set, ["other=1; Path=/", "app=2; Path=/; HttpOnly"]);

    // Planted cookies first, the real one last: still signed in.
    let elsewhere = forge_session(
        s,
        serde_json::json!({"aud": "warren-session", "sub": e.alice.id, "ws": e.ws.id,
            "host": host_only(&s.host(3000, "alice-web")), "iat": now(), "exp": now() + 600}),
        None,
    )
    .await;
    for planted in ["garbage", elsewhere.as_str()] {
        let resp = http
            .get(&url)
            .header("accept", "text/html")
            .header(
                "cookie",
                format!("warren_session={planted}; app=1; warren_session={real}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "planted {planted:.12}…");
        assert_eq!(resp.text().await.unwrap(), "hello from alice-web");
    }
}
