//! Single sign-on against a real, certified OpenID provider (npm `oidc-provider`, run by the
//! test from `tests/oidc/provider.mjs`), with a cookie-jar browser, on SQLite and (when
//! configured) PostgreSQL: a good sign-in from the login page's button creating the account,
//! the admin group claim granting and taking the admin role, local passwords turned off,
//! ID tokens with the wrong audience, expired, badly signed or of another sign-in refused, a
//! replayed callback, a replayed code, a mismatched state, key rotation, and (sign-up off) an unknown user refused while an
//! existing account is linked.
//!
//! Needs Node.js and the provider installed by `.ci/setup-tools.sh`; skips with a notice
//! when they are missing, unless `WARREN_REQUIRE_TOOLS=1`.

use crate::common;

use common::browser::{Browser, Page};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};

const CLIENT_ID: &str = "warren-test";
const CLIENT_SECRET: &str = "a-client-secret-of-the-test";
const ADMINS: &str = "warren-admins";

/// The provider's `node_modules`, installed by `.ci/setup-tools.sh`.
fn provider_modules() -> Option<PathBuf> {
    let cache = std::env::var_os("WARREN_TOOLS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/warren-tools"));
    let modules = cache.join("oidc-provider-9.13.3/node_modules");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node && modules.join("oidc-provider/package.json").is_file() {
        return Some(modules);
    }
    let notice = format!(
        "node or oidc-provider is not installed (no {}; run .ci/setup-tools.sh)",
        modules.display()
    );
    if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_TOOLS=1 but {notice}");
    }
    eprintln!("SKIPPED: {notice}");
    None
}

/// The running provider; killed when dropped (and it exits when its stdin closes).
struct Provider {
    issuer: String,
    http: reqwest::Client,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Provider {
    async fn start(modules: &std::path::Path) -> Provider {
        let dir = tempfile::tempdir().expect("temporary directory");
        let script = dir.path().join("provider.mjs");
        std::fs::copy(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oidc/provider.mjs"),
            &script,
        )
        .expect("copy the provider script");
        // ES modules resolve packages from the script's directory upwards.
        std::os::unix::fs::symlink(modules, dir.path().join("node_modules")).expect("link");
        let mut child = tokio::process::Command::new("node")
            .arg(&script)
            .env("OIDC_CLIENT_ID", CLIENT_ID)
            .env("OIDC_CLIENT_SECRET", CLIENT_SECRET)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start node");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let issuer = loop {
            match lines.next_line().await.expect("read the provider") {
                Some(l) if l.starts_with("READY ") => break l[6..].to_owned(),
                Some(_) => continue,
                None => panic!("the provider exited before it was ready"),
            }
        };
        // Keep reading its output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Provider {
            issuer,
            http: reqwest::Client::new(),
            _child: child,
            _dir: dir,
        }
    }

    async fn control(&self, path: &str, query: &[(&str, &str)]) {
        let r = self
            .http
            .post(format!("{}{path}", self.issuer))
            .query(query)
            .send()
            .await
            .expect("provider control");
        assert_eq!(
            r.status(),
            204,
            "{path}: {}",
            r.text().await.unwrap_or_default()
        );
    }

    /// The next interaction signs `sub` in with these claims.
    async fn login_as(&self, sub: &str, claims: Value) {
        self.control(
            "/test/login",
            &[("sub", sub), ("claims", &claims.to_string())],
        )
        .await;
    }
}

/// A server whose single sign-on goes to `p` (its callback registered there).
async fn server(
    db: &DbChoice,
    p: &Provider,
    tweak: impl FnOnce(&mut warren_server::OidcConfig, &mut bool),
) -> TestServer {
    let issuer = p.issuer.clone();
    let s = TestServer::start_at(db, move |c, base| {
        let mut o = warren_server::OidcConfig::new(
            &issuer,
            CLIENT_ID,
            &format!("{base}/oauth/sso/callback"),
        );
        o.client_secret = Some(CLIENT_SECRET.into());
        o.display_name = "Test ID".into();
        o.scopes = vec!["profile".into(), "email".into(), "groups".into()];
        tweak(&mut o, &mut c.password_login);
        c.oidc = Some(o);
    })
    .await;
    p.control(
        "/test/client",
        &[("redirect_uri", &format!("{}/oauth/sso/callback", s.base))],
    )
    .await;
    s
}

