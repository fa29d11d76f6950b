//! The UI's static files, compiled into the binary (no CDN; works offline): the stylesheet
//! and the vendored htmx scripts (`assets/vendor/LICENSES.md`). Pages link them with a
//! content hash in the URL, so they are cached for good and a new build is never stale.

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use http::{header, StatusCode};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

impl Asset {
    const fn new(name: &'static str, content_type: &'static str, body: &'static [u8]) -> Asset {
        Asset {
            name,
            content_type,
            body,
        }
    }
}

const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

const ASSETS: &[Asset] = &[
    Asset::new(
        "warren.css",
        CSS,
        include_bytes!("../../../assets/warren.css"),
    ),
    Asset::new("warren.js", JS, include_bytes!("../../../assets/warren.js")),
    Asset::new(
        "htmx.min.js",
        JS,
        include_bytes!("../../../assets/vendor/htmx-2.0.11.min.js"),
    ),
    Asset::new(
        "sse.min.js",
        JS,
        include_bytes!("../../../assets/vendor/htmx-ext-sse-2.2.4.min.js"),
    ),
];

/// Each asset's content hash (first 12 hex digits of its SHA-256), computed once.
fn hashes() -> &'static Vec<String> {
    static H: OnceLock<Vec<String>> = OnceLock::new();
    H.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| hex::encode(Sha256::digest(a.body))[..12].to_owned())
            .collect()
    })
}

/// The URL pages link an asset by.
pub fn url(name: &str) -> String {
    match ASSETS.iter().position(|a| a.name == name) {
        Some(i) => format!("/assets/{name}?v={}", hashes()[i]),
        None => format!("/assets/{name}"),
    }
}

/// `GET /assets/{file}`
pub async fn serve(Path(file): Path<String>) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.name == file) else {
        return super::html_not_found();
    };
    let mut r = (StatusCode::OK, a.body).into_response();
    crate::http::set_headers(
        &mut r,
        &[
            (header::CONTENT_TYPE, a.content_type),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
    );
    r
}
