//! Proxy replicas behind one load balancer, with no sticky sessions (issue 42): what a
//! browser holds from one replica is valid on every other — the session cookie, the sign-in's
//! state and hand-off (used once whichever replica sees it again) — and a replica that stops
//! leaves its peers serving.

use crate::common;

use common::*;
use futures::StreamExt;
use warren_testkit::{Stack, StackOptions};

async fn two_replicas() -> (Stack, warren_testkit::TestUser, Upstream) {
    let stack = Stack::start_with(StackOptions {
        ssh: false,
        proxies: 2,
        ..StackOptions::default()
    })
    .await
    .expect("stack");
    let alice = stack.user("alice").await.expect("alice");
    let ws = stack
        .workspace(&alice, "alice-web")
        .await
        .expect("workspace");
    let up = upstream("alice-web").await;
    stack.set_endpoint(&ws, 8080, up.addr);
    (stack, alice, up)
}

fn browser(s: &Stack, fresh_connections: bool) -> Browser {
    let hosts = [
        s.host(8080, "alice-web"),
        format!("auth.ws.localhost:{}", s.proxy_addr.port()),
    ];
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30));
    if fresh_connections {
        // Every request a new connection, so the balancer's turns spread one sign-in's steps
        // over both replicas.
        b = b.pool_max_idle_per_host(0);
    }
    for h in &hosts {
        b = b.resolve(h.split(':').next().unwrap(), s.proxy_addr);
    }
    Browser::new(b.build().unwrap())
}

fn steer(s: &Stack, replica: Option<usize>) {
    s.proxy_balancers
        .as_ref()
        .expect("replicas")
        .0
        .prefer(replica);
}

/// Signed in through replica A, the browser goes on through replica B without signing in
/// again; a sign-in whose steps alternate between the replicas completes.
#[tokio::test]
async fn a_sign_in_on_one_replica_holds_on_the_other() {
    let (s, _alice, up) = two_replicas().await;
    let url = s.url(8080, "alice-web", "/");
    let host = s.host(8080, "alice-web");
    let host_only = host.split(':').next().unwrap().to_owned();

    steer(&s, Some(0));
    let mut a = browser(&s, false);
    let page = a.sign_in(&url, "alice", "password-123").await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web")
    );

    steer(&s, Some(1));
    let mut b = browser(&s, false);
    b.jar = a.jar.clone();
    let page = b.get(&url).await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web"),
        "replica B took A's session: {:#?}",
        b.hops
    );
    assert!(b.hops.len() <= 1, "no sign-in on B: {:#?}", b.hops);

    // Alternating replicas on every request of a whole sign-in.
    steer(&s, None);
    let mut c = browser(&s, true);
    let page = c.sign_in(&url, "alice", "password-123").await;
    assert_eq!(
        (page.status, page.body.as_str()),
        (200, "hello from alice-web"),
        "{:#?}",
        c.hops
    );
    assert!(c.cookie(&host_only, "warren_session").is_some());

    // Stop replica A: the same browser goes on through B with its session.
    s.stop_proxy(0);
    let mut d = browser(&s, true);
    d.jar = c.jar.clone();
    for _ in 0..4 {
        let page = d.get(&url).await;
        assert_eq!(
            (page.status, page.body.as_str()),
            (200, "hello from alice-web")
        );
    }
    assert!(up.seen().iter().filter(|r| r.as_str() == "GET /").count() >= 7);
}

/// A sign-in hand-off used on replica A is refused on replica B, even with the browser's own
/// binding cookie (single use is kept by the server, not per replica).
#[tokio::test]
async fn a_hand_off_used_on_one_replica_is_refused_on_the_other() {
    let (s, _alice, _up) = two_replicas().await;
    let url = s.url(8080, "alice-web", "/");
    let host_only = s
        .host(8080, "alice-web")
        .split(':')
        .next()
        .unwrap()
        .to_owned();

    steer(&s, Some(0));
    let mut a = browser(&s, false);
    let page = a.sign_in(&url, "alice", "password-123").await;
    assert_eq!(page.status, 200, "{:#?}", a.hops);
    let handoff_url = a
        .hops
        .iter()
        .filter_map(|h| h.location.clone())
        .find(|l| l.contains("/.warren/session?handoff="))
        .expect("the hand-off");
    let bind = a
        .hops
        .iter()
        .flat_map(|h| h.set_cookies.iter())
        .find_map(|c| {
            let v = c.strip_prefix("warren_bind=")?.split(';').next()?;
            (!v.is_empty()).then(|| v.to_owned())
        })
        .expect("the binding cookie");

    steer(&s, Some(1));
    let mut b = browser(&s, false);
    b.set_cookie(&host_only, "warren_bind", &bind);
    let replay = b.once(b.http.get(&handoff_url), &handoff_url).await;
    assert_eq!(replay.status, 400, "{replay:?}");
    assert!(replay.body.contains("already used"), "{}", replay.body);
    assert!(
        !replay
            .set_cookies
            .iter()
            .any(|c| c.starts_with("warren_session=")),
        "{replay:?}"
    );
}

