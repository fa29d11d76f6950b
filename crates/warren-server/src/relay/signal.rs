//! The "reconcile now" push: on a desired-state change the server tells every configured
//! relay to signal the agent. Best effort, asynchronous and coalesced: the API call that
//! changed the state never waits for it; the agent's timers remain the safety net.

use super::jwt;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;
use warren_types::internal::signal_path;
use warren_types::AgentId;

#[derive(Debug, Default)]
struct Inner {
    pending: Mutex<BTreeSet<AgentId>>,
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
    /// Asks for agent `id` to be signalled; never blocks.
    pub fn notify(&self, id: AgentId) {
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(id);
        }
        self.inner.wake.notify_one();
        let _ = self.local.send(id);
    }

    /// Every agent id notified from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<AgentId> {
        self.local.subscribe()
    }

    fn take(&self) -> BTreeSet<AgentId> {
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
        let signed = agents.iter().filter_map(|agent| {
            match jwt::mint_for_relay(&secret, *agent, now) {
                Ok(token) => Some((agent, token)),
                Err(e) => {
                    tracing::warn!(error = %warren_types::error_chain(&e), "signing a signal failed");
                    None
                }
            }
        });
        let sends = signed.flat_map(|(agent, token)| {
            relay_urls.iter().map(move |base| {
                let url = format!("{}{}", base.trim_end_matches('/'), signal_path(*agent));
                let req = client.post(url.clone()).bearer_auth(token.clone());
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
