//! Warren's own Kubernetes manifests (`deploy/kubernetes`) against a real kube-apiserver: the
//! base and every overlay build with kustomize (the one built into kubectl) and pass the API
//! server's dry run object by object; the production overlay is then applied for real, and the
//! agent's service account, impersonated (`kubectl auth can-i --as`), may do what the agent
//! does and nothing it must not (RBAC, nodes, webhooks, CRDs, listing secrets, other
//! namespaces' leases, …);
//! the other components' service accounts may do nothing at all.
//!
//! Skips with a notice when the control plane's binaries are missing, unless
//! `WARREN_REQUIRE_KUBERNETES=1`.

use crate::kube_common;

use kube_common::{binaries_dir, cluster, Cluster};
use std::io::Write;
use std::process::{Command, Stdio};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/kubernetes");
const AGENT: &str = "system:serviceaccount:warren:warren-agent";

/// Runs the cluster's kubectl: (success, stdout, stderr).
fn kubectl(c: &Cluster, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(binaries_dir().join("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            c.dir.join("kubeconfig").display()
        ))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).expect("write to kubectl");
    }
    drop(input);
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The rendered manifests of `dir` (relative to `deploy/kubernetes`), fitted to the server:
/// one built before `policy/v1` (1.21) gets its PodDisruptionBudgets as `policy/v1beta1`,
/// whose fields these budgets share.
fn build(c: &Cluster, dir: &str, policy_v1: bool) -> String {
    let (ok, out, err) = kubectl(c, &["kustomize", &format!("{ROOT}/{dir}")], None);
    assert!(ok, "kustomize {dir}: {err}");
    if policy_v1 {
        out
    } else {
        out.replace("apiVersion: policy/v1\n", "apiVersion: policy/v1beta1\n")
    }
}

fn can_i(c: &Cluster, who: &str, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
    // `pods/exec` is a subresource; kubectl would read `pods/exec` as a pod named `exec`.
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(format!("--subresource={s}"))),
        None => (resource, None),
    };
    let mut args = vec!["auth", "can-i", verb, resource, "--as", who];
    if let Some(s) = &sub {
        args.push(s);
    }
    match namespace {
        Some(ns) => args.extend(["-n", ns]),
        None => args.push("--all-namespaces"),
    }
    let (ok, out, err) = kubectl(c, &args, None);
    assert!(
        out.trim() == "yes" || out.trim() == "no",
        "can-i {verb} {resource}: {out} {err}"
    );
    ok
}

