//! `POST /internal/agents/build-context`: a relay asks, for its agent, the build context of
//! an image a workspace builds at start; answered by `crate::app::builds` with the tar
//! archive, streamed.

use crate::app::{self, AppState};
use crate::http::error::{HttpError, InternalJson};
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use warren_types::relay::{BuildContextRequest, BUILD_COMMIT_HEADER, BUILD_KEY_HEADER};

pub async fn context(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(req): InternalJson<BuildContextRequest>,
) -> Result<Response, HttpError> {
    let bearer = crate::relay::jwt::bearer(&headers);
    let app::builds::BuildContext { archive, key } =
        app::builds::context(&state, bearer, &req).await?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(archive.file),
    ));
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(archive.len));
    for (name, value) in [
        (BUILD_COMMIT_HEADER, &archive.commit),
        (BUILD_KEY_HEADER, &key),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    }
    Ok(resp)
}
