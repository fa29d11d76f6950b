//! The web UI over HTTP, without rendering, on SQLite and (when configured) PostgreSQL:
//! the session cookie and sign-out, CSRF on forms, escaping, 404 for what a user may not
//! see, the sign-in throttle, security headers, field errors, and the live list's events.
//! The whole journey in a real browser is `crates/warren/tests/ui_e2e.rs`.

use crate::common;

use common::browser::{Browser, Page};
use common::*;
use reqwest::header::CONTENT_SECURITY_POLICY;
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

/// Signs `user` in through the UI's form; returns the answer to the form's POST.
async fn sign_in(b: &mut Browser, user: &str, password: &str) -> Page {
    let login = b.get("/login?next=%2F").await;
    assert_eq!(login.status, 200, "{}", login.body);
    let csrf = login
        .hidden()
        .into_iter()
        .find(|(k, _)| k == "csrf_token")
        .expect("csrf field")
        .1;
    b.post_form(
        "/login",
        &[
            ("username".into(), user.into()),
            ("password".into(), password.into()),
            ("csrf_token".into(), csrf),
            ("next".into(), "/".into()),
        ],
    )
    .await
}

/// A form's fields as `post_form` takes them, with the CSRF token `csrf` added.
pub(crate) fn form_with(csrf: &str, pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.push(("csrf_token".into(), csrf.to_owned()));
    v
}

/// The CSRF token of the forms on `page`.
pub(crate) fn csrf_of(page: &Page) -> String {
    page.hidden()
        .into_iter()
        .find(|(k, _)| k == "csrf_token")
        .expect("a form with a CSRF token")
        .1
}

/// Signs the admin in through the UI's form, sending `proto` as `X-Forwarded-Proto` with
/// both requests, from an empty cookie jar; returns the session's `Set-Cookie`.
async fn session_cookie_with(b: &mut Browser, password: &str, proto: Option<&str>) -> String {
    b.jar.clear();
    let with = |r: reqwest::RequestBuilder| match proto {
        Some(p) => r.header("x-forwarded-proto", p),
        None => r,
    };
    let login = b.send(with(b.http.get(format!("{}/login", b.base)))).await;
    assert_eq!(login.status, 200, "{}", login.body);
    let csrf = csrf_of(&login);
    let form = [
        ("username", "admin"),
        ("password", password),
        ("csrf_token", &csrf),
    ];
    let p = b
        .send(with(b.http.post(format!("{}/login", b.base)).form(&form)))
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    p.set_cookies
        .into_iter()
        .find(|c| c.starts_with("warren_session="))
        .expect("a session cookie")
}