/// Follows redirects from `start` through the provider until the browser is sent back to
/// Warren's callback: that URL, not yet visited.
async fn to_callback(b: &mut Browser, start: &str) -> String {
    let mut url = start.to_owned();
    for _ in 0..12 {
        let page = b.get(&url).await;
        let Some(next) = page.location.clone() else {
            panic!(
                "{url} answered {} without a redirect: {}",
                page.status, page.body
            );
        };
        let next = if next.starts_with('/') {
            let origin = url::Url::parse(&url).expect("url");
            format!(
                "{}://{}{next}",
                origin.scheme(),
                origin.host_str().zip(origin.port()).map_or_else(
                    || origin.host_str().unwrap_or_default().to_owned(),
                    |(h, p)| format!("{h}:{p}")
                )
            )
        } else {
            next
        };
        if next.contains("/oauth/sso/callback") {
            return next;
        }
        url = next;
    }
    panic!("no callback after 12 redirects from {start}");
}

/// A whole sign-in from `/oauth/sso?next=/`: the callback's answer.
async fn sign_in(b: &mut Browser) -> Page {
    let start = format!("{}/oauth/sso?next=%2F", b.base);
    let cb = to_callback(b, &start).await;
    b.get(&cb).await
}

async fn users(s: &TestServer) -> Vec<Value> {
    let (st, body) = s.admin(Method::GET, "/api/v1/users", None).await;
    assert_eq!(st, 200, "{body}");
    body["items"]
        .as_array()
        .or(body.as_array())
        .cloned()
        .unwrap_or_default()
}

async fn user(s: &TestServer, name: &str) -> Option<Value> {
    users(s).await.into_iter().find(|u| u["username"] == name)
}

/// A browser that started a sign-in (and went no further), and the state it was given.
async fn started(base: &str) -> (Browser, String) {
    let mut b = Browser::new(base);
    let start = b.get("/oauth/sso?next=%2F").await;
    let auth = url::Url::parse(start.location.as_deref().expect("to the provider")).unwrap();
    let state = auth
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .expect("state");
    (b, state)
}

fn signed_in(page: &Page) -> bool {
    page.status == 302
        && page.location.as_deref() == Some("/")
        && page
            .set_cookies
            .iter()
            .any(|c| c.starts_with("warren_session=") && !c.contains("Max-Age=0"))
}

