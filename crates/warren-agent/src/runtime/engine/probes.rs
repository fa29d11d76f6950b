//! Startup, readiness and liveness probes of pods from Git, run as the kubelet runs them.
//!
//! Each probe (`exec`, `httpGet`, `tcpSocket`) runs after its `initialDelaySeconds`, every
//! `periodSeconds`, each attempt bounded by `timeoutSeconds`; `successThreshold` and
//! `failureThreshold` consecutive results flip it. A container with a startup probe runs its
//! other probes only once that one has passed. The pod is ready when every container's
//! readiness probe has passed (a container without one is ready when it runs); until then
//! `list` reports it not ready, with the probe's last failure as the reason. A failed liveness
//! or startup probe stops the container, which the supervisor (`restarts`) restarts with its
//! back-off, naming the probe as the cause.
//!
//! One prober task per running pod of the GitOps sibling, started by the look that finds the
//! pod running and ended when the pod stops, is replaced, restarted or deleted, so a
//! restarted container starts unready, as a new container does on Kubernetes. Workspaces
//! keep the rules of `ready` (their renderer decides what to wait for).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerSummary, ExecConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::plan::{Role, CONTAINER_LABEL, POD_HASH_LABEL};
use super::{label, lock, summary_order, summary_role, EngineRuntime, Record};

/// Bytes of an exec probe's output kept for its failure message.
const OUTPUT_KEPT: usize = 512;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Startup,
    Readiness,
    Liveness,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Startup => "startup",
            Kind::Readiness => "readiness",
            Kind::Liveness => "liveness",
        }
    }
}

/// The probers of the sibling's pods, by pod.
#[derive(Debug, Default)]
pub(super) struct Probers(BTreeMap<String, Prober>);

#[derive(Debug)]
struct Prober {
    /// The pod (hash) and its containers' ids it probes.
    generation: String,
    cancel: CancellationToken,
    verdict: Arc<Mutex<Verdict>>,
}

/// What a pod's probes say now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Verdict {
    /// `None` when ready; else why not.
    not_ready: Option<String>,
}

/// The pod's containers and their probes, from the Deployment last applied.
fn probes_of(deployment: &Value) -> Vec<(String, Container)> {
    deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::from_value::<Container>(c.clone()).ok())
        .map(|c| (c.name.clone(), c))
        .collect()
}

/// A probe's handler that the engine cannot run, named; `None` when every probe can run.
pub(super) fn unsupported(container: &Container) -> Option<String> {
    for (kind, probe) in [
        ("startupProbe", &container.startup_probe),
        ("readinessProbe", &container.readiness_probe),
        ("livenessProbe", &container.liveness_probe),
    ] {
        let Some(p) = probe else { continue };
        if p.grpc.is_some() {
            return Some(format!(
                "container {:?}: {kind}.grpc is not supported by the container-engine runtime \
                 (use exec, httpGet or tcpSocket)",
                container.name
            ));
        }
        if p.exec.is_none() && p.http_get.is_none() && p.tcp_socket.is_none() {
            return Some(format!(
                "container {:?}: {kind} has no handler (exec, httpGet or tcpSocket)",
                container.name
            ));
        }
        // The agent probes from where it stands, which reaches more than a pod may (the
        // host's own services, other workspaces, a cloud's metadata service): a probe goes
        // to the pod's own address only, as Kubernetes' baseline requires since 1.34.
        let host = p
            .http_get
            .as_ref()
            .and_then(|h| h.host.as_deref())
            .or(p.tcp_socket.as_ref().and_then(|t| t.host.as_deref()));
        if host.is_some_and(|h| !h.is_empty()) {
            return Some(format!(
                "container {:?}: {kind} names a host; probes reach only the pod's own address",
                container.name
            ));
        }
    }
    None
}

/// Why the pod is not ready, as its readiness and startup probes say; `None` when it is.
fn not_ready(running: &[Running]) -> Option<String> {
    let why: Vec<String> = running
        .iter()
        .filter(|r| r.kind != Kind::Liveness && !r.passed)
        .map(|r| {
            format!(
                "{} probe of container {} {}",
                r.kind.word(),
                r.container,
                match &r.last_failure {
                    Some(f) => format!("failed: {f}"),
                    None => "has not passed yet".to_owned(),
                }
            )
        })
        .collect();
    (!why.is_empty()).then(|| why.join("; "))
}

/// Resolves a probe's port (a number, or the name of one of the container's ports).
fn port_of(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| format!("port {name:?} names no port of the container"))?,
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port {number} is out of range"))
}

/// Seconds of a probe field, with the kubelet's default and floor.
fn secs(v: Option<i32>, default: i32, floor: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(floor)).unwrap_or(0))
}

