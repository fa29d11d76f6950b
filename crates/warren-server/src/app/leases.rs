//! Which server replica runs the jobs that must run once: the lifecycle timers and the
//! finishing of account deletions. Several `warren server` processes on one database
//! compete for one lease in the database; the holder renews it on every run and gives it up
//! on shutdown, and when it dies another takes it once the lease has expired.
//!
//! The jobs stay safe if two replicas ever overlap (a holder stalled past its lease): every
//! change they make is a conditional write on the row's version, so a second run finds
//! nothing left to do. The lease keeps that from being the normal case.

use super::AppState;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The lease of the housekeeping jobs.
pub const HOUSEKEEPING: &str = "housekeeping";

/// Runs `round` every `interval` (the first at once) until `shutdown`, on the rounds this
/// server holds the housekeeping lease: the loop of every job that must run once.
pub async fn housekeeping_rounds<F, Fut>(
    state: &AppState,
    interval: std::time::Duration,
    shutdown: &tokio_util::sync::CancellationToken,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Cancel-safe: cancellation only flips a flag.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: a lost tick is simply taken on the next iteration.
            _ = tick.tick() => {}
        }
        if state.housekeeping.hold(state).await {
            round().await;
        }
    }
}

/// This server's claim on one lease.
#[derive(Debug)]
pub struct Lease {
    name: &'static str,
    /// Who this server is to the other replicas: host name plus a random suffix, so two
    /// processes on one host differ and a restarted process does not inherit the old claim.
    holder: Arc<str>,
    duration_ms: i64,
    held: AtomicBool,
}

impl Lease {
    pub fn new(name: &'static str, holder: Arc<str>, duration: std::time::Duration) -> Lease {
        Lease {
            name,
            holder,
            duration_ms: i64::try_from(duration.as_millis()).unwrap_or(i64::MAX),
            held: AtomicBool::new(false),
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes or renews the lease: true when this server may run the job now. A database
    /// error counts as not holding it (the job waits for the next round rather than risk
    /// running twice).
    pub async fn hold(&self, state: &AppState) -> bool {
        let now = state.clock.now_ms();
        let outcome = state
            .store
            .hold_lease(
                self.name,
                &self.holder,
                now,
                now.saturating_add(self.duration_ms),
            )
            .await;
        let held = matches!(outcome, Ok(true));
        let was = self.held.swap(held, Ordering::Relaxed);
        match outcome {
            Err(e) => {
                tracing::warn!(lease = self.name, error = %warren_types::error_chain(&e), "cannot renew the lease; skipping this round")
            }
            Ok(true) if !was => {
                tracing::info!(lease = self.name, holder = %self.holder, "this server now runs the jobs of the lease")
            }
            Ok(false) if was => {
                tracing::info!(lease = self.name, holder = %self.holder, "another server holds the lease; its jobs run there")
            }
            Ok(_) => {}
        }
        metrics::gauge!("warren_server_lease_held", "lease" => self.name).set(if held {
            1.0
        } else {
            0.0
        });
        held
    }

    /// Whether the last [`Lease::hold`] took or renewed it (no database round trip).
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Gives the lease up if held, so another replica takes over without waiting.
    pub async fn release(&self, state: &AppState) {
        if !self.held.swap(false, Ordering::Relaxed) {
            return;
        }
        match state.store.release_lease(self.name, &self.holder).await {
            Ok(()) => tracing::info!(lease = self.name, "gave the lease up"),
            Err(e) => {
                tracing::warn!(lease = self.name, error = %warren_types::error_chain(&e), "cannot give the lease up; another server takes it when it expires")
            }
        }
        metrics::gauge!("warren_server_lease_held", "lease" => self.name).set(0.0);
    }
}

/// A name for this server among its replicas, kept in `home` (`server-instance`) so a
/// server restarted after a crash takes its own unexpired lease back at once instead of
/// waiting for it to expire; host name plus a random suffix when first made.
pub fn instance_name(home: &std::path::Path) -> Arc<str> {
    let file = home.join("server-instance");
    if let Some(name) = std::fs::read_to_string(&file)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
    {
        return Arc::from(name);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "server".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{host}/{}", &suffix[..8]);
    if let Err(e) = std::fs::write(&file, &name) {
        tracing::warn!(file = %file.display(), error = %e, "cannot keep this server's instance name; a restart waits for its old lease to expire");
    }
    Arc::from(name)
}
