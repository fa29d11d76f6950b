//! A workspace's logs: the page with the last lines, and the followed stream.

use super::events::{event, live_channel, sse, EventStream};
use super::*;

#[derive(Debug, Default, Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    tail: Option<u32>,
    #[serde(default)]
    container: Option<String>,
    #[serde(default)]
    follow: Option<bool>,
}

/// `GET /workspaces/{name}/logs`: the last lines, or (`follow=true`) the last lines and
/// what comes next, streamed into the page.
pub async fn logs_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, UiError> {
    let w = domain::get(&state, &viewer.who, &name).await?;
    let tail = q.tail.unwrap_or(DEFAULT_TAIL);
    let follow = q.follow.unwrap_or(false);
    let base = format!("/workspaces/{}", w.name);
    let container_q = q
        .container
        .as_deref()
        .map(|c| {
            format!(
                "&container={}",
                url::form_urlencoded::byte_serialize(c.as_bytes()).collect::<String>()
            )
        })
        .unwrap_or_default();
    let text = if follow {
        None
    } else {
        let req = LogsRequest {
            tail: Some(tail),
            container: q.container.clone(),
            follow: false,
        };
        Some(match domain::logs(&state, &viewer.who, &name, &req).await {
            Ok(Logs::Text(t)) => Ok(String::from_utf8_lossy(&t).into_owned()),
            Ok(Logs::Stream(_)) => Ok(String::new()),
            Err(e) if e.kind == ErrorKind::NotFound => return Err(e.into()),
            Err(e) => Err(e.message),
        })
    };
    let body = html! {
        p { a href=(base) { "← " (w.name) } }
        form.inline method="get" action=(format!("{base}/logs")) {
            label for="tail" { "Lines" }
            input type="number" id="tail" name="tail" min="1" max="10000" value=(tail);
            @if let Some(c) = &q.container { input type="hidden" name="container" value=(c); }
            label { input type="checkbox" name="follow" value="true" checked[follow]; " Follow" }
            button type="submit" { "Show" }
        }
        @match text {
            None => {
                p.hint role="status" { "Following: new output appears below as the workspace writes it." }
                pre.logs id="logs" hx-ext="sse" sse-connect=(format!("{base}/logs/stream?tail={tail}{container_q}"))
                    sse-swap="line" hx-swap="beforeend" sse-close="end" tabindex="0" aria-live="polite" {}
            }
            Some(Ok(t)) if t.is_empty() => { p.empty { "No output yet." } }
            Some(Ok(t)) => { pre.logs id="logs" tabindex="0" { (t) } }
            Some(Err(m)) => { p.error role="alert" { (m) } }
        }
    };
    Ok(layout::page(
        &viewer,
        StatusCode::OK,
        &format!("Logs of {}", w.name),
        body,
    ))
}

/// `GET /workspaces/{name}/logs/stream`: the output as server-sent events (`line`, HTML-
/// escaped text), then `end` when the container stops or the stream breaks.
pub async fn logs_stream(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<EventStream, UiError> {
    let req = LogsRequest {
        tail: Some(q.tail.unwrap_or(DEFAULT_TAIL)),
        container: q.container.clone(),
        follow: true,
    };
    let logs = domain::logs(&state, &viewer.who, &name, &req).await;
    let (tx, rx) = live_channel(64);
    tokio::spawn(async move {
        let line = |text: &str| event("line", &html! { (text) "\n" }.into_string());
        match logs {
            Ok(Logs::Text(t)) => {
                for l in String::from_utf8_lossy(&t).lines() {
                    if tx.send(Ok(line(l))).await.is_err() {
                        return;
                    }
                }
            }
            Ok(Logs::Stream(io)) => {
                let mut lines = tokio::io::BufReader::new(io).lines();
                loop {
                    tokio::select! {
                        // Cancel-safe per tokio's docs for `Lines::next_line`.
                        l = lines.next_line() => match l {
                            Ok(Some(l)) => if tx.send(Ok(line(&l))).await.is_err() { return },
                            Ok(None) | Err(_) => break,
                        },
                        // Cancel-safe: `closed` only watches the channel.
                        _ = tx.closed() => return,
                        // Cancel-safe: a token's wait holds nothing. The server is shutting down.
                        _ = state.closing.cancelled() => break,
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Ok(line(&format!("warren: {}", e.message)))).await;
            }
        }
        let _ = tx
            .send(Ok(event(
                "line",
                &html! { span.end { "— end of output —" } }.into_string(),
            )))
            .await;
        let _ = tx.send(Ok(event("end", "end"))).await;
    });
    Ok(sse(rx))
}
