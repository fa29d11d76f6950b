//! The audit log's one writer per server: audited operations queue their entries and go on;
//! the writer appends what has queued up in one transaction (so a burst costs one commit, and
//! the request that caused an entry does not wait for the chain's lock), then copies each to
//! the stream. Reads of the log wait for what this server queued before them.

use super::stream::{Quiet, Stream};
use crate::store::audit::NewAuditEntry;
use crate::store::Store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Entries waiting at most; past it, audited operations wait for the writer (a database that
/// does not take writes holds them back rather than growing memory).
const QUEUE: usize = 10_000;
/// Entries appended in one transaction at most.
const BATCH: usize = 500;
/// Longest wait between attempts while the database refuses the append.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The handle audited operations record through; cheap to share.
#[derive(Debug)]
pub struct Log {
    tx: mpsc::Sender<NewAuditEntry>,
    /// Entries queued so far, and (from the writer) entries written so far.
    queued: AtomicU64,
    written: watch::Receiver<u64>,
    quiet: std::sync::Mutex<Quiet>,
}

impl Log {
    /// Starts the writer on `store`, copying every entry to `stream`.
    pub fn start(store: Store, stream: Stream) -> Log {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (written_tx, written) = watch::channel(0);
        tokio::spawn(write(store, stream, rx, written_tx));
        Log {
            tx,
            queued: AtomicU64::new(0),
            written,
            quiet: Default::default(),
        }
    }

    pub(super) async fn enqueue(&self, e: NewAuditEntry) {
        let action = e.action.clone();
        if self.tx.send(e).await.is_err() {
            metrics::counter!("warren_audit_failures_total").increment(1);
            tracing::error!(action, "the audit writer has stopped; entry lost");
            return;
        }
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until every entry queued before this call is in the database (or the writer
    /// stopped).
    pub async fn flush(&self) {
        let target = self.queued.load(Ordering::SeqCst);
        let mut written = self.written.clone();
        let _ = written.wait_for(|n| *n >= target).await;
    }

    pub(super) fn quiet(&self) -> std::sync::MutexGuard<'_, Quiet> {
        self.quiet.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Appends queued entries until every sender is gone and the queue is empty. A failed append
/// is tried again with the same batch (the chain's order kept), backing off; once nothing can
/// queue any more, a batch the database still refuses is logged as lost.
async fn write(
    store: Store,
    stream: Stream,
    mut rx: mpsc::Receiver<NewAuditEntry>,
    written: watch::Sender<u64>,
) {
    let mut count = 0u64;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        let mut backoff = Duration::from_millis(100);
        loop {
            match store.append_audit(batch.clone()).await {
                Ok(entries) => {
                    for e in &entries {
                        stream.send(e).await;
                    }
                    break;
                }
                Err(e) if rx.is_closed() => {
                    metrics::counter!("warren_audit_failures_total").increment(n);
                    tracing::error!(error = %warren_types::error_chain(&e), entries = n, "appending audit entries at shutdown failed; they are lost");
                    break;
                }
                Err(e) => {
                    metrics::counter!("warren_audit_failures_total").increment(1);
                    tracing::error!(error = %warren_types::error_chain(&e), entries = n, "appending audit entries failed; trying again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        count += n;
        written.send_replace(count);
    }
}
