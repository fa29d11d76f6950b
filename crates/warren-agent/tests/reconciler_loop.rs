//! The reconcile loop against the simulated runtime and a model of the server, in paused
//! tokio time: intervals, backoff, partial selection, errors reported once, termination,
//! settings changes and wake-up on signals are checked on the virtual clock.

use crate::reconciler_model;

use async_trait::async_trait;
use reconciler_model::{ServerModel, NAMESPACE};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use warren_agent::reconciler::{
    ReconcileTransport, Reconciler, ReconcilerConfig, TransportError, TransportEvents,
};
use warren_agent::runtime::simulated::SimulatedRuntime;
use warren_agent::runtime::WorkspaceKey;
use warren_types::reconcile::{
    ErrorType, ReconcileRequest, ReconcileResponse, ReconcileSettings, UpdateType,
};
use warren_types::{ActualState, DesiredState};

/// The server model behind an in-process transport, recording each call on the virtual clock.
struct ModelTransport {
    model: Mutex<ServerModel>,
    calls: Mutex<Vec<(Instant, ReconcileRequest)>>,
    fail_next: Mutex<u32>,
    /// Calls the model answers whose answer is then lost (the server killed after its commit).
    lose_next: Mutex<u32>,
    events: watch::Sender<TransportEvents>,
}

#[async_trait]
impl ReconcileTransport for ModelTransport {
    async fn reconcile(
        &self,
        request: &ReconcileRequest,
    ) -> Result<ReconcileResponse, TransportError> {
        self.calls
            .lock()
            .unwrap()
            .push((Instant::now(), request.clone()));
        {
            let mut fail = self.fail_next.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err(TransportError::Status {
                    status: 503,
                    message: "server unavailable".into(),
                });
            }
        }
        let answer = self.model.lock().unwrap().handle(request.clone());
        let mut lose = self.lose_next.lock().unwrap();
        if *lose > 0 {
            *lose -= 1;
            return Err(TransportError::Status {
                status: 502,
                message: "server_unavailable".into(),
            });
        }
        Ok(answer)
    }

    fn events(&self) -> watch::Receiver<TransportEvents> {
        self.events.subscribe()
    }
}

struct Harness {
    transport: Arc<ModelTransport>,
    runtime: Arc<SimulatedRuntime>,
    shutdown: CancellationToken,
    start: Instant,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn settings(full: u64, partial: u64) -> ReconcileSettings {
    ReconcileSettings {
        full_reconciliation_interval_seconds: full,
        partial_reconciliation_interval_seconds: partial,
    }
}

fn key(name: &str) -> WorkspaceKey {
    WorkspaceKey {
        name: name.into(),
        namespace: NAMESPACE.into(),
    }
}

impl Harness {
    /// Workspace "a" running, on a runtime whose deletions do not finish by themselves.
    async fn running_a() -> Harness {
        let runtime = Arc::new(SimulatedRuntime::new());
        runtime.set_auto_settle(true);
        let mut model = ServerModel::new(settings(3600, 10));
        model.create("a");
        let h = Harness::with(model, runtime);
        h.until(1, "running", |h| {
            h.model(|m| m.actual("a")) == Some(ActualState::Running)
        })
        .await;
        h
    }

    fn new(settings: ReconcileSettings, workspaces: &[&str]) -> Harness {
        let mut model = ServerModel::new(settings);
        for w in workspaces {
            model.create(w);
        }
        let runtime = Arc::new(SimulatedRuntime::new());
        runtime.set_auto_settle(true);
        runtime.set_auto_delete(true);
        Self::with(model, runtime)
    }

    fn with(model: ServerModel, runtime: Arc<SimulatedRuntime>) -> Harness {
        let transport = Arc::new(ModelTransport {
            model: Mutex::new(model),
            calls: Mutex::new(vec![]),
            fail_next: Mutex::new(0),
            lose_next: Mutex::new(0),
            events: watch::channel(TransportEvents::default()).0,
        });
        let h = Harness {
            transport,
            runtime,
            shutdown: CancellationToken::new(),
            start: Instant::now(),
        };
        h.spawn();
        h
    }

