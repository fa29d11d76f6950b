//! Shared pieces of the proxy's tests: a local upstream playing the workspace's web app,
//! and a cookie-keeping browser that follows redirects by hand across hosts.

#![allow(dead_code)]

use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use axum::Router;
use futures::StreamExt;
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The workspace's web app: `/` names itself, `/headers` echoes the request headers as
/// JSON, `/upload` streams the body and answers its size and SHA-256, `/ws` echoes
/// WebSocket messages, `/toss` answers `Set-Cookie`s aimed at the whole workspace domain
/// (as a hostile workspace would). Every request it gets is logged, to prove what never
/// reached it.
pub struct Upstream {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

impl Upstream {
    /// `"{method} {path and query}"` of every request so far, in arrival order.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn upstream(name: &'static str) -> Upstream {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new()
        .route(
            "/",
            get(move || async move { format!("hello from {name}") }),
        )
        .route(
            "/headers",
            any(|req: Request| async move {
                let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for (k, v) in req.headers() {
                    m.entry(k.as_str().to_owned())
                        .or_default()
                        .push(v.to_str().unwrap_or("").to_owned());
                }
                axum::Json(m)
            }),
        )
        .route(
            "/upload",
            post(|req: Request| async move {
                let mut body = req.into_body().into_data_stream();
                let mut n = 0u64;
                let mut h = sha2::Sha256::new();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.expect("upload chunk");
                    n += chunk.len() as u64;
                    h.update(&chunk);
                }
                format!("{n} {}", hex(&h.finalize()))
            }),
        )
        .route(
            "/ws",
            get(|ws: WebSocketUpgrade| async move {
                ws.on_upgrade(|mut socket| async move {
                    while let Some(Ok(m)) = socket.recv().await {
                        let reply = match m {
                            Message::Text(t) => {
                                Message::Text(format!("echo: {}", t.as_str()).into())
                            }
                            Message::Binary(b) => Message::Binary(b),
                            Message::Close(_) => break,
                            _ => continue,
                        };
                        if socket.send(reply).await.is_err() {
                            break;
                        }
                    }
                })
                .into_response()
            }),
        )
        .route("/big", get(big))
        .route(
            "/toss",
            get(|| async {
                let bare = warren_testkit::DOMAIN;
                let domain = format!("Domain={bare}");
                let cookies: Vec<(axum::http::HeaderName, String)> = [
                    format!("warren_session=planted; {domain}; Path=/"),
                    format!("other=1; {domain}; Path=/"),
                    "__Host-warren_session=planted; Path=/; Secure".to_owned(),
                    format!("warren_bind=planted; Path=/; domain=.{bare}"),
                    "app=2; Path=/; HttpOnly".to_owned(),
                ]
                .into_iter()
                .map(|c| (axum::http::header::SET_COOKIE, c))
                .collect();
                (axum::response::AppendHeaders(cookies), "tossed")
            }),
        )
        .layer(axum::middleware::from_fn(
            move |req: Request, next: axum::middleware::Next| {
                let log = log.clone();
                async move {
                    log.lock()
                        .unwrap()
                        .push(format!("{} {}", req.method(), req.uri()));
                    next.run(req).await
                }
            },
        ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        axum::serve(l, app)
            .with_graceful_shutdown(async move { s.cancelled().await })
            .await
            .ok();
    });
    Upstream { addr, seen, stop }
}

/// Size of the upstream's `/big` download.
pub const BIG_LEN: usize = 64 << 20;

/// Byte `i` of `/big`: not a short cycle, so a resumed download at the wrong offset shows.
pub fn big_byte(i: usize) -> u8 {
    ((i as u64).wrapping_mul(2_654_435_761) >> 11) as u8
}

/// `GET /big`: [`BIG_LEN`] bytes streamed in 64 KiB chunks; `Range: bytes=N-` answers the
/// rest from `N` (206), as a server of large files does for a resumed download.
async fn big(req: Request) -> axum::response::Response {
    let from = req
        .headers()
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&n| n < BIG_LEN);
    let start = from.unwrap_or(0);
    let chunks = futures::stream::iter((start..BIG_LEN).step_by(64 * 1024).map(|at| {
        let end = (at + 64 * 1024).min(BIG_LEN);
        Ok::<_, std::io::Error>(bytes::Bytes::from(
            (at..end).map(big_byte).collect::<Vec<u8>>(),
        ))
    }));
    let mut resp = axum::response::Response::new(axum::body::Body::from_stream(chunks));
    if from.is_some() {
        *resp.status_mut() = axum::http::StatusCode::PARTIAL_CONTENT;
        let range = format!("bytes {start}-{}/{BIG_LEN}", BIG_LEN - 1);
        resp.headers_mut()
            .insert("content-range", range.parse().unwrap());
    }
    let h = resp.headers_mut();
    h.insert("content-length", (BIG_LEN - start).into());
    h.insert(
        "accept-ranges",
        axum::http::HeaderValue::from_static("bytes"),
    );
    resp
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One answer the browser saw.
#[derive(Debug)]
pub struct Seen {
    pub url: String,
    pub status: u16,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
    pub body: String,
}

