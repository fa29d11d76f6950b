//! The trace id of the work in progress: set for each API request by the HTTP layer, read by
//! whatever that request causes further away (the relay signal its change sends), so the
//! same id shows up in the server's, the relay's and the agent's logs.

use warren_types::trace::TraceId;

tokio::task_local! {
    static CURRENT: TraceId;
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
