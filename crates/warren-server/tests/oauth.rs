//! The OAuth 2.0 authorization server through HTTP, on SQLite and (when configured)
//! PostgreSQL: a browser-style sign-in with a cookie-keeping client, the same flow with
//! real curl and a cookie jar, and the negative matrix.

use crate::common;

use base64::Engine;
use common::browser::{Browser, Page};
use common::*;
use reqwest::header::{AUTHORIZATION, CACHE_CONTROL};
use reqwest::Method;
use serde_json::{json, Value};
use sha2::Digest;
use std::collections::BTreeMap;
use warren_server::app::oauth::NewOAuthClient;

const REDIRECT: &str = "http://127.0.0.1:9/callback";
const VERIFIER: &str = "verifier-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFG";

fn challenge(v: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(v.as_bytes()))
}

fn authorize_path(client: &str, redirect: &str, state: &str, extra: &[(&str, &str)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    s.append_pair("response_type", "code")
        .append_pair("client_id", client)
        .append_pair("redirect_uri", redirect)
        .append_pair("state", state);
    let has = |k: &str| extra.iter().any(|(e, _)| *e == k);
    if !has("code_challenge") {
        s.append_pair("code_challenge", &challenge(VERIFIER));
    }
    if !has("code_challenge_method") {
        s.append_pair("code_challenge_method", "S256");
    }
    for (k, v) in extra {
        if !v.is_empty() {
            s.append_pair(k, v);
        }
    }
    format!("/oauth/authorize?{}", s.finish())
}

fn query_of(url: &str) -> BTreeMap<String, String> {
    url::Url::parse(url)
        .expect("absolute url")
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Registers the first-party confidential client `proxy` through the admin API; returns
/// its secret.
async fn register_proxy(s: &TestServer) -> String {
    let (st, b) = s
        .admin(
            Method::POST,
            "/api/v1/oauth/clients",
            Some(json!({"client_id": "proxy", "name": "Warren proxy", "redirect_uris": [REDIRECT], "first_party": true})),
        )
        .await;
    assert_eq!(st, 201, "[{}] {b}", s.label);
    assert_eq!(b["client"]["confidential"], json!(true));
    b["client_secret"].as_str().expect("secret").to_owned()
}

/// Login page → credentials → redirect with code; returns the callback URL.
async fn sign_in(b: &mut Browser, client: &str, user: &str, password: &str) -> Page {
    let p = b.get(&authorize_path(client, REDIRECT, "st-1", &[])).await;
    assert_eq!(p.status, 200, "{}", p.body);
    // Browsers apply form-action to every redirect after the post (to the client and on
    // from there): the login page must not restrict it, or the sign-in stops half-way.
    let csp = p.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("form-action"),
        "{csp}"
    );
    assert!(p
        .body
        .contains("<form method=\"post\" action=\"/oauth/login\">"));
    let mut form = p.hidden();
    form.push(("username".into(), user.into()));
    form.push(("password".into(), password.into()));
    b.post_form("/oauth/login", &form).await
}

async fn exchange(
    s: &TestServer,
    secret: &str,
    code: &str,
    verifier: &str,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let resp = s
        .http
        .post(format!("{}/oauth/token", s.base))
        .basic_auth("proxy", Some(secret))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .expect("token request");
    let st = resp.status().as_u16();
    let h = resp.headers().clone();
    (st, resp.json().await.unwrap_or(Value::Null), h)
}

async fn userinfo(s: &TestServer, token: &str) -> (u16, Value) {
    let resp = s
        .http
        .get(format!("{}/oauth/userinfo", s.base))
        .header(AUTHORIZATION, format!("Bearer {token}"))
        .send()
        .await
        .expect("userinfo");
    let st = resp.status().as_u16();
    (st, resp.json().await.unwrap_or(Value::Null))
}

/// A full sign-in; returns the code.
async fn code_for(s: &TestServer, user: &str) -> String {
    let mut b = Browser::new(&s.base);
    let p = sign_in(&mut b, "proxy", user, "password-123").await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = b.get(p.location.as_deref().expect("location")).await;
    assert_eq!(p.status, 302, "{}", p.body);
    query_of(p.location.as_deref().expect("callback"))["code"].clone()
}

#[tokio::test]
async fn browser_flow_with_cookies_pkce_and_userinfo() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let secret = register_proxy(&s).await;
        s.user("alice", &["api", "workspace"]).await;
        let mut b = Browser::new(&s.base);

        let p = sign_in(&mut b, "proxy", "alice", "password-123").await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let session = p
            .set_cookies
            .iter()
            .find(|c| c.starts_with("warren_session="))
            .expect("session cookie");
        for attr in ["HttpOnly", "SameSite=Lax", "Path=/;"] {
            assert!(session.contains(attr), "[{l}] {session}");
        }
        let back = p.location.clone().expect("location");
        assert!(back.starts_with("/oauth/authorize?"), "[{l}] {back}");

        // Signed in: the first-party client gets its code without consent.
        let p = b.get(&back).await;
        assert_eq!(p.status, 302, "[{l}] {}", p.body);
        let cb = p.location.clone().expect("callback");
        assert!(cb.starts_with(&format!("{REDIRECT}?")), "[{l}] {cb}");
        let q = query_of(&cb);
        assert_eq!(q["state"], "st-1");
        let code = q["code"].clone();

        let (st, tok, h) = exchange(&s, &secret, &code, VERIFIER).await;
        assert_eq!(st, 200, "[{l}] {tok}");
        assert_eq!(h[CACHE_CONTROL], "no-store");
        assert_eq!(tok["token_type"], "Bearer");
        assert_eq!(tok["expires_in"], 600);
        let access = tok["access_token"].as_str().expect("access token");
        assert!(access.starts_with("wrn_oat_"));
        let (st, me) = userinfo(&s, access).await;
        assert_eq!(st, 200, "[{l}] {me}");
        assert_eq!(me["username"], "alice");
        assert_eq!(me["user_id"], tok["user_id"]);
        assert_eq!(me["client_id"], "proxy");

        // The same browser, still signed in, goes straight through.
        let p = b
            .get(&authorize_path("proxy", REDIRECT, "again", &[]))
            .await;
        assert_eq!(p.status, 302, "[{l}]");
        assert_eq!(query_of(p.location.as_deref().unwrap())["state"], "again");

        // The session expires after 12 h: the login page again.
        s.clock.advance_ms(12 * 3_600_000 + 1);
        let p = b.get(&authorize_path("proxy", REDIRECT, "late", &[])).await;
        assert_eq!(p.status, 200, "[{l}]");
        assert!(p.body.contains("Sign in"));

        // Access tokens expire after 10 minutes.
        let (st, _) = userinfo(&s, access).await;
        assert_eq!(st, 401, "[{l}] expired token");

        // Client listing (admin only).
        let (st, list) = s.admin(Method::GET, "/api/v1/oauth/clients", None).await;
        assert_eq!(st, 200);
        assert_eq!(list[0]["client_id"], "proxy");
        assert!(list[0].get("client_secret").is_none());
        let alice = s.user("alice2", &["api"]).await;
        let (st, _) = s
            .call(Method::GET, "/api/v1/oauth/clients", Some(&alice), None)
            .await;
        assert_eq!(st, 403, "[{l}] non-admin");
        s.stop().await;
    }
}

