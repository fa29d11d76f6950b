//! GitOps on the relay: for each source stream an agent holds open, poll the repository on
//! the agent's behalf and send the objects of each new commit down the stream. The agent
//! never sees a Git credential; the relay asks the server for it before every poll, which
//! also re-checks that the agent's token is still valid and the source still exists.
//!
//! Sharing: every stream of this relay reading the same repository, ref and credential
//! shares one ref lookup per [`FRESH`] window (single flight behind a lock), and one fetch and
//! parse per commit and path set. A push webhook ([`Gitops::poke`]) wakes the streams of a
//! repository at once and makes their next lookup go to the remote.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio::time::Instant;
use warren_git::snapshot::{Snapshots, Want};
use warren_gitops::manifests::{parse_files, Limits};
use warren_gitops::{PathSelector, Rights};
use warren_types::gitops::{GitopsFrame, SourceGrant, SyncError, SyncObject};

/// A ref looked up this recently is not looked up again (another stream just did).
pub(crate) const FRESH: Duration = Duration::from_secs(1);
/// Parsed commits kept per relay.
const PARSED_ENTRIES: usize = 256;

/// What one lookup key (URL, ref, credential) last resolved to.
#[derive(Debug, Default)]
struct Head {
    remote_id: Option<String>,
    at: Option<Instant>,
}

/// A commit's objects for one path set, and what could not be read.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub commit: String,
    pub objects: Vec<SyncObject>,
    pub errors: Vec<SyncError>,
}

/// Parsed snapshots by key, with their insertion order for eviction.
type ParsedCache = (
    HashMap<String, Arc<Snapshot>>,
    std::collections::VecDeque<String>,
);

