//! `warren ws port-forward`: one TCP connection to any port of a workspace, carried as binary
//! messages of a WebSocket on the workspace's terminal host (`/.warren/port-forward/{port}`),
//! through the same door as everything else (who asks, may they reach this workspace) and
//! the relay's tunnel, as SSH's `direct-tcpip` is. Like `kubectl port-forward`, any port of
//! the owner's own workspace, declared or not. Cross-site pages cannot open it with a
//! browser's session cookie: a request with a foreign `Origin` is refused.

use crate::terminal::{error, same_origin_upgrade};
use crate::Shared;
use axum::extract::ws::{Message, WebSocket};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_types::internal::WorkspaceAccess;
use warren_types::relay::DialTarget;

/// The reserved path prefix on terminal hosts.
pub(crate) const PATH_PREFIX: &str = "/.warren/port-forward/";

/// Largest WebSocket message accepted from the client (the CLI sends reads of its socket).
const MAX_MESSAGE: usize = 1 << 20;

/// The port a port-forward path names, if it is one.
pub(crate) fn port_of(path: &str) -> Option<Result<u16, String>> {
    let rest = path.strip_prefix(PATH_PREFIX)?;
    Some(
        rest.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{rest:?} is not a port (1-65535)")),
    )
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    access: Arc<WorkspaceAccess>,
    port: Result<u16, String>,
    req: axum::extract::Request,
) -> Response {
    let port = match port {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_port", &e),
    };
    if req.method() != Method::GET {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "port-forward is a WebSocket (GET with an upgrade)",
        );
    }
    let upgrade = match same_origin_upgrade(
        req,
        "port-forward accepts no connections from web pages of other sites",
    )
    .await
    {
        Ok((u, _)) => u,
        Err(r) => return r,
    };
    shared.activity.touch(access.workspace_id);
    upgrade
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| pipe(shared, access, port, socket))
}

/// Copies between the WebSocket and a relay tunnel to the port until either side ends.
async fn pipe(shared: Arc<Shared>, access: Arc<WorkspaceAccess>, port: u16, socket: WebSocket) {
    let target = DialTarget {
        workspace: access.workspace_name.clone(),
        namespace: access.namespace.clone(),
        port,
    };
    let (mut to_client, mut from_client) = socket.split();
    let tunnel = match shared.relay.open_tunnel(access.agent_id, &target).await {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(workspace = %access.workspace_name, port, error = %crate::error_chain(&e), "port-forward: tunnel failed");
            let reason = match &e {
                crate::relay::RelayError::Refused { message, .. } => message.clone(),
                other => crate::error_chain(other),
            };
            let mut reason: String = reason.chars().take(120).collect();
            if reason.is_empty() {
                reason = "the port could not be reached".into();
            }
            let _ = to_client
                .send(Message::Close(Some(axum::extract::ws::CloseFrame {
                    code: 1011,
                    reason: reason.into(),
                })))
                .await;
            return;
        }
    };
    let (mut tunnel_read, mut tunnel_write) = tokio::io::split(tunnel);
    let workspace_id = access.workspace_id;
    let activity = shared.activity.clone();
    let upstream = async {
        while let Some(msg) = from_client.next().await {
            match msg {
                Ok(Message::Binary(b)) => {
                    activity.touch(workspace_id);
                    if tunnel_write.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = tunnel_write.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match tunnel_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    activity.touch(workspace_id);
                    if to_client
                        .send(Message::Binary(buf[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = to_client.send(Message::Close(None)).await;
    };
    // Either direction ending ends the connection (like a TCP close seen by kubectl).
    tokio::select! {
        // Not cancel-safe and need not be: the other half is dropped with the connection.
        _ = upstream => {}
        // As above.
        _ = downstream => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_in_paths() {
        assert_eq!(port_of("/.warren/port-forward/5432"), Some(Ok(5432)));
        assert!(port_of("/.warren/port-forward/0").unwrap().is_err());
        assert!(port_of("/.warren/port-forward/70000").unwrap().is_err());
        assert!(port_of("/.warren/port-forward/x").unwrap().is_err());
        assert_eq!(port_of("/ws"), None);
    }
}
