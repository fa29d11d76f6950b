//! Workspace hosts over HTTP/1.1 and HTTP/2: host routing, sign-in, authorisation and
//! forwarding (access.md).

use crate::{ProxyError, Shared};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the HTTP listener until `shutdown`.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ProxyError> {
    // Placeholder: the HTTP front door lands with the proxy work.
    let _ = (shared, listener);
    shutdown.cancelled().await;
    Ok(())
}
