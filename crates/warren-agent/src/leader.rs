//! Leader election among replicas of one agent through a Kubernetes Lease
//! (coordination.k8s.io/v1), as client-go's leader election does it: one replica holds the
//! lease and runs the agent; the others poll it and take it over once it has not been renewed
//! for a lease duration, measured on their own monotonic clock (no clock agreement needed).
//!
//! The leader renews every retry period and steps down (cancels the agent) when it has not
//! renewed for the renew deadline, which is shorter than the lease duration, every API call
//! bounded by what is left of it: so it has been told to stop before anyone else may take
//! over (its in-flight calls may still finish, as with client-go). On shutdown it gives the
//! lease up at once. Two replicas must not share an identity: both would count as holder.

use crate::AgentError;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::chrono::Utc;
use kube::api::{Api, PostParams};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where the lease lives, who this replica is, and how long a lease lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    pub namespace: String,
    /// The Lease's name; empty means `warren-agent-<agent id>`, so different agents sharing
    /// a namespace never block each other.
    pub lease_name: String,
    /// This replica's name in the lease (the pod's name in a cluster).
    pub identity: String,
    /// How long a lease is good for without renewal (client-go's default is 15 s).
    pub lease_duration: Duration,
}

impl LeaderElectionConfig {
    /// The leader steps down when it could not renew for this long: two thirds of the lease.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    /// How often the leader renews and the others look (client-go: 2 s of 15 s).
    pub fn retry_period(&self) -> Duration {
        (self.lease_duration * 2 / 15).max(Duration::from_millis(100))
    }

    /// Checks the settings; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.namespace.is_empty() {
            return Err("leader election namespace: must not be empty".into());
        }
        if !self.lease_name.is_empty() && !is_dns_subdomain(&self.lease_name) {
            return Err(format!(
                "leader election lease name: {:?} is not a Kubernetes object name (lowercase \
                 letters, digits, '-' and '.', starting and ending with a letter or digit, at \
                 most 253 characters)",
                self.lease_name
            ));
        }
        if self.identity.is_empty() {
            return Err("leader election identity: must not be empty".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err("leader election lease duration: must be at least 1 second".into());
        }
        Ok(())
    }
}

fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// The lease as last seen, and when (on this replica's clock) it last changed.
#[derive(Debug, Clone, PartialEq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    transitions: i32,
    /// The holder's own lease duration (replicas may differ, e.g. during a rollout).
    duration_seconds: Option<i32>,
}

/// One replica's view of the election.
pub struct Elector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observed: Option<(Record, Instant)>,
}

impl Elector {
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    fn spec(&self, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Utc::now());
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
        }
    }

    fn observe(&mut self, record: Record) {
        if self.observed.as_ref().map(|(r, _)| r) != Some(&record) {
            self.observed = Some((record, Instant::now()));
        }
    }

    /// One attempt to take or renew the lease: true when this replica holds it afterwards.
    /// A lost race (someone else wrote first) is `Ok(false)`, not an error.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(current) = self.api.get_opt(&self.config.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(record_of(&created));
                    Ok(true)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let record = record_of(&current);
        self.observe(record.clone());
        let mine = record.holder.as_deref() == Some(self.config.identity.as_str());
        let vacant = record.holder.as_deref().is_none_or(str::is_empty);
        // The longer of the holder's duration and ours: a holder configured for longer must
        // not be overrun by a replica configured for less.
        let theirs =
            Duration::from_secs(u64::try_from(record.duration_seconds.unwrap_or(0)).unwrap_or(0));
        let duration = theirs.max(self.config.lease_duration);
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() >= duration);
        if !mine && !vacant && !expired {
            return Ok(false);
        }
        let spec = current.spec.clone().unwrap_or_default();
        let (acquire, transitions) = if mine {
            (spec.acquire_time, record.transitions)
        } else {
            (None, record.transitions.saturating_add(1))
        };
        let mut next = current;
        next.spec = Some(self.spec(acquire, transitions));
        // The resourceVersion read above makes this a compare-and-swap: a replica that wrote
        // in between makes it fail with 409.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                if !mine {
                    tracing::info!(identity = %self.config.identity, previous = ?record.holder, "took the agent's lease over");
                }
                self.observe(record_of(&written));
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up if this replica holds it, so another takes over without waiting.
    pub async fn release(&mut self) {
        let mut current = match self.api.get_opt(&self.config.lease_name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %warren_types::error_chain(&e), "cannot read the agent's lease to give it up; another replica takes it when it expires");
                return;
            }
        };
        let spec = current.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Utc::now()));
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => tracing::info!(identity = %self.config.identity, "gave the agent's lease up"),
            Err(e) => {
                tracing::warn!(error = %warren_types::error_chain(&e), "cannot give the agent's lease up; another replica takes it when it expires")
            }
        }
    }
}

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity,
        renew_time: spec.renew_time,
        transitions: spec.lease_transitions.unwrap_or(0),
        duration_seconds: spec.lease_duration_seconds,
    }
}