#[tokio::test]
async fn disabling_or_a_password_change_ends_browser_sessions() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let secret = register_proxy(&s).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let mut b = Browser::new(&s.base);
        let p = sign_in(&mut b, "proxy", "alice", "password-123").await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let p = b.get(p.location.as_deref().unwrap()).await;
        let code = query_of(p.location.as_deref().expect("callback"))["code"].clone();
        let (_, tok, _) = exchange(&s, &secret, &code, VERIFIER).await;
        let access = tok["access_token"]
            .as_str()
            .expect("access token")
            .to_owned();
        let signed_in = |p: &Page| p.status == 302;

        // Disabled: the browser session, the proxy's token and a new sign-in all stop.
        let (st, _) = s
            .admin(
                Method::PATCH,
                "/api/v1/users/alice",
                Some(json!({"disabled": true})),
            )
            .await;
        assert_eq!(st, 200, "[{l}]");
        let p = b.get(&authorize_path("proxy", REDIRECT, "x", &[])).await;
        assert!(
            !signed_in(&p) && p.body.contains("Sign in"),
            "[{l}] {}",
            p.body
        );
        assert_eq!(userinfo(&s, &access).await.0, 401, "[{l}]");
        let p = sign_in(&mut b, "proxy", "alice", "password-123").await;
        assert_eq!(p.status, 403, "[{l}] {}", p.body);
        assert!(
            p.body.contains("This account is disabled"),
            "[{l}] {}",
            p.body
        );
        let p = sign_in(&mut b, "proxy", "alice", "wrong-password").await;
        assert_eq!(p.status, 401, "[{l}] a wrong password says nothing more");

        // Enabled again: the same session works (disabling revokes nothing).
        let (st, _) = s
            .admin(
                Method::PATCH,
                "/api/v1/users/alice",
                Some(json!({"disabled": false})),
            )
            .await;
        assert_eq!(st, 200, "[{l}]");
        let p = b.get(&authorize_path("proxy", REDIRECT, "y", &[])).await;
        assert!(signed_in(&p), "[{l}] {}", p.body);

        // A password change that keeps sessions keeps this one; one that revokes ends it.
        s.clock.advance_ms(1);
        let change = |revoke: bool, from: &str, to: &str| json!({"current_password": from, "new_password": to, "revoke_sessions": revoke});
        let path = "/api/v1/users/me/password";
        let (st, _) = s
            .call(
                Method::POST,
                path,
                Some(&alice),
                Some(change(false, "password-123", "password-456")),
            )
            .await;
        assert_eq!(st, 204, "[{l}]");
        let p = b.get(&authorize_path("proxy", REDIRECT, "z", &[])).await;
        assert!(signed_in(&p), "[{l}] {}", p.body);
        s.clock.advance_ms(1);
        let (st, _) = s
            .call(
                Method::POST,
                path,
                Some(&alice),
                Some(change(true, "password-456", "password-789")),
            )
            .await;
        assert_eq!(st, 204, "[{l}]");
        let p = b.get(&authorize_path("proxy", REDIRECT, "w", &[])).await;
        assert!(
            !signed_in(&p) && p.body.contains("Sign in"),
            "[{l}] {}",
            p.body
        );
        s.clock.advance_ms(1);
        let p = sign_in(&mut b, "proxy", "alice", "password-789").await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);

        // Deleting the client ends what was signed in through it.
        let p = b.get(p.location.as_deref().unwrap()).await;
        let code = query_of(p.location.as_deref().expect("callback"))["code"].clone();
        let (_, tok, _) = exchange(&s, &secret, &code, VERIFIER).await;
        let access = tok["access_token"]
            .as_str()
            .expect("access token")
            .to_owned();
        assert_eq!(userinfo(&s, &access).await.0, 200, "[{l}]");
        let (st, _) = s
            .call(
                Method::DELETE,
                "/api/v1/oauth/clients/proxy",
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(st, 403, "[{l}] admins only");
        let (st, _) = s
            .admin(Method::DELETE, "/api/v1/oauth/clients/proxy", None)
            .await;
        assert_eq!(st, 204, "[{l}]");
        assert_eq!(userinfo(&s, &access).await.0, 401, "[{l}]");
        let (st, _) = s
            .admin(Method::DELETE, "/api/v1/oauth/clients/proxy", None)
            .await;
        assert_eq!(st, 404, "[{l}]");
        s.stop().await;
    }
}