/// Issue 37: `Secure` on the session cookie follows what the server knows — its own TLS
/// listener, or what a trusted reverse proxy says in `X-Forwarded-Proto` — never a header any
/// client can write: neither turned off on TLS (the cookie would then also travel in clear)
/// nor on over plain HTTP (browsers would drop it: a sign-in loop).
#[tokio::test]
async fn the_session_cookie_is_secure_by_what_the_server_knows() {
    use warren_server::{Server, ServerConfig};
    let secure = |c: &str| c.contains("; Secure");

    // Plain HTTP, no trusted proxy: the client's header is ignored either way.
    let s = TestServer::start(&DbChoice::Sqlite).await;
    let mut b = Browser::new(&s.base);
    for proto in [Some("https"), None] {
        let c = session_cookie_with(&mut b, &s.admin_password, proto).await;
        assert!(!secure(&c), "{proto:?}: {c}");
    }
    s.stop().await;

    // Plain HTTP behind a trusted proxy (this test's peer, 127.0.0.1): its word counts.
    let s = TestServer::start_with(&DbChoice::Sqlite, |c| {
        c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await;
    let mut b = Browser::new(&s.base);
    for (proto, want) in [
        (Some("https"), true),
        (Some("http"), false),
        (None, false),
        // A proxy that appends: its own (right-most) entry counts, not the client's.
        (Some("http, https"), true),
        (Some("https, http"), false),
    ] {
        let c = session_cookie_with(&mut b, &s.admin_password, proto).await;
        assert_eq!(secure(&c), want, "{proto:?}: {c}");
    }
    s.stop().await;

    // The server's own TLS listener: Secure without any header, and a client saying
    // `http` cannot turn it off.
    let db = TestDb::new(&DbChoice::Sqlite).await;
    let pki = tempfile::tempdir().unwrap();
    let ca = warren_testkit::tls::TestCa::new(pki.path(), "issue-37 CA").unwrap();
    let cert = ca
        .issue(&pki.path().join("server"), &["localhost", "127.0.0.1"])
        .unwrap();
    let mut config = ServerConfig::new(db.dir.path().join("home"));
    config.database_url = Some(db.url.clone());
    config.relay_secret = Some(RELAY_SECRET.into());
    config.tls_cert_file = Some(cert.cert_file.clone());
    config.tls_key_file = Some(cert.key_file.clone());
    let server = Server::prepare(config).await.expect("prepare");
    let password = server.bootstrap_admin().expect("admin").password.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(server.serve(listener, stop.clone()));
    let ca_pem = std::fs::read(&ca.ca_file).unwrap();
    let mut b = Browser {
        base,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
            .build()
            .unwrap(),
        jar: Default::default(),
    };
    for proto in [None, Some("http")] {
        let c = session_cookie_with(&mut b, &password, proto).await;
        assert!(secure(&c), "{proto:?}: {c}");
    }
    stop.cancel();
    task.await.unwrap().unwrap();
}

pub(crate) async fn signed_in(s: &TestServer, user: &str, password: &str) -> Browser {
    let mut b = Browser::new(&s.base);
    let p = sign_in(&mut b, user, password).await;
    assert_eq!(p.status, 303, "[{}] {}", s.label, p.body);
    b
}

const DEVFILE: &str = "schemaVersion: 2.2.0\ncomponents:\n  - name: dev\n    container:\n      image: busybox\n      memoryLimit: 256Mi\n";

#[tokio::test]
async fn session_cookie_sign_out_and_security_headers() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let mut b = Browser::new(&s.base);
        // Not signed in: to the sign-in page, remembering where.
        let p = b.get("/workspaces/new").await;
        assert_eq!(p.status, 303, "[{l}]");
        assert_eq!(
            p.location.as_deref(),
            Some("/login?next=%2Fworkspaces%2Fnew")
        );

        let p = sign_in(&mut b, "admin", "wrong-password").await;
        assert_eq!(p.status, 401, "[{l}]");
        assert!(
            p.body.contains("Invalid username or password."),
            "[{l}] {}",
            p.body
        );
        let p = sign_in(&mut b, "admin", &s.admin_password).await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        assert_eq!(p.location.as_deref(), Some("/"));
        let cookie = p
            .set_cookies
            .iter()
            .find(|c| c.starts_with("warren_session="))
            .expect("session cookie");
        for attr in ["HttpOnly", "SameSite=Lax", "Path=/;"] {
            assert!(cookie.contains(attr), "[{l}] {cookie}");
        }
        assert!(!cookie.contains("Secure"), "[{l}] plain HTTP: {cookie}");

        let home = b.get("/").await;
        assert_eq!(home.status, 200, "[{l}]");
        let csp = home.headers[CONTENT_SECURITY_POLICY].to_str().expect("csp");
        for part in [
            "default-src 'none'",
            "script-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(part), "[{l}] {csp}");
        }
        assert!(!csp.contains("unsafe"), "[{l}] {csp}");
        assert_eq!(home.headers["x-frame-options"], "DENY");
        assert!(home.body.contains("No workspaces yet"), "[{l}]");
        assert!(
            !home.body.contains("<script>") && !home.body.contains(" style=\""),
            "[{l}] no inline script or style"
        );

        // The assets are served from the binary, cached for good under their hash.
        for (asset, kind) in [
            ("warren.css", "text/css"),
            ("htmx.min.js", "text/javascript"),
            ("sse.min.js", "text/javascript"),
            ("warren.js", "text/javascript"),
        ] {
            let href = home
                .body
                .split(&format!("/assets/{asset}?v="))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_else(|| panic!("[{l}] page links {asset}"));
            let a = b.get(&format!("/assets/{asset}?v={href}")).await;
            assert_eq!(a.status, 200, "[{l}] {asset}");
            assert!(a.headers["content-type"]
                .to_str()
                .unwrap_or("")
                .starts_with(kind));
            assert!(a.headers["cache-control"]
                .to_str()
                .unwrap_or("")
                .contains("immutable"));
        }

        // Plain HTTP from a client that is no trusted proxy: its `X-Forwarded-Proto` is not
        // believed (see `the_session_cookie_is_secure_by_what_the_server_knows`).
        let mut direct = Browser::new(&s.base);
        let c = session_cookie_with(&mut direct, &s.admin_password, Some("https")).await;
        assert!(!c.contains("Secure"), "[{l}] {c}");

        // Sign-out ends the session on the server, not only in this browser.
        let old = b.jar.get("warren_session").cloned().expect("session");
        let p = b
            .post_form("/logout", &[("csrf_token".into(), csrf_of(&home))])
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        assert_eq!(p.location.as_deref(), Some("/login"));
        assert!(
            !b.jar.contains_key("warren_session"),
            "[{l}] cookie cleared"
        );
        b.jar.insert("warren_session".into(), old);
        let p = b.get("/").await;
        assert_eq!(p.status, 303, "[{l}] the old cookie no longer works");
        s.stop().await;
    }
}

