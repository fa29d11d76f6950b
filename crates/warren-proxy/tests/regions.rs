//! Regional proxies (issue 42, item 2): the workspaces of a region's agents are shown with
//! their region's proxy's URLs while it serves, reached through it without touching the
//! central proxy, signed in through the one server (single sign-on across regions); when the
//! region's proxy stops or dies they are shown with the central proxy's URLs and a notice,
//! and the same browser carries on there without a password.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::net::SocketAddr;
use warren_testkit::{Stack, StackOptions, TestUser};
use warren_types::internal::ProxyPresence;

/// The agent's configuration with `region` set.
async fn set_region(s: &Stack, region: Option<&str>) {
    let admin = &s.admin.token;
    let agent = s
        .api(Method::GET, "/api/v1/agents/local", admin, None)
        .await
        .expect("agent");
    let mut config = agent["config"].clone();
    config["region"] = json!(region);
    s.api(
        Method::PUT,
        "/api/v1/agents/local",
        admin,
        Some(json!({ "config": config })),
    )
    .await
    .expect("agent updated");
}

async fn shown(s: &Stack, alice: &TestUser) -> Value {
    s.api(
        Method::GET,
        "/api/v1/workspaces/alice-web",
        &alice.token,
        None,
    )
    .await
    .expect("workspace")
}

/// A browser whose names under `eu.localhost` reach the regional proxy and under
/// `ws.localhost` the central one (through its balancer).
fn browser(s: &Stack, eu: SocketAddr, jar: Option<&Browser>) -> Browser {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30));
    let names: [(String, SocketAddr); 4] = [
        ("8080-alice-web.eu.localhost".into(), eu),
        ("auth.eu.localhost".into(), eu),
        ("8080-alice-web.ws.localhost".into(), s.proxy_addr),
        ("auth.ws.localhost".into(), s.proxy_addr),
    ];
    for (name, addr) in &names {
        b = b.resolve(name, *addr);
    }
    let mut browser = Browser::new(b.build().unwrap());
    if let Some(j) = jar {
        browser.jar = j.jar.clone();
    }
    browser
}

fn central_connections(s: &Stack) -> usize {
    s.proxy_balancers
        .as_ref()
        .expect("two central replicas")
        .0
        .connections()
        .iter()
        .sum()
}

#[tokio::test]
async fn a_regions_workspaces_go_through_its_proxy_and_fall_back_to_the_central_one() {
    let s = Stack::start_with(StackOptions {
        proxies: 2,
        ..StackOptions::default()
    })
    .await
    .expect("stack");
    let alice = s.user("alice").await.expect("alice");
    let ws = s.workspace(&alice, "alice-web").await.expect("workspace");
    let up = upstream("alice-web").await;
    s.set_endpoint(&ws, 8080, up.addr);
    let central_web = s.url(8080, "alice-web", "/");

    // A region not registered yet: the central proxy's URLs, and why.
    set_region(&s, Some("eu")).await;
    let w = shown(&s, &alice).await;
    assert_eq!(w["endpoints"]["web"], central_web.as_str(), "{w:#}");
    assert_eq!(w["region"]["name"], "eu");
    assert_eq!(w["region"]["regional"], false);
    let notice = w["region"]["notice"].as_str().expect("notice");
    assert!(notice.contains("region eu is not registered"), "{notice}");

    // The region's proxy serves: its URLs, its SSH address.
    let eu = s
        .regional_proxy("eu", "eu.localhost")
        .await
        .expect("eu proxy");
    let eu_web = eu.url(8080, "alice-web", "/");
    let w = shown(&s, &alice).await;
    assert_eq!(w["endpoints"]["web"], eu_web.as_str(), "{w:#}");
    assert_eq!(
        w["terminal_url"],
        format!(
            "http://terminal-alice-web.eu.localhost:{}/",
            eu.http_addr.port()
        )
    );
    assert_eq!(w["region"]["regional"], true);
    assert!(w["region"].get("notice").is_none(), "{w:#}");
    assert_eq!(
        w["region"]["ssh_address"],
        eu.ssh_addr.expect("ssh").to_string()
    );
    // Lists show the same.
    let list = s
        .api(Method::GET, "/api/v1/workspaces", &alice.token, None)
        .await
        .expect("list");
    assert_eq!(list["items"][0]["endpoints"]["web"], eu_web.as_str());

    // Signing in and browsing through the region's proxy: the server signs in, the central
    // proxy sees not one connection.
    let before = central_connections(&s);
    let mut b = browser(&s, eu.http_addr, None);
    let page = b.sign_in(&eu_web, "alice", "password-123").await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web"),
        "{:#?}",
        b.hops
    );
    assert!(
        b.hops.iter().any(|h| h.url.starts_with(&s.api_url)),
        "signed in on the server: {:#?}",
        b.hops
    );
    for _ in 0..3 {
        let page = b.get(&eu_web).await;
        assert_eq!(
            (page.status, page.body.as_str()),
            (200, "hello from alice-web")
        );
    }
    assert_eq!(
        central_connections(&s),
        before,
        "no traffic crossed the central proxy"
    );

    // The region's proxy stops: the central proxy's URLs at once, and the same browser goes
    // on there with no password (the server's session signs it in).
    let eu_addr = eu.http_addr;
    eu.stop().await;
    // It said it leaves (the server may take a moment to hear it on a busy machine).
    warren_testkit::wait_for("the stopped proxy to be gone", 60, || async {
        shown(&s, &alice).await["region"]["regional"] == false
    })
    .await
    .expect("fallback");
    let w = shown(&s, &alice).await;
    assert_eq!(w["endpoints"]["web"], central_web.as_str(), "{w:#}");
    assert_eq!(w["region"]["regional"], false);
    let mut c = browser(&s, eu_addr, Some(&b));
    let page = c.get(&central_web).await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web"),
        "single sign-on: {:#?}",
        c.hops
    );
    assert!(
        !c.hops
            .iter()
            .any(|h| h.body.contains("action=\"/oauth/login\"")),
        "no login page: {:#?}",
        c.hops
    );

    // A region's proxy that dies says nothing: its presence expires, then the central URLs,
    // saying since when.
    let eu_again = s
        .regional_proxy("eu", "eu.localhost")
        .await
        .expect("eu proxy again");
    assert_eq!(shown(&s, &alice).await["region"]["regional"], true);
    eu_again.kill();
    warren_testkit::wait_for("the dead proxy's presence to expire", 60, || async {
        shown(&s, &alice).await["region"]["regional"] == false
    })
    .await
    .expect("fallback");
    let w = shown(&s, &alice).await;
    assert_eq!(w["endpoints"]["web"], central_web.as_str());
    let notice = w["region"]["notice"].as_str().expect("notice");
    assert!(
        notice.contains("region eu's proxy has not answered since"),
        "{notice}"
    );
    let page = c.get(&central_web).await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web")
    );

    // Back to no region: no region shown.
    set_region(&s, None).await;
    assert!(shown(&s, &alice).await.get("region").is_none());
}

