//! High availability, end to end with real processes: two `warren server`s on one PostgreSQL
//! database, a relay, and two replicas of one agent on the Kubernetes runtime electing a
//! leader through a Lease on the test control plane. While two clients keep creating and
//! stopping workspaces, the server holding the housekeeping lease is SIGKILLed, then the agent
//! leader; the clients fail over to the surviving server. In the end every acknowledged change
//! is there exactly once, in the API and in the cluster, the surviving server runs the
//! housekeeping jobs and the surviving agent holds the Lease.
//!
//! The agents' reconcile timers are set to ten minutes, so the cluster follows through the
//! surviving server's signals and the new leader's first reconcile, not the safety net.
//!
//! Needs `WARREN_TEST_DATABASE_URL` and the control plane of `.ci/setup-kubernetes.sh`; skips
//! with a notice otherwise (fails under `WARREN_REQUIRE_KUBERNETES=1`).

use crate::kube_common;
use crate::support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{free_port, Proc};
use warren_agent::runtime::{AGENT_ID_LABEL, WORKSPACE_ID_LABEL};

const RELAY_SECRET: &str = "ha-e2e-relay-secret-0123456789abcdef";

struct Server {
    proc: Proc,
    base: String,
}

/// Starts `warren server` on the shared database and waits for its ready file.
fn start_server(dir: &Path, name: &str, db_url: &str, relay_internal: u16) -> Server {
    let home = dir.join(name);
    let ready = dir.join(format!("{name}.ready"));
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        "full_reconciliation_interval_seconds = 600\npartial_reconciliation_interval_seconds = 600\n",
    )
    .unwrap();
    let args: Vec<String> = [
        "server",
        "--config",
        &config.display().to_string(),
        "--listen",
        "127.0.0.1:0",
        "--home",
        &home.display().to_string(),
        "--ready-file",
        &ready.display().to_string(),
        "--secret-key-file",
        &dir.join("secret.key").display().to_string(),
        "--relay-url",
        &format!("http://127.0.0.1:{relay_internal}"),
        "--lifecycle-interval-seconds",
        "1",
    ]
    .map(str::to_owned)
    .to_vec();
    let envs = [
        ("WARREN_DATABASE_URL", db_url.to_owned()),
        ("WARREN_RELAY_SECRET", RELAY_SECRET.to_owned()),
    ];
    let mut proc = Proc::spawn(name, &args, &envs, &dir.join(format!("{name}.log")));
    let addr = proc.wait_ready(&ready);
    Server {
        proc,
        base: format!("http://{addr}"),
    }
}

fn start_agent(dir: &Path, name: &str, relay_agents: u16, token: &str, namespace: &str) -> Proc {
    let args: Vec<String> = [
        "agent",
        "--relay-url",
        &format!("http://127.0.0.1:{relay_agents}"),
        "--runtime",
        "kubernetes",
        "--leader-election",
        "true",
        "--leader-election-namespace",
        namespace,
        "--leader-election-identity",
        name,
        "--leader-election-lease-seconds",
        "5",
    ]
    .map(str::to_owned)
    .to_vec();
    let envs = [
        ("WARREN_LOG", "info,warren_agent=debug".to_owned()),
        ("WARREN_AGENT_TOKEN", token.to_owned()),
        (
            "KUBECONFIG",
            dir.join("cluster-kubeconfig").display().to_string(),
        ),
    ];
    Proc::spawn(name, &args, &envs, &dir.join(format!("{name}.log")))
}

/// Whether the server at `base` reports holding the housekeeping lease on `/metrics`.
async fn holds_housekeeping(http: &reqwest::Client, base: &str) -> Option<bool> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("warren_server_lease_held{lease=\"housekeeping\"}"))?;
    Some(line.trim_end().ends_with(" 1"))
}

/// What the clients were told: each workspace's desired state once acknowledged.
type Acked = Arc<Mutex<BTreeMap<String, &'static str>>>;

/// A client behind a load balancer: requests go to one server and move to the other when it
/// does not answer.
struct Failover {
    http: reqwest::Client,
    servers: Vec<String>,
    current: usize,
    token: String,
}