#[tokio::test]
async fn forms_need_their_own_csrf_token() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        s.user("bob", &["api"]).await;
        let mut admin = signed_in(&s, "admin", &s.admin_password).await;
        let mut bob = signed_in(&s, "bob", "password-123").await;
        let bobs = csrf_of(&bob.get("/").await);
        let form = |csrf: Option<&str>| {
            let mut f = vec![
                ("name".to_owned(), "csrf-test".to_owned()),
                ("devfile".to_owned(), DEVFILE.to_owned()),
            ];
            if let Some(c) = csrf {
                f.push(("csrf_token".into(), c.into()));
            }
            f
        };
        for (what, csrf) in [
            ("none", None),
            ("forged", Some("forged")),
            ("another session's", Some(bobs.as_str())),
        ] {
            let p = admin.post_form("/workspaces/new", &form(csrf)).await;
            assert_eq!(p.status, 403, "[{l}] {what} token: {}", p.body);
            assert!(p.body.contains("did not come from this site"), "[{l}]");
        }
        let (st, _) = s
            .admin(Method::GET, "/api/v1/workspaces/csrf-test", None)
            .await;
        assert_eq!(st, 404, "[{l}] nothing was created");

        let mine = csrf_of(&admin.get("/workspaces/new").await);
        let p = admin.post_form("/workspaces/new", &form(Some(&mine))).await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        assert_eq!(p.location.as_deref(), Some("/workspaces/csrf-test"));
        // The login form's token is bound to its own pre-login cookie.
        let mut stranger = Browser::new(&s.base);
        let p = stranger
            .post_form(
                "/login",
                &[
                    ("username".into(), "admin".into()),
                    ("password".into(), s.admin_password.clone()),
                    ("csrf_token".into(), mine),
                ],
            )
            .await;
        assert_eq!(p.status, 403, "[{l}]");
        s.stop().await;
    }
}