/// One probe of one container, and its run so far.
struct Running {
    container: String,
    engine_name: String,
    kind: Kind,
    probe: Probe,
    spec: Container,
    next: Instant,
    successes: i32,
    failures: i32,
    /// Whether it has passed (readiness, startup): flips on the thresholds.
    passed: bool,
    last_failure: Option<String>,
}

impl EngineRuntime {
    /// What the probes of the running pod of `record` say: `None` when it is ready. Starts
    /// its prober when none probes this pod (its hash and containers) yet.
    pub(super) fn probe_verdict(
        &self,
        record: &Record,
        containers: &[ContainerSummary],
    ) -> Option<String> {
        let mut apps: Vec<&ContainerSummary> = containers
            .iter()
            .filter(|c| {
                summary_role(c) == Role::App
                    && label(c, POD_HASH_LABEL) == Some(record.pod_hash.as_str())
            })
            .collect();
        apps.sort_by_key(|c| summary_order(c));
        let generation = format!(
            "{} {}",
            record.pod_hash,
            apps.iter()
                .map(|c| c.id.clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(",")
        );
        let probes = probes_of(&record.deployment);
        let any = probes.iter().any(|(_, c)| {
            c.startup_probe.is_some() || c.readiness_probe.is_some() || c.liveness_probe.is_some()
        });
        if !any {
            self.forget_prober(&record.name);
            return None;
        }
        let mut probers = lock(&self.inner.probers);
        if let Some(p) = probers.0.get(&record.name) {
            if p.generation == generation {
                return lock(&p.verdict).not_ready.clone();
            }
            p.cancel.cancel();
        }
        // Ready while running unless a readiness or startup probe must pass first.
        let gated = probes
            .iter()
            .any(|(_, c)| c.startup_probe.is_some() || c.readiness_probe.is_some());
        let first = gated.then(|| "its probes have not passed yet".to_owned());
        let verdict = Arc::new(Mutex::new(Verdict {
            not_ready: first.clone(),
        }));
        let cancel = self.inner.shutdown.child_token();
        let engine_names: BTreeMap<String, String> = apps
            .iter()
            .filter_map(|c| {
                Some((
                    label(c, CONTAINER_LABEL)?.to_owned(),
                    c.id.clone().unwrap_or_default(),
                ))
            })
            .collect();
        let owner = apps.first().and_then(|c| c.id.clone()).unwrap_or_default();
        probers.0.insert(
            record.name.clone(),
            Prober {
                generation,
                cancel: cancel.clone(),
                verdict: verdict.clone(),
            },
        );
        let runtime = self.clone();
        let name = record.name.clone();
        tokio::spawn(async move {
            tokio::select! {
                // Cancel-safe: a probe in flight is dropped; its result would be stale.
                _ = cancel.cancelled() => {}
                _ = runtime.run_probes(&name, &owner, probes, engine_names, verdict) => {}
            }
        });
        first
    }

    /// Ends the prober of pod `name`, if one runs (the pod stopped, went, or restarts).
    pub(super) fn forget_prober(&self, name: &str) {
        if let Some(p) = lock(&self.inner.probers).0.remove(name) {
            p.cancel.cancel();
        }
    }

    /// The prober of pod `name` (see the module docs). Returns when a liveness or startup
    /// probe has stopped a container (the restart starts a new prober).
    async fn run_probes(
        &self,
        name: &str,
        owner: &str,
        containers: Vec<(String, Container)>,
        engine_names: BTreeMap<String, String>,
        verdict: Arc<Mutex<Verdict>>,
    ) {
        let mut addresses = self.pod_addresses_of(owner).await;
        // As the kubelet: certificates are not checked, any status from 200 to 399 passes,
        // and a redirect is followed only on the same host (one elsewhere passes, never
        // followed: a pod must not point the agent at another host). No proxy: the pod's
        // address is on this host.
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let same = attempt
                .previous()
                .first()
                .is_some_and(|first| first.host_str() == attempt.url().host_str());
            if !same || attempt.previous().len() >= 10 {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        let client = match reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .no_proxy()
            .redirect(redirects)
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no HTTP client for probes");
                return;
            }
        };
        let start = Instant::now();
        let mut running: Vec<Running> = Vec::new();
        for (container, spec) in &containers {
            let Some(engine_name) = engine_names.get(container) else {
                continue;
            };
            for (kind, probe) in [
                (Kind::Startup, &spec.startup_probe),
                (Kind::Readiness, &spec.readiness_probe),
                (Kind::Liveness, &spec.liveness_probe),
            ] {
                let Some(probe) = probe else { continue };
                running.push(Running {
                    container: container.clone(),
                    engine_name: engine_name.clone(),
                    kind,
                    probe: probe.clone(),
                    spec: spec.clone(),
                    next: start + secs(probe.initial_delay_seconds, 0, 0),
                    successes: 0,
                    failures: 0,
                    passed: false,
                    last_failure: None,
                });
            }
        }
        loop {
            // Each container's startup probe gates its other probes.
            let started = |running: &[Running], container: &str| {
                running
                    .iter()
                    .filter(|r| r.container == container && r.kind == Kind::Startup)
                    .all(|r| r.passed)
            };
            let now = Instant::now();
            if addresses.is_empty() {
                addresses = self.pod_addresses_of(owner).await;
            }
            for i in 0..running.len() {
                // A startup probe that passed is done, as the kubelet's is.
                let done = running[i].kind == Kind::Startup && running[i].passed;
                if done
                    || running[i].next > now
                    || (running[i].kind != Kind::Startup
                        && !started(&running, &running[i].container))
                {
                    continue;
                }
                let outcome = self.attempt(&client, &running[i], &addresses).await;
                let r = &mut running[i];
                r.next = Instant::now() + secs(r.probe.period_seconds, 10, 1);
                let threshold_ok = r.probe.success_threshold.unwrap_or(1).max(1);
                let threshold_fail = r.probe.failure_threshold.unwrap_or(3).max(1);
                match outcome {
                    Ok(()) => {
                        r.failures = 0;
                        r.successes += 1;
                        if r.successes >= threshold_ok {
                            r.passed = true;
                        }
                    }
                    Err(message) => {
                        r.successes = 0;
                        r.failures += 1;
                        r.last_failure = Some(message.clone());
                        if r.failures < threshold_fail {
                            continue;
                        }
                        if r.kind == Kind::Readiness {
                            r.passed = false;
                            continue;
                        }
                        // Liveness or startup: the container goes, and comes back through
                        // the supervisor's restart.
                        let reason = format!("{} probe failed: {message}", r.kind.word());
                        tracing::info!(pod = %name, container = %r.container, probe = r.kind.word(), "stopping a GitOps container its probe found unhealthy");
                        self.note_probe_kill(name, &r.container, &reason);
                        let _ = self.stop(&r.engine_name).await;
                        self.changed(name);
                        return;
                    }
                }
            }
            let now_verdict = Verdict {
                not_ready: not_ready(&running),
            };
            let differs = {
                let mut v = lock(&verdict);
                let differs = *v != now_verdict;
                *v = now_verdict;
                differs
            };
            if differs {
                self.changed(name);
            }
            let pending = running
                .iter()
                .filter(|r| !(r.kind == Kind::Startup && r.passed));
            match pending.map(|r| r.next).min() {
                Some(next) => tokio::time::sleep_until(next.max(Instant::now())).await,
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// One attempt of a probe: `Err` with the kubelet's kind of message when it fails.
    async fn attempt(
        &self,
        client: &reqwest::Client,
        r: &Running,
        addresses: &[IpAddr],
    ) -> Result<(), String> {
        let timeout = secs(r.probe.timeout_seconds, 1, 1);
        if let Some(exec) = &r.probe.exec {
            let command = exec.command.clone().unwrap_or_default();
            return match tokio::time::timeout(timeout, self.exec_probe(&r.engine_name, &command))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(format!(
                    "command {command:?} timed out after {}s",
                    timeout.as_secs()
                )),
            };
        }
        let Some(address) = addresses.first().copied() else {
            return Err("the pod has no address on its network".into());
        };
        if let Some(http) = &r.probe.http_get {
            let port = port_of(&http.port, &r.spec)?;
            let scheme = http
                .scheme
                .as_deref()
                .unwrap_or("HTTP")
                .to_ascii_lowercase();
            let host = match address {
                IpAddr::V6(v6) => format!("[{v6}]"),
                IpAddr::V4(v4) => v4.to_string(),
            };
            let path = http.path.clone().unwrap_or_else(|| "/".into());
            let path = if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            };
            let url = format!("{scheme}://{host}:{port}{path}");
            let mut request = client
                .get(&url)
                .timeout(timeout)
                .header("User-Agent", "kube-probe/warren");
            for h in http.http_headers.iter().flatten() {
                request = request.header(h.name.as_str(), h.value.as_str());
            }
            return match request.send().await {
                Ok(response) if (200..400).contains(&response.status().as_u16()) => Ok(()),
                Ok(response) => Err(format!(
                    "http probe failed with status code {}",
                    response.status().as_u16()
                )),
                Err(e) if e.is_timeout() => Err(format!(
                    "get {url:?}: no answer within {}s",
                    timeout.as_secs()
                )),
                Err(e) => Err(format!("get {url:?}: {}", warren_types::error_chain(&e))),
            };
        }
        if let Some(tcp) = &r.probe.tcp_socket {
            let port = port_of(&tcp.port, &r.spec)?;
            let host = address;
            return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
                .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
                Err(_) => Err(format!("dial tcp {host}:{port}: i/o timeout")),
            };
        }
        Err("the probe has no handler".into())
    }

