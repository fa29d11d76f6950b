//! A configuration's Features cannot make the agent reach what only the agent reaches: the
//! registry a Feature names, the token realm that registry names and the redirects it
//! answers with all go through the agent's outbound guard. The attacker here runs a
//! registry the operator trusts by name (the worst case: an untrusted one is refused before
//! it is asked anything), and the target is a loopback service standing in for the cloud's
//! metadata service.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use warren_features::oci::Registries;
use warren_features::{resolve, LocalFeatures};
use warren_netguard::Guard;
use warren_types::features::{FeatureBuild, FeatureRequest, FeatureSource};

struct NoLocal;

#[async_trait::async_trait]
impl LocalFeatures for NoLocal {
    async fn fetch(&self, dir: &str) -> Result<(Vec<u8>, Option<String>), String> {
        Err(format!("no folder {dir}"))
    }
}

/// Serves `app` on a loopback port; the address.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr.to_string()
}

/// The service only the agent reaches; it counts every request.
async fn internal_service() -> (String, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let app = axum::Router::new().fallback(move || {
        count.fetch_add(1, Ordering::SeqCst);
        async { r#"{"token":"instance-credentials"}"# }
    });
    (serve(app).await, asked)
}

/// What the hostile registry does.
#[derive(Clone, Copy)]
enum Trick {
    /// Asks for a token from a realm at the internal service.
    Realm,
    /// Serves a Feature's manifest, and redirects its layer to the internal service.
    Redirect,
}

/// A registry answering with `trick`, aimed at `internal`.
async fn hostile_registry(trick: Trick, internal: String) -> String {
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let internal = internal.clone();
        async move {
            let path = uri.path();
            match trick {
                Trick::Realm => (
                    StatusCode::UNAUTHORIZED,
                    [(
                        header::WWW_AUTHENTICATE,
                        format!(r#"Bearer realm="http://{internal}/latest/meta-data",service="r""#),
                    )],
                )
                    .into_response(),
                Trick::Redirect if path.contains("/manifests/") => manifest(),
                Trick::Redirect if path.contains("/blobs/") => (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, format!("http://{internal}/layer"))],
                )
                    .into_response(),
                Trick::Redirect => StatusCode::OK.into_response(),
            }
        }
    });
    serve(app).await
}

/// A Feature's manifest whose layer the registry does not serve itself.
fn manifest() -> Response {
    let zeros = "0".repeat(64);
    let body = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": warren_features::oci::MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": warren_features::oci::CONFIG_MEDIA_TYPE,
            "digest": format!("sha256:{zeros}"),
            "size": 2,
        },
        "layers": [{
            "mediaType": warren_features::oci::LAYER_MEDIA_TYPE,
            "digest": format!("sha256:{}", "1".repeat(64)),
            "size": 1024,
        }],
    });
    (
        [(
            header::CONTENT_TYPE,
            warren_features::oci::MANIFEST_MEDIA_TYPE,
        )],
        body.to_string(),
    )
        .into_response()
}

/// Resolves the one Feature `reference` with the registries in `plain_http` trusted, through
/// the agent's guard; the error's whole chain.
async fn fetch_error(reference: &str, plain_http: Vec<String>) -> String {
    let cache = tempfile::tempdir().unwrap();
    let registries = Registries {
        certs_dir: cache.path().join("certs.d"),
        plain_http,
        cache_dir: cache.path().join("cache"),
        credentials: Arc::new(|_: &str| None),
        guard: Some(Guard::default()),
    };
    let build = FeatureBuild {
        features: vec![FeatureRequest {
            source: FeatureSource::Oci(reference.to_owned()),
            options: BTreeMap::new(),
        }],
        ..Default::default()
    };
    let lines = Mutex::new(vec![]);
    let mut log = |l: String| lines.lock().unwrap().push(l);
    let err = resolve(&build, &registries, &NoLocal, &mut log)
        .await
        .expect_err("the fetch must fail");
    warren_types::error_chain(&err)
}

/// The Feature at the internal service itself (`None`) or on a hostile registry playing
/// `trick`: refused by the guard, in its words, and the service never asked.
async fn attack(trick: Option<Trick>) {
    let (internal, asked) = internal_service().await;
    let (registry, trusted) = match trick {
        None => (internal, vec![]),
        Some(trick) => {
            let registry = hostile_registry(trick, internal).await;
            (registry.clone(), vec![registry])
        }
    };
    let reference = format!("{registry}/features/x:1");
    let err = fetch_error(&reference, trusted).await;
    assert!(
        err.contains(&reference)
            && err.contains("127.0.0.1 does not resolve to a public address")
            && !err.contains("instance-credentials"),
        "{err}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the service was asked");
}

#[tokio::test]
async fn attack_a_feature_on_an_internal_address_is_not_fetched() {
    attack(None).await;
}

#[tokio::test]
async fn attack_a_registrys_token_realm_on_an_internal_address_is_not_asked() {
    attack(Some(Trick::Realm)).await;
}

#[tokio::test]
async fn attack_a_registrys_redirect_to_an_internal_address_is_not_followed() {
    attack(Some(Trick::Redirect)).await;
}
