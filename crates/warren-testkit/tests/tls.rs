//! TLS everywhere it is served: the server, the relay's agent listener and the proxy
//! present certificates from the stack's own CA; the agent trusts it for the relay, the
//! relay and the proxy for the server; a renewed certificate is served from the next
//! connection on, with no restart and no connection dropped.

use anyhow::{Context, Result};
use std::time::Duration;
use warren_testkit::{wait_for, Stack, StackOptions};

/// The certificate `url` presents on a new connection (none when the handshake fails). A
/// new client each time: a client resumes its TLS sessions, and a resumed session shows the
/// certificate of the first.
async fn served_certificate(stack: &Stack, hosts: &[String], url: &str) -> Option<Vec<u8>> {
    let client = inspecting(stack, hosts).ok()?;
    let r = client.get(url).send().await.ok()?;
    r.extensions()
        .get::<reqwest::tls::TlsInfo>()?
        .peer_certificate()
        .map(<[u8]>::to_vec)
}

/// A client that trusts the stack's CA and reports the peer's certificate.
fn inspecting(stack: &Stack, hosts: &[String]) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .tls_info(true)
        .timeout(Duration::from_secs(10));
    for h in hosts {
        b = b.resolve(h.split(':').next().unwrap_or(h), stack.proxy_addr);
    }
    let pki = stack.tls.as_ref().context("a TLS stack")?;
    Ok(pki.ca.bundle()?.apply(b).build()?)
}

#[tokio::test]
async fn every_service_serves_tls_and_takes_a_renewed_certificate_without_a_restart() -> Result<()>
{
    let mut stack = Stack::start_with(StackOptions {
        tls: true,
        ..Default::default()
    })
    .await?;
    assert!(stack.api_url.starts_with("https://"), "{}", stack.api_url);
    assert!(stack.relay_agents_url().starts_with("https://"));

    // The agent reached the relay over TLS and the relay checked its token with the server
    // over TLS: the workspace runs.
    let alice = stack.user("alice").await?;
    let ws = stack.workspace(&alice, "alice-tls").await?;

    // Through the proxy over HTTPS to a workspace port.
    stack.set_endpoint(&ws, 8080, warren_testkit::text_upstream("over tls").await?);
    let host = stack.host(8080, "alice-tls");
    let url = stack.url(8080, "alice-tls", "/");
    assert!(url.starts_with("https://"), "{url}");
    let client = stack.client_for(std::slice::from_ref(&host));
    let r = client.get(&url).bearer_auth(&alice.token).send().await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await?, "over tls");

    // Plain HTTP on a TLS port is not served, and a client that does not trust the CA is
    // refused by its own verification.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let api_plain = stack.api_url.replace("https://", "http://");
    let answer = plain.get(format!("{api_plain}/healthz")).send().await;
    assert!(
        answer.as_ref().map_or(true, |r| !r.status().is_success()),
        "plain HTTP on the server's TLS port: {answer:?}"
    );
    let untrusting = plain.get(format!("{}/healthz", stack.api_url)).send().await;
    let err = untrusting.expect_err("a certificate from an unknown CA is refused");
    assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");

    // Renewals: each service serves its new certificate from the next connection on.
    let hosts = std::slice::from_ref(&host);
    let pki = stack.tls.as_ref().context("a TLS stack")?;
    let server_url = format!("{}/healthz", stack.api_url);
    let relay_url = format!("{}/", stack.relay_agents_url());
    let before = served_certificate(&stack, hosts, &server_url)
        .await
        .context("the server's certificate")?;
    let renewed = pki.ca.issue(&pki.server_dir, &["localhost", "127.0.0.1"])?;
    assert_ne!(before, renewed.der);
    wait_for(
        "the server to serve its renewed certificate",
        30,
        || async {
            served_certificate(&stack, hosts, &server_url)
                .await
                .as_deref()
                == Some(&renewed.der[..])
        },
    )
    .await?;
    let renewed = pki.ca.issue(&pki.relay_dir, &["localhost", "127.0.0.1"])?;
    wait_for("the relay to serve its renewed certificate", 30, || async {
        served_certificate(&stack, hosts, &relay_url)
            .await
            .as_deref()
            == Some(&renewed.der[..])
    })
    .await?;
    let renewed = pki
        .ca
        .issue(&pki.proxy_dir, &["*.ws.localhost", "localhost"])?;
    wait_for("the proxy to serve its renewed certificate", 30, || async {
        served_certificate(&stack, hosts, &url).await.as_deref() == Some(&renewed.der[..])
    })
    .await?;

    // Everything still works across the renewals: the same client (its pooled connection)
    // and the whole desired-state path.
    let r = client.get(&url).bearer_auth(&alice.token).send().await?;
    assert_eq!(r.status(), 200);
    stack.set_desired(&alice, "alice-tls", "Stopped").await?;
    stack.wait_state(&alice, "alice-tls", "Stopped").await?;
    // A second agent dials the relay afresh, against its renewed certificate, and is seen
    // by the server through it.
    stack.add_agent("second").await?;
    let admin = stack.admin.token.clone();
    wait_for("the second agent's first reconcile", 30, || async {
        stack
            .api(reqwest::Method::GET, "/api/v1/agents/second", &admin, None)
            .await
            .is_ok_and(|a| !a["last_seen_at"].is_null())
    })
    .await?;
    Ok(())
}