#[tokio::test]
async fn errors_beside_fields_escaping_and_404_for_others() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        let alice_token = s.user("alice", &["api", "workspace"]).await;
        s.user("bob", &["api"]).await;
        let mut alice = signed_in(&s, "alice", "password-123").await;

        // A bad devfile: 422, the message under the devfile field, the text kept, escaped.
        let csrf = csrf_of(&alice.get("/workspaces/new").await);
        let bad = "schemaVersion: 2.2.0\ncomponents:\n  - name: \"<script>x()</script>\"\n    container:\n      image: busybox\n";
        let p = alice
            .post_form(
                "/workspaces/new",
                &[
                    ("devfile".into(), bad.into()),
                    ("csrf_token".into(), csrf.clone()),
                ],
            )
            .await;
        assert_eq!(p.status, 422, "[{l}] {}", p.body);
        let error = p
            .body
            .split("id=\"devfile-error\"")
            .nth(1)
            .expect("an error beside the devfile");
        assert!(error.contains("components[0].name"), "[{l}] {error}");
        assert!(!p.body.contains("<script>x()"), "[{l}] escaped");
        assert!(p.body.contains("&lt;script&gt;x()&lt;/script&gt;"), "[{l}]");
        // A bad size and a bad variable line land beside their fields too.
        let p = alice
            .post_form(
                "/workspaces/new",
                &[
                    ("memory".into(), "lots".into()),
                    ("devfile".into(), DEVFILE.into()),
                    ("csrf_token".into(), csrf.clone()),
                ],
            )
            .await;
        assert_eq!(p.status, 400, "[{l}] {}", p.body);
        assert!(p.body.contains("id=\"memory-error\""), "[{l}] {}", p.body);
        let p = alice
            .post_form(
                "/workspaces/new",
                &[
                    ("variables".into(), "NO_EQUALS".into()),
                    ("devfile".into(), DEVFILE.into()),
                    ("csrf_token".into(), csrf.clone()),
                ],
            )
            .await;
        assert!(
            p.body.contains("id=\"variables-error\""),
            "[{l}] {}",
            p.body
        );

        // Script in a variable is text on the workspace's page.
        let w = s
            .workspace(
                &alice_token,
                json!({"name": "alices", "devfile": DEVFILE,
                       "variables": [{"key": "X", "value": "<img src=x onerror=alert(1)>"}]}),
            )
            .await;
        assert_eq!(w["name"], "alices");
        let p = alice.get("/workspaces/alices").await;
        assert_eq!(p.status, 200, "[{l}]");
        assert!(
            p.body.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "[{l}]"
        );
        assert!(!p.body.contains("<img src=x"), "[{l}]");
        let list = alice.get("/").await;
        assert!(list.body.contains("alices"), "[{l}]");

        // Bob: not found, everywhere, in pages and forms alike.
        let mut bob = signed_in(&s, "bob", "password-123").await;
        let bobs = csrf_of(&bob.get("/").await);
        for path in [
            "/workspaces/alices",
            "/workspaces/alices/logs",
            "/workspaces/alices/events",
            "/workspaces/alices/confirm/delete",
            "/workspaces/alices/rebuild",
            "/admin",
            "/admin/agents/local",
            "/no-such-page",
        ] {
            let p = bob.get(path).await;
            assert_eq!(p.status, 404, "[{l}] {path}");
        }
        let p = bob.get("/").await;
        assert!(!p.body.contains("alices"), "[{l}] bob's list");
        for path in [
            "/workspaces/alices/action/delete",
            "/workspaces/alices/resize",
            "/workspaces/alices/rebuild",
            "/admin/agents",
        ] {
            let p = bob
                .post_form(
                    path,
                    &[
                        ("csrf_token".into(), bobs.clone()),
                        ("name".into(), "x".into()),
                    ],
                )
                .await;
            assert_eq!(p.status, 404, "[{l}] {path}");
        }
        let (_, w) = s
            .admin(Method::GET, "/api/v1/workspaces/alices", None)
            .await;
        assert_eq!(w["desired_state"], "Running", "[{l}] untouched");

        // Alice stops it through the form; the API sees it.
        let p = alice
            .post_form(
                "/workspaces/alices/action/stop",
                &[("csrf_token".into(), csrf.clone())],
            )
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, w) = s
            .admin(Method::GET, "/api/v1/workspaces/alices", None)
            .await;
        assert_eq!(w["desired_state"], "Stopped", "[{l}]");
        // A browser asking for an unknown page gets a page; an API client its JSON.
        let p = bob
            .send(
                bob.http
                    .get(format!("{}/nowhere", s.base))
                    .header("accept", "text/html"),
            )
            .await;
        assert!(p.body.contains("<h1>Not found</h1>"), "[{l}] {}", p.body);
        let (st, j) = s.call(Method::GET, "/nowhere", None, None).await;
        assert_eq!(
            (st, j["error"]["code"].as_str()),
            (404, Some("not_found")),
            "[{l}]"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn sign_in_is_throttled_like_the_api() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let mut b = Browser::new(&s.base);
        let mut last = None;
        for _ in 0..20 {
            let p = sign_in(&mut b, "admin", "not-the-password").await;
            if p.status == 429 {
                last = Some(p);
                break;
            }
            assert_eq!(p.status, 401, "[{l}]");
        }
        let p = last.unwrap_or_else(|| panic!("[{l}] never throttled"));
        assert!(p.headers.contains_key("retry-after"), "[{l}]");
        assert!(p.body.contains("Too many failed sign-in attempts"), "[{l}]");
        // Throttled even with the right password, as the API's session endpoint.
        let p = sign_in(&mut b, "admin", &s.admin_password).await;
        assert_eq!(p.status, 429, "[{l}]");
        s.stop().await;
    }
}