#[tokio::test]
async fn curl_with_a_cookie_jar_signs_in() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: curl is not installed");
        return;
    }
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let secret = register_proxy(&s).await;
        s.user("carol", &["api", "workspace"]).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let script = r#"
set -eu
curl() { command curl --max-time 20 "$@"; }
jar="$DIR/jar.txt"
auth="$BASE/oauth/authorize?response_type=code&client_id=proxy&redirect_uri=$(printf %s "$REDIRECT" | sed 's/:/%3A/g; s#/#%2F#g')&state=curl-state&code_challenge=$CHALLENGE&code_challenge_method=S256"
page=$(curl -sS -c "$jar" -b "$jar" "$auth")
field() { printf '%s\n' "$page" | sed -n "s/.*name=\"$1\" value=\"\([^\"]*\)\".*/\1/p" | head -n1; }
csrf=$(field csrf_token)
[ -n "$csrf" ] || { echo "no csrf token in the login page"; exit 1; }
loc=$(curl -sS -o /dev/null -w '%{redirect_url}' -c "$jar" -b "$jar" \
  --data-urlencode "username=carol" --data-urlencode "password=password-123" \
  --data-urlencode "csrf_token=$csrf" --data-urlencode "response_type=code" \
  --data-urlencode "client_id=proxy" --data-urlencode "redirect_uri=$REDIRECT" \
  --data-urlencode "state=curl-state" --data-urlencode "code_challenge=$CHALLENGE" \
  --data-urlencode "code_challenge_method=S256" "$BASE/oauth/login")
