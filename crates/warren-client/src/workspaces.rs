//! The client's calls for workspaces: their lifecycle, grants, logs, commands and port
//! forwarding, and the streams the last three return.

use super::*;

impl Client {
    // ---- workspaces ----

    /// One page of `GET /workspaces`.
    pub async fn list_workspaces(&self, query: &WorkspaceQuery) -> Result<Page<Workspace>> {
        self.call(
            Method::GET,
            &routes::workspaces(),
            &query_pairs(query),
            None::<&()>,
        )
        .await
    }

    /// Every page of `GET /workspaces`, following `next_cursor` until the end.
    pub async fn list_all_workspaces(&self, query: &WorkspaceQuery) -> Result<Vec<Workspace>> {
        let mut query = query.clone();
        let mut items = Vec::new();
        let mut seen = std::collections::HashSet::new();
        loop {
            let page = self.list_workspaces(&query).await?;
            items.extend(page.items);
            match page.next_cursor {
                Some(cursor) => {
                    if !seen.insert(cursor.clone()) {
                        return Err(Error::CursorLoop { cursor });
                    }
                    query.cursor = Some(cursor);
                }
                None => return Ok(items),
            }
        }
    }

    /// `POST /workspaces`; a devfile the server refuses comes back as a 422 [`Error::Api`]
    /// whose message lists the devfile's errors with their paths.
    pub async fn create_workspace(&self, req: &CreateWorkspaceRequest) -> Result<Workspace> {
        self.with_body(Method::POST, &routes::workspaces(), req)
            .await
    }

    pub async fn get_workspace(&self, name_or_id: &str) -> Result<Workspace> {
        self.get(&routes::workspace(name_or_id)).await
    }

    /// The workspace once its `version` differs from `version`, or as it is after
    /// `timeout_secs` (1–60): the server answers on the change instead of being polled.
    pub async fn watch_workspace(
        &self,
        name_or_id: &str,
        version: i64,
        timeout_secs: u64,
    ) -> Result<Workspace> {
        self.call(
            Method::GET,
            &routes::workspace(name_or_id),
            &[
                ("watch_version", version.to_string()),
                ("timeout_seconds", timeout_secs.to_string()),
            ],
            None::<&()>,
        )
        .await
    }

    pub async fn set_desired_state(
        &self,
        name_or_id: &str,
        desired_state: DesiredState,
    ) -> Result<Workspace> {
        let req = UpdateDesiredStateRequest { desired_state };
        self.with_body(
            Method::PUT,
            &routes::workspace_desired_state(name_or_id),
            &req,
        )
        .await
    }

    pub async fn resize_workspace(
        &self,
        name_or_id: &str,
        resources: WorkspaceResources,
    ) -> Result<Workspace> {
        let req = ResizeWorkspaceRequest { resources };
        self.with_body(Method::PUT, &routes::workspace_resources(name_or_id), &req)
            .await
    }

    /// `POST /workspaces/{name}/rebuild`: makes the workspace again from its definition (or
    /// with `dry_run`, tells what that would change).
    pub async fn rebuild_workspace(
        &self,
        name_or_id: &str,
        req: &RebuildWorkspaceRequest,
    ) -> Result<RebuildOutcome> {
        self.with_body(Method::POST, &routes::workspace_rebuild(name_or_id), req)
            .await
    }

    /// `GET /workspaces/{name}/logs`: the last `tail` lines a container wrote (`None`: the
    /// main container), as bytes (the workspace's own text, not necessarily UTF-8).
    pub async fn workspace_logs(
        &self,
        name_or_id: &str,
        tail: Option<u32>,
        container: Option<&str>,
    ) -> Result<Vec<u8>> {
        let mut query = Vec::new();
        if let Some(t) = tail {
            query.push(("tail", t.to_string()));
        }
        if let Some(c) = container {
            query.push(("container", c.to_owned()));
        }
        let url = self.url(&routes::workspace_logs(name_or_id));
        self.send(Method::GET, url, &query, None::<&()>)
            .await
            .map(|(_, bytes)| bytes)
    }

    /// `GET /workspaces/{name}/startup`: how the main container's startup went, as its
    /// output says.
    pub async fn workspace_startup(
        &self,
        name_or_id: &str,
    ) -> Result<warren_types::startup::WorkspaceStartup> {
        self.get(&routes::workspace_startup(name_or_id)).await
    }

    /// `GET /workspaces/{name}/logs?follow=true`: the tail, then what the container writes
    /// next, chunk by chunk, until it stops.
    pub async fn follow_workspace_logs(
        &self,
        name_or_id: &str,
        tail: Option<u32>,
        container: Option<&str>,
    ) -> Result<LogFollow> {
        let url = self.url(&routes::workspace_logs(name_or_id));
        let mut req = self.streams.get(url.clone()).query(&[("follow", "true")]);
        if let Some(t) = tail {
            req = req.query(&[("tail", t.to_string())]);
        }
        if let Some(c) = container {
            req = req.query(&[("container", c)]);
        }
        Ok(LogFollow {
            resp: self.open_stream(req, &url).await?,
            url: url.to_string(),
        })
    }