#[tokio::test]
async fn single_sign_on_through_a_real_openid_provider() {
    let Some(modules) = provider_modules() else {
        return;
    };
    for db in databases() {
        let p = Provider::start(&modules).await;
        let s = server(&db, &p, |o, password| {
            o.admin_group = Some(ADMINS.into());
            *password = false;
        })
        .await;
        let l = s.label;

        // The login page offers the provider and no password form.
        let mut b = Browser::new(&s.base);
        let page = b.get("/login").await;
        assert_eq!(page.status, 200, "{l}");
        assert!(
            page.body.contains("Sign in with Test ID"),
            "{l}: {}",
            page.body
        );
        assert!(
            !page.body.contains("type=\"password\""),
            "{l}: {}",
            page.body
        );
        // Passwords sign nobody in, the admin's included, and the answer says why.
        let (st, body) = s
            .call(
                Method::POST,
                "/api/v1/session",
                None,
                Some(json!({"username": "admin", "password": s.admin_password})),
            )
            .await;
        assert_eq!(st, 403, "{l}: {body}");
        assert!(
            body.to_string().contains("password sign-in is turned off"),
            "{l}: {body}"
        );

        // A good sign-in creates the account; the session opens the web UI as that user.
        p.login_as(
            "sub-alice",
            json!({"preferred_username": "Alice", "email": "alice@example.com", "groups": ["dev"]}),
        )
        .await;
        let page = sign_in(&mut b).await;
        assert!(
            signed_in(&page),
            "{l}: {} {:?} {}",
            page.status,
            page.location,
            page.body
        );
        assert!(
            !b.jar.contains_key("warren_sso"),
            "{l}: the sign-in cookie is cleared"
        );
        let home = b.get("/").await;
        assert_eq!(home.status, 200, "{l}: {}", home.body);
        assert!(home.body.contains("alice"), "{l}: {}", home.body);
        let alice = user(&s, "alice").await.expect("alice was created");
        assert_eq!(alice["is_admin"], false, "{l}");

        // The OAuth login page (how the proxy and the CLI sign users in) offers the same
        // button, and single sign-on returns to the authorization request, which then grants.
        let (st, body) = s
            .admin(
                Method::POST,
                "/api/v1/oauth/clients",
                Some(json!({"client_id": "front-door", "name": "Front door",
                            "redirect_uris": ["http://127.0.0.1:9/cb"], "first_party": true})),
            )
            .await;
        assert_eq!(st, 201, "{l}: {body}");
        let authorize = "/oauth/authorize?response_type=code&client_id=front-door&\
            redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&state=s1&\
            code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256";
        let mut bo = Browser::new(&s.base);
        let page = bo.get(authorize).await;
        assert_eq!(page.status, 200, "{l}: {}", page.body);
        let link = page
            .body
            .split("id=\"sso\" href=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(common::browser::unescape)
            .expect("the login page's single sign-on link");
        let cb = to_callback(&mut bo, &format!("{}{link}", s.base)).await;
        let page = bo.get(&cb).await;
        assert_eq!(page.status, 302, "{l}: {}", page.body);
        let back = page.location.clone().unwrap_or_default();
        assert!(back.starts_with("/oauth/authorize?"), "{l}: {back}");
        let page = bo.get(&back).await;
        let granted = page.location.clone().unwrap_or_default();
        assert!(
            granted.starts_with("http://127.0.0.1:9/cb?code=") && granted.contains("state=s1"),
            "{l}: {} {granted} {}",
            page.status,
            page.body
        );

        // Signing in again finds the same account, even after the username claim changed.
        let mut b2 = Browser::new(&s.base);
        p.login_as("sub-alice", json!({"preferred_username": "alice-renamed"}))
            .await;
        assert!(signed_in(&sign_in(&mut b2).await), "{l}");
        assert_eq!(b2.get("/").await.status, 200, "{l}");
        let all = users(&s).await;
        assert_eq!(
            all.iter().filter(|u| u["username"] == "alice").count(),
            1,
            "{l}"
        );
        assert!(!all.iter().any(|u| u["username"] == "alice-renamed"), "{l}");

        // The admin group claim makes an admin, and its absence takes the role away.
        p.login_as(
            "sub-carol",
            json!({"preferred_username": "carol", "groups": [ADMINS, "dev"]}),
        )
        .await;
        assert!(signed_in(&sign_in(&mut Browser::new(&s.base)).await), "{l}");
        assert_eq!(user(&s, "carol").await.unwrap()["is_admin"], true, "{l}");
        p.login_as(
            "sub-carol",
            json!({"preferred_username": "carol", "groups": ["dev"]}),
        )
        .await;
        assert!(signed_in(&sign_in(&mut Browser::new(&s.base)).await), "{l}");
        assert_eq!(user(&s, "carol").await.unwrap()["is_admin"], false, "{l}");

        // The groups claim fills the `oidc` groups Warren has (a name it has no group for is
        // ignored), and a sign-in whose claim leaves one out takes the member out.
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/groups",
                Some(json!({"name": "dev", "source": "oidc"})),
            )
            .await;
        assert_eq!(st, 201, "{l}: {b}");
        let dev_members = || async {
            let (st, b) = s.admin(Method::GET, "/api/v1/groups/dev", None).await;
            assert_eq!(st, 200, "{l}: {b}");
            b["members"].as_array().unwrap().clone()
        };
        assert!(dev_members().await.is_empty(), "{l}");
        p.login_as(
            "sub-carol",
            json!({"preferred_username": "carol", "groups": ["dev", "no-such-group"]}),
        )
        .await;
        assert!(signed_in(&sign_in(&mut Browser::new(&s.base)).await), "{l}");
        let members = dev_members().await;
        assert_eq!(members.len(), 1, "{l}: {members:?}");
        assert_eq!(members[0]["username"], "carol", "{l}");
        let until: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(members[0]["expires_at"].clone()).expect("expires_at");
        let left = until - chrono::Utc::now();
        assert!(
            left > chrono::Duration::hours(11) && left <= chrono::Duration::hours(12),
            "{l}: the membership lasts oidc.group_ttl_hours (12 h by default): {left}"
        );
        p.login_as(
            "sub-carol",
            json!({"preferred_username": "carol", "groups": ["other"]}),
        )
        .await;
        assert!(signed_in(&sign_in(&mut Browser::new(&s.base)).await), "{l}");
        assert!(dev_members().await.is_empty(), "{l}");

        // ID tokens that must not be believed: each refused with its reason, no session.
        p.login_as("sub-mallory", json!({"preferred_username": "mallory"}))
            .await;
        for (mode, reason) in [
            ("audience", "not meant for this server (audience)"),
            ("expired", "it has expired"),
            ("signature", "its signature does not verify"),
            ("nonce", "its nonce is not this sign-in&#39;s"),
        ] {
            p.control("/test/tamper", &[("mode", mode)]).await;
            let mut bad = Browser::new(&s.base);
            let page = sign_in(&mut bad).await;
            assert_eq!(page.status, 401, "{l} {mode}: {}", page.body);
            assert!(page.body.contains(reason), "{l} {mode}: {}", page.body);
            assert!(!bad.jar.contains_key("warren_session"), "{l} {mode}");
        }
        assert!(user(&s, "mallory").await.is_none(), "{l}");
        // Anyone can send refused callbacks: the four from this address in this minute are
        // recorded once.
        let (st, log) = s
            .admin(
                Method::GET,
                "/api/v1/audit?action=session.sign_in&outcome=denied",
                None,
            )
            .await;
        assert_eq!(st, 200, "{l}: {log}");
        let refused: Vec<&Value> = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["credential"] == "sso")
            .collect();
        assert_eq!(refused.len(), 1, "{l}: {refused:#?}");
        assert_eq!(refused[0]["actor_kind"], "anonymous", "{l}");

        // A replayed callback: refused with the browser's cookie gone, and with it restored.
        let mut b3 = Browser::new(&s.base);
        p.login_as("sub-alice", json!({"preferred_username": "alice"}))
            .await;
        let cb = to_callback(&mut b3, &format!("{}/oauth/sso?next=%2F", s.base)).await;
        let sso_cookie = b3.jar.get("warren_sso").cloned().expect("sign-in cookie");
        assert!(signed_in(&b3.get(&cb).await), "{l}");
        b3.jar.remove("warren_session");
        let page = b3.get(&cb).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(
            page.body.contains("no sign-in is in progress"),
            "{l}: {}",
            page.body
        );
        b3.jar.insert("warren_sso".into(), sso_cookie);
        let page = b3.get(&cb).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(
            page.body.contains("already finished once"),
            "{l}: {}",
            page.body
        );
        assert!(!b3.jar.contains_key("warren_session"), "{l}");

        // A used code under a new sign-in's state: the provider refuses to redeem it twice.
        let mut b5 = Browser::new(&s.base);
        let fresh = to_callback(&mut b5, &format!("{}/oauth/sso?next=%2F", s.base)).await;
        let old_code = url::Url::parse(&cb)
            .unwrap()
            .query_pairs()
            .find(|(k, _)| k == "code")
            .map(|(_, v)| v.into_owned())
            .expect("code");
        let mut u = url::Url::parse(&fresh).unwrap();
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "code" {
                    old_code.clone()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
        let page = b5.get(u.as_str()).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(
            page.body.contains("refused the sign-in&#39;s code"),
            "{l}: {}",
            page.body
        );
        assert!(!b5.jar.contains_key("warren_session"), "{l}");

        // A state that is not the browser's (a forged or crossed callback).
        let mut b4 = Browser::new(&s.base);
        let cb = to_callback(&mut b4, &format!("{}/oauth/sso?next=%2F", s.base)).await;
        let mut u = url::Url::parse(&cb).unwrap();
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "state" {
                    "forged-state".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
        let page = b4.get(u.as_str()).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(page.body.contains("does not match"), "{l}: {}", page.body);

        // The provider rotates its signing key: the new key is fetched and believed.
        p.control("/test/rotate", &[]).await;
        p.login_as("sub-alice", json!({"preferred_username": "alice"}))
            .await;
        let page = sign_in(&mut Browser::new(&s.base)).await;
        assert!(signed_in(&page), "{l}: {} {}", page.status, page.body);

        // A bad `next` is refused before anything else happens.
        let page = Browser::new(&s.base)
            .get("/oauth/sso?next=https%3A%2F%2Fevil.example%2F")
            .await;
        assert_eq!(page.status, 400, "{l}: {}", page.body);
        s.stop().await;

        // Sign-up off: an unknown user is refused by name; an existing account is linked.
        // Only the `dev` group may sign in here.
        let s = server(&db, &p, |o, _| {
            o.sign_up = false;
            o.link_existing_users = true;
            o.allowed_groups = vec!["dev".into()];
        })
        .await;
        p.login_as(
            "sub-dave",
            json!({"preferred_username": "dave", "groups": ["dev"]}),
        )
        .await;
        let page = sign_in(&mut Browser::new(&s.base)).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(
            page.body
                .contains("there is no account for &quot;dave&quot;")
                && page.body.contains("sign-up through single sign-on is"),
            "{l}: {}",
            page.body
        );
        assert!(user(&s, "dave").await.is_none(), "{l}");
        s.user("erin", &["api"]).await;
        p.login_as(
            "sub-erin",
            json!({"preferred_username": "erin", "groups": ["dev"]}),
        )
        .await;
        let mut be = Browser::new(&s.base);
        assert!(signed_in(&sign_in(&mut be).await), "{l}");
        assert!(be.get("/").await.body.contains("erin"), "{l}");
        // Linked: another identity claiming the same username is refused.
        p.login_as(
            "sub-erin-2",
            json!({"preferred_username": "erin", "groups": ["dev"]}),
        )
        .await;
        let page = sign_in(&mut Browser::new(&s.base)).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(
            page.body.contains("linked to another identity"),
            "{l}: {}",
            page.body
        );
        // Outside the allowed groups: refused whoever it is, nothing created.
        s.user("frank", &["api"]).await;
        p.login_as(
            "sub-frank",
            json!({"preferred_username": "frank", "groups": ["outsiders"]}),
        )
        .await;
        let page = sign_in(&mut Browser::new(&s.base)).await;
        assert_eq!(page.status, 403, "{l}: {}", page.body);
        assert!(
            page.body.contains("none of the groups allowed"),
            "{l}: {}",
            page.body
        );
        // The provider's refusal: shown for this browser's sign-in only, its code alone.
        let (mut bp, state) = started(&s.base).await;
        let refusal = |state: &str| {
            let q = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("error", "access_denied")
                .append_pair("error_description", "<b>call +1 555 0100 now</b>")
                .append_pair("state", state)
                .finish();
            format!("/oauth/sso/callback?{q}")
        };
        let page = Browser::new(&s.base).get(&refusal(&state)).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        assert!(page.body.contains("no sign-in is in progress"), "{l}");
        let page = bp.get(&refusal("another-state")).await;
        assert_eq!(page.status, 401, "{l}: {}", page.body);
        let (mut bp, state) = started(&s.base).await;
        let page = bp.get(&refusal(&state)).await;
        assert_eq!(page.status, 403, "{l}: {}", page.body);
        assert!(
            page.body.contains("refused the sign-in (access_denied)")
                && !page.body.contains("555 0100"),
            "{l}: {}",
            page.body
        );

        // With passwords still on here, the login page offers both.
        let page = Browser::new(&s.base).get("/login").await;
        assert!(page.body.contains("Sign in with Test ID"), "{l}");
        assert!(page.body.contains("type=\"password\""), "{l}");
        s.stop().await;
    }
}
