//! Shared set-up of the engine tests: find an engine (or skip, or fail under
//! `WARREN_REQUIRE_ENGINE=1`), make sure the test image exists, build fixture objects, and
//! clean every workspace up with a Drop guard, even when a test fails.
#![allow(dead_code)]

pub mod counting;
pub mod public;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Once;
use std::time::Duration;
use warren_agent::runtime::engine::{EngineConfig, EngineRuntime};
use warren_agent::runtime::{ObservedWorkspace, WorkspaceKey, WorkspaceRuntime};
use warren_types::lifecycle::derive_actual_state;
use warren_types::reconcile::WorkspaceAgentInfo;
use warren_types::state::ActualState;
use warren_types::AgentId;

pub const IMAGE: &str = "localhost/warren-test:latest";

/// The engine CLI used for set-up, inspection and cleanup (`podman`, else `docker`).
pub fn cli() -> Option<&'static str> {
    static CLI: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *CLI.get_or_init(|| {
        ["podman", "docker"].into_iter().find(|c| {
            Command::new(c)
                .arg("version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        })
    })
}

/// `true` when the engine tests can run; prints a notice and returns `false` otherwise,
/// unless `WARREN_REQUIRE_ENGINE=1`, which turns the skip into a failure.
pub fn engine_available() -> bool {
    if cli().is_some() {
        ensure_image();
        return true;
    }
    if std::env::var("WARREN_REQUIRE_ENGINE").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_ENGINE=1 but neither podman nor docker works here (run .ci/setup-podman.sh)");
    }
    eprintln!("skipping: no podman or docker found (install Podman: .ci/setup-podman.sh)");
    false
}

/// Builds the test image the same way CI does (the set-up script's `image` step) when missing.
fn ensure_image() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let cli = cli().expect("engine CLI");
        let exists = Command::new(cli)
            .args(["image", "inspect", IMAGE])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if exists {
            return;
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/setup-podman.sh");
        let status = Command::new("bash")
            .arg(&script)
            .arg("image")
            .status()
            .expect("running .ci/setup-podman.sh image");
        assert!(
            status.success(),
            "building {IMAGE} with {} failed",
            script.display()
        );
    });
}

/// A runtime with its own state directory and agent id (so parallel tests never see each
/// other's workspaces).
pub struct Harness {
    pub runtime: EngineRuntime,
    pub state_dir: tempfile::TempDir,
    pub agent_id: AgentId,
}

impl Harness {
    pub async fn new() -> Result<Harness> {
        Harness::configured(|_| {}).await
    }

    /// A harness whose engine configuration `edit` changes first.
    pub async fn configured(edit: impl FnOnce(&mut EngineConfig)) -> Result<Harness> {
        let state_dir = tempfile::tempdir()?;
        let agent_id = AgentId(rand::random::<u32>() as i64 + 1_000_000);
        trace_to_test_output();
        let mut config = EngineConfig::new(agent_id, state_dir.path().to_path_buf());
        config.stop_timeout_secs = 2;
        edit(&mut config);
        let runtime = EngineRuntime::connect(config).await?;
        Ok(Harness {
            runtime,
            state_dir,
            agent_id,
        })
    }

    /// A fresh runtime on the same state directory and agent id: an agent restart.
    pub async fn restart(&mut self) -> Result<()> {
        self.runtime.shutdown().await;
        self.runtime = connect(self.agent_id, self.state_dir.path().to_path_buf()).await?;
        Ok(())
    }
}

pub async fn connect(agent_id: AgentId, state_dir: PathBuf) -> Result<EngineRuntime> {
    trace_to_test_output();
    let mut config = EngineConfig::new(agent_id, state_dir);
    config.stop_timeout_secs = 2;
    Ok(EngineRuntime::connect(config).await?)
}

/// A unique workspace name per test; removes everything of it when dropped.
pub struct Workspace {
    pub key: WorkspaceKey,
    pub agent_id: AgentId,
}

impl Workspace {
    pub fn new(prefix: &str, agent_id: AgentId) -> Workspace {
        let name = format!("{prefix}-{:06x}", rand::random::<u32>() & 0xffffff);
        Workspace {
            key: WorkspaceKey {
                name: name.clone(),
                namespace: format!("warren-ws-{name}"),
            },
            agent_id,
        }
    }

    pub fn name(&self) -> &str {
        &self.key.name
    }