    /// Sends a request whose answer is read as it comes (no whole-answer timeout): the
    /// answer once it is a success, else the API error it carries.
    async fn open_stream(
        &self,
        mut req: reqwest::RequestBuilder,
        url: &Url,
    ) -> Result<reqwest::Response> {
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let transport = |source| Error::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        if !status.is_success() {
            let bytes = resp.bytes().await.map_err(transport)?;
            return Err(api_error(status, &bytes));
        }
        Ok(resp)
    }

    /// `POST /workspaces/{name}/commands/{command}/run`: runs a devfile command; its events
    /// follow as they happen (dropping the run stops the command).
    pub async fn run_workspace_command(
        &self,
        name_or_id: &str,
        command: &str,
    ) -> Result<CommandRun> {
        let url = self.url(&routes::workspace_command_run(name_or_id, command));
        let req = self.streams.post(url.clone());
        Ok(CommandRun {
            resp: self.open_stream(req, &url).await?,
            url: url.to_string(),
            buf: Vec::new(),
        })
    }

    /// `DELETE /workspaces/{name}`: asks for `Terminated`; answers the workspace.
    pub async fn delete_workspace(&self, name_or_id: &str) -> Result<Workspace> {
        self.call(
            Method::DELETE,
            &routes::workspace(name_or_id),
            &[],
            None::<&()>,
        )
        .await
    }

    // ---- port-forward ----

    /// Opens one TCP connection to `port` of the workspace whose terminal is at
    /// `terminal_url` (`Workspace::terminal_url`): a WebSocket through the proxy carrying the
    /// bytes as binary messages. The token must have the `workspace` scope.
    pub async fn open_port_forward(&self, terminal_url: &str, port: u16) -> Result<PortForward> {
        let url = beside_terminal(terminal_url, &format!(".warren/port-forward/{port}"))?;
        Ok(PortForward {
            ws: self.open_websocket(url).await?,
        })
    }

    /// Opens the web terminal of the workspace whose terminal is at `terminal_url`
    /// (`Workspace::terminal_url`) at `cols`×`rows`, as the browser's page does: binary
    /// messages carry the terminal's bytes both ways; text messages are the proxy's JSON
    /// (`{"type":"resize",…}` from the client, `{"type":"exit"|"error",…}` to it). The token
    /// must have the `workspace` scope.
    pub async fn open_terminal(
        &self,
        terminal_url: &str,
        cols: u16,
        rows: u16,
    ) -> Result<TerminalSocket> {
        let url = beside_terminal(terminal_url, &format!("ws?cols={cols}&rows={rows}"))?;
        self.open_websocket(url).await
    }

    /// A WebSocket to `url` (`http`/`https`) with the client's token, through the same
    /// connection settings as its calls.
    async fn open_websocket(&self, url: Url) -> Result<TerminalSocket> {
        use base64::Engine;
        let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
        // `*.localhost` is loopback (RFC 6761) even where the system resolver does not say
        // so (`warren up`'s default workspace domain is `ws.localhost`).
        let http = match url.host_str() {
            Some(h) if h == "localhost" || h.ends_with(".localhost") => {
                let port = url.port_or_known_default().unwrap_or(80);
                reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .resolve(h, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
                    .build()
                    .map_err(|e| Error::InvalidUrl {
                        url: url.to_string(),
                        reason: format!("cannot build an HTTP client ({e})"),
                    })?
            }
            _ => self.streams.clone(),
        };
        let mut req = http
            .get(url.clone())
            .header(reqwest::header::CONNECTION, "Upgrade")
            .header(reqwest::header::UPGRADE, "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", key);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let transport = |source| Error::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let bytes = resp.bytes().await.map_err(transport)?;
            return Err(match (api_error(status, &bytes), retry_after) {
                (Error::Api { code, message, .. }, Some(secs)) if code == "workspace_starting" => {
                    Error::Starting { message, secs }
                }
                (e, _) => e,
            });
        }
        let io = resp.upgrade().await.map_err(transport)?;
        Ok(tokio_tungstenite::WebSocketStream::from_raw_socket(
            io,
            tokio_tungstenite::tungstenite::protocol::Role::Client,
            None,
        )
        .await)
    }
}

/// A WebSocket through the proxy ([`Client::open_terminal`]).
pub type TerminalSocket = tokio_tungstenite::WebSocketStream<reqwest::Upgraded>;

/// One forwarded connection ([`Client::open_port_forward`]).
pub struct PortForward {
    ws: tokio_tungstenite::WebSocketStream<reqwest::Upgraded>,
}

impl std::fmt::Debug for PortForward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortForward").finish_non_exhaustive()
    }
}