cb=$(curl -sS -o /dev/null -w '%{redirect_url}' -c "$jar" -b "$jar" "$loc")
echo "callback=$cb"
code=$(printf %s "$cb" | sed -n 's/.*[?&]code=\([^&]*\).*/\1/p')
tok=$(curl -sS -u "proxy:$SECRET" --data-urlencode grant_type=authorization_code \
  --data-urlencode "code=$code" --data-urlencode "redirect_uri=$REDIRECT" \
  --data-urlencode "code_verifier=$VERIFIER" "$BASE/oauth/token")
access=$(printf %s "$tok" | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p')
echo "userinfo=$(curl -sS -H "Authorization: Bearer $access" "$BASE/oauth/userinfo")"
echo "jar:"; cat "$jar"
"#;
        let mut cmd = std::process::Command::new("bash");
        cmd.arg("-c")
            .arg(script)
            .env("DIR", dir.path())
            .env("BASE", &s.base)
            .env("REDIRECT", REDIRECT)
            .env("CHALLENGE", challenge(VERIFIER))
            .env("VERIFIER", VERIFIER)
            .env("SECRET", &secret);
        // Off the runtime's thread: the server answers curl from this same runtime.
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .expect("join")
            .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "[{l}] {stdout}\n{stderr}");
        assert!(
            stdout.contains(&format!("callback={REDIRECT}?code="))
                && stdout.contains("state=curl-state"),
            "[{l}] {stdout}"
        );
        assert!(stdout.contains("\"username\":\"carol\""), "[{l}] {stdout}");
        assert!(
            stdout.contains("#HttpOnly_127.0.0.1\tFALSE\t/\tFALSE\t"),
            "[{l}] {stdout}"
        );
        assert!(stdout.contains("warren_session"), "[{l}] {stdout}");
        s.stop().await;
    }
}