impl Failover {
    /// One request, retried on the other server while unanswered; `ok` says which statuses
    /// acknowledge it.
    async fn send(&mut self, method: reqwest::Method, path: &str, body: &Value, ok: &[u16]) {
        for _ in 0..200 {
            let base = self.servers[self.current % self.servers.len()].clone();
            match self
                .http
                .request(method.clone(), format!("{base}{path}"))
                .bearer_auth(&self.token)
                .json(body)
                .send()
                .await
            {
                Ok(r) if ok.contains(&r.status().as_u16()) => return,
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    panic!("{method} {path} via {base}: {status} {text}");
                }
                Err(_) => {
                    self.current += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        panic!("{method} {path}: no server answered");
    }
}

/// Creates workspaces and stops every other one until `stop`, starting on `servers[first]`,
/// while fewer than `allowed` workspaces exist (the test raises it phase by phase, so the
/// kills happen mid-traffic and the load stays bounded).
async fn client(
    servers: Vec<String>,
    first: usize,
    token: String,
    prefix: &'static str,
    acked: Acked,
    allowed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let mut client = Failover {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        servers,
        current: first,
        token,
    };
    for n in 0.. {
        while acked.lock().unwrap().len() >= allowed.load(Ordering::Relaxed) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let name = format!("{prefix}-{n}");
        // 409: an earlier attempt the dead server committed but never answered.
        client
            .send(
                reqwest::Method::POST,
                "/api/v1/workspaces",
                &json!({"name": name}),
                &[201, 409],
            )
            .await;
        acked.lock().unwrap().insert(name.clone(), "Running");
        if n % 2 == 1 {
            client
                .send(
                    reqwest::Method::PUT,
                    &format!("/api/v1/workspaces/{name}/desired_state"),
                    &json!({"desired_state": "Stopped"}),
                    &[200],
                )
                .await;
            acked.lock().unwrap().insert(name, "Stopped");
        }
    }
}

/// Waits for `at_least` acknowledged workspaces; a client that ended (it panicked) fails the
/// test at once, with `logs`.
async fn wait_acked(
    acked: &Acked,
    at_least: usize,
    clients: &[tokio::task::JoinHandle<()>],
    logs: &dyn Fn() -> String,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while acked.lock().unwrap().len() < at_least {
        assert!(
            !clients.iter().any(|c| c.is_finished()),
            "a client failed (its panic is above)\n{}",
            logs()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {at_least} acknowledged workspaces\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_and_agent_replicas_survive_kills_under_load() {
    let Some(base_db) = std::env::var("WARREN_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!(
            "skipping: WARREN_TEST_DATABASE_URL is not set (several servers need PostgreSQL)"
        );
        return;
    };
    let Some(cluster) = kube_common::cluster() else {
        return;
    };
    let kube = cluster.client().await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_owned();
    std::fs::copy(
        cluster.dir.join("kubeconfig"),
        dir.join("cluster-kubeconfig"),
    )
    .unwrap();
    let schema = support::PgSchema::create(&base_db).await;
    let http = reqwest::Client::new();

    let relay_agents = free_port();
    let relay_internal = free_port();
    // The first server bootstraps the admin and writes the key the second one shares.
    let a = start_server(&dir, "server-a", &schema.url(), relay_internal);
    let b = start_server(&dir, "server-b", &schema.url(), relay_internal);
    let mut servers = vec![a, b];
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let password = servers[0].proc.bootstrap_password();
    assert!(
        !servers[1].proc.log_text().contains("password: "),
        "the second server finds the admin made by the first"
    );
    let token = support::admin_session(&http, &bases[1], &password).await;
    let agent = support::api(
        &http,
        &bases[0],
        Some(&token),
        reqwest::Method::POST,
        "/agents",
        Some(json!({"name": "cluster"})),
    )
    .await;
    let agent_id = agent["agent"]["id"].as_i64().expect("agent id");
    let agent_token = agent["token"].as_str().unwrap().to_owned();

    // The relay reaches the servers through a balancer, as through a Service.
    let upstreams = bases
        .iter()
        .map(|b| b.trim_start_matches("http://").parse().unwrap())
        .collect();
    let (balancer, balanced) = warren_testkit::balancer::start(upstreams).await.unwrap();
    let relay_args: Vec<String> = [
        "relay",
        "--agent-listen",
        &format!("127.0.0.1:{relay_agents}"),
        "--internal-listen",
        &format!("127.0.0.1:{relay_internal}"),
        "--server-url",
        &format!("http://{balanced}"),
    ]
    .map(str::to_owned)
    .to_vec();
    let _relay = Proc::spawn(
        "relay",
        &relay_args,
        &[("WARREN_RELAY_SHARED_SECRET", RELAY_SECRET.to_owned())],
        &dir.join("relay.log"),
    );
    let accepts = |port: u16| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    support::wait_for(
        "the relay to listen",
        Duration::from_secs(60),
        || (accepts(relay_agents) && accepts(relay_internal)).then_some(()),
        || std::fs::read_to_string(dir.join("relay.log")).unwrap_or_default(),
    );

    let lease_ns = format!("warren-ha-{:06x}", rand::random::<u32>() & 0xff_ffff);
    Api::<Namespace>::all(kube.clone())
        .patch(
            &lease_ns,
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lease_ns}}),
            ),
        )
        .await
        .unwrap();
    let mut agents: BTreeMap<String, Proc> = ["agent-x", "agent-y"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                start_agent(&dir, n, relay_agents, &agent_token, &lease_ns),
            )
        })
        .collect();
    let logs = |agents: &BTreeMap<String, Proc>, servers: &[Server]| {
        let mut out = String::new();
        for s in servers {
            out += &format!("--- {} ---\n{}\n", s.proc.name, s.proc.log_text());
        }
        for (n, p) in agents {
            out += &format!("--- {n} ---\n{}\n", p.log_text());
        }
        out + &format!(
            "--- relay ---\n{}",
            std::fs::read_to_string(dir.join("relay.log")).unwrap_or_default()
        )
    };
    let leases: Api<Lease> = Api::namespaced(kube.clone(), &lease_ns);
    let lease_name = format!("warren-agent-{agent_id}");
    let holder = |leases: Api<Lease>, lease_name: String| async move {
        leases
            .get_opt(&lease_name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    warren_testkit::wait_for("an agent replica to be elected", 60, || {
        let (l, n) = (leases.clone(), lease_name.clone());
        async move { holder(l, n).await.is_some() }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&agents, &servers)));

    // Exactly one server runs the housekeeping jobs.
    let holder_index = Arc::new(Mutex::new(None));
    warren_testkit::wait_for("one server to hold the housekeeping lease", 30, || {
        let http = http.clone();
        let bases = bases.clone();
        let holder_index = holder_index.clone();
        async move {
            let mut held = vec![];
            for (i, b) in bases.iter().enumerate() {
                if holds_housekeeping(&http, b).await == Some(true) {
                    held.push(i);
                }
            }
            *holder_index.lock().unwrap() = held.first().copied();
            held.len() == 1
        }
    })
    .await
    .unwrap();
    let doomed = holder_index.lock().unwrap().expect("a holder");
    let survivor = 1 - doomed;

    let acked: Acked = Arc::default();
    let allowed = Arc::new(AtomicUsize::new(16));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = [("c0", 0), ("c1", 1)]
        .into_iter()
        .map(|(prefix, first)| {
            tokio::spawn(client(
                bases.clone(),
                first,
                token.clone(),
                prefix,
                acked.clone(),
                allowed.clone(),
                stop.clone(),
            ))
        })
        .collect();

    // The server with the lease dies mid-traffic; the other takes its clients and its jobs.
    wait_acked(&acked, 8, &clients, &|| logs(&agents, &servers)).await;
    servers[doomed].proc.kill();
    allowed.store(32, Ordering::Relaxed);
    wait_acked(&acked, 24, &clients, &|| logs(&agents, &servers)).await;
    let survivor_base = bases[survivor].clone();
    warren_testkit::wait_for(
        "the surviving server to take the housekeeping lease",
        60,
        || {
            let http = http.clone();
            let b = survivor_base.clone();
            async move { holds_housekeeping(&http, &b).await == Some(true) }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&agents, &servers)));

    // The agent leader dies mid-traffic; the other replica takes the Lease over.
    let leader = holder(leases.clone(), lease_name.clone()).await.unwrap();
    allowed.store(48, Ordering::Relaxed);
    agents.get_mut(&leader).unwrap().kill();
    let follower = if leader == "agent-x" {
        "agent-y"
    } else {
        "agent-x"
    };
    wait_acked(&acked, 40, &clients, &|| logs(&agents, &servers)).await;
    warren_testkit::wait_for("the other agent replica to take the Lease", 60, || {
        let (l, n) = (leases.clone(), lease_name.clone());
        async move { holder(l, n).await.as_deref() == Some(follower) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&agents, &servers)));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("a client failed");
    }
    let lease = leases.get(&lease_name).await.unwrap();
    assert!(
        lease.spec.unwrap().lease_transitions.unwrap_or(0) >= 1,
        "the Lease changed hands"
    );

    // Every acknowledged change is in the API, once.
    let acked = acked.lock().unwrap().clone();
    let listed = support::api(
        &http,
        &survivor_base,
        Some(&token),
        reqwest::Method::GET,
        "/workspaces?limit=500",
        None,
    )
    .await;
    assert!(listed["next_cursor"].is_null(), "one page holds them all");
    let items = listed["items"].as_array().expect("workspace list");
    let mut by_name: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for w in items {
        let name = w["name"].as_str().unwrap().to_owned();
        let prior = by_name.insert(
            name.clone(),
            (
                w["id"].as_i64().unwrap(),
                w["desired_state"].as_str().unwrap().to_owned(),
            ),
        );
        assert!(prior.is_none(), "{name} listed twice");
    }
    assert_eq!(
        by_name.keys().collect::<Vec<_>>(),
        acked.keys().collect::<Vec<_>>(),
        "exactly the acknowledged workspaces exist"
    );
    for (name, desired) in &acked {
        assert_eq!(&by_name[name].1, desired, "{name}'s desired state");
    }

    // And the cluster follows: one Deployment per workspace, scaled to its desired state.
    let deployments: Api<Deployment> = Api::all(kube.clone());
    let want: BTreeMap<String, i32> = by_name
        .values()
        .map(|(id, d)| (id.to_string(), i32::from(d == "Running")))
        .collect();
    let selector = format!("{AGENT_ID_LABEL}={agent_id}");
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let converged = warren_testkit::wait_for("the cluster to hold every workspace", 180, || {
        let deployments = deployments.clone();
        let selector = selector.clone();
        let want = want.clone();
        let seen = seen.clone();
        async move {
            let Ok(list) = deployments
                .list(&ListParams::default().labels(&selector))
                .await
            else {
                return false;
            };
            let mut have = BTreeMap::new();
            for d in list.items {
                let id = d
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(WORKSPACE_ID_LABEL).cloned())
                    .unwrap_or_default();
                let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(1);
                if have.insert(id.clone(), replicas).is_some() {
                    panic!("two Deployments for workspace {id}");
                }
            }
            let ok = have == want;
            *seen.lock().unwrap() = have;
            ok
        }
    })
    .await;
    if let Err(e) = converged {
        panic!(
            "{e}\nwanted {want:?}\nhave {:?}\n{}",
            seen.lock().unwrap(),
            logs(&agents, &servers)
        );
    }

    // Leave the cluster as found: terminate everything through the surviving server.
    for name in acked.keys() {
        support::api(
            &http,
            &survivor_base,
            Some(&token),
            reqwest::Method::PUT,
            &format!("/workspaces/{name}/desired_state"),
            Some(json!({"desired_state": "Terminated"})),
        )
        .await;
    }
    // The agent's part is deleting each workspace's namespace; the namespace controller then
    // empties it at its own pace.
    let namespaces: Api<Namespace> = Api::all(kube.clone());
    let deleted = warren_testkit::wait_for("the workspaces' namespaces to be deleted", 120, || {
        let namespaces = namespaces.clone();
        let selector = selector.clone();
        async move {
            namespaces
                .list(&ListParams::default().labels(&selector))
                .await
                .is_ok_and(|l| {
                    l.items
                        .iter()
                        .all(|n| n.metadata.deletion_timestamp.is_some())
                })
        }
    })
    .await;
    if let Err(e) = deleted {
        let left: Vec<String> = namespaces
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter(|n| n.metadata.deletion_timestamp.is_none())
                    .filter_map(|n| n.metadata.name)
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "{e}: {left:?}\n{}\n--- controller manager ---\n{}",
            logs(&agents, &servers),
            cluster.log_tail("kube-controller-manager")
        );
    }
    balancer.abort();
}