impl PortForward {
    /// Copies between `local` and the workspace's port until either side closes; the
    /// message is why the workspace side ended, when it says.
    pub async fn pipe<S>(self, local: S) -> std::result::Result<(), String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        use futures::{SinkExt, StreamExt};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_tungstenite::tungstenite::Message;
        let (mut sink, mut stream) = self.ws.split();
        let (mut rd, mut wr) = tokio::io::split(local);
        let up = async {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if sink.send(Message::binary(buf[..n].to_vec())).await.is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = sink.send(Message::Close(None)).await;
            Ok(())
        };
        let down = async {
            while let Some(msg) = stream.next().await {
                match msg {
                    Ok(Message::Binary(b)) => {
                        if wr.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                    Ok(Message::Close(Some(frame))) if frame.code != 1000.into() => {
                        return Err(frame.reason.to_string());
                    }
                    Ok(Message::Close(_)) => break,
                    Err(e) => return Err(e.to_string()),
                    Ok(_) => {}
                }
            }
            let _ = wr.shutdown().await;
            Ok(())
        };
        // Either side ending ends the connection.
        tokio::select! {
            r = up => r,
            r = down => r,
        }
    }
}

/// A followed workspace output ([`Client::follow_workspace_logs`]).
#[derive(Debug)]
pub struct LogFollow {
    resp: reqwest::Response,
    url: String,
}

impl LogFollow {
    /// The next chunk; `None` once the container stopped.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        let url = &self.url;
        self.resp
            .chunk()
            .await
            .map(|c| c.map(|b| b.to_vec()))
            .map_err(|source| Error::Transport {
                url: url.clone(),
                source,
            })
    }
}

/// The events of a running devfile command (newline-delimited JSON).
pub struct CommandRun {
    resp: reqwest::Response,
    url: String,
    buf: Vec<u8>,
}

/// Longest event line accepted (output comes in chunks of at most a tunnel frame).
const MAX_EVENT_LINE: usize = 4 << 20;

impl CommandRun {
    /// The next event; `None` once the answer ended.
    pub async fn next(&mut self) -> Result<Option<warren_types::api::CommandRunEvent>> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return serde_json::from_slice(&line[..i])
                    .map(Some)
                    .map_err(|source| Error::Decode {
                        url: self.url.clone(),
                        status: 200,
                        source,
                    });
            }
            if self.buf.len() > MAX_EVENT_LINE {
                return Err(Error::Decode {
                    url: self.url.clone(),
                    status: 200,
                    source: serde::de::Error::custom("an event line longer than 4 MiB"),
                });
            }
            let chunk = self.resp.chunk().await.map_err(|source| Error::Transport {
                url: self.url.clone(),
                source,
            })?;
            match chunk {
                Some(c) => self.buf.extend_from_slice(&c),
                None => return Ok(None),
            }
        }
    }
}

/// A workspace's ports and share links (issue 41, item 4).
impl Client {
    /// `GET /workspaces/{name}/ports`: the ports the proxy serves and who may reach each.
    pub async fn workspace_ports(&self, ws: &str) -> Result<Vec<WorkspacePort>> {
        let mut seg = routes::workspace(ws);
        seg.push("ports".to_owned());
        self.get(&seg).await
    }

    /// `PUT /workspaces/{name}/ports/{port}`: who may reach it (`None`: back to its
    /// definition's choice).
    pub async fn set_workspace_port(
        &self,
        ws: &str,
        port: u16,
        visibility: Option<PortVisibility>,
    ) -> Result<WorkspacePort> {
        let mut seg = routes::workspace(ws);
        seg.extend(["ports".to_owned(), port.to_string()]);
        self.with_body(Method::PUT, &seg, &SetPortRequest { visibility })
            .await
    }

    /// `GET /workspaces/{name}/share-links`.
    pub async fn share_links(&self, ws: &str) -> Result<Vec<ShareLink>> {
        let mut seg = routes::workspace(ws);
        seg.push("share-links".to_owned());
        self.get(&seg).await
    }

    /// `POST /workspaces/{name}/ports/{port}/share-links`: the new link, with its secret.
    pub async fn create_share_link(
        &self,
        ws: &str,
        port: u16,
        expires_in_secs: Option<u64>,
    ) -> Result<ShareLink> {
        let mut seg = routes::workspace(ws);
        seg.extend([
            "ports".to_owned(),
            port.to_string(),
            "share-links".to_owned(),
        ]);
        self.with_body(
            Method::POST,
            &seg,
            &CreateShareLinkRequest { expires_in_secs },
        )
        .await
    }

    /// `DELETE /workspaces/{name}/share-links/{id}`.
    pub async fn revoke_share_link(&self, ws: &str, id: i64) -> Result<()> {
        let mut seg = routes::workspace(ws);
        seg.extend(["share-links".to_owned(), id.to_string()]);
        self.call_empty(Method::DELETE, &seg).await
    }
}

/// `path` resolved against a workspace's terminal URL (the proxy serves the terminal's socket
/// and port forwards beside its page).
fn beside_terminal(terminal_url: &str, path: &str) -> Result<Url> {
    Url::parse(terminal_url)
        .and_then(|u| u.join(path))
        .map_err(|e| Error::InvalidUrl {
            url: terminal_url.to_owned(),
            reason: e.to_string(),
        })
}
