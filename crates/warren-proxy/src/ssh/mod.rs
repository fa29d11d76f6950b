//! The SSH server (russh): user = workspace name; public key or personal access token;
//! sessions, `direct-tcpip` and `sftp` through the relay (access.md).

use crate::{ProxyError, Shared};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves SSH on `listener` until `shutdown`.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ProxyError> {
    // Placeholder: the SSH server lands with the SSH work.
    let _ = (shared, listener);
    shutdown.cancelled().await;
    Ok(())
}