#[tokio::test]
async fn bad_clients_and_redirects_never_redirect() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        register_proxy(&s).await;
        let mut b = Browser::new(&s.base);
        for (client, redirect) in [
            ("nobody", REDIRECT),
            ("proxy", "http://evil.example/callback"),
            ("proxy", "http://127.0.0.1:9/callback/../evil"),
            (
                "proxy",
                "http://127.0.0.1:9/callback?next=http://evil.example",
            ),
            ("proxy", "http://127.0.0.1:9/CALLBACK"),
            ("proxy", "//evil.example/callback"),
            ("proxy", ""),
        ] {
            let p = b.get(&authorize_path(client, redirect, "s", &[])).await;
            assert_eq!(p.status, 400, "[{l}] {client} {redirect}: {}", p.body);
            assert!(p.location.is_none(), "[{l}] {client} {redirect} redirected");
            assert!(p.body.contains("Sign-in error"), "[{l}] {}", p.body);
        }
        // No client id at all.
        let p = b.get("/oauth/authorize?response_type=code").await;
        assert_eq!((p.status, p.location.is_none()), (400, true), "[{l}]");

        // Once client and redirect are good, errors go back to the client with the state.
        for (extra, want) in [
            (vec![("code_challenge", "")], "invalid_request"),
            (vec![("code_challenge_method", "plain")], "invalid_request"),
            (vec![("code_challenge_method", "")], "invalid_request"),
            (vec![("code_challenge", "short")], "invalid_request"),
        ] {
            let p = b
                .get(&authorize_path("proxy", REDIRECT, "keep-me", &extra))
                .await;
            assert_eq!(p.status, 302, "[{l}] {extra:?}");
            let q = query_of(p.location.as_deref().unwrap());
            assert_eq!(q["error"], want, "[{l}] {extra:?}");
            assert_eq!(q["state"], "keep-me");
            assert!(!q.contains_key("code"));
        }
        let p = b
            .get("/oauth/authorize?response_type=token&client_id=proxy&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback&state=t")
            .await;
        assert_eq!(p.status, 302);
        assert_eq!(
            query_of(p.location.as_deref().unwrap())["error"],
            "unsupported_response_type"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn login_form_csrf_and_generic_failures() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        register_proxy(&s).await;
        s.user("dave", &["api", "workspace"]).await;
        let mut b = Browser::new(&s.base);
        let p = b.get(&authorize_path("proxy", REDIRECT, "s", &[])).await;
        let form = p.hidden();
        let with = |extra: &[(&str, &str)], drop: &str| -> Vec<(String, String)> {
            let mut f: Vec<(String, String)> =
                form.iter().filter(|(k, _)| k != drop).cloned().collect();
            for (k, v) in extra {
                f.retain(|(x, _)| x != k);
                f.push((k.to_string(), v.to_string()));
            }
            f
        };

        // Wrong password and unknown user: the same status and the same message.
        let bad_pw = b
            .post_form(
                "/oauth/login",
                &with(&[("username", "dave"), ("password", "wrong-password")], ""),
            )
            .await;
        let no_user = b
            .post_form(
                "/oauth/login",
                &with(
                    &[("username", "nobody"), ("password", "wrong-password")],
                    "",
                ),
            )
            .await;
        for p in [&bad_pw, &no_user] {
            assert_eq!(p.status, 401, "[{l}] {}", p.body);
            assert!(p.body.contains("Invalid username or password."), "[{l}]");
            assert!(!p
                .set_cookies
                .iter()
                .any(|c| c.starts_with("warren_session")));
        }
        assert!(!no_user.body.contains("not exist") && !bad_pw.body.contains("wrong password"));

        let ok = [("username", "dave"), ("password", "password-123")];
        // CSRF token missing, tampered, or from another browser's pre-login cookie.
        let p = b.post_form("/oauth/login", &with(&ok, "csrf_token")).await;
        assert_eq!(p.status, 403, "[{l}] missing csrf");
        let csrf = form
            .iter()
            .find(|(k, _)| k == "csrf_token")
            .unwrap()
            .1
            .clone();
        let mut tampered = csrf.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        let p = b
            .post_form(
                "/oauth/login",
                &with(&[ok[0], ok[1], ("csrf_token", &tampered)], ""),
            )
            .await;
        assert_eq!(p.status, 403, "[{l}] tampered csrf");
        let mut other = Browser::new(&s.base);
        other
            .get(&authorize_path("proxy", REDIRECT, "s", &[]))
            .await;
        let p = other.post_form("/oauth/login", &with(&ok, "")).await;
        assert_eq!(p.status, 403, "[{l}] csrf of another browser");
        let mut cookieless = Browser::new(&s.base);
        let p = cookieless.post_form("/oauth/login", &with(&ok, "")).await;
        assert_eq!(p.status, 403, "[{l}] no pre-login cookie");

        // Open redirect through the login form: the redirect URI is checked again.
        let p = b
            .post_form(
                "/oauth/login",
                &with(
                    &[ok[0], ok[1], ("redirect_uri", "http://evil.example/cb")],
                    "",
                ),
            )
            .await;
        assert_eq!((p.status, p.location.as_deref()), (400, None), "[{l}]");

        // The genuine form signs in.
        let p = b.post_form("/oauth/login", &with(&ok, "")).await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        assert!(p
            .location
            .as_deref()
            .unwrap()
            .starts_with("/oauth/authorize?"));
        assert_eq!(p.headers[CACHE_CONTROL], "no-store");

        // A forged session cookie is not a session.
        let mut forged = Browser::new(&s.base);
        forged
            .jar
            .insert("warren_session".into(), "1.99999999999999.AAAA".into());
        let p = forged
            .get(&authorize_path("proxy", REDIRECT, "s", &[]))
            .await;
        assert_eq!(p.status, 200, "[{l}] forged session shows the login page");
        s.stop().await;
    }
}

