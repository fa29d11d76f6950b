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
}
