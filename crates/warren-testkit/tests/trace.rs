//! A trace id follows a change from the API request through the relay to the agent: the
//! caller's `X-Request-Id` (or one the server makes) names the server's request, the signal
//! it sends, the relay's delivery and the agent's reconcile, all in the logs.

use anyhow::Result;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use warren_testkit::{wait_for, Stack};

/// Every log line of this test process (all services run in it), as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    })
}

/// The captured lines that name `trace`.
fn lines_with(trace: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| l.contains(trace))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_changes_trace_id_reaches_the_relay_and_the_agent_in_the_logs() -> Result<()> {
    logs();
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    stack.workspace(&alice, "alice-traced").await?;

    let trace = "e2e-trace-4bf92f3577b34da6";
    let http = reqwest::Client::new();
    let r = http
        .put(format!(
            "{}/api/v1/workspaces/alice-traced/desired_state",
            stack.api_url
        ))
        .bearer_auth(&alice.token)
        .header("x-request-id", trace)
        .json(&serde_json::json!({"desired_state": "Stopped"}))
        .send()
        .await?;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(r.headers()["x-request-id"], trace, "the id is answered");
    stack.wait_state(&alice, "alice-traced", "Stopped").await?;

    // Each hop logs under the same id.
    let hop = |module: &'static str, message: &'static str| {
        move || async move {
            lines_with(trace)
                .iter()
                .any(|l| l.contains(module) && l.contains(message))
        }
    };
    wait_for(
        "the server to log the signal it sends",
        30,
        hop("warren_server", "signalling the agent through the relays"),
    )
    .await?;
    wait_for(
        "the relay to log the delivery",
        30,
        hop("warren_relay", "signalled the agent"),
    )
    .await?;
    wait_for(
        "the agent to log the signal",
        30,
        hop("warren_agent", "signalled by the relay"),
    )
    .await?;
    wait_for(
        "the agent's reconcile to run under the id",
        30,
        hop("warren_agent", "reconciling after a signal"),
    )
    .await?;

    // A caller's id that is not a plain short token is not echoed into logs: a fresh one is
    // made.
    let r = http
        .get(format!("{}/api/v1/users/me", stack.api_url))
        .bearer_auth(&alice.token)
        .header("x-request-id", "evil id\twith spaces")
        .send()
        .await?;
    let answered = r.headers()["x-request-id"].to_str()?.to_owned();
    assert_eq!(answered.len(), 32, "{answered}");
    assert!(
        answered.bytes().all(|b| b.is_ascii_hexdigit()),
        "{answered}"
    );
    Ok(())
}