/// Clients keep requesting through the balancer (kept-alive connections, spread over both
/// replicas) while replica A is killed: at most the request each client had in flight on A
/// fails, every later one succeeds on B — new connections at once — and nobody is sent to
/// sign in again.
#[tokio::test]
async fn killing_a_replica_under_load_loses_only_what_was_in_flight() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    const CLIENTS: usize = 8;

    let (s, _alice, _up) = two_replicas().await;
    let url = s.url(8080, "alice-web", "/");
    let host = s.host(8080, "alice-web");
    let host_only = host.split(':').next().unwrap().to_owned();
    let mut a = browser(&s, false);
    let page = a.sign_in(&url, "alice", "password-123").await;
    assert_eq!(page.status, 200, "{:#?}", a.hops);
    let session = a.cookie(&host_only, "warren_session").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(30))
            .resolve(&host_only, s.proxy_addr)
            .build()
            .unwrap();
        let (url, session) = (url.clone(), session.clone());
        let (stop, ok) = (stop.clone(), ok.clone());
        clients.push(tokio::spawn(async move {
            // Failed requests, and answers other than the page (a sign-in redirect).
            let (mut failed, mut wrong) = (0usize, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let resp = http
                    .get(&url)
                    .header("accept", "text/html")
                    .header("cookie", format!("warren_session={session}"))
                    .send()
                    .await;
                match resp {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        match r.text().await {
                            Ok(body) if status == 200 && body == "hello from alice-web" => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(body) => wrong.push(format!("{status}: {body:.80}")),
                            Err(_) => failed += 1,
                        }
                    }
                    Err(_) => failed += 1,
                }
            }
            (failed, wrong)
        }));
    }
    let at_least = |n: usize| {
        let ok = ok.clone();
        move || {
            let ok = ok.clone();
            async move { ok.load(Ordering::Relaxed) >= n }
        }
    };
    warren_testkit::wait_for("requests through both replicas", 30, at_least(200))
        .await
        .unwrap();
    let before = s.proxy_balancers.as_ref().unwrap().0.connections();
    assert!(
        before.iter().all(|&n| n > 0),
        "both replicas serve: {before:?}"
    );
    s.kill_proxy(0);
    let after_kill = ok.load(Ordering::Relaxed);
    warren_testkit::wait_for("requests after the kill", 30, at_least(after_kill + 400))
        .await
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let mut failed = 0;
    for c in clients {
        let (f, wrong) = c.await.unwrap();
        assert!(wrong.is_empty(), "nobody is sent to sign in: {wrong:?}");
        failed += f;
    }
    eprintln!(
        "killing a replica under load: {} answers, {failed} failed requests, {CLIENTS} clients, \
         connections per replica before the kill {before:?}",
        ok.load(Ordering::Relaxed)
    );
    // A client's kept connection carries one request at a time: at most one each of those
    // that were on replica A was in flight.
    assert!(
        failed <= before[0],
        "{failed} failed requests: more than the {} connections replica A held",
        before[0]
    );
}

/// A replica the server does not trust (another shared secret) stops at start and says why,
/// instead of serving with keys of its own that its peers would refuse.
#[tokio::test]
async fn a_replica_the_server_refuses_stops_at_start() {
    let s = Stack::start_with(StackOptions {
        ssh: false,
        ..StackOptions::default()
    })
    .await
    .expect("stack");
    let dir = tempfile::tempdir().unwrap();
    let mut config = s.another_proxy(dir.path().to_owned()).unwrap();
    config.shared_secret = "not-the-servers-secret-0123456789abcdef".into();
    let listeners = warren_proxy::ProxyListeners {
        http: tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        ssh: None,
        metrics: None,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let ran = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        warren_proxy::run(config, listeners, stop),
    )
    .await
    .expect("a refused replica stops instead of waiting");
    let err = warren_types::error_chain(&ran.unwrap_err());
    assert!(
        err.contains("the server refused to share the proxies' keys") && err.contains("401"),
        "{err}"
    );
}

/// A long download cut by a killed replica: what had arrived is kept, and the client resumes
/// it through another replica with a range request (as `curl -C -` and browsers' download
/// managers do) at once and with no sign-in; the bytes add up to the file.
#[tokio::test]
async fn a_long_download_cut_by_a_killed_replica_resumes_through_another() {
    let (s, alice, up) = two_replicas().await;
    let url = s.url(8080, "alice-web", "/big");
    let host = s.host(8080, "alice-web");
    let client = reqwest::Client::builder()
        .resolve(host.split(':').next().unwrap(), s.proxy_addr)
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    steer(&s, Some(0));
    let resp = client
        .get(&url)
        .bearer_auth(&alice.token)
        .send()
        .await
        .expect("download");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(BIG_LEN as u64));
    let mut body = resp.bytes_stream();
    let mut got: Vec<u8> = Vec::with_capacity(BIG_LEN);
    while got.len() < 1 << 20 {
        got.extend_from_slice(&body.next().await.expect("more").expect("bytes"));
    }
    s.kill_proxy(0);
    let mut cut = false;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(b) => got.extend_from_slice(&b),
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    assert!(
        cut && got.len() < BIG_LEN,
        "the kill cut the download ({} of {BIG_LEN} bytes)",
        got.len()
    );

    // Still pointed at A: the balancer finds it gone and the resumption lands on B.
    let resp = client
        .get(&url)
        .bearer_auth(&alice.token)
        .header("range", format!("bytes={}-", got.len()))
        .send()
        .await
        .expect("resumed download");
    assert_eq!(resp.status(), 206);
    let rest = resp.bytes().await.expect("the rest");
    got.extend_from_slice(&rest);
    assert_eq!(got.len(), BIG_LEN);
    let wrong = got.iter().enumerate().position(|(i, b)| *b != big_byte(i));
    assert_eq!(wrong, None, "every byte where it belongs");
    let taken = s.proxy_balancers.as_ref().unwrap().0.connections();
    assert!(taken[1] >= 1, "B served the rest: {taken:?}");
    assert!(
        up.seen()
            .iter()
            .filter(|r| r.starts_with("GET /big"))
            .count()
            >= 2
    );
}
