//! Share links on workspace hosts (issue 41, item 4): `GET /.warren/share?token=wrn_share_…`
//! asks the server whether the link opens this host's port; if so the browser gets a share
//! cookie for this host only (signed like sessions, ending when the link does) and is sent to
//! `/`, so the secret leaves the address bar (and every `Referer`) at once. Each request with
//! the cookie is then authorised as the link's holder, so a revoked link stops working within
//! the authorisation cache's bound.

use super::cookies;
use super::host::Target;
use super::pages;
use super::signin::redirect;
use crate::server_api::ServerApiError;
use crate::Shared;
use axum::body::Body;
use http::header::SET_COOKIE;
use http::request::Parts;
use http::{HeaderMap, Response, StatusCode};
use serde::{Deserialize, Serialize};
use warren_types::internal::ShareRedeemRequest;
use warren_types::sharing::SHARE_TOKEN_PREFIX;
use warren_types::WorkspaceId;

const AUD_SHARE: &str = "warren-share";
/// The longest secret accepted (what the server makes is far shorter).
const MAX_TOKEN: usize = 200;

/// The share cookie's claims.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ShareClaims {
    pub aud: String,
    /// The share link's id.
    pub link: i64,
    pub ws: WorkspaceId,
    /// The one host it is valid on.
    pub host: String,
    pub exp: i64,
}

fn secure(shared: &Shared) -> bool {
    shared.config.public_scheme == "https"
}

/// The share cookie's claims, if one valid for this host was sent (each cookie of the name
/// is tried, as for sessions).
pub(crate) fn cookie(shared: &Shared, target: &Target, headers: &HeaderMap) -> Option<ShareClaims> {
    cookies::get_all(headers, cookies::SHARE, secure(shared)).find_map(|raw| {
        let c: ShareClaims = shared.front.keys.verify(raw, AUD_SHARE)?;
        (c.host == target.host).then_some(c)
    })
}

/// `GET /.warren/share?token=…` on an endpoint host.
pub(crate) async fn redeem(shared: &Shared, target: &Target, parts: &Parts) -> Response<Body> {
    let headers = &parts.headers;
    let invalid = || {
        pages::error(
            headers,
            StatusCode::NOT_FOUND,
            "share_link_invalid",
            "This share link does not open anything",
            "It has expired, was revoked, or is for another address. Ask whoever shared it for a new one.",
        )
    };
    let (Some(workspace), Some(port)) = (target.workspace(), target.port()) else {
        return invalid();
    };
    let token = url::form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .filter(|t| t.starts_with(SHARE_TOKEN_PREFIX) && t.len() <= MAX_TOKEN);
    let Some(token) = token else {
        return invalid();
    };
    let request = ShareRedeemRequest {
        host: workspace.to_owned(),
        port,
        token,
    };
    let link = match shared.server.redeem_share(&request).await {
        Ok(l) => l,
        Err(ServerApiError::Denied) => return invalid(),
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "redeeming a share link failed");
            return pages::server_unavailable(headers);
        }
    };
    let exp = link.expires_at_ms / 1000;
    let claims = ShareClaims {
        aud: AUD_SHARE.into(),
        link: link.link_id,
        ws: link.workspace_id,
        host: target.host.clone(),
        exp,
    };
    let now = super::keys::now_secs();
    let max_age = u64::try_from(exp - now).unwrap_or(0);
    let value = shared.front.keys.sign(&claims);
    tracing::info!(workspace, port, link = link.link_id, "share link opened");
    let mut r = redirect(StatusCode::SEE_OTHER, "/");
    r.headers_mut().append(
        SET_COOKIE,
        cookies::set(cookies::SHARE, &value, max_age, secure(shared)),
    );
    r
}