    /// The addresses of the pod whose first container is `owner`; none when it cannot be
    /// inspected (looked at again at the next round).
    async fn pod_addresses_of(&self, owner: &str) -> Vec<IpAddr> {
        match self.inspect(owner).await {
            Ok(i) => super::exec::pod_addresses(i),
            Err(_) => Vec::new(),
        }
    }

    /// Runs an exec probe's command in `container`: passes when it exits 0.
    async fn exec_probe(&self, container: &str, command: &[String]) -> Result<(), String> {
        match self.run_exec(container, command).await? {
            (0, _) => Ok(()),
            (code, text) if text.is_empty() => {
                Err(format!("command {command:?} exited with code {code}"))
            }
            (code, text) => Err(format!(
                "command {command:?} exited with code {code}: {text}"
            )),
        }
    }

    /// Runs `command` in `container` to its end: its exit code and the start of its output
    /// (at most [`OUTPUT_KEPT`] bytes, trimmed).
    pub(super) async fn run_exec(
        &self,
        container: &str,
        command: &[String],
    ) -> Result<(i64, String), String> {
        if command.is_empty() {
            return Err("the command is empty".into());
        }
        let docker = &self.inner.docker;
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(command.to_vec()),
            ..Default::default()
        };
        let created = docker
            .create_exec(container, config)
            .await
            .map_err(|e| super::error_message(&e))?;
        let mut output = Vec::new();
        match docker
            .start_exec(&created.id, None::<StartExecOptions>)
            .await
            .map_err(|e| super::error_message(&e))?
        {
            StartExecResults::Attached {
                output: mut out, ..
            } => {
                while let Some(chunk) = out.next().await {
                    if let Ok(chunk) = chunk {
                        let bytes = chunk.into_bytes();
                        let room = OUTPUT_KEPT.saturating_sub(output.len());
                        output.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    }
                }
            }
            StartExecResults::Detached => {}
        }
        let code = docker
            .inspect_exec(&created.id)
            .await
            .map_err(|e| super::error_message(&e))?
            .exit_code;
        let text = String::from_utf8_lossy(&output).trim().to_owned();
        code.map(|c| (c, text))
            .ok_or_else(|| format!("command {command:?} did not report an exit code"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(v: Value) -> Container {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn probes_the_engine_cannot_run_are_named() {
        let grpc = container(json!({"name": "web", "livenessProbe": {"grpc": {"port": 9000}}}));
        let message = unsupported(&grpc).unwrap();
        assert!(message.contains("livenessProbe.grpc"), "{message}");
        let none = container(json!({"name": "web", "readinessProbe": {"periodSeconds": 3}}));
        assert!(unsupported(&none).unwrap().contains("no handler"));
        let aimed = container(json!({"name": "web",
            "readinessProbe": {"httpGet": {"host": "169.254.169.254", "port": 80}}}));
        assert!(unsupported(&aimed).unwrap().contains("names a host"));
        let aimed = container(json!({"name": "web",
            "livenessProbe": {"tcpSocket": {"host": "127.0.0.1", "port": 22}}}));
        assert!(unsupported(&aimed).unwrap().contains("names a host"));
        let fine = container(json!({"name": "web",
            "readinessProbe": {"httpGet": {"port": "http", "path": "/"}},
            "livenessProbe": {"tcpSocket": {"port": 80}},
            "startupProbe": {"exec": {"command": ["true"]}}}));
        assert_eq!(unsupported(&fine), None);
    }

    #[test]
    fn named_ports_resolve_to_the_containers_ports() {
        let c =
            container(json!({"name": "web", "ports": [{"name": "http", "containerPort": 8080}]}));
        assert_eq!(port_of(&IntOrString::String("http".into()), &c), Ok(8080));
        assert_eq!(port_of(&IntOrString::Int(80), &c), Ok(80));
        assert!(port_of(&IntOrString::String("admin".into()), &c)
            .unwrap_err()
            .contains("admin"));
        assert!(port_of(&IntOrString::Int(70000), &c).is_err());
    }

    #[test]
    fn durations_follow_the_kubelets_defaults_and_floors() {
        assert_eq!(secs(None, 10, 1), Duration::from_secs(10));
        assert_eq!(secs(Some(0), 10, 1), Duration::from_secs(1));
        assert_eq!(secs(Some(5), 10, 1), Duration::from_secs(5));
        assert_eq!(secs(None, 0, 0), Duration::ZERO);
    }
}