impl Seen {
    /// The hidden inputs of the page's form, unescaped.
    pub fn hidden(&self) -> Vec<(String, String)> {
        hidden_inputs(&self.body)
    }
}

pub fn hidden_inputs(body: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    for part in body.split("<input type=\"hidden\" name=\"").skip(1) {
        let (name, rest) = part.split_once("\" value=\"").expect("value");
        let value = rest.split_once('"').expect("end").0;
        out.push((unescape(name), unescape(value)));
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// A browser: host-only cookies per host, `Accept: text/html`, follows redirects itself
/// and records every hop.
pub struct Browser {
    pub http: reqwest::Client,
    pub jar: HashMap<String, BTreeMap<String, String>>,
    pub hops: Vec<Seen>,
}

fn host_of(url: &str) -> String {
    url::Url::parse(url).unwrap().host_str().unwrap().to_owned()
}

impl Browser {
    pub fn new(http: reqwest::Client) -> Browser {
        Browser {
            http,
            jar: HashMap::new(),
            hops: vec![],
        }
    }

    pub fn cookie(&self, host: &str, name: &str) -> Option<String> {
        self.jar.get(host)?.get(name).cloned()
    }

    pub fn set_cookie(&mut self, host: &str, name: &str, value: &str) {
        self.jar
            .entry(host.to_owned())
            .or_default()
            .insert(name.to_owned(), value.to_owned());
    }

    /// One request, no redirect following.
    pub async fn once(&mut self, req: reqwest::RequestBuilder, url: &str) -> Seen {
        let host = host_of(url);
        let mut req = req.header("accept", "text/html");
        if let Some(c) = self.jar.get(&host).filter(|c| !c.is_empty()) {
            let v = c
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ");
            req = req.header("cookie", v);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let set_cookies: Vec<String> = resp
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        for c in &set_cookies {
            let (k, v) = c.split(';').next().unwrap().split_once('=').unwrap();
            let jar = self.jar.entry(host.clone()).or_default();
            if v.is_empty() || c.contains("Max-Age=0") {
                jar.remove(k);
            } else {
                jar.insert(k.to_owned(), v.to_owned());
            }
        }
        let location = resp
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned())
            .map(|l| url::Url::parse(url).unwrap().join(&l).unwrap().to_string());
        let body = resp.text().await.unwrap_or_default();
        Seen {
            url: url.to_owned(),
            status,
            location,
            set_cookies,
            body,
        }
    }

    /// GET, following redirects; returns the last answer.
    pub async fn get(&mut self, url: &str) -> Seen {
        let mut url = url.to_owned();
        for _ in 0..10 {
            let seen = self.once(self.http.get(&url), &url).await;
            match (&seen.location, seen.status) {
                (Some(l), 301 | 302 | 303 | 307 | 308) => {
                    url = l.clone();
                    self.hops.push(seen);
                }
                _ => return seen,
            }
        }
        panic!("too many redirects");
    }

    /// POSTs a form, following redirects (as GETs) afterwards.
    pub async fn post_form(&mut self, url: &str, form: &[(String, String)]) -> Seen {
        let seen = self.once(self.http.post(url).form(form), url).await;
        match (&seen.location, seen.status) {
            (Some(l), 301..=303) => {
                let l = l.clone();
                self.hops.push(seen);
                self.get(&l).await
            }
            _ => seen,
        }
    }

    /// Opens `url` (a workspace page), signs in on the server's login page as
    /// `username`, and returns the page the browser lands on.
    pub async fn sign_in(&mut self, url: &str, username: &str, password: &str) -> Seen {
        let login = self.get(url).await;
        assert_eq!(login.status, 200, "login page: {login:?}");
        assert!(
            login.body.contains("action=\"/oauth/login\""),
            "{}",
            login.body
        );
        let mut form = login.hidden();
        form.push(("username".into(), username.into()));
        form.push(("password".into(), password.into()));
        let origin = url::Url::parse(&login.url)
            .unwrap()
            .origin()
            .ascii_serialization();
        self.post_form(&format!("{origin}/oauth/login"), &form)
            .await
    }
}

/// The cookie keys the server shares with the proxies, as a proxy polls them.
pub async fn cookie_keys(s: &warren_testkit::Stack) -> Vec<warren_types::internal::ProxyCookieKey> {
    let api = warren_proxy::server_api::ServerApi::new(
        s.api_url.parse().unwrap(),
        s.shared_secret.as_bytes(),
        None,
    )
    .unwrap();
    api.cookie_keys().await.unwrap().cookie_keys
}

/// The key proxies sign with now (base64url).
pub async fn signing_key(s: &warren_testkit::Stack) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let keys = cookie_keys(s).await;
    keys.iter()
        .rev()
        .find(|k| k.signing_from <= now)
        .unwrap_or(&keys[0])
        .secret
        .clone()
}

/// The `kid` in a JWT's header.
pub fn jwt_kid(token: &str) -> String {
    jsonwebtoken::decode_header(token).unwrap().kid.unwrap()
}
