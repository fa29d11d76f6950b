//! The "reconcile now" push: on a desired-state change the server tells every configured
//! relay to signal the agent. Best effort, asynchronous and coalesced: the API call that
//! changed the state never waits for it; the agent's timers remain the safety net. Each
//! signal carries the trace id of the request that caused it (the latest one, when several
//! changes for one agent were coalesced) in `X-Request-Id`.

use super::jwt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;
use warren_types::internal::signal_path;
use warren_types::trace::{TraceId, TRACE_HEADER};
use warren_types::AgentId;

#[derive(Debug, Default)]
struct Inner {
    /// Agents to signal, each with the trace id of its latest change (if it had one).
    pending: Mutex<BTreeMap<AgentId, Option<TraceId>>>,
    wake: Notify,
}

/// Collects agents to signal; a background task drains them.
#[derive(Debug, Clone)]
pub struct SignalHub {
    inner: Arc<Inner>,
    /// In-process listeners (e.g. a relay running in the same process, tests).
    local: broadcast::Sender<AgentId>,
}

impl Default for SignalHub {
    fn default() -> Self {
        SignalHub {
            inner: Arc::default(),
            local: broadcast::channel(1024).0,
        }
    }
}

impl SignalHub {
    /// Asks for agent `id` to be signalled; never blocks. The signal carries the current
    /// trace id (`crate::trace`).
    pub fn notify(&self, id: AgentId) {
        let trace = crate::trace::current();
        if let Ok(mut p) = self.inner.pending.lock() {
            let slot = p.entry(id).or_default();
            if trace.is_some() {
                *slot = trace;
            }
        }
        self.inner.wake.notify_one();
        let _ = self.local.send(id);
    }

    /// Every agent id notified from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<AgentId> {
        self.local.subscribe()
    }

    fn take(&self) -> BTreeMap<AgentId, Option<TraceId>> {
        self.inner
            .pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }
}

/// Delivers pending signals to `relay_urls` until `shutdown`.
pub async fn deliver_task(
    hub: SignalHub,
    relay_urls: Vec<String>,
    secret: Arc<Vec<u8>>,
    shutdown: CancellationToken,
) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the HTTP client for relay signals; signals are off");
            return;
        }
    };
    loop {
        tokio::select! {
            // Cancel-safe: cancellation only flips a flag.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: a missed wake-up leaves the ids pending; the next notify wakes us.
            _ = hub.inner.wake.notified() => {}
        }
        let agents = hub.take();
        if relay_urls.is_empty() {
            continue;
        }
        let now = warren_jwt::now_secs();
        let client = &client;
        let signed = agents.iter().filter_map(|(agent, trace)| {
            match trace {
                Some(t) => tracing::info!(%agent, trace = %t, "signalling the agent through the relays"),
                None => tracing::debug!(%agent, "signalling the agent through the relays"),
            }
            match jwt::mint_for_relay(&secret, *agent, now) {
                Ok(token) => Some((agent, trace, token)),
                Err(e) => {
                    tracing::warn!(error = %warren_types::error_chain(&e), "signing a signal failed");
                    None
                }
            }
        });
        let sends = signed.flat_map(|(agent, trace, token)| {
            relay_urls.iter().map(move |base| {
                let url = format!("{}{}", base.trim_end_matches('/'), signal_path(*agent));
                let mut req = client.post(url.clone()).bearer_auth(token.clone());
                if let Some(t) = trace {
                    req = req.header(TRACE_HEADER, t.as_str());
                }
                async move {
                    match req.send().await {
                        Ok(r) if r.status().is_success() => {}
                        Ok(r) => {
                            tracing::debug!(%url, status = %r.status(), "relay refused the signal")
                        }
                        Err(e) => tracing::debug!(%url, error = %e, "signal to relay failed"),
                    }
                }
            })
        });
        futures::future::join_all(sends).await;
    }
}