    /// The fixture objects, renamed to this workspace.
    pub fn objects(&self) -> Vec<Value> {
        let text = include_str!("../fixtures/workspace.yaml")
            .replace("fixture-ws", self.name())
            .replace("\"AGENT\"", &format!("\"{}\"", self.agent_id));
        serde_yaml::Deserializer::from_str(&text)
            .map(|doc| {
                let v: serde_yaml::Value =
                    serde::Deserialize::deserialize(doc).expect("fixture YAML");
                serde_json::to_value(v).expect("fixture as JSON")
            })
            .collect()
    }

    /// The engine objects (containers, volumes, networks) of this workspace still present.
    pub fn leftovers(&self) -> Vec<String> {
        let filter = format!("label=warren.dev/workspace-name={}", self.name());
        let mut out = Vec::new();
        for args in [
            vec!["ps", "-a", "-q", "--filter", &filter],
            vec!["volume", "ls", "-q", "--filter", &filter],
            vec!["network", "ls", "-q", "--filter", &filter],
        ] {
            out.extend(
                cli_lines(&args)
                    .into_iter()
                    .map(|l| format!("{} {l}", args[0])),
            );
        }
        out
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        remove_labelled(&format!("label=warren.dev/workspace-name={}", self.name()));
    }
}

/// Removes every container, volume and network the engine filter `filter` selects.
pub fn remove_labelled(filter: &str) {
    // Joiners first: the infra container owns the network namespace. Podman 4.3 may fail a
    // removal it is racing (its own clean-up, a restart under way) and leave the container:
    // what is still listed is removed again, a bounded number of times.
    for _ in 0..5 {
        let containers = cli_lines(&["ps", "-a", "-q", "--filter", filter]);
        if containers.is_empty() {
            break;
        }
        for id in containers.iter().rev() {
            let _ = cli_run(&["rm", "-f", "-t", "0", id]);
        }
    }
    for v in cli_lines(&["volume", "ls", "-q", "--filter", filter]) {
        let _ = cli_run(&["volume", "rm", "-f", &v]);
    }
    for n in cli_lines(&["network", "ls", "-q", "--filter", filter]) {
        let _ = cli_run(&["network", "rm", "-f", &n]);
    }
    // A prebuild's snapshots (once no volume is a clone of them).
    for i in cli_lines(&["images", "-q", "--filter", filter]) {
        let _ = cli_run(&["rmi", &i]);
    }
}