/// The relay's GitOps state, shared by every stream.
#[derive(Clone)]
pub(crate) struct Gitops {
    snapshots: Snapshots,
    _cache: Arc<tempfile::TempDir>,
    heads: Arc<Mutex<HashMap<HeadKey, Arc<tokio::sync::Mutex<Head>>>>>,
    parsed: Arc<Mutex<ParsedCache>>,
    pokes: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

/// Why a snapshot could not be taken (the message goes to the agent's status).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PollError {
    #[error(transparent)]
    Git(#[from] warren_git::snapshot::SnapshotError),
    #[error("the Git worker stopped")]
    Join(#[from] tokio::task::JoinError),
}

fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The repository's URL (what a poke names) and a digest of everything a lookup depends on.
type HeadKey = (String, String);

fn key_of(grant: &SourceGrant) -> HeadKey {
    let credential = grant
        .credential
        .as_ref()
        .map(|c| serde_json::to_string(c).unwrap_or_default())
        .unwrap_or_default();
    (
        grant.url.clone(),
        digest(&[&grant.url, &grant.source.git_ref, &credential]),
    )
}

impl Gitops {
    pub(crate) fn new() -> std::io::Result<Gitops> {
        let cache = tempfile::Builder::new()
            .prefix("warren-gitops-")
            .tempdir()?;
        Ok(Gitops {
            snapshots: Snapshots::new(cache.path()),
            _cache: Arc::new(cache),
            heads: Arc::default(),
            parsed: Arc::default(),
            pokes: Arc::default(),
        })
    }

    /// The wake-up of the streams reading `url`.
    pub(crate) fn poke_handle(&self, url: &str) -> Arc<Notify> {
        let mut pokes = self.pokes.lock().unwrap_or_else(|p| p.into_inner());
        pokes.entry(url.to_owned()).or_default().clone()
    }

    /// A push arrived for `url`: every stream reading it looks at the remote now.
    pub(crate) async fn poke(&self, url: &str) {
        let heads: Vec<_> = {
            let heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
            heads
                .iter()
                .filter(|((u, _), _)| u == url)
                .map(|(_, h)| h.clone())
                .collect()
        };
        for h in heads {
            // Forget when this repository's refs were looked up, so the next lookup is not
            // served from FRESH; other repositories keep theirs.
            h.lock().await.at = None;
        }
        let notify = self.poke_handle(url);
        notify.notify_waiters();
    }

    /// Where the source's ref points now (shared across streams within [`FRESH`]).
    pub(crate) async fn head(&self, grant: &SourceGrant) -> Result<String, PollError> {
        let key = key_of(grant);
        let cell = {
            let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
            heads.entry(key).or_default().clone()
        };
        let mut head = cell.lock().await;
        if let (Some(id), Some(at)) = (&head.remote_id, head.at) {
            if at.elapsed() < FRESH {
                return Ok(id.clone());
            }
        }
        let snapshots = self.snapshots.clone();
        let (url, git_ref, credential) = (
            grant.url.clone(),
            grant.source.git_ref.clone(),
            grant.credential.clone(),
        );
        let resolved = tokio::task::spawn_blocking(move || {
            snapshots.resolve(&Want {
                url: &url,
                credential: credential.as_ref(),
                git_ref: &git_ref,
            })
        })
        .await??;
        head.remote_id = Some(resolved.remote_id.clone());
        head.at = Some(Instant::now());
        Ok(resolved.remote_id)
    }

    /// The objects of the source at `remote_id` (fetched and parsed once per commit and
    /// path set), each already checked against the source's rights.
    pub(crate) async fn snapshot(
        &self,
        grant: &SourceGrant,
        remote_id: &str,
    ) -> Result<Arc<Snapshot>, PollError> {
        let paths = grant.source.paths.join("\u{1}");
        let parse_key = digest(&[&grant.url, remote_id, &paths]);
        if let Some(hit) = self.cached(&parse_key) {
            return Ok(self.checked(grant, &hit));
        }
        // One fetch per lookup key at a time.
        let cell = {
            let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
            heads.entry(key_of(grant)).or_default().clone()
        };
        let _held = cell.lock().await;
        if let Some(hit) = self.cached(&parse_key) {
            return Ok(self.checked(grant, &hit));
        }
        let snapshots = self.snapshots.clone();
        let (url, git_ref, credential, globs) = (
            grant.url.clone(),
            grant.source.git_ref.clone(),
            grant.credential.clone(),
            grant.source.paths.clone(),
        );
        let limits = Limits::default();
        let snapshot = tokio::task::spawn_blocking(move || {
            let want = Want {
                url: &url,
                credential: credential.as_ref(),
                git_ref: &git_ref,
            };
            let fetched = snapshots.fetch(&want)?;
            let selector = PathSelector::new(&globs).ok();
            let select = |p: &str| selector.as_ref().is_some_and(|s| s.selects(p));
            let files = snapshots.read(&url, &fetched, &select, limits.max_file_bytes as u64)?;
            let parsed = parse_files(&files.files, &limits);
            let mut errors = files.errors;
            errors.extend(parsed.errors);
            Ok::<_, warren_git::snapshot::SnapshotError>(Snapshot {
                commit: fetched.commit,
                objects: parsed
                    .objects
                    .into_iter()
                    .map(|m| SyncObject {
                        file: m.file,
                        document: m.document,
                        object: m.object,
                    })
                    .collect(),
                errors,
            })
        })
        .await??;
        let snapshot = Arc::new(snapshot);
        self.remember(parse_key, snapshot.clone());
        Ok(self.checked(grant, &snapshot))
    }

    fn cached(&self, key: &str) -> Option<Arc<Snapshot>> {
        let parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        parsed.0.get(key).cloned()
    }

    fn remember(&self, key: String, s: Arc<Snapshot>) {
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        if parsed.0.insert(key.clone(), s).is_none() {
            parsed.1.push_back(key);
        }
        while parsed.1.len() > PARSED_ENTRIES {
            if let Some(old) = parsed.1.pop_front() {
                parsed.0.remove(&old);
            }
        }
    }

    /// The snapshot as this source may apply it: objects outside its rights become errors
    /// naming them (the agent checks again).
    fn checked(&self, grant: &SourceGrant, s: &Snapshot) -> Arc<Snapshot> {
        let rights = Rights::new(&grant.source, &grant.policy);
        let mut objects = Vec::new();
        let mut errors = s.errors.clone();
        for o in &s.objects {
            let m = warren_gitops::Manifest {
                file: o.file.clone(),
                document: o.document,
                object: o.object.clone(),
            };
            match rights.admit(&m, None) {
                Ok(_) => objects.push(o.clone()),
                Err(message) => errors.push(SyncError {
                    file: Some(o.file.clone()),
                    object: Some(m.display()),
                    message,
                }),
            }
        }
        Arc::new(Snapshot {
            commit: s.commit.clone(),
            objects,
            errors,
        })
    }
}

/// The frame that sends a snapshot.
pub(crate) fn sync_frame(grant: &SourceGrant, s: &Snapshot) -> GitopsFrame {
    GitopsFrame::Sync {
        commit: s.commit.clone(),
        source: grant.source.clone(),
        policy: grant.policy.clone(),
        objects: s.objects.clone(),
        errors: s.errors.clone(),
    }
}

/// The commit a stream last sent and when it first saw it at the ref.
type Detected = Option<(String, DateTime<Utc>)>;

/// Waits this long before asking the server again after it could not be reached.
const SERVER_RETRY: Duration = Duration::from_secs(5);

impl crate::Relay {
    /// Serves one source stream of `agent` until the agent closes it, the server withdraws
    /// the source (or the agent's token), or the relay stops.
    pub(crate) async fn serve_gitops(
        &self,
        agent: warren_types::AgentId,
        token_digest: String,
        source: String,
        stream: crate::tunnel::TunnelStream,
    ) {
        use crate::server::SourceAnswer;
        use crate::tunnel::{read_json, write_json};
        use tokio::io::AsyncWriteExt;
        let (mut rd, mut wr) = tokio::io::split(stream);
        let closed = self.shutdown.child_token();
        // The commit last sent and when this stream first saw it at the ref: stamped on the
        // agent's status of that commit, for the server's lag metric.
        let detected: Arc<Mutex<Detected>> = Arc::default();
        let reader = {
            let relay = self.clone();
            let closed = closed.clone();
            let detected = detected.clone();
            tokio::spawn(async move {
                loop {
                    match read_json::<_, GitopsFrame>(&mut rd).await {
                        Ok(GitopsFrame::Status(mut status)) => {
                            if let Some((commit, at)) =
                                &*detected.lock().unwrap_or_else(|p| p.into_inner())
                            {
                                if status.commit.as_ref() == Some(commit) {
                                    status.detected_at = Some(*at);
                                }
                            }
                            if let Err(e) = relay.server.report_status(agent, &status).await {
                                tracing::warn!(agent = %agent, source = %status.source, error = %warren_types::error_chain(&e), "cannot forward a GitOps status");
                            }
                        }
                        Ok(_) => {
                            tracing::warn!(agent = %agent, "agent sent a GitOps frame only relays send");
                        }
                        Err(_) => break,
                    }
                }
                closed.cancel();
            })
        };
        let mut last_sent: Option<String> = None;
        let mut last_failure: Option<String> = None;
        loop {
            let grant = match self
                .server
                .authorize_source(agent, &source, &token_digest)
                .await
            {
                Ok(SourceAnswer::Granted(g)) => g,
                Ok(SourceAnswer::Denied { status, message }) => {
                    if status == 401 {
                        // The token was reset: the agent's next connection with it is refused.
                        self.server.forget(&token_digest);
                    }
                    tracing::info!(agent = %agent, source = %source, reason = %message, "GitOps source withdrawn; closing its stream");
                    let _ = write_json(&mut wr, &GitopsFrame::Stopped { reason: message }).await;
                    break;
                }
                Err(e) => {
                    tracing::warn!(agent = %agent, source = %source, error = %warren_types::error_chain(&e), "cannot ask the server about a GitOps source");
                    tokio::select! {
                        // Cancel-safe: cancellation is level-triggered.
                        _ = closed.cancelled() => break,
                        // Cancel-safe: a sleep holds nothing.
                        _ = tokio::time::sleep(SERVER_RETRY) => continue,
                    }
                }
            };
            let interval = warren_gitops::parse_interval(&grant.source.interval)
                .unwrap_or(Duration::from_secs(60));
            let notify = self.gitops.poke_handle(&grant.url);
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before the poll, so a push arriving during it is not missed.
            notified.as_mut().enable();
            let seen_at = Utc::now();
            let outcome = match self.gitops.head(&grant).await {
                Ok(id) if last_sent.as_deref() == Some(id.as_str()) => Ok(None),
                Ok(id) => self
                    .gitops
                    .snapshot(&grant, &id)
                    .await
                    .map(|s| Some((id, s))),
                Err(e) => Err(e),
            };
            let sent = match outcome {
                Ok(None) => Ok(()),
                Ok(Some((id, snapshot))) => {
                    *detected.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((snapshot.commit.clone(), seen_at));
                    let r = write_json(&mut wr, &sync_frame(&grant, &snapshot)).await;
                    if r.is_ok() {
                        tracing::info!(agent = %agent, source = %source, commit = %snapshot.commit, objects = snapshot.objects.len(), "GitOps commit sent");
                        last_sent = Some(id);
                        last_failure = None;
                    }
                    r
                }
                Err(e) => {
                    let message = warren_types::error_chain(&e);
                    if last_failure.as_deref() == Some(message.as_str()) {
                        Ok(())
                    } else {
                        tracing::warn!(agent = %agent, source = %source, error = %message, "GitOps poll failed");
                        last_failure = Some(message.clone());
                        write_json(&mut wr, &GitopsFrame::Failed { message }).await
                    }
                }
            };
            if sent.is_err() {
                break;
            }
            tokio::select! {
                // Cancel-safe: cancellation is level-triggered.
                _ = closed.cancelled() => break,
                // Cancel-safe: a sleep holds nothing.
                _ = tokio::time::sleep(interval) => {}
                // Cancel-safe: a missed wake-up only delays the poll to the interval.
                _ = &mut notified => {}
            }
        }
        let _ = wr.shutdown().await;
        reader.abort();
    }
}
