//! What workspaces use on Kubernetes (issue 44, item 3), from the cluster's Metrics API
//! (`metrics.k8s.io`, served by metrics-server): each container's CPU rate and working-set
//! memory over its last window. [`WorkspaceRuntime::usage`] reports CPU as a counter, so the
//! rates are integrated here, each over the time since the container's previous sample (its
//! window for the first). A cluster without the Metrics API reports nothing, said once in the
//! log. Listed by the agent's label: PodMetrics carry their pod's labels.

use super::{status, KubernetesRuntime};
use crate::runtime::{RuntimeError, WorkspaceKey, WorkspaceUsage, AGENT_ID_LABEL};
use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// One container's sample from the Metrics API.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub at: DateTime<Utc>,
    pub window_s: f64,
    pub cpu_cores: f64,
    pub memory_bytes: u64,
}

/// CPU cores of a quantity as the Metrics API writes it (`12345678n`, `250m`, `2`).
fn cores(q: &str) -> Option<f64> {
    let (number, scale) = match q.as_bytes().last()? {
        b'n' => (&q[..q.len() - 1], 1e-9),
        b'u' => (&q[..q.len() - 1], 1e-6),
        b'm' => (&q[..q.len() - 1], 1e-3),
        _ => (q, 1.0),
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v * scale)
}

/// Bytes of a memory quantity (`1024Ki`, `12Mi`, `1G`, `4096`).
fn bytes(q: &str) -> Option<u64> {
    const SUFFIXES: [(&str, f64); 10] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("m", 1e-3),
        ("", 1.0),
    ];
    let (number, scale) = SUFFIXES
        .iter()
        .find_map(|(s, scale)| q.strip_suffix(s).map(|n| (n, *scale)))?;
    let v = number.parse::<f64>().ok()? * scale;
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

/// `90s`, `1m30s`, `500ms` (the windows metrics-server writes).
fn seconds(d: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = d;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        total += value
            * match &rest[..unit] {
                "h" => 3600.0,
                "m" => 60.0,
                "s" => 1.0,
                "ms" => 1e-3,
                _ => return None,
            };
        rest = &rest[unit..];
    }
    Some(total)
}

