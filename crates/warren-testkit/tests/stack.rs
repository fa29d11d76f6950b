//! The in-process stack itself: a user's workspace runs, stops and starts again through
//! the real server, relay, agent connection and reconciler.

use warren_testkit::Stack;

#[tokio::test]
async fn a_workspace_runs_stops_and_starts_through_the_whole_stack() -> anyhow::Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    assert_eq!(ws.agent_id, 1);
    assert!(stack.runtime.workspace(&ws.key()).is_some());
    stack.set_desired(&alice, "alice-web", "Stopped").await?;
    stack.wait_state(&alice, "alice-web", "Stopped").await?;
    stack.set_desired(&alice, "alice-web", "Running").await?;
    stack.wait_state(&alice, "alice-web", "Running").await?;
    assert!(stack
        .host(8080, "alice-web")
        .starts_with("8080-alice-web.ws.localhost:"));
    Ok(())
}
