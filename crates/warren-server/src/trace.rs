//! The trace id of the work in progress: set for each API request by the HTTP layer, read by
//! whatever that request causes further away (the relay signal its change sends), so the
//! same id shows up in the server's, the relay's and the agent's logs. Beside it, the
//! request's [`Origin`] (the client's address, the door it came through), which the audit log
//! records with whatever the request does.

use warren_types::trace::TraceId;

tokio::task_local! {
    static CURRENT: TraceId;
    static ORIGIN: Origin;
}

/// The door a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The JSON API (the CLI, scripts).
    Api,
    /// The web UI and the sign-in pages.
    Web,
    /// A proxy, on behalf of a user reaching a workspace over HTTP.
    Proxy,
    /// A proxy, on behalf of a user reaching a workspace over SSH.
    Ssh,
    /// Warren itself (timers, policies), or a caller with no request.
    System,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Api => "api",
            Channel::Web => "web",
            Channel::Proxy => "proxy",
            Channel::Ssh => "ssh",
            Channel::System => "system",
        }
    }
}

/// Where the work in progress came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The client's address (behind trusted proxies: the one they name).
    pub addr: Option<std::net::IpAddr>,
    pub channel: Channel,
}

/// Runs `fut` with `origin` as the current origin.
pub async fn with_origin<F: std::future::Future>(origin: Origin, fut: F) -> F::Output {
    ORIGIN.scope(origin, fut).await
}

/// The current origin; work no request started is Warren's own.
pub fn origin() -> Origin {
    ORIGIN.try_with(|o| *o).unwrap_or(Origin {
        addr: None,
        channel: Channel::System,
    })
}

/// Runs `fut` with `trace` as the current trace id.
pub async fn scope<F: std::future::Future>(trace: TraceId, fut: F) -> F::Output {
    CURRENT.scope(trace, fut).await
}

/// The current trace id, if the work in progress has one.
pub fn current() -> Option<TraceId> {
    CURRENT.try_with(Clone::clone).ok()
}

/// A new random trace id.
pub fn fresh() -> TraceId {
    TraceId::from_random(rand::random())
}
