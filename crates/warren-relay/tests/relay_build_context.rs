//! Build contexts through a real relay and a real agent connection: the server's archive
//! arrives whole and in order with its commit, a refusal arrives as the server worded it, and
//! an archive the server breaks off is an error at the agent — never a shorter context that
//! would build something else.

use crate::common;

use common::*;
use futures::StreamExt;
use warren_agent::runtime::FetchedContext;

/// The context of `workspace` as the runtime gets it, or the reason there is none.
async fn open(agent: &TestAgent, workspace: &str) -> Result<FetchedContext, String> {
    agent
        .connection
        .build_contexts()
        .fetch(workspace, "localhost/warren/devcontainer:latest", None)
        .await
}

/// The archive read to its end, or the error that ended it.
async fn read(fetched: FetchedContext) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    let mut archive = fetched.archive;
    while let Some(chunk) = archive.next().await {
        bytes.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
    }
    Ok(bytes)
}

#[test]
fn a_build_context_arrives_whole_or_not_at_all() {
    block_on(async {
        let (_server, relay, agent) = one_workspace().await;

        let fetched = open(&agent, "whole").await.expect("the whole context");
        assert_eq!(fetched.commit, "c0ffee");
        let bytes = read(fetched).await.expect("read whole");
        assert_eq!(bytes.len(), CONTEXT_BYTES);
        assert!(
            bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8),
            "the bytes arrive in order"
        );

        let refused = open(&agent, "gone").await.err().expect("a refusal");
        assert_eq!(refused, format!("workspace \"gone\" of agent {}", AGENT.0));

        let broken = open(&agent, "broken")
            .await
            .expect("the answer comes first");
        BREAK_CONTEXT.notify_one();
        let broken = read(broken).await.expect_err("a broken context");
        assert!(broken.contains("cut short"), "{broken}");
        relay.stop().await;
    });
}