/// The samples in one PodMetrics object; what does not parse is left out.
pub(super) fn samples(pod_metrics: &Value) -> Vec<Sample> {
    let text = |v: &Value, path: &str| v.pointer(path).and_then(Value::as_str).map(str::to_owned);
    let (Some(namespace), Some(pod), Some(at)) = (
        text(pod_metrics, "/metadata/namespace"),
        text(pod_metrics, "/metadata/name"),
        text(pod_metrics, "/timestamp").and_then(|t| DateTime::parse_from_rfc3339(&t).ok()),
    ) else {
        return vec![];
    };
    let window_s = text(pod_metrics, "/window")
        .and_then(|w| seconds(&w))
        .unwrap_or(0.0);
    let containers = pod_metrics
        .get("containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    containers
        .iter()
        .filter_map(|c| {
            Some(Sample {
                namespace: namespace.clone(),
                pod: pod.clone(),
                container: text(c, "/name")?,
                at: at.with_timezone(&Utc),
                window_s,
                cpu_cores: cores(&text(c, "/usage/cpu")?)?,
                memory_bytes: bytes(&text(c, "/usage/memory")?)?,
            })
        })
        .collect()
}

/// A container: its namespace, pod and name.
type ContainerRef = (String, String, String);

/// Each container's CPU seconds so far, integrated from the rates it was sampled at.
#[derive(Debug, Default)]
pub(super) struct Integrated {
    /// By (namespace, pod, container): the last sample's time and the seconds so far.
    counters: Mutex<HashMap<ContainerRef, (DateTime<Utc>, f64)>>,
    /// Whether the Metrics API's absence was logged.
    told: std::sync::atomic::AtomicBool,
}

impl Integrated {
    /// Adds `samples` (one listing: a container missing from it is gone) and returns each
    /// one's CPU seconds so far.
    pub(super) fn add(&self, samples: &[Sample]) -> Vec<f64> {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::with_capacity(samples.len());
        let mut out = Vec::with_capacity(samples.len());
        for s in samples {
            let key = (s.namespace.clone(), s.pod.clone(), s.container.clone());
            let (at, total) = match counters.get(&key) {
                // The same sample as last time adds nothing; a later one its rate since.
                Some((at, total)) => {
                    let since = (s.at - *at).num_milliseconds().max(0) as f64 / 1000.0;
                    (s.at.max(*at), total + s.cpu_cores * since)
                }
                None => (s.at, s.cpu_cores * s.window_s),
            };
            next.insert(key, (at, total));
            out.push(total);
        }
        *counters = next;
        out
    }
}

impl KubernetesRuntime {
    /// The agent's workspaces' usage from the Metrics API.
    pub(super) async fn metrics_usage(&self) -> Result<Vec<WorkspaceUsage>, RuntimeError> {
        let resource = ApiResource {
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "metrics.k8s.io/v1beta1".into(),
            kind: "PodMetrics".into(),
            plural: "pods".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let selector = format!("{AGENT_ID_LABEL}={}", self.agent_id);
        let list = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 503 => {
                if !self
                    .usage
                    .told
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::info!("the cluster serves no Metrics API (metrics.k8s.io, metrics-server): workspaces' CPU and memory use is not measured");
                }
                return Ok(vec![]);
            }
            Err(e) => {
                return Err(RuntimeError::Runtime {
                    context: "listing the workspaces' pod metrics".into(),
                    source: Box::new(e),
                })
            }
        };
        let samples: Vec<Sample> = list
            .items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .flat_map(|v| samples(&v))
            .collect();
        let totals = self.usage.add(&samples);
        // Pods to their workspaces, as `list` matches them.
        let mut owner: HashMap<(String, String), WorkspaceKey> = HashMap::new();
        let deployments = self.deployments.state();
        for pod in self.pods.state() {
            let (Some(ns), Some(name)) =
                (pod.metadata.namespace.clone(), pod.metadata.name.clone())
            else {
                continue;
            };
            if let Some(d) = deployments.iter().find(|d| status::selects(d, &pod)) {
                if let Some(workspace) = d.metadata.name.clone() {
                    owner.insert(
                        (ns.clone(), name),
                        WorkspaceKey {
                            name: workspace,
                            namespace: ns,
                        },
                    );
                }
            }
        }
        Ok(samples
            .into_iter()
            .zip(totals)
            .filter_map(|(s, cpu_seconds)| {
                let workspace = owner.get(&(s.namespace, s.pod))?.clone();
                Some(WorkspaceUsage {
                    workspace,
                    container: s.container,
                    cpu_seconds,
                    memory_bytes: s.memory_bytes,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_metrics(at: &str, cpu: &str, memory: &str) -> Value {
        json!({
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": "ws-a-5d8f", "namespace": "warren-ws-a",
                         "labels": {"warren.dev/agent-id": "7"}},
            "timestamp": at,
            "window": "1m0s",
            "containers": [
                {"name": "tools", "usage": {"cpu": cpu, "memory": memory}},
                {"name": "broken", "usage": {"cpu": "lots", "memory": "1Ki"}}
            ]
        })
    }

    #[test]
    fn quantities_as_the_metrics_api_writes_them() {
        assert_eq!(cores("250000000n"), Some(0.25));
        assert_eq!(cores("1500m"), Some(1.5));
        assert_eq!(cores("2"), Some(2.0));
        assert_eq!(cores("-1"), None);
        assert_eq!(bytes("1024Ki"), Some(1 << 20));
        assert_eq!(bytes("3Gi"), Some(3 << 30));
        assert_eq!(bytes("1M"), Some(1_000_000));
        assert_eq!(bytes("12x"), None);
        assert_eq!(seconds("1m30s"), Some(90.0));
        assert_eq!(seconds("500ms"), Some(0.5));
        assert_eq!(seconds("5d"), None);
    }

    #[test]
    fn rates_are_integrated_into_cpu_seconds() {
        let first = samples(&pod_metrics("2026-12-06T10:00:00Z", "500m", "256Mi"));
        assert_eq!(
            first.len(),
            1,
            "the unparsable container is left out: {first:?}"
        );
        assert_eq!(first[0].memory_bytes, 256 << 20);
        let i = Integrated::default();
        // The first sample counts its window: half a core for a minute.
        assert_eq!(i.add(&first), vec![30.0]);
        // The same sample again adds nothing; two minutes later at two cores, 240 s more.
        assert_eq!(i.add(&first), vec![30.0]);
        let later = samples(&pod_metrics("2026-12-06T10:02:00Z", "2", "300Mi"));
        assert_eq!(i.add(&later), vec![270.0]);
        // Gone from a listing, a container starts over when it comes back.
        assert_eq!(i.add(&[]), Vec::<f64>::new());
        assert_eq!(i.add(&later), vec![120.0]);
        assert!(samples(&json!({"metadata": {}})).is_empty());
    }
}