    fn spawn(&self) {
        let reconciler = Reconciler::new(
            self.transport.clone(),
            self.runtime.clone(),
            ReconcilerConfig::default(),
        );
        tokio::spawn(reconciler.run(self.shutdown.clone()));
    }

    fn model<R>(&self, f: impl FnOnce(&mut ServerModel) -> R) -> R {
        f(&mut self.transport.model.lock().unwrap())
    }

    /// (seconds since start, kind, reported workspace names) of every call.
    fn calls(&self) -> Vec<(f64, UpdateType, Vec<String>)> {
        self.transport
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|(t, r)| {
                (
                    (*t - self.start).as_secs_f64(),
                    r.update_type,
                    r.workspace_agent_infos
                        .iter()
                        .map(|i| i.name.clone())
                        .collect(),
                )
            })
            .collect()
    }

    fn last_request(&self) -> ReconcileRequest {
        self.transport
            .calls
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .1
            .clone()
    }

    fn signal(&self) {
        self.transport.events.send_modify(|e| e.signals += 1);
    }

    fn reconnect(&self) {
        self.transport.events.send_modify(|e| e.connection += 1);
    }

    /// Lets virtual time pass (tasks run; timers fire in order).
    async fn run_for(&self, secs: f64) {
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    }

    /// Runs virtual time until `cond` holds, at most `secs` seconds.
    async fn until(&self, secs: u64, what: &str, mut cond: impl FnMut(&Harness) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            assert!(
                Instant::now() < deadline,
                "not reached within {secs} virtual s: {what}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn full_at_start_then_partials_on_the_interval() {
    let h = Harness::new(settings(3600, 10), &["a"]);
    h.run_for(45.5).await;
    let calls = h.calls();
    assert_eq!(calls[0].0, 0.0);
    assert_eq!(calls[0].1, UpdateType::Full);
    // The apply is reported at once by a partial (follow-up), then the timer takes over.
    assert_eq!(calls[1].1, UpdateType::Partial);
    assert!(calls[1].0 < 0.01, "{calls:?}");
    assert_eq!(calls[1].2, vec!["a".to_string()]);
    let timer: Vec<f64> = calls[2..].iter().map(|c| c.0.round()).collect();
    assert_eq!(timer, vec![10.0, 20.0, 30.0, 40.0], "{calls:?}");
    assert!(calls[2..].iter().all(|c| c.1 == UpdateType::Partial));
    // Nothing changed: quiet partials report nothing.
    assert!(calls[2..].iter().all(|c| c.2.is_empty()), "{calls:?}");
    assert_eq!(h.model(|m| m.actual("a")), Some(ActualState::Running));
}

#[tokio::test(start_paused = true)]
async fn full_reconcile_every_full_interval() {
    let h = Harness::new(settings(60, 25), &["a", "b"]);
    h.run_for(185.0).await;
    let fulls: Vec<(f64, Vec<String>)> = h
        .calls()
        .into_iter()
        .filter(|c| c.1 == UpdateType::Full)
        .map(|c| (c.0.round(), c.2))
        .collect();
    assert_eq!(
        fulls.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![0.0, 60.0, 120.0, 180.0]
    );
    // A full reports every workspace the runtime has, changed or not.
    for (_, names) in &fulls[1..] {
        assert_eq!(names, &vec!["a".to_string(), "b".to_string()]);
    }
}

#[tokio::test(start_paused = true)]
async fn settings_from_the_server_apply_at_once() {
    let h = Harness::new(settings(3600, 30), &["a"]);
    h.run_for(1.0).await;
    h.model(|m| m.settings = settings(3600, 2));
    // The next call (the 30 s tick) brings the new settings; from then on every 2 s.
    h.run_for(36.5).await;
    let times: Vec<f64> = h.calls().iter().map(|c| c.0.round()).collect();
    let after: Vec<f64> = times.into_iter().filter(|t| *t >= 30.0).collect();
    assert_eq!(after, vec![30.0, 32.0, 34.0, 36.0]);
}

#[tokio::test(start_paused = true)]
async fn partial_reports_only_changed_workspaces() {
    let h = Harness::new(settings(3600, 10), &["a", "b", "c"]);
    h.run_for(15.0).await;
    assert!(h.last_request().workspace_agent_infos.is_empty());
    let before = h.calls().len();
    h.runtime
        .crash(&key("b"), "CrashLoopBackOff", "exit code 1");
    h.until(1, "the crash to be reported", |h| h.calls().len() > before)
        .await;
    let req = h.last_request();
    assert_eq!(req.update_type, UpdateType::Partial);
    assert_eq!(req.workspace_agent_infos.len(), 1);
    let info = &req.workspace_agent_infos[0];
    assert_eq!(info.name, "b");
    assert_eq!(
        info.pod_failure.as_ref().unwrap().reason,
        "CrashLoopBackOff"
    );
    assert_eq!(h.model(|m| m.actual("b")), Some(ActualState::Failed));
    assert_eq!(h.model(|m| m.actual("a")), Some(ActualState::Running));
    // Reported once: the next tick is quiet again.
    h.run_for(10.0).await;
    assert!(h.last_request().workspace_agent_infos.is_empty());
}

#[tokio::test(start_paused = true)]
async fn signal_wakes_the_loop_without_waiting_for_the_timer() {
    let h = Harness::new(settings(3600, 3600), &["a"]);
    h.run_for(5.0).await;
    let before = h.calls().len();
    h.model(|m| m.set_desired("a", DesiredState::Stopped));
    let signalled = Instant::now();
    h.signal();
    h.until(1, "the signal's partial", |h| h.calls().len() > before)
        .await;
    let (at, _) = h.transport.calls.lock().unwrap()[before].clone();
    assert_eq!(
        at - signalled,
        Duration::ZERO,
        "woken on the virtual clock at once"
    );
    assert_eq!(h.calls()[before].1, UpdateType::Partial);
    h.until(1, "the stop", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Stopped)
    })
    .await;
    assert_eq!(h.runtime.workspace(&key("a")).unwrap().replicas, 0);
}