#[tokio::test]
async fn token_endpoint_negative_matrix() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let secret = register_proxy(&s).await;
        s.user("erin", &["api", "workspace"]).await;

        // Wrong verifier, then (code now used) the right one fails too.
        let code = code_for(&s, "erin").await;
        let wrong = "wrong-verifier-0123456789-abcdefghijklmnopqrstuvwxyz";
        let (st, b, _) = exchange(&s, &secret, &code, wrong).await;
        assert_eq!(
            (st, b["error"].as_str()),
            (400, Some("invalid_grant")),
            "[{l}] {b}"
        );

        // Wrong client secret, unknown client, secret in the form.
        let code = code_for(&s, "erin").await;
        let (st, b, h) = exchange(
            &s,
            "wrn_cs_wrong-secret-wrong-secret-wrong-secret",
            &code,
            VERIFIER,
        )
        .await;
        assert_eq!(
            (st, b["error"].as_str()),
            (401, Some("invalid_client")),
            "[{l}] {b}"
        );
        assert!(h.get("www-authenticate").is_some());
        let form = |client: &str, sec: &str, code: &str| {
            s.http.post(format!("{}/oauth/token", s.base)).form(&[
                ("grant_type", "authorization_code".to_owned()),
                ("code", code.to_owned()),
                ("redirect_uri", REDIRECT.to_owned()),
                ("code_verifier", VERIFIER.to_owned()),
                ("client_id", client.to_owned()),
                ("client_secret", sec.to_owned()),
            ])
        };
        let r = form("nobody", &secret, &code).send().await.unwrap();
        assert_eq!(r.status(), 401, "[{l}] unknown client");
        // The code was not consumed by failed client authentication: form auth works.
        let r = form("proxy", &secret, &code).send().await.unwrap();
        assert_eq!(r.status(), 200, "[{l}] form client_secret");

        // Reuse: the second exchange fails and revokes the first token.
        let code = code_for(&s, "erin").await;
        let (st, tok, _) = exchange(&s, &secret, &code, VERIFIER).await;
        assert_eq!(st, 200, "[{l}] {tok}");
        let access = tok["access_token"].as_str().unwrap().to_owned();
        assert_eq!(userinfo(&s, &access).await.0, 200);
        let (st, b, _) = exchange(&s, &secret, &code, VERIFIER).await;
        assert_eq!(
            (st, b["error"].as_str()),
            (400, Some("invalid_grant")),
            "[{l}] reuse {b}"
        );
        let (st, b) = userinfo(&s, &access).await;
        assert_eq!(
            (st, b["error"].as_str()),
            (401, Some("invalid_token")),
            "[{l}] revoked"
        );

        // Expired: a code is valid for 60 s.
        let code = code_for(&s, "erin").await;
        s.clock.advance_ms(61_000);
        let (st, b, _) = exchange(&s, &secret, &code, VERIFIER).await;
        assert_eq!(
            (st, b["error"].as_str()),
            (400, Some("invalid_grant")),
            "[{l}] expired {b}"
        );
        assert!(b["error_description"].as_str().unwrap().contains("expired"));

        // redirect_uri must equal the code's.
        let code = code_for(&s, "erin").await;
        let r = s
            .http
            .post(format!("{}/oauth/token", s.base))
            .basic_auth("proxy", Some(&secret))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", "http://127.0.0.1:9/other"),
                ("code_verifier", VERIFIER),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "[{l}]");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"], "invalid_grant");

        // Missing verifier, garbage code, wrong grant type.
        let (st, b, _) = exchange(&s, &secret, "not-a-code", VERIFIER).await;
        assert_eq!(
            (st, b["error"].as_str()),
            (400, Some("invalid_grant")),
            "[{l}]"
        );
        let r = s
            .http
            .post(format!("{}/oauth/token", s.base))
            .basic_auth("proxy", Some(&secret))
            .form(&[("grant_type", "password"), ("username", "erin")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"], "unsupported_grant_type", "[{l}]");
        let code = code_for(&s, "erin").await;
        let r = s
            .http
            .post(format!("{}/oauth/token", s.base))
            .basic_auth("proxy", Some(&secret))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", REDIRECT),
            ])
            .send()
            .await
            .unwrap();
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"], "invalid_request", "[{l}] missing verifier");
        s.stop().await;
    }
}

