//! Slow and numerous clients (slowloris): a client that connects and sends nothing, or sends
//! a request's headers one piece at a time and stops, is closed after the header timeout;
//! past the connection cap a new client is refused at once while the open ones keep their
//! connections; on SSH, a client that never finishes the handshake is closed, and past the
//! cap a new one gets no banner. Real sockets on loopback; of the server only the keys it
//! shares are needed (a stand-in hands a starting proxy back what it offers), and no relay.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use warren_proxy::config::ConnectionLimits;

/// Longest any single wait may take before the test fails: the limits under test are 1 s,
/// and the defaults they replace are 30 s and more, so a proxy that ignored them fails here
/// instead of passing slowly.
const BOUND: Duration = Duration::from_secs(20);

struct Proxy {
    http: String,
    ssh: String,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn proxy(limits: ConnectionLimits) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ssh = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (http_addr, ssh_addr) = (http.local_addr().unwrap(), ssh.local_addr().unwrap());
    // Nothing here talks to the relay; of the server only the shared keys are asked for.
    let nowhere: url::Url = "http://127.0.0.1:9/".parse().unwrap();
    let keys_server = keys_stand_in().await;
    let config = warren_proxy::ProxyConfig {
        public_port: Some(http_addr.port()),
        shared_secret: "limits-test-secret-0123456789abcdef".into(),
        oauth_client_secret: "limits-test-client-secret-0123456789".into(),
        session_lifetime_secs: 3600,
        activity_report_secs: 1,
        limits,
        ..warren_proxy::ProxyConfig::new(
            dir.path().join("state"),
            "ws.localhost",
            keys_server,
            nowhere,
        )
    };
    let stop = CancellationToken::new();
    tokio::spawn(warren_proxy::run(
        config,
        warren_proxy::ProxyListeners {
            http,
            ssh: Some(ssh),
            metrics: None,
        },
        stop.clone(),
    ));
    Proxy {
        http: http_addr.to_string(),
        ssh: ssh_addr.to_string(),
        stop,
        _dir: dir,
    }
}

/// Answers a starting proxy's offer of keys with those keys, as a server holding none does;
/// the test's runtime ends it.
async fn keys_stand_in() -> url::Url {
    use warren_types::internal::{ProxyCookieKey, ProxyKeyOffer, ProxyKeys, PROXY_KEYS_PATH};
    let app = axum::Router::new().route(
        PROXY_KEYS_PATH,
        axum::routing::post(|axum::Json(offer): axum::Json<ProxyKeyOffer>| async move {
            axum::Json(ProxyKeys {
                cookie_keys: vec![ProxyCookieKey {
                    generation: 1,
                    secret: offer.cookie_key.unwrap_or_default(),
                    signing_from: 0,
                }],
                ssh_host_key: offer.ssh_host_key.map(|k| k.private_key),
            })
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/").parse().unwrap()
}

/// Everything the peer sends until it closes.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    match tokio::time::timeout(BOUND, s.read_to_end(&mut buf)).await {
        Ok(_) => buf,
        Err(_) => panic!(
            "the proxy kept the connection open; got {:?}",
            String::from_utf8_lossy(&buf)
        ),
    }
}

/// A complete request to a host that is no workspace: answered by the proxy itself.
async fn answered(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: nothing.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    String::from_utf8_lossy(&read_to_close(&mut s).await).into_owned()
}

fn limits(header: u64, handshake: u64, http: usize, ssh: usize) -> ConnectionLimits {
    ConnectionLimits {
        max_http_connections: http,
        max_ssh_connections: ssh,
        header_timeout_secs: header,
        ssh_handshake_timeout_secs: handshake,
    }
}

#[tokio::test]
async fn slow_http_clients_are_closed_after_the_header_timeout() {
    let p = proxy(limits(1, 30, 100, 100)).await;
    // Connects and sends nothing.
    let mut silent = TcpStream::connect(&p.http).await.unwrap();
    // Sends part of its headers and stops.
    let mut slow = TcpStream::connect(&p.http).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: nothing.example\r\nX-A: 1\r\n")
        .await
        .unwrap();
    assert!(read_to_close(&mut silent).await.is_empty());
    let got = read_to_close(&mut slow).await;
    assert!(
        !String::from_utf8_lossy(&got).contains("404"),
        "a request without its end was answered: {}",
        String::from_utf8_lossy(&got)
    );
    // Whole requests are still served.
    let answer = answered(&p.http).await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

#[tokio::test]
async fn past_the_cap_new_http_clients_are_refused_and_the_open_ones_kept() {
    let p = proxy(limits(30, 30, 2, 100)).await;
    let mut held = vec![];
    for _ in 0..2 {
        let mut s = TcpStream::connect(&p.http).await.unwrap();
        // Past the first byte, into the header read: the connection holds its place.
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    // Accepted in order: the third is past the cap.
    let mut third = TcpStream::connect(&p.http).await.unwrap();
    let got = String::from_utf8_lossy(&read_to_close(&mut third).await).into_owned();
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("too many connections"), "{got}");
    // The held ones still finish their requests.
    held[0]
        .write_all(b"Host: nothing.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let first = String::from_utf8_lossy(&read_to_close(&mut held[0]).await).into_owned();
    assert!(first.starts_with("HTTP/1.1 404"), "{first}");
    // Its place is free again once the proxy sees it closed.
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let answer = answered(&p.http).await;
        if answer.starts_with("HTTP/1.1 404") {
            break;
        }
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never came free"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn ssh_clients_that_never_finish_the_handshake_are_closed() {
    let p = proxy(limits(30, 1, 100, 100)).await;
    let mut silent = TcpStream::connect(&p.ssh).await.unwrap();
    let got = read_to_close(&mut silent).await;
    // The server introduced itself, then gave up on the client.
    assert!(
        String::from_utf8_lossy(&got).starts_with("SSH-2.0-warren"),
        "{got:?}"
    );
}

#[tokio::test]
async fn past_the_cap_new_ssh_clients_get_no_banner() {
    let p = proxy(limits(30, 30, 100, 1)).await;
    let mut held = TcpStream::connect(&p.ssh).await.unwrap();
    let mut banner = [0u8; 14];
    tokio::time::timeout(BOUND, held.read_exact(&mut banner))
        .await
        .expect("banner in time")
        .unwrap();
    assert_eq!(&banner, b"SSH-2.0-warren");
    let mut refused = TcpStream::connect(&p.ssh).await.unwrap();
    assert!(
        read_to_close(&mut refused).await.is_empty(),
        "a connection past the cap was served"
    );
    drop(held);
}