/// Reads server-sent events until one named `name` whose data contains `needle` arrives.
async fn wait_for_event(resp: &mut reqwest::Response, name: &str, needle: &str) -> String {
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let event = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("");
            let data: Vec<&str> = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                .collect();
            let data = data.join("\n");
            if event == name && data.contains(needle) {
                return data;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {name:?} event with {needle:?}; had {buf:?}"))
            .expect("stream")
            .expect("stream ended");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_list_and_the_page_follow_changes_live() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        let token = s.user("alice", &["api", "workspace"]).await;
        let b = signed_in(&s, "alice", "password-123").await;
        let events = |path: &str| {
            b.http
                .get(format!("{}{path}", s.base))
                .header(reqwest::header::COOKIE, b.cookie_header())
                .send()
        };
        let mut list = events("/events/workspaces").await.expect("events");
        assert_eq!(list.status(), 200, "[{l}]");
        assert!(list.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .starts_with("text/event-stream"));
        // With no digest of what the page showed, the rows come at once (the empty state).
        wait_for_event(&mut list, "rows", "No workspaces yet").await;
        // A workspace created elsewhere appears; a change to it comes as its row alone.
        let w = s
            .workspace(&token, json!({"name": "live-one", "devfile": DEVFILE}))
            .await;
        let id = w["id"].as_i64().expect("id");
        let rows = wait_for_event(&mut list, "rows", "live-one").await;
        assert!(
            rows.contains(&format!("sse-swap=\"ws-{id}\"")),
            "[{l}] {rows}"
        );
        let mut page = events(&format!("/workspaces/live-one/events?v={}", w["version"]))
            .await
            .expect("page events");
        let (st, _) = s
            .put(
                &token,
                "/api/v1/workspaces/live-one/desired_state",
                json!({"desired_state": "Stopped"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}]");
        let row = wait_for_event(&mut list, &format!("ws-{id}"), "Stopped").await;
        assert!(
            row.starts_with("<th scope=\"row\"><a href=\"/workspaces/live-one\">"),
            "[{l}] the row's cells: {row}"
        );
        let live = wait_for_event(&mut page, "live", "Stopped").await;
        assert!(
            live.contains("/action/start"),
            "[{l}] a Start button once stopping: {live}"
        );
        drop(page);
        // An open stream does not hold the server's graceful shutdown up.
        tokio::time::timeout(Duration::from_secs(20), s.stop())
            .await
            .unwrap_or_else(|_| panic!("[{l}] shutdown waited on the live events"));
        drop(list);
    }
}

#[tokio::test]
async fn the_list_shows_a_hundred_a_page() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        let token = s.user("alice", &["api", "workspace"]).await;
        for i in 0..105 {
            s.workspace(
                &token,
                json!({"name": format!("w-{i:03}"), "devfile": DEVFILE}),
            )
            .await;
        }
        let mut b = signed_in(&s, "alice", "password-123").await;
        let first = b.get("/").await;
        assert_eq!(first.body.matches("<tr id=\"ws-").count(), 100, "[{l}]");
        let next = first
            .body
            .split("href=\"/?after=")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("[{l}] a link to the next page"));
        let second = b.get(&format!("/?after={next}")).await;
        assert_eq!(second.status, 200, "[{l}]");
        assert_eq!(second.body.matches("<tr id=\"ws-").count(), 5, "[{l}]");
        assert!(second.body.contains("First page"), "[{l}]");
        assert!(
            !second.body.contains("href=\"/?after="),
            "[{l}] no further page"
        );
        assert!(
            second.body.contains("/events/workspaces?v=")
                && second.body.contains(&format!("&amp;after={next}")),
            "[{l}] the page's live events follow its rows"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn a_user_changes_their_password() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.user("alice", &["api"]).await;
        let mut b = signed_in(&s, "alice", "password-123").await;
        let csrf = csrf_of(&b.get("/account").await);
        let change = |current: &str, new: &str| {
            vec![
                ("current_password".to_owned(), current.to_owned()),
                ("new_password".to_owned(), new.to_owned()),
                ("csrf_token".to_owned(), csrf.clone()),
            ]
        };
        let p = b
            .post_form(
                "/account/password",
                &change("wrong-one-123", "new-password-456"),
            )
            .await;
        assert_eq!(p.status, 400, "[{l}] {}", p.body);
        assert!(p.body.contains("id=\"current_password-error\""), "[{l}]");
        let p = b
            .post_form(
                "/account/password",
                &change("password-123", "new-password-456"),
            )
            .await;
        assert_eq!(p.status, 200, "[{l}] {}", p.body);
        assert!(p.body.contains("Password changed."), "[{l}]");
        let mut again = Browser::new(&s.base);
        assert_eq!(
            sign_in(&mut again, "alice", "new-password-456")
                .await
                .status,
            303,
            "[{l}]"
        );
        s.stop().await;
    }
}