#[tokio::test]
async fn third_party_clients_get_a_consent_page() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        warren_server::app::oauth::register_client(
            &s.state,
            &NewOAuthClient {
                client_id: "tool".into(),
                name: "Some <Tool>".into(),
                redirect_uris: vec![REDIRECT.into()],
                first_party: false,
                secret: None,
            },
        )
        .await
        .expect("register");
        s.user("fay", &["api", "workspace"]).await;
        let mut b = Browser::new(&s.base);
        let p = sign_in(&mut b, "tool", "fay", "password-123").await;
        assert_eq!(p.status, 303, "[{l}]");
        let p = b.get(p.location.as_deref().unwrap()).await;
        assert_eq!(p.status, 200, "[{l}] consent page");
        assert!(p.body.contains("Some &lt;Tool&gt;"), "escaped: {}", p.body);
        let form = p.hidden();
        let mut deny = form.clone();
        deny.push(("decision".into(), "deny".into()));
        let d = b.post_form("/oauth/consent", &deny).await;
        assert_eq!(
            query_of(d.location.as_deref().unwrap())["error"],
            "access_denied"
        );
        let mut bad = form.clone();
        bad.retain(|(k, _)| k != "csrf_token");
        bad.push(("csrf_token".into(), "forged".into()));
        bad.push(("decision".into(), "allow".into()));
        assert_eq!(
            b.post_form("/oauth/consent", &bad).await.status,
            403,
            "[{l}]"
        );
        let mut allow = form.clone();
        allow.push(("decision".into(), "allow".into()));
        let a = b.post_form("/oauth/consent", &allow).await;
        assert_eq!(a.status, 302, "[{l}] {}", a.body);
        let code = query_of(a.location.as_deref().unwrap())["code"].clone();
        // A public client: no secret, PKCE alone.
        let r = s
            .http
            .post(format!("{}/oauth/token", s.base))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", REDIRECT),
                ("code_verifier", VERIFIER),
                ("client_id", "tool"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "[{l}]");
        s.stop().await;
    }
}

/// `Server::register_oauth_client` (for `warren up`) is idempotent and replaces the secret.
#[tokio::test]
async fn register_oauth_client_upserts() {
    for db in databases() {
        let tdb = TestDb::new(&db).await;
        let mut config = warren_server::ServerConfig::new(tdb.dir.path().join("home"));
        config.database_url = Some(tdb.url.clone());
        config.relay_secret = Some(RELAY_SECRET.into());
        let server = warren_server::Server::prepare(config)
            .await
            .expect("prepare");
        let mut c = NewOAuthClient {
            client_id: "warren-proxy".into(),
            name: "Warren proxy".into(),
            redirect_uris: vec!["http://auth.ws.localhost:7080/callback".into()],
            first_party: true,
            secret: Some("first-secret-first-secret-first-secret".into()),
        };
        let a = server.register_oauth_client(&c).await.expect("register");
        assert!(a.confidential && a.first_party);
        c.secret = Some("second-secret-second-secret-second-secret".into());
        c.redirect_uris
            .push("https://auth.ws.example.com/callback".into());
        let b = server.register_oauth_client(&c).await.expect("again");
        assert_eq!(b.redirect_uris.len(), 2, "[{}]", db.label());
        let row = server
            .state()
            .store
            .oauth_client("warren-proxy")
            .await
            .unwrap()
            .unwrap();
        assert!(row.check_secret("second-secret-second-secret-second-secret"));
        assert!(!row.check_secret("first-secret-first-secret-first-secret"));
        c.redirect_uris = vec!["javascript:alert(1)".into()];
        assert!(server.register_oauth_client(&c).await.is_err());
        c.redirect_uris = vec!["http://x.example/cb#frag".into()];
        assert!(server.register_oauth_client(&c).await.is_err());
    }
}

/// The login form shares the password throttle with `POST /api/v1/session`: after five
/// failures even the right password is refused (429, `Retry-After`, no session) until the
/// wait has passed.
#[tokio::test]
async fn login_form_slows_down_password_guessing() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    register_proxy(&s).await;
    s.user("erin", &["api", "workspace"]).await;
    for _ in 0..5 {
        let mut b = Browser::new(&s.base);
        let p = sign_in(&mut b, "proxy", "erin", "wrong-password").await;
        assert_eq!(p.status, 401, "{}", p.body);
    }
    let mut b = Browser::new(&s.base);
    let p = sign_in(&mut b, "proxy", "erin", "password-123").await;
    assert_eq!(p.status, 429, "{}", p.body);
    assert_eq!(p.headers["retry-after"], "1");
    assert!(
        p.body
            .contains("Too many failed sign-in attempts. Try again in 1 s."),
        "{}",
        p.body
    );
    assert!(!p
        .set_cookies
        .iter()
        .any(|c| c.starts_with("warren_session")));
    s.clock.advance_ms(1000);
    let p = sign_in(&mut b, "proxy", "erin", "password-123").await;
    assert_eq!(p.status, 303, "{}", p.body);
    s.stop().await;
}