#[tokio::test(start_paused = true)]
async fn reconnect_triggers_a_full_reconcile() {
    let h = Harness::new(settings(3600, 3600), &["a"]);
    h.run_for(5.0).await;
    assert_eq!(h.model(|m| m.count(UpdateType::Full)), 1);
    h.reconnect();
    h.until(1, "a full after reconnecting", |h| {
        h.model(|m| m.count(UpdateType::Full)) == 2
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_exponentially_with_jitter_and_recover() {
    let h = Harness::new(settings(3600, 3600), &["a"]);
    *h.transport.fail_next.lock().unwrap() = 5;
    h.run_for(60.0).await;
    let calls = h.calls();
    let gaps: Vec<f64> = calls.windows(2).map(|w| w[1].0 - w[0].0).take(5).collect();
    // Gap n is in [d/2, d] with d = 1 s · 2^n.
    for (n, gap) in gaps.iter().enumerate() {
        let d = f64::from(1u32 << n);
        assert!(
            *gap >= d / 2.0 - 1e-6 && *gap <= d + 1e-6,
            "gap {n} = {gap}: {gaps:?}"
        );
    }
    // Every failed attempt was the start-up full; the sixth succeeded and the loop lives on.
    assert!(calls[..6].iter().all(|c| c.1 == UpdateType::Full));
    assert_eq!(h.model(|m| m.actual("a")), Some(ActualState::Running));
}

/// The server commits an answer (marking its workspaces as sent) and dies before the agent
/// gets it: the retry must be a full reconcile, or a partial would never name the workspace
/// again and the change would wait for the hourly full (CI's faults_e2e lost a start so).
#[tokio::test(start_paused = true)]
async fn an_answer_lost_after_the_server_committed_it_is_asked_again_in_full() {
    let h = Harness::running_a().await;
    let before = h.calls().len();
    *h.transport.lose_next.lock().unwrap() = 1;
    h.model(|m| m.set_desired("a", DesiredState::Stopped));
    h.signal();
    h.until(
        30,
        "the stop whose answer was lost reaches the runtime",
        |h| h.model(|m| m.actual("a")) == Some(ActualState::Stopped),
    )
    .await;
    let calls = h.calls();
    assert_eq!(calls[before].1, UpdateType::Partial, "{calls:?}");
    assert_eq!(calls[before + 1].1, UpdateType::Full, "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn runtime_failures_are_retried() {
    let h = Harness::new(settings(3600, 10), &["a"]);
    h.runtime.set_list_failure(Some("engine socket gone"));
    h.run_for(20.0).await;
    // No workspace is reported without a runtime view; the fault is, so the server stops
    // presenting the last states as current.
    let calls = h.transport.calls.lock().unwrap().clone();
    assert!(!calls.is_empty(), "the fault is reported");
    for (_, r) in &calls {
        assert!(r.workspace_agent_infos.is_empty(), "{r:?}");
        assert!(
            r.runtime_fault
                .as_deref()
                .is_some_and(|f| f.contains("engine socket gone")),
            "{r:?}"
        );
    }
    assert!(
        calls.len() <= 6,
        "on the backoff, not in a loop: {}",
        calls.len()
    );
    h.runtime.set_list_failure(None);
    h.until(120, "recovery", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Running)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn apply_errors_are_reported_once_and_newer_replaces_older() {
    let runtime = Arc::new(SimulatedRuntime::new());
    runtime.set_auto_settle(true);
    runtime.fail_next_apply(&key("a"), "first failure");
    let mut model = ServerModel::new(settings(3600, 10));
    model.create("a");
    let h = Harness::with(model, runtime);
    h.until(1, "the error to reach the server", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Error)
    })
    .await;
    let info = h
        .last_request()
        .workspace_agent_infos
        .into_iter()
        .find(|i| i.name == "a")
        .unwrap();
    let details = info.error_details.unwrap();
    assert_eq!(details.error_type, ErrorType::Applier);
    assert!(details.error_message.contains("first failure"));
    h.run_for(35.0).await;
    assert_eq!(
        h.model(|m| m.workspaces["a"].errors_seen.len()),
        1,
        "reported once"
    );

    // A new desired state, a new failure: reported (once), the older one never again.
    h.runtime.fail_next_apply(&key("a"), "second failure");
    h.model(|m| m.set_desired("a", DesiredState::Stopped));
    h.signal();
    h.run_for(35.0).await;
    let seen = h.model(|m| m.workspaces["a"].errors_seen.clone());
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[1].contains("second failure"));
    // A later apply succeeds and the workspace leaves Error.
    h.model(|m| m.set_desired("a", DesiredState::Running));
    h.signal();
    h.until(5, "running again", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Running)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn termination_is_reported_then_forgotten() {
    let h = Harness::running_a().await;
    h.model(|m| m.set_desired("a", DesiredState::Terminated));
    h.signal();
    h.until(1, "terminating", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Terminating)
    })
    .await;
    // Still deleting over several ticks: keeps reporting Terminating.
    h.run_for(25.0).await;
    assert_eq!(h.model(|m| m.actual("a")), Some(ActualState::Terminating));
    assert!(
        h.runtime.delete_calls() >= 2,
        "deletion is driven every cycle"
    );
    assert!(h.runtime.finish_deleting(&key("a")));
    h.until(1, "terminated", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Terminated)
    })
    .await;
    // Once the server echoed Terminated the agent forgets it: later calls do not mention it.
    h.run_for(25.0).await;
    let last = h.calls();
    let tail: Vec<_> = last.iter().rev().take(2).collect();
    assert!(tail.iter().all(|c| c.2.is_empty()), "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn a_restarted_agent_rebuilds_from_the_runtime_without_duplicates() {
    let h = Harness::new(settings(3600, 10), &["a", "b"]);
    h.until(1, "both running", |h| {
        h.model(|m| {
            m.actual("a") == Some(ActualState::Running)
                && m.actual("b") == Some(ActualState::Running)
        })
    })
    .await;
    // Kill the loop and start a new one on the same runtime: a fresh agent process.
    h.shutdown.cancel();
    let model = std::mem::take(&mut *h.transport.model.lock().unwrap());
    let h2 = Harness::with(model, h.runtime.clone());
    h2.run_for(15.0).await;
    let first = &h2.calls()[0];
    assert_eq!(first.1, UpdateType::Full);
    assert_eq!(first.2, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(h2.runtime.keys().len(), 2);
    // The re-apply of identical objects changed nothing.
    for k in ["a", "b"] {
        let ws = h2.runtime.workspace(&key(k)).unwrap();
        assert_eq!(ws.replicas, 1);
        assert!(ws.apply_count >= 2);
    }
    assert_eq!(h2.model(|m| m.actual("a")), Some(ActualState::Running));
}

#[tokio::test(start_paused = true)]
async fn a_blocked_deletion_backs_off_says_why_once_and_finishes_when_unblocked() {
    let h = Harness::running_a().await;
    h.runtime.block_deletion(
        &key("a"),
        Some("volume warren-a-data: volume is being used"),
    );
    h.model(|m| m.set_desired("a", DesiredState::Terminated));
    h.signal();
    h.until(1, "the reason to reach the server", |h| {
        h.model(|m| m.workspaces["a"].errors_seen.len()) == 1
    })
    .await;
    let seen = h.model(|m| m.workspaces["a"].errors_seen.clone());
    assert!(seen[0].contains("volume warren-a-data"), "{seen:?}");
    // Two virtual minutes of a deletion that cannot progress: a handful of attempts on a
    // growing interval (not one per wake-up), and the same reason is not said again.
    let before = h.runtime.delete_calls();
    h.run_for(120.0).await;
    let attempts = h.runtime.delete_calls() - before;
    assert!((2..=10).contains(&attempts), "{attempts} attempts in 120 s");
    assert_eq!(h.model(|m| m.workspaces["a"].errors_seen.len()), 1);
    assert_eq!(h.model(|m| m.actual("a")), Some(ActualState::Terminating));
    // The blocker goes away (a change event): the deletion goes on at once, not after the
    // backoff.
    h.runtime.set_auto_delete(true);
    h.runtime.block_deletion(&key("a"), None);
    h.until(1, "terminated", |h| {
        h.model(|m| m.actual("a")) == Some(ActualState::Terminated)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn what_workspaces_use_goes_with_a_call_each_minute_and_again_after_a_failure() {
    use warren_agent::runtime::WorkspaceUsage;
    let used = |cpu_seconds: f64| {
        vec![WorkspaceUsage {
            workspace: key("a"),
            container: "tools".into(),
            cpu_seconds,
            memory_bytes: 256 << 20,
        }]
    };
    let h = Harness::new(settings(3600, 10), &["a"]);
    h.runtime.set_usage(used(100.0));
    // The first reading only sets the counters.
    h.run_for(59.5).await;
    let sent = |h: &Harness| {
        h.transport
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.used.clone())
            .collect::<Vec<_>>()
    };
    assert!(sent(&h).iter().all(Vec::is_empty), "{:?}", sent(&h));
    // A minute on: 3 s of CPU and 256 MiB for a minute, in the call that fails and its retry.
    h.runtime.set_usage(used(103.0));
    *h.transport.fail_next.lock().unwrap() = 1;
    let before = sent(&h).len();
    h.until(30, "the retry", |h| sent(h).len() >= before + 2)
        .await;
    let calls = sent(&h);
    for u in &calls[before..before + 2] {
        assert_eq!(u.len(), 1, "{calls:?}");
        assert_eq!((u[0].name.as_str(), u[0].cpu_ms), ("a", 3000), "{calls:?}");
        // The reading falls on the first call at least a minute after the last one.
        assert!(
            (256 * 60..=256 * 70).contains(&u[0].memory_mib_s),
            "{calls:?}"
        );
    }
    // Delivered: the next call carries nothing new.
    let before = sent(&h).len();
    h.until(15, "the next call", |h| sent(h).len() > before)
        .await;
    assert!(sent(&h)[before].is_empty(), "{:?}", sent(&h));
}