/// Issue 21 in the web UI: a workspace created into a team space from the form, listed with
/// its space for a viewer of that space, who may open its page but not stop it; a space the
/// creator may not use is named beside the field.
#[tokio::test]
async fn spaces_in_the_list_the_page_and_the_form() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        s.user("alice", &["api"]).await;
        s.user("carol", &["api"]).await;
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "acme"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        for (who, role) in [("alice", "developer"), ("carol", "viewer")] {
            let (st, b) = s
                .admin(
                    Method::PUT,
                    &format!("/api/v1/spaces/acme/members/{who}"),
                    Some(json!({"role": role})),
                )
                .await;
            assert_eq!(st, 200, "[{l}] {b}");
        }

        let mut alice = signed_in(&s, "alice", "password-123").await;
        let form = alice.get("/workspaces/new").await;
        assert!(
            form.body.contains(r#"<option value="acme">acme</option>"#)
                && form.body.contains("users/alice (yours)"),
            "[{l}] the spaces alice may create in: {}",
            form.body
        );
        let csrf = csrf_of(&form);
        let post = |space: &'static str, name: &'static str| {
            vec![
                ("name".to_owned(), name.to_owned()),
                ("space".to_owned(), space.to_owned()),
                ("devfile".to_owned(), DEVFILE.to_owned()),
                ("agent".to_owned(), "local".to_owned()),
                ("csrf_token".to_owned(), csrf.clone()),
            ]
        };
        let p = alice
            .post_form("/workspaces/new", &post("nowhere", "lost"))
            .await;
        assert_eq!(p.status, 400, "[{l}] {}", p.body);
        let error = p
            .body
            .split("id=\"space-error\"")
            .nth(1)
            .expect("an error beside the space");
        assert!(error.contains("nowhere"), "[{l}] {error}");
        let p = alice
            .post_form("/workspaces/new", &post("acme", "shared"))
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, w) = s
            .admin(Method::GET, "/api/v1/workspaces/shared", None)
            .await;
        assert_eq!(w["space"], "acme", "[{l}] {w}");

        // Carol, a viewer of acme, sees it with its space and owner, and may not stop it.
        let mut carol = signed_in(&s, "carol", "password-123").await;
        let list = carol.get("/").await;
        assert!(
            list.body.contains(">shared</a>")
                && list.body.contains(r#"<td class="space">acme</td>"#)
                && list.body.contains("<td>alice</td>"),
            "[{l}] {}",
            list.body
        );
        let page = carol.get("/workspaces/shared").await;
        assert_eq!(page.status, 200, "[{l}]");
        assert!(page.body.contains("<dt>Space</dt><dd>acme</dd>"), "[{l}]");
        // Only what a viewer may do is offered: no actions, resize or logs.
        assert!(
            page.body.contains("see it (a viewer of its space)")
                && !page.body.contains("Delete…")
                && !page.body.contains("Stop…")
                && !page.body.contains("/resize")
                && !page.body.contains("/logs"),
            "[{l}] {}",
            page.body
        );
        let alices = alice.get("/workspaces/shared").await;
        assert!(
            alices.body.contains("Stop…") && alices.body.contains("/resize"),
            "[{l}] its owner is offered everything"
        );
        // The form posted anyway (an old tab) is refused, naming what is missing.
        let csrf = csrf_of(&page);
        let p = carol
            .post_form(
                "/workspaces/shared/action/stop",
                &[("csrf_token".into(), csrf)],
            )
            .await;
        assert_eq!(p.status, 403, "[{l}] {}", p.body);
        assert!(
            p.body.contains("developer or owner role"),
            "[{l}] {}",
            p.body
        );
        let (_, w) = s
            .admin(Method::GET, "/api/v1/workspaces/shared", None)
            .await;
        assert_eq!(w["desired_state"], "Running", "[{l}] untouched");
        s.stop().await;
    }
}

