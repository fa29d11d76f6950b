//! GitOps on the agent: one stream per source to the relay, which sends the objects of each
//! new commit; the runtime makes them so ([`WorkspaceRuntime::sync_gitops`]) and the outcome
//! goes back as a status frame. The last commit is applied again every interval, so an
//! object changed by hand is restored (drift). The set of sources follows what the server
//! says with each reconcile answer ([`ReconcilerStatus::gitops_sources`]); a removed
//! source's stream is closed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use warren_gitops::Manifest;
use warren_types::gitops::{GitopsFrame, Policy, Source, SourceStatus, SyncError, SyncObject};
use warren_types::relay::StreamOpen;

use crate::connection::tunnel::{read_json, write_json};
use crate::connection::RelayConnection;
use crate::reconciler::ReconcilerStatus;
use crate::runtime::{GitopsSync, WorkspaceRuntime};

/// Between attempts to reopen a source's stream.
const REOPEN_MIN: Duration = Duration::from_millis(500);
const REOPEN_MAX: Duration = Duration::from_secs(30);

/// The last commit received for a source, kept to re-apply it (drift).
struct Received {
    commit: String,
    source: Source,
    policy: Policy,
    objects: Vec<Manifest>,
    errors: Vec<SyncError>,
}

/// Runs until `shutdown`: keeps one task per source the server lists.
pub async fn run(
    agent_name: String,
    connection: RelayConnection,
    runtime: Arc<dyn WorkspaceRuntime>,
    mut status: watch::Receiver<ReconcilerStatus>,
    shutdown: CancellationToken,
) {
    let mut tasks: BTreeMap<String, CancellationToken> = BTreeMap::new();
    loop {
        let wanted = status.borrow_and_update().gitops_sources.clone();
        tasks.retain(|name, stop| {
            let keep = wanted.contains(name);
            if !keep {
                tracing::info!(source = %name, "GitOps source removed; closing its stream");
                stop.cancel();
            }
            keep
        });
        for name in wanted {
            if tasks.contains_key(&name) {
                continue;
            }
            let stop = shutdown.child_token();
            tasks.insert(name.clone(), stop.clone());
            tokio::spawn(follow(
                agent_name.clone(),
                name,
                connection.clone(),
                runtime.clone(),
                stop,
            ));
        }
        tokio::select! {
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: `changed` only marks the value seen.
            r = status.changed() => if r.is_err() { return },
        }
    }
}