/// Runs `lead` while this replica holds the lease, until `shutdown`: waits to be elected,
/// runs `lead` with a token that is cancelled when leadership is lost, and after a loss waits
/// for `lead` to end and stands again. Returns what `lead` returns when it ends on its own
/// (an error, or shutdown).
pub async fn run_elected<F, Fut>(
    mut elector: Elector,
    shutdown: CancellationToken,
    mut lead: F,
) -> Result<(), AgentError>
where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), AgentError>> + Send + 'static,
{
    let retry = elector.config.retry_period();
    let deadline = elector.config.renew_deadline();
    // A follower shows 0, so a dashboard counts exactly one leader per agent.
    metrics::gauge!("warren_agent_leader").set(0.0);
    loop {
        // Candidate: poll until the lease is ours. Each call is bounded: an API server that
        // stops answering must not stall the election.
        let acquired = loop {
            let sent = Instant::now();
            match tokio::time::timeout(deadline, elector.try_acquire_or_renew()).await {
                Ok(Ok(true)) => break sent,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %warren_types::error_chain(&e), "reading the agent's lease failed; retrying")
                }
                Err(_) => tracing::warn!(
                    "the API server did not answer about the agent's lease; retrying"
                ),
            }
            tokio::select! {
                // Cancel-safe: cancellation only flips a flag.
                _ = shutdown.cancelled() => return Ok(()),
                // Cancel-safe: a sleep holds nothing.
                _ = tokio::time::sleep(retry) => {}
            }
        };
        tracing::info!(identity = %elector.config.identity, lease = %elector.config.lease_name, "elected: this replica runs the agent");
        let leading = shutdown.child_token();
        metrics::gauge!("warren_agent_leader").set(1.0);
        metrics::counter!("warren_agent_leader_transitions_total").increment(1);
        let mut task = tokio::spawn(lead(leading.clone()));
        // When the last successful renewal was *sent*: the other replicas count from when they
        // saw it, which is later, so stepping down `deadline` after this is always in time.
        let mut renewed = acquired;
        let outcome = loop {
            tokio::select! {
                // Cancel-safe: polling a JoinHandle by reference loses nothing.
                r = &mut task => break r,
                // Cancel-safe: a sleep holds nothing.
                _ = tokio::time::sleep(retry) => {}
            }
            if leading.is_cancelled() {
                continue;
            }
            let sent = Instant::now();
            let budget = deadline.saturating_sub(renewed.elapsed());
            match tokio::time::timeout(budget, elector.try_acquire_or_renew()).await {
                Ok(Ok(true)) => renewed = sent,
                Ok(Ok(false)) => {
                    tracing::warn!("another replica holds the agent's lease; stepping down");
                    leading.cancel();
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %warren_types::error_chain(&e), "renewing the agent's lease failed");
                    if renewed.elapsed() >= deadline {
                        tracing::warn!("the agent's lease was not renewed in time; stepping down");
                        leading.cancel();
                    }
                }
                Err(_) => {
                    tracing::warn!("the agent's lease was not renewed in time (the API server did not answer); stepping down");
                    leading.cancel();
                }
            }
        };
        metrics::gauge!("warren_agent_leader").set(0.0);
        let result = outcome.unwrap_or_else(|e| Err(AgentError::Task("leading agent", e)));
        if shutdown.is_cancelled() || result.is_err() || !leading.is_cancelled() {
            // Shutting down, failed, or (not cancelled) nothing left to lead: let another
            // replica take over at once, if the API server answers in time.
            let _ = tokio::time::timeout(deadline, elector.release()).await;
            return result;
        }
        tracing::info!("no longer the leader; standing for election again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(lease_name: &str, seconds: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            namespace: "warren".into(),
            lease_name: lease_name.into(),
            identity: "pod-a".into(),
            lease_duration: Duration::from_secs(seconds),
        }
    }

    #[test]
    fn timings_follow_client_go_proportions() {
        let c = config("", 15);
        assert_eq!(c.renew_deadline(), Duration::from_secs(10));
        assert_eq!(c.retry_period(), Duration::from_secs(2));
        assert!(c.renew_deadline() < c.lease_duration);
    }

    #[test]
    fn settings_are_checked_by_name() {
        assert!(
            config("", 15).validate().is_ok(),
            "empty: derived from the agent id"
        );
        assert!(config("warren-agent-7", 15).validate().is_ok());
        for bad in ["Warren", "-lease", "lease-", "a_b", &"a".repeat(254)] {
            let err = config(bad, 15).validate().unwrap_err();
            assert!(err.contains("lease name"), "{bad}: {err}");
        }
        let err = config("x", 0).validate().unwrap_err();
        assert!(err.contains("lease duration"), "{err}");
        let mut c = config("x", 15);
        c.identity.clear();
        assert!(c.validate().unwrap_err().contains("identity"));
    }
}