/// The rebuild page (issue 41, item 1): a pasted devfile's changes are listed before anything
/// happens, a definition that does not validate is refused on the page with the workspace as
/// it was, and the button rebuilds (restarting a running workspace).
#[tokio::test]
async fn the_rebuild_page_shows_what_changes_then_rebuilds() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        let token = s.user("alice", &["api", "workspace"]).await;
        s.workspace(&token, json!({"name": "rb", "devfile": DEVFILE}))
            .await;
        let mut alice = signed_in(&s, "alice", "password-123").await;
        let page = alice.get("/workspaces/rb").await;
        assert!(
            page.body.contains("/workspaces/rb/rebuild"),
            "[{l}] {}",
            page.body
        );
        let page = alice.get("/workspaces/rb/rebuild").await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(
            page.body.contains("No change to its containers"),
            "[{l}] {}",
            page.body
        );
        let csrf = csrf_of(&page);
        let next = DEVFILE.replace("image: busybox", "image: alpine:3");
        assert_ne!(next, DEVFILE, "the test's devfile names busybox");
        let p = alice
            .post_form(
                "/workspaces/rb/rebuild",
                &[
                    ("devfile".into(), next.clone()),
                    ("csrf_token".into(), csrf.clone()),
                ],
            )
            .await;
        assert_eq!(p.status, 200, "[{l}] {}", p.body);
        assert!(
            p.body.contains("container dev") && p.body.contains("image alpine:3"),
            "[{l}] {}",
            p.body
        );
        let (_, w) = s
            .call(Method::GET, "/api/v1/workspaces/rb", Some(&token), None)
            .await;
        let version = w["version"].clone();
        let bad = "schemaVersion: 2.2.0\ncomponents: 7\n";
        let p = alice
            .post_form(
                "/workspaces/rb/rebuild",
                &[
                    ("devfile".into(), bad.into()),
                    ("apply".into(), "1".into()),
                    ("csrf_token".into(), csrf.clone()),
                ],
            )
            .await;
        assert_eq!(p.status, 422, "[{l}] {}", p.body);
        assert!(p.body.contains("Not rebuilt: "), "[{l}] {}", p.body);
        let (_, w) = s
            .call(Method::GET, "/api/v1/workspaces/rb", Some(&token), None)
            .await;
        assert_eq!(w["version"], version, "[{l}] untouched: {w}");
        let p = alice
            .post_form(
                "/workspaces/rb/rebuild",
                &[
                    ("devfile".into(), next),
                    ("apply".into(), "1".into()),
                    ("csrf_token".into(), csrf),
                ],
            )
            .await;
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some("/workspaces/rb")),
            "[{l}] {}",
            p.body
        );
        let (_, w) = s
            .call(Method::GET, "/api/v1/workspaces/rb", Some(&token), None)
            .await;
        assert_eq!(w["desired_state"], "RestartRequested", "[{l}] {w}");
        s.stop().await;
    }
}

/// The page of a workspace `ide` of a new user's, as that user sees it.
async fn a_users_workspace_page(s: &TestServer) -> Page {
    s.agent("local", json!({})).await;
    let token = s.user("alice", &["api", "workspace"]).await;
    s.workspace(&token, json!({"name": "ide", "devfile": DEVFILE}))
        .await;
    let mut alice = signed_in(s, "alice", "password-123").await;
    alice.get("/workspaces/ide").await
}

/// The workspace page's desktop IDE links (issue 41, item 6): with SSH offered, VS Code's
/// Remote-SSH link and JetBrains Gateway's name the host `warren ws open --vscode` installs
/// and the project's folder; without SSH, none is offered.
#[tokio::test]
async fn the_page_links_desktop_ides_when_ssh_is_offered() {
    for db in databases() {
        let s = TestServer::start_with(&db, |c| {
            c.ssh_public_address = Some("ssh.example.com:2222".into())
        })
        .await;
        let l = s.label;
        let page = a_users_workspace_page(&s).await;
        assert!(
            page.body
                .contains("href=\"vscode://vscode-remote/ssh-remote+warren-ide/projects\""),
            "[{l}] {}",
            page.body
        );
        assert!(
            page.body.contains(
                "href=\"jetbrains-gateway://connect#type=ssh&amp;deploy=false&amp;host=warren-ide&amp;port=2222&amp;user=ide&amp;projectPath=%2Fprojects\""
            ),
            "[{l}] {}",
            page.body
        );
        s.stop().await;
    }
    let db = databases().into_iter().next().expect("sqlite");
    let s = TestServer::start(&db).await;
    let page = a_users_workspace_page(&s).await;
    assert!(!page.body.contains("vscode://"), "{}", page.body);
    s.stop().await;
}