/// Follows one source until `stop`: (re)opens its stream, applies what arrives, reports.
async fn follow(
    agent: String,
    name: String,
    connection: RelayConnection,
    runtime: Arc<dyn WorkspaceRuntime>,
    stop: CancellationToken,
) {
    let mut failures = 0u32;
    let mut last: Option<Received> = None;
    while !stop.is_cancelled() {
        let header = StreamOpen::Gitops {
            source: name.clone(),
        };
        let opened = tokio::select! {
            // Cancel-safe: an unfinished open is dropped.
            _ = stop.cancelled() => return,
            // Cancel-safe: as above.
            r = connection.open(&header) => r,
        };
        let ended = match opened {
            Ok(stream) => {
                failures = 0;
                serve(&agent, &name, stream, runtime.as_ref(), &mut last, &stop).await
            }
            Err(e) => Ended::Broken(warren_types::error_chain(&e)),
        };
        match ended {
            Ended::Stopped(reason) => {
                tracing::info!(source = %name, reason = %reason, "the relay ended the GitOps source");
                // The server's list changes next (or the token is gone): wait to be told.
                stop.cancelled().await;
                return;
            }
            Ended::Cancelled => return,
            Ended::Broken(e) => {
                failures += 1;
                let delay = crate::backoff::jittered(REOPEN_MIN, REOPEN_MAX, failures);
                tracing::debug!(source = %name, error = %e, delay_ms = delay.as_millis() as u64, "GitOps stream ended; reopening");
                tokio::select! {
                    // Cancel-safe: cancellation is level-triggered.
                    _ = stop.cancelled() => return,
                    // Cancel-safe: a sleep holds nothing.
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

enum Ended {
    Stopped(String),
    Cancelled,
    Broken(String),
}

async fn serve(
    agent: &str,
    name: &str,
    stream: crate::connection::tunnel::TunnelStream,
    runtime: &dyn WorkspaceRuntime,
    last: &mut Option<Received>,
    stop: &CancellationToken,
) -> Ended {
    let (mut rd, mut wr) = tokio::io::split(stream);
    // Frames are read by their own task, so waiting for one never competes with the drift
    // timer for a half-read frame.
    let (tx, mut frames) = tokio::sync::mpsc::channel(1);
    let reader = tokio::spawn(async move {
        loop {
            let frame = read_json::<_, GitopsFrame>(&mut rd).await;
            let end = frame.is_err();
            if tx.send(frame).await.is_err() || end {
                return;
            }
        }
    });
    let ended = serve_frames(agent, name, &mut wr, &mut frames, runtime, last, stop).await;
    reader.abort();
    ended
}

async fn serve_frames(
    agent: &str,
    name: &str,
    wr: &mut (impl tokio::io::AsyncWrite + Unpin),
    frames: &mut tokio::sync::mpsc::Receiver<
        Result<GitopsFrame, crate::connection::tunnel::TunnelError>,
    >,
    runtime: &dyn WorkspaceRuntime,
    last: &mut Option<Received>,
    stop: &CancellationToken,
) -> Ended {
    loop {
        let interval = last
            .as_ref()
            .and_then(|r| warren_gitops::parse_interval(&r.source.interval).ok())
            .unwrap_or(Duration::from_secs(60));
        let frame = tokio::select! {
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => return Ended::Cancelled,
            // Cancel-safe: `recv` loses nothing when not chosen.
            f = frames.recv() => match f {
                Some(f) => f,
                None => return Ended::Broken("the stream ended".into()),
            },
            // Cancel-safe: a sleep holds nothing.
            _ = tokio::time::sleep(interval), if last.is_some() => {
                // Drift: apply the last commit again.
                if let Some(r) = last.as_ref() {
                    let status = apply(agent, name, r, runtime).await;
                    if let Err(e) = write_json(wr, &GitopsFrame::Status(Box::new(status))).await {
                        return Ended::Broken(warren_types::error_chain(&e));
                    }
                }
                continue;
            }
        };
        let status = match frame {
            Ok(GitopsFrame::Sync {
                commit,
                source,
                policy,
                objects,
                errors,
            }) => {
                let received = Received {
                    commit,
                    source,
                    policy,
                    objects: objects.into_iter().map(manifest).collect(),
                    errors,
                };
                let status = apply(agent, name, &received, runtime).await;
                *last = Some(received);
                status
            }
            Ok(GitopsFrame::Failed { message }) => {
                tracing::warn!(source = %name, error = %message, "the relay cannot read the source");
                failed_status(name, last.as_ref(), message)
            }
            Ok(GitopsFrame::Stopped { reason }) => return Ended::Stopped(reason),
            Ok(GitopsFrame::Status(_)) => continue,
            Err(e) => return Ended::Broken(warren_types::error_chain(&e)),
        };
        if let Err(e) = write_json(wr, &GitopsFrame::Status(Box::new(status))).await {
            return Ended::Broken(warren_types::error_chain(&e));
        }
    }
}

fn manifest(o: SyncObject) -> Manifest {
    Manifest {
        file: o.file,
        document: o.document,
        object: o.object,
    }
}

/// Hands a commit to the runtime and says what happened.
async fn apply(
    agent: &str,
    name: &str,
    r: &Received,
    runtime: &dyn WorkspaceRuntime,
) -> SourceStatus {
    let sync = GitopsSync {
        agent,
        source: &r.source,
        policy: &r.policy,
        commit: &r.commit,
        objects: &r.objects,
        prune: r.source.prune && r.errors.is_empty(),
    };
    let mut status = SourceStatus {
        source: name.to_owned(),
        commit: Some(r.commit.clone()),
        synced_at: chrono::Utc::now(),
        applied: 0,
        unchanged: 0,
        pruned: 0,
        errors: r.errors.clone(),
        health: vec![],
        detected_at: None,
    };
    match runtime.sync_gitops(&sync).await {
        Ok(out) => {
            status.applied = out.applied;
            status.unchanged = out.unchanged;
            status.pruned = out.pruned;
            status.errors.extend(out.errors);
            status.health = out.health;
            tracing::info!(source = %name, commit = %r.commit, applied = out.applied, unchanged = out.unchanged, pruned = out.pruned, errors = status.errors.len(), "GitOps sync");
        }
        Err(e) => status.errors.push(SyncError {
            file: None,
            object: None,
            message: warren_types::error_chain(&e),
        }),
    }
    status
}

/// The status after the relay could not read the source: the last commit stays applied.
fn failed_status(name: &str, last: Option<&Received>, message: String) -> SourceStatus {
    SourceStatus {
        source: name.to_owned(),
        commit: last.map(|r| r.commit.clone()),
        synced_at: chrono::Utc::now(),
        applied: 0,
        unchanged: 0,
        pruned: 0,
        errors: vec![SyncError {
            file: None,
            object: None,
            message,
        }],
        health: vec![],
        detected_at: None,
    }
}