/// A change that makes a presence wrong.
type Spoil = fn(&mut ProxyPresence);

/// Only the proxies' shared secret may say a proxy serves, and what it says is checked: it
/// becomes the URLs users are given.
#[tokio::test]
async fn presence_needs_the_proxies_secret_and_a_well_formed_door() {
    let s = Stack::start_with(StackOptions {
        ssh: false,
        ..StackOptions::default()
    })
    .await
    .expect("stack");
    let url = format!("{}/internal/proxy/presence", s.api_url);
    let good = json!({
        "instance": "abcdefghijklmnop",
        "region": "eu",
        "workspace_domain": "eu.example",
        "public_scheme": "https",
    });
    let http = reqwest::Client::new();
    // No token, a user's token, the admin's token: refused.
    let alice = s.user("alice").await.expect("alice");
    for token in [
        None,
        Some(alice.token.as_str()),
        Some(s.admin.token.as_str()),
    ] {
        let mut req = http.put(&url).json(&good);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let status = req.send().await.expect("put").status().as_u16();
        assert_eq!(status, 401, "{token:?}");
    }
    let api = warren_proxy::server_api::ServerApi::new(
        s.api_url.parse().unwrap(),
        s.shared_secret.as_bytes(),
        None,
    )
    .unwrap();
    let presence: ProxyPresence = serde_json::from_value(good).unwrap();
    let bad: [(&str, Spoil); 5] = [
        ("instance", |p| p.instance = "short".into()),
        ("region", |p| p.region = Some("EU West".into())),
        ("workspace_domain", |p| {
            p.workspace_domain = "evil.example/path".into()
        }),
        ("public_scheme", |p| p.public_scheme = "javascript".into()),
        ("ssh_address", |p| {
            p.ssh_address = Some("ssh.example".into())
        }),
    ];
    for (field, spoil) in bad {
        let mut p = presence.clone();
        spoil(&mut p);
        let e = api.present(&p).await.expect_err(field);
        let text = e.to_string();
        assert!(
            text.contains("400") && text.contains(field),
            "{field}: {text}"
        );
    }
    // A well-formed presence still cannot switch on a region no administrator registered,
    // nor point a registered one at another door: a relay holds the same secret.
    let text = api
        .present(&presence)
        .await
        .expect_err("unregistered")
        .to_string();
    assert!(
        text.contains("403") && text.contains("region eu is not registered"),
        "{text}"
    );
    s.api(
        Method::PUT,
        "/api/v1/regions/eu",
        &s.admin.token,
        Some(json!({"workspace_domain": "eu.example"})),
    )
    .await
    .expect("registering eu");
    for spoil in [
        (|p: &mut ProxyPresence| p.workspace_domain = "evil.example".into()) as Spoil,
        |p| p.public_scheme = "http".into(),
        |p| p.ssh_address = Some("evil.example:22".into()),
        |p| p.public_port = Some(8443),
    ] {
        let mut p = presence.clone();
        spoil(&mut p);
        let text = api.present(&p).await.expect_err("another door").to_string();
        assert!(
            text.contains("403") && text.contains("registered for https://*.eu.example"),
            "{text}"
        );
    }
    api.present(&presence).await.expect("presence");
    // Only admins see the proxies.
    let refused = s
        .api(Method::GET, "/api/v1/proxies", &alice.token, None)
        .await;
    assert!(refused.is_err());
    let proxies = s
        .api(Method::GET, "/api/v1/proxies", &s.admin.token, None)
        .await
        .expect("proxies");
    assert!(
        proxies
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["region"] == "eu" && p["workspace_domain"] == "eu.example"),
        "{proxies:#}"
    );
    // Leaving removes it.
    api.leaving(&presence.instance).await.expect("leaving");
    let proxies = s
        .api(Method::GET, "/api/v1/proxies", &s.admin.token, None)
        .await
        .expect("proxies");
    assert!(!proxies
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["region"] == "eu"));
}