#[tokio::test]
async fn manifests_pass_the_api_servers_dry_run_and_the_agent_gets_least_privilege() {
    let Some(c) = cluster() else {
        return;
    };
    let (ok, versions, err) = kubectl(c, &["api-versions"], None);
    assert!(ok, "{err}");
    let policy_v1 = versions.lines().any(|l| l == "policy/v1");

    // Namespaced objects need their namespace to exist for a dry run: it alone is real.
    let (ok, _, err) = kubectl(
        c,
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: warren\n"),
    );
    assert!(ok, "{err}");
    for dir in [
        "base",
        "overlays/single-node",
        "overlays/production",
        "overlays/production-tls",
    ] {
        let yaml = build(c, dir, policy_v1);
        let objects = yaml.matches("\nkind: ").count() + usize::from(yaml.starts_with("kind: "));
        assert!(objects >= 25, "{dir}: only {objects} objects:\n{yaml}");
        let (ok, out, err) = kubectl(c, &["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
        assert!(ok, "{dir}: the API server refused:\n{err}\n{out}");
        let accepted = out
            .lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count();
        assert_eq!(accepted, objects, "{dir}: {out}");
    }

    // TLS: every Secret the overlay mounts is one the cert-manager Certificates write (the
    // test's API server has no cert-manager CRDs, so those are only read here).
    let tls = build(c, "overlays/production-tls", policy_v1);
    let issued: Vec<String> =
        std::fs::read_to_string(format!("{ROOT}/cert-manager/certificates.yaml"))
            .expect("certificates.yaml")
            .split("\n---\n")
            .map(|doc| serde_yaml::from_str::<serde_yaml::Value>(doc).expect("a YAML document"))
            .filter(|d| d["kind"] == "Certificate")
            .filter_map(|d| d["spec"]["secretName"].as_str().map(str::to_owned))
            .collect();
    for secret in ["warren-server-tls", "warren-relay-tls", "warren-proxy-tls"] {
        assert!(
            tls.contains(&format!("secretName: {secret}")),
            "the overlay mounts {secret}"
        );
        assert!(issued.iter().any(|s| s == secret), "{secret} in {issued:?}");
    }
    assert!(tls.contains("value: https://warren-relay-agents:7081"));
    assert!(tls.contains("scheme: HTTPS"));
    assert!(
        tls.contains("port: 443") && !tls.contains("port: 80\n"),
        "{tls}"
    );

    // The shipped agent is what every workspace's NetworkPolicy admits: its pods carry the
    // label the policy selects, in the namespace the default configuration names.
    let agent = build(c, "overlays/production", policy_v1)
        .split("\n---\n")
        .map(|doc| serde_yaml::from_str::<serde_yaml::Value>(doc).expect("a YAML document"))
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "warren-agent")
        .expect("the agent's Deployment");
    assert_eq!(
        agent["metadata"]["namespace"].as_str(),
        Some(warren_types::config::DEFAULT_AGENT_NAMESPACE)
    );
    assert_eq!(
        agent["spec"]["template"]["metadata"]["labels"]["warren.dev/component"].as_str(),
        Some("agent"),
        "{agent:?}"
    );

    // For real now (no kubelet: the pods never run), so RBAC can be asked.
    let yaml = build(c, "overlays/production", policy_v1);
    let (ok, out, err) = kubectl(c, &["apply", "-f", "-"], Some(&yaml));
    assert!(ok, "{err}\n{out}");

    let ws = Some("warren-ws-demo");
    for (verb, resource, ns) in [
        ("create", "namespaces", None),
        ("delete", "namespaces", None),
        ("watch", "namespaces", None),
        ("patch", "deployments.apps", ws),
        ("watch", "deployments.apps", None),
        ("delete", "secrets", ws),
        ("patch", "configmaps", ws),
        ("patch", "persistentvolumeclaims", ws),
        ("patch", "resourcequotas", ws),
        ("patch", "serviceaccounts", ws),
        ("patch", "services", ws),
        ("patch", "networkpolicies.networking.k8s.io", ws),
        ("watch", "pods", None),
        ("create", "pods/exec", ws),
        // The editor, on its pod's loopback.
        ("create", "pods/portforward", ws),
        ("get", "pods/log", ws),
        ("update", "leases.coordination.k8s.io", Some("warren")),
        // A devfile's Kubernetes components.
        ("patch", "statefulsets.apps", ws),
        ("patch", "jobs.batch", ws),
        ("patch", "ingresses.networking.k8s.io", ws),
        ("list", "configmaps", ws),
    ] {
        assert!(
            can_i(c, AGENT, verb, resource, ns),
            "the agent must be allowed to {verb} {resource} in {ns:?}"
        );
    }
    for (verb, resource, ns) in [
        (
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            None,
        ),
        ("create", "rolebindings.rbac.authorization.k8s.io", ws),
        ("escalate", "clusterroles.rbac.authorization.k8s.io", None),
        ("bind", "clusterroles.rbac.authorization.k8s.io", None),
        ("impersonate", "serviceaccounts", None),
        ("impersonate", "users", None),
        ("list", "nodes", None),
        (
            "create",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
        ),
        (
            "create",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            None,
        ),
        ("create", "persistentvolumes", None),
        ("list", "secrets", None),
        ("watch", "secrets", ws),
        ("create", "daemonsets.apps", ws),
        ("create", "serviceaccounts/token", ws),
        ("update", "leases.coordination.k8s.io", Some("kube-system")),
        ("list", "leases.coordination.k8s.io", Some("warren")),
    ] {
        assert!(
            !can_i(c, AGENT, verb, resource, ns),
            "the agent must not be allowed to {verb} {resource} in {ns:?}"
        );
    }
    for who in ["warren-server", "warren-relay", "warren-proxy"] {
        let sa = format!("system:serviceaccount:warren:{who}");
        for (verb, resource) in [("get", "secrets"), ("list", "pods"), ("get", "configmaps")] {
            assert!(
                !can_i(c, &sa, verb, resource, Some("warren")),
                "{who} must not {verb} {resource}"
            );
        }
    }
    let (ok, _, err) = kubectl(c, &["delete", "-f", "-", "--wait=false"], Some(&yaml));
    assert!(ok, "{err}");
}
