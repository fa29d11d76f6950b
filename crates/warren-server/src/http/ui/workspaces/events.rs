//! The live views: the list's and a workspace page's server-sent events, sent when this
//! server changes a workspace or every few seconds (another server may have).

use super::*;

#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    /// Digest of the rows the page was rendered with: sent again only when they differ.
    #[serde(default)]
    v: Option<String>,
    /// The page's cursor ([`ListQuery::after`]).
    #[serde(default)]
    after: Option<String>,
}

pub(super) type EventStream =
    Sse<axum::response::sse::KeepAliveStream<ReceiverStream<Result<Event, Infallible>>>>;

/// An event carrying HTML; SSE cannot carry carriage returns (axum refuses them), so any in
/// user text become a character reference.
pub(super) fn event(name: impl Into<String>, html: &str) -> Event {
    Event::default()
        .event(name.into())
        .data(html.replace('\r', "&#13;"))
}

pub(super) fn sse(rx: tokio::sync::mpsc::Receiver<Result<Event, Infallible>>) -> EventStream {
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::default())
}

type EventSender = tokio::sync::mpsc::Sender<Result<Event, Infallible>>;

/// The channel of an event stream, its first event already in it: the reconnection delay,
/// sent at once so the answer's head and first bytes leave now. (A stream that stays silent
/// until its first change keeps Chromium's connection to the server open after the page
/// is gone, and six of those block every further request to the server.)
pub(super) fn live_channel(
    capacity: usize,
) -> (
    EventSender,
    tokio::sync::mpsc::Receiver<Result<Event, Infallible>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    let _ = tx.try_send(Ok(Event::default().retry(Duration::from_secs(3))));
    (tx, rx)
}

/// Waits for a change of this server's or the recheck timer.
pub(super) async fn next_change(changes: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::select! {
        // Cancel-safe: `changed` only marks the value seen; the caller reads everything
        // again after either arm.
        r = changes.changed() => {
            if r.is_err() {
                tokio::time::sleep(RECHECK).await;
            }
        }
        // Cancel-safe: a sleep holds nothing.
        _ = tokio::time::sleep(RECHECK) => {}
    }
}

/// `GET /events/workspaces`: the list's changes as server-sent events — `rows` (all rows)
/// when workspaces came or went, else `ws-<id>` for each row that changed.
pub async fn list_events(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<EventsQuery>,
) -> EventStream {
    let (tx, rx) = live_channel(16);
    tokio::spawn(async move {
        let mut changes = state.changes.subscribe();
        let mut sent: Option<BTreeMap<String, String>> = None;
        let mut page_digest = q.v;
        loop {
            changes.borrow_and_update();
            let after = q.after.as_deref().filter(|a| !a.is_empty());
            let list = match list_window(&state, &viewer, after).await {
                Ok(l) => l.items,
                // The account was disabled or the database is away: end; the browser
                // reconnects and the page shows what is wrong.
                Err(_) => return,
            };
            let (all, each) = rows(&list, after.is_some());
            let events: Vec<Event> = match &sent {
                None if page_digest.take().as_deref() == Some(digest(&all).as_str()) => vec![],
                Some(prev) if prev.keys().eq(each.keys()) => each
                    .iter()
                    .filter(|(id, html)| prev.get(*id) != Some(html))
                    .map(|(id, html)| event(format!("ws-{id}"), html))
                    .collect(),
                _ => vec![event("rows", &all.into_string())],
            };
            sent = Some(each);
            for e in events {
                if tx.send(Ok(e)).await.is_err() {
                    return; // the page was closed
                }
            }
            tokio::select! {
                // Cancel-safe: dropping the wait loses nothing; the list is read again.
                _ = next_change(&mut changes) => {}
                // Cancel-safe: `closed` only watches the channel.
                _ = tx.closed() => return,
                // Cancel-safe: a token's wait holds nothing. The server is shutting down.
                _ = state.closing.cancelled() => return,
            }
        }
    });
    sse(rx)
}

// ---- create ----

#[derive(Debug, Default, Deserialize)]
pub struct ShowEventsQuery {
    #[serde(default)]
    v: Option<i64>,
}

/// `GET /workspaces/{name}/events`: the page's live panel again (event `live`) whenever the
/// workspace changes.
pub async fn show_events(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<ShowEventsQuery>,
) -> Result<EventStream, UiError> {
    // Not found is answered now, as a page would be.
    let first = domain::get(&state, &viewer.who, &name).await?;
    let (tx, rx) = live_channel(4);
    tokio::spawn(async move {
        let mut changes = state.changes.subscribe();
        let mut shown = q.v;
        let mut w = first;
        loop {
            if shown != Some(w.version) {
                shown = Some(w.version);
                let html = live_contents(&w, &viewer).into_string();
                if tx.send(Ok(event("live", &html))).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                // Cancel-safe: dropping the wait loses nothing; the workspace is read again.
                _ = next_change(&mut changes) => {}
                // Cancel-safe: `closed` only watches the channel.
                _ = tx.closed() => return,
                // Cancel-safe: a token's wait holds nothing. The server is shutting down.
                _ = state.closing.cancelled() => return,
            }
            changes.borrow_and_update();
            w = match domain::get(&state, &viewer.who, &name).await {
                Ok(w) => w,
                Err(_) => return, // gone (terminated and purged) or no longer visible
            };
        }
    });
    Ok(sse(rx))
}
