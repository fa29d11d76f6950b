//! Kill `warren server` (SIGKILL) at random points while it acknowledges writes, restart it,
//! and check that every acknowledged write survived.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RELAY_SECRET: &str = "crash-test-relay-secret-0123456789";

/// The server process; killed when dropped, whatever happens in the test.
struct ServerProcess {
    child: Child,
    base: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(home: &Path) -> ServerProcess {
    let ready = home.join("ready");
    let _ = std::fs::remove_file(&ready);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("stdout.log"))
        .expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["server", "--listen", "127.0.0.1:0", "--home"])
        .arg(home)
        .arg("--ready-file")
        .arg(&ready)
        .args(["--relay-secret", RELAY_SECRET])
        .env_remove("WARREN_DATABASE_URL")
        .env("WARREN_LOG", "warn")
        .stdout(Stdio::from(log))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn warren server");
    let mut p = ServerProcess {
        child,
        base: String::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(addr) = std::fs::read_to_string(&ready) {
            p.base = format!("http://{addr}");
            return p;
        }
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("server exited early: {status}");
        }
        assert!(Instant::now() < deadline, "server did not become ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn admin_password(home: &Path) -> String {
    let out = std::fs::read_to_string(home.join("stdout.log")).expect("stdout");
    out.lines()
        .find_map(|l| l.trim().strip_prefix("password: "))
        .expect("the first start prints the admin password")
        .to_owned()
}

/// Cheap pseudo-random numbers; the seed is printed so a failure can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

/// What the test knows about each workspace: the states it may be in after a crash.
type Expected = Arc<Mutex<BTreeMap<String, Vec<Option<String>>>>>;

async fn writer(base: String, token: String, prefix: String, expected: Expected) {
    let http = reqwest::Client::new();
    for i in 0.. {
        let name = format!("{prefix}-{i}");
        // In flight: may or may not exist after a crash.
        expected
            .lock()
            .unwrap()
            .insert(name.clone(), vec![None, Some("Running".into())]);
        let r = http
            .post(format!("{base}/api/v1/workspaces"))
            .bearer_auth(&token)
            .json(&json!({"name": name}))
            .send()
            .await;
        match r {
            Ok(r) if r.status() == 201 => {
                expected
                    .lock()
                    .unwrap()
                    .insert(name.clone(), vec![Some("Running".into())]);
            }
            _ => return,
        }
        expected.lock().unwrap().insert(
            name.clone(),
            vec![Some("Running".into()), Some("Stopped".into())],
        );
        let r = http
            .put(format!("{base}/api/v1/workspaces/{name}/desired_state"))
            .bearer_auth(&token)
            .json(&json!({"desired_state": "Stopped"}))
            .send()
            .await;
        match r {
            Ok(r) if r.status() == 200 => {
                expected
                    .lock()
                    .unwrap()
                    .insert(name, vec![Some("Stopped".into())]);
            }
            _ => return,
        }
    }
}

async fn check(base: &str, token: &str, expected: &Expected) -> usize {
    let http = reqwest::Client::new();
    let snapshot = expected.lock().unwrap().clone();
    for (name, allowed) in &snapshot {
        let r = http
            .get(format!("{base}/api/v1/workspaces/{name}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("get");
        let state = if r.status() == 404 {
            None
        } else {
            assert_eq!(r.status(), 200);
            let w: Value = r.json().await.unwrap();
            w["desired_state"].as_str().map(str::to_owned)
        };
        assert!(
            allowed.contains(&state),
            "{name}: found {state:?}, acknowledged {allowed:?}"
        );
        // From now on the one state found is what must stay.
        expected.lock().unwrap().insert(name.clone(), vec![state]);
    }
    snapshot.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let home: PathBuf = dir.path().to_owned();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash test seed {seed}");
    let mut rng = Lcg(seed);
    let http = reqwest::Client::new();

    let mut server = start(&home);
    let password = admin_password(&home);
    let login: Value = http
        .post(format!("{}/api/v1/session", server.base))
        .json(&json!({"username": "admin", "password": password}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = login["secret"].as_str().expect("token").to_owned();
    let r = http
        .post(format!("{}/api/v1/agents", server.base))
        .bearer_auth(&token)
        .json(&json!({"name": "a1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let expected: Expected = Arc::default();
    for round in 0..5 {
        let writers: Vec<_> = (0..2)
            .map(|w| {
                tokio::spawn(writer(
                    server.base.clone(),
                    token.clone(),
                    format!("r{round}w{w}"),
                    expected.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100 + rng.next(400))).await;
        let _ = server.child.kill();
        let _ = server.child.wait();
        for w in writers {
            w.await.unwrap();
        }
        drop(server);
        server = start(&home);
        let checked = check(&server.base, &token, &expected).await;
        eprintln!("round {round}: {checked} workspaces checked after SIGKILL");
    }
    let acked = expected
        .lock()
        .unwrap()
        .values()
        .filter(|v| v[0].is_some())
        .count();
    assert!(acked > 0, "no write was acknowledged before the kills");
    // The token issued before the first crash still works, and the admin was not re-created.
    let out = std::fs::read_to_string(home.join("stdout.log")).unwrap();
    assert_eq!(
        out.matches("password: ").count(),
        1,
        "the admin password is printed once, ever"
    );
}