pub fn cli_lines(args: &[&str]) -> Vec<String> {
    let Some(cli) = cli() else { return vec![] };
    Command::new(cli)
        .args(args)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

pub fn cli_run(args: &[&str]) -> Result<String> {
    let cli = cli().context("no engine CLI")?;
    let out = Command::new(cli).args(args).output()?;
    if !out.status.success() {
        bail!(
            "{cli} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command in a container of the workspace (as its user).
pub fn exec(ws: &Workspace, container: &str, script: &str) -> Result<String> {
    let name = format!("warren-{}.c.{container}", ws.name());
    cli_run(&["exec", &name, "sh", "-c", script])
}

pub fn derive(o: &ObservedWorkspace) -> ActualState {
    derive_actual_state(&WorkspaceAgentInfo {
        name: o.key.name.clone(),
        namespace: o.key.namespace.clone(),
        latest_k8s_deployment_info: o.deployment.clone(),
        termination_progress: o
            .terminating
            .then_some(warren_types::reconcile::TerminationProgress::Terminating),
        error_details: None,
        pod_failure: o.pod_failure.clone(),
        pod_waiting: o.pod_waiting.clone(),
    })
}

pub async fn observe(rt: &EngineRuntime, ws: &Workspace) -> Result<Option<ObservedWorkspace>> {
    Ok(rt.list().await?.into_iter().find(|o| o.key == ws.key))
}

/// Polls `list()` until the workspace's derived state is `want` (deadline 60 s).
pub async fn wait_state(
    rt: &EngineRuntime,
    ws: &Workspace,
    want: ActualState,
) -> Result<ObservedWorkspace> {
    wait_for(rt, ws, &format!("{want:?}"), |o| derive(o) == want).await
}

pub async fn wait_for(
    rt: &EngineRuntime,
    ws: &Workspace,
    what: &str,
    pred: impl Fn(&ObservedWorkspace) -> bool,
) -> Result<ObservedWorkspace> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        if let Some(o) = observe(rt, ws).await? {
            if pred(&o) {
                return Ok(o);
            }
            last = Some(o);
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "workspace {} never became {what}; last observed: {:?} (derived {:?})",
                ws.name(),
                last,
                last.as_ref().map(derive)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `ws`'s objects with its main container running `image`, the pod listing `builds` to make
/// before its containers start.
pub fn with_builds(
    ws: &Workspace,
    image: &str,
    builds: &[warren_types::relay::BuildImageTask],
) -> Vec<Value> {
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["image"] = image.into();
    let d = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    d["spec"]["template"]["metadata"]["annotations"] = serde_json::json!({
        (warren_types::relay::IMAGE_BUILDS_ANNOTATION): serde_json::to_string(builds).expect("JSON")
    });
    objects
}

/// Sets `spec.replicas` of the Deployment among `objects`.
pub fn with_replicas(mut objects: Vec<Value>, replicas: i64) -> Vec<Value> {
    with_replicas_in_place(&mut objects, replicas);
    objects
}

pub fn with_replicas_in_place(objects: &mut [Value], replicas: i64) {
    for o in objects {
        if o["kind"] == "Deployment" {
            o["spec"]["replicas"] = replicas.into();
        }
    }
}

/// The Deployment's pod spec among `objects`, to change in a test.
pub fn pod_spec(objects: &mut [Value]) -> &mut Value {
    let d = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    &mut d["spec"]["template"]["spec"]
}

/// `GET /` through `dial`, retried until a 200 answer or a 20 s deadline: right after the
/// workspace runs, its server may not listen yet (the connection is then refused).
pub async fn http_get_via_dial(rt: &EngineRuntime, ws: &Workspace, port: u16) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            let mut stream = rt.dial(&ws.key, port).await?;
            stream
                .write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
                .await?;
            let mut response = String::new();
            stream.read_to_string(&mut response).await?;
            anyhow::Ok(response)
        }
        .await;
        match attempt {
            Ok(response) if response.contains(" 200 ") => return Ok(response),
            Ok(response) if tokio::time::Instant::now() > deadline => {
                bail!("no 200 from port {port} of {}: {response:?}", ws.name())
            }
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(e.context(format!("dialling port {port} of {}", ws.name())))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The runtime's log, captured with each test's output (shown when it fails): a failure
/// seen once in CI is a bug to find, and its log is what finds it. `RUST_LOG` overrides.
pub fn trace_to_test_output() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warren_agent=debug"));
    // Already set by another test of this binary: that one serves all.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
    say_panics_at_once();
}

/// A test's panic message, written to the process's own standard error as it happens, then
/// handled as usual. The harness shows a failed test's captured output with its panic last,
/// after thousands of lines of debug log: CI's excerpt of a run keeps the first lines, so a
/// failure seen once in CI showed its log but not what failed (issue 38). Written around
/// the harness's capture, this line lands beside the test's `FAILED` in the summary.
fn say_panics_at_once() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let usual = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            use std::io::Write as _;
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("a thread");
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            let place = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            // `std::io::stderr()` is not the harness's capture (that takes `eprint!` only).
            let _ = writeln!(
                std::io::stderr().lock(),
                "\n{test} panicked at {place}: {message}\n"
            );
            usual(info);
        }));
    });
}

/// Removes, when dropped, the names a test gave images (untagged: the image stays under its
/// other names), the images it made and every image built for the named workspaces. Made
/// before the workspaces, so it goes after them: an image a pod runs cannot be removed.
#[derive(Default)]
pub struct Images {
    pub made: Vec<String>,
    pub names: Vec<String>,
    pub built_for: Vec<String>,
}

impl Drop for Images {
    fn drop(&mut self) {
        for w in &self.built_for {
            let filter = format!("label=warren.dev/built-for={w}");
            // Intermediate images of a build carry its labels too.
            for id in cli_lines(&["images", "-a", "-q", "--filter", &filter]) {
                let _ = cli_run(&["rmi", "-f", &id]);
            }
        }
        for name in &self.names {
            let _ = cli_run(&["rmi", name]);
        }
        for id in &self.made {
            let _ = cli_run(&["rmi", "-f", id]);
        }
    }
}

/// A build context: a tar archive of `files` (path, contents), made by the system's `tar`.
pub fn tar_context(files: &[(&str, &str)]) -> Result<warren_agent::runtime::BuildContext> {
    use futures::StreamExt;
    let dir = tempfile::tempdir()?;
    for (path, text) in files {
        std::fs::write(dir.path().join(path), text)?;
    }
    let out = std::process::Command::new("tar")
        .arg("-C")
        .arg(dir.path())
        .args(["-cf", "-", "."])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = bytes::Bytes::from(out.stdout);
    Ok(futures::stream::once(async move { Ok(archive) }).boxed())
}
