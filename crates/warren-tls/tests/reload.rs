//! The TLS listener serves the certificate its files hold, and a changed pair of files is
//! served from the next handshake on, without dropping open connections; a half-written or
//! broken pair leaves the previous certificate in use.

use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_tls::{CaBundle, CertFiles, ServerCert, TlsError, TlsListener};

struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf for localhost and 127.0.0.1: (certificate PEM, key PEM).
    fn leaf(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn bundle(&self, dir: &Path, name: &str) -> CaBundle {
        let path = dir.join(name);
        std::fs::write(&path, self.cert.pem()).unwrap();
        CaBundle::load(&path).unwrap()
    }
}

fn write(files: &CertFiles, (cert, key): &(String, String)) {
    std::fs::write(&files.cert, cert).unwrap();
    std::fs::write(&files.key, key).unwrap();
}

/// A client that trusts only `ca` (no public roots) and opens a new connection per request.
/// (A client resumes its TLS sessions, which skips the certificate: make a new one to see
/// the certificate served now.)
fn client(ca: &CaBundle) -> reqwest::Client {
    ca.apply(reqwest::Client::builder().tls_built_in_root_certs(false))
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Serves "hello" over TLS on a free port until `shutdown`; answers the port.
async fn serve(cert: &ServerCert, shutdown: &CancellationToken) -> u16 {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = TlsListener::new(tcp, cert, &[b"h2", b"http/1.1"]).unwrap();
    let port = axum::serve::Listener::local_addr(&listener).unwrap().port();
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    let stop = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .unwrap();
    });
    port
}

async fn get(client: &reqwest::Client, url: &str) -> Result<String, reqwest::Error> {
    client
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await
}

#[tokio::test]
async fn a_changed_certificate_is_served_from_the_next_handshake_on() {
    let dir = tempfile::tempdir().unwrap();
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    let (old_ca, new_ca) = (Ca::new("old"), Ca::new("new"));
    let (old, new) = (old_ca.leaf(), new_ca.leaf());
    write(&files, &old);
    let cert = ServerCert::load(files.clone()).unwrap();
    assert_eq!(cert.generation(), 1);
    let shutdown = CancellationToken::new();
    let url = format!("https://127.0.0.1:{}/", serve(&cert, &shutdown).await);
    let trusts_old = client(&old_ca.bundle(dir.path(), "old.pem"));
    let trusts_new = client(&new_ca.bundle(dir.path(), "new.pem"));
    assert_eq!(get(&trusts_old, &url).await.unwrap(), "hello");
    assert!(get(&trusts_new, &url).await.is_err());

    // A connection opened before the change keeps working after it.
    let kept = old_ca
        .bundle(dir.path(), "old.pem")
        .apply(reqwest::Client::builder().tls_built_in_root_certs(false))
        .build()
        .unwrap();
    assert_eq!(get(&kept, &url).await.unwrap(), "hello");

    // Nothing changed: nothing reloaded.
    assert!(!cert.reload().unwrap());

    // Half-written: the new certificate beside the old key. Refused, the old one stays.
    std::fs::write(&files.cert, &new.0).unwrap();
    let err = cert.reload().unwrap_err();
    assert!(matches!(err, TlsError::Key { .. }), "{err}");
    assert!(err.to_string().contains("does not load with"), "{err}");
    assert_eq!(get(&trusts_old, &url).await.unwrap(), "hello");

    // Garbage in the key file: named, the old certificate stays.
    std::fs::write(&files.key, "not a key").unwrap();
    let err = cert.reload().unwrap_err();
    assert!(err.to_string().contains("tls.key"), "{err}");
    assert_eq!(get(&trusts_old, &url).await.unwrap(), "hello");

    // The whole new pair, picked up by the watcher on its own.
    std::fs::write(&files.key, &new.1).unwrap();
    let watcher = tokio::spawn(
        cert.clone()
            .watch(Duration::from_millis(20), shutdown.child_token()),
    );
    tokio::time::timeout(Duration::from_secs(10), async {
        while cert.generation() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the watcher reloads the changed files");
    let trusts_old = client(&old_ca.bundle(dir.path(), "old.pem"));
    let trusts_new = client(&new_ca.bundle(dir.path(), "new.pem"));
    assert_eq!(get(&trusts_new, &url).await.unwrap(), "hello");
    assert!(get(&trusts_old, &url).await.is_err());
    assert_eq!(
        get(&kept, &url).await.unwrap(),
        "hello",
        "the connection opened before the change stays open"
    );
    shutdown.cancel();
    watcher.await.unwrap();
}

#[tokio::test]
async fn a_client_that_stalls_its_handshake_holds_up_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    let ca = Ca::new("ca");
    write(&files, &ca.leaf());
    let cert = ServerCert::load(files).unwrap();
    let shutdown = CancellationToken::new();
    let port = serve(&cert, &shutdown).await;
    let url = format!("https://localhost:{port}/");
    // Connected, silent.
    let _stalled = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let c = client(&ca.bundle(dir.path(), "ca.pem"));
    assert_eq!(get(&c, &url).await.unwrap(), "hello");
    // Plain HTTP on the TLS port is refused, not served.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    shutdown.cancel();
}

#[test]
fn bad_files_are_named_before_anything_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let files = CertFiles {
        cert: dir.path().join("missing.crt"),
        key: dir.path().join("missing.key"),
    };
    let err = ServerCert::load(files.clone()).unwrap_err();
    assert!(err.to_string().contains("missing.crt"), "{err}");
    std::fs::write(&files.cert, "no pem here").unwrap();
    std::fs::write(&files.key, "no pem here").unwrap();
    let err = ServerCert::load(files).unwrap_err();
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let err = CaBundle::load(&empty).unwrap_err();
    assert!(err.to_string().contains("empty.pem"), "{err}");
    let err = CertFiles::from_options(Some("a".into()), None).unwrap_err();
    assert!(err.to_string().contains("key file is missing"), "{err}");
    assert!(CertFiles::from_options(None, None).unwrap().is_none());
}