/// A workspace of a region's agent (issue 42, item 2): the page and the API say it is
/// reached through the central proxy, and why, until a proxy of the region says it serves;
/// then its addresses are the region's. On both databases (the proxies' presence is stored).
#[tokio::test]
async fn the_page_names_the_region_and_its_fallback() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent(
            "local",
            json!({"region": "eu", "workspace_domain": "ws.example"}),
        )
        .await;
        let token = s.user("alice", &["api", "workspace"]).await;
        s.workspace(&token, json!({"name": "ide", "devfile": DEVFILE}))
            .await;
        let mut alice = signed_in(&s, "alice", "password-123").await;
        let page = alice.get("/workspaces/ide").await;
        assert!(
            page.body.contains("region eu is not registered"),
            "[{l}] {}",
            page.body
        );
        // A proxy of region eu says it serves `domain`.
        let present = |domain: &str| {
            let body = json!({
                "instance": "eu-proxy-0123456789",
                "region": "eu",
                "workspace_domain": domain,
                "public_scheme": "https",
                "ssh_address": "ssh.eu.example:22",
            });
            let jwt = proxy_jwt();
            let s = &s;
            async move {
                s.call(
                    Method::PUT,
                    "/internal/proxy/presence",
                    Some(&jwt),
                    Some(body),
                )
                .await
            }
        };
        // An unregistered region cannot be switched on by a holder of the internal secret.
        let (status, body) = present("ws.eu.example").await;
        assert_eq!(status, 403, "[{l}] {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("region eu is not registered"),
            "[{l}] {body}"
        );
        let (status, body) = s
            .call(
                Method::PUT,
                "/api/v1/regions/eu",
                Some(&s.admin_token),
                Some(json!({"workspace_domain": "ws.eu.example", "ssh_address": "ssh.eu.example:22"})),
            )
            .await;
        assert_eq!(status, 200, "[{l}] {body}");
        assert_eq!(body["serving"], false, "[{l}] {body}");
        let page = alice.get("/workspaces/ide").await;
        assert!(
            page.body.contains("region eu has no proxy serving"),
            "[{l}] {}",
            page.body
        );
        // Nor pointed at another door once it is registered.
        let (status, body) = present("ws.evil.example").await;
        assert_eq!(status, 403, "[{l}] {body}");
        let page = alice.get("/workspaces/ide").await;
        assert!(
            page.body.contains("region eu has no proxy serving"),
            "[{l}] {}",
            page.body
        );
        let (status, _) = present("ws.eu.example").await;
        assert_eq!(status, 204, "[{l}]");
        let page = alice.get("/workspaces/ide").await;
        assert!(
            page.body
                .contains("Region: eu (reached through its own proxy)"),
            "[{l}] {}",
            page.body
        );
        let (_, w) = s
            .call(Method::GET, "/api/v1/workspaces/ide", Some(&token), None)
            .await;
        assert_eq!(
            w["terminal_url"], "https://terminal-ide.ws.eu.example/",
            "[{l}] {w}"
        );
        assert_eq!(w["region"]["ssh_address"], "ssh.eu.example:22", "[{l}] {w}");
        // A user cannot see or change regions; an admin's change of the door takes the
        // region's URLs back to the central proxy until a proxy serves the new door.
        let (status, _) = s
            .call(Method::GET, "/api/v1/regions", Some(&token), None)
            .await;
        assert_eq!(status, 403, "[{l}]");
        let (status, _) = s
            .call(
                Method::PUT,
                "/api/v1/regions/eu",
                Some(&token),
                Some(json!({"workspace_domain": "ws.evil.example"})),
            )
            .await;
        assert_eq!(status, 403, "[{l}]");
        let (_, regions) = s
            .call(Method::GET, "/api/v1/regions", Some(&s.admin_token), None)
            .await;
        assert_eq!(regions[0]["serving"], true, "[{l}] {regions}");
        let (status, body) = s
            .call(
                Method::PUT,
                "/api/v1/regions/eu",
                Some(&s.admin_token),
                Some(json!({"workspace_domain": "ws2.eu.example"})),
            )
            .await;
        assert_eq!(status, 200, "[{l}] {body}");
        assert_eq!(body["serving"], false, "[{l}] {body}");
        let (_, w) = s
            .call(Method::GET, "/api/v1/workspaces/ide", Some(&token), None)
            .await;
        assert_eq!(w["region"]["regional"], false, "[{l}] {w}");
        assert!(
            w["terminal_url"]
                .as_str()
                .is_some_and(|u| u.ends_with("://terminal-ide.ws.example/")),
            "[{l}] {w}"
        );
        let (status, _) = s
            .call(
                Method::DELETE,
                "/api/v1/regions/eu",
                Some(&s.admin_token),
                None,
            )
            .await;
        assert_eq!(status, 204, "[{l}]");
        let (status, _) = s
            .call(
                Method::DELETE,
                "/api/v1/regions/eu",
                Some(&s.admin_token),
                None,
            )
            .await;
        assert_eq!(status, 404, "[{l}]");
        s.stop().await;
    }
}
