//! The state every handler shares.

use crate::clock::Clock;
use crate::internal::signal::SignalHub;
use crate::store::Store;
use std::sync::Arc;
use warren_types::reconcile::ReconcileSettings;

#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// HS256 secret shared with the relays.
    pub relay_secret: Arc<Vec<u8>>,
    pub signals: SignalHub,
    pub settings: ReconcileSettings,
    /// The devfile used when neither request nor project gives one.
    pub default_devfile: Arc<String>,
    /// How users reach workspaces besides the API (`GET /api/v1/access`).
    pub access: Arc<warren_types::api::AccessInfo>,
    /// Slows password guessing down (`throttle`).
    pub login_throttle: Arc<crate::throttle::LoginThrottle>,
}

/// The client's address as the server's listener saw it (`None` where a test drives the
/// router without a socket). Behind a reverse proxy this is the proxy's address.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}
