//! The NetworkPolicy of a workspace: who may reach its pods, and where they may go.
//!
//! Whatever egress an agent's configuration allows, the ranges in [`PROTECTED`] are excepted
//! from every allowed block that contains them: loopback, link-local (every cloud's instance
//! metadata and credentials at 169.254.169.254), shared CGNAT space (Alibaba's metadata at
//! 100.100.100.200, a provider's internal services), multicast and reserved space. An admin
//! who really wants one allows it by name — an allowed block inside a protected range (say
//! `169.254.169.254/32`) is kept as written — but a broad `0.0.0.0/0` never opens them.

use super::names::{object_name, Ctx};
use super::{AGENT_COMPONENT, LABEL_COMPONENT};
use k8s_openapi::api::networking::v1 as net;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use warren_types::config::{AgentConfig, EgressRule};

/// Ranges no broad egress rule opens (see the module's documentation).
pub const PROTECTED: &[&str] = &[
    "0.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::1/128",
    "fe80::/10",
    // The IPv6 metadata services of AWS, Google Cloud and Oracle Cloud.
    "fd00:ec2::254/128",
    "fd20:ce::254/128",
    "fd00:c1::a9fe:a9fe/128",
    "ff00::/8",
];

/// `rules` with every protected range a rule's block strictly contains added to its
/// exceptions (once; an exception already covering it is enough).
pub fn protected_egress(rules: &[EgressRule]) -> Vec<EgressRule> {
    let protected: Vec<ipnet::IpNet> = PROTECTED.iter().filter_map(|p| p.parse().ok()).collect();
    rules
        .iter()
        .map(|r| {
            let mut rule = r.clone();
            // An unparsable block is left for the agent's configuration check to name.
            let Ok(allow) = r.allow.parse::<ipnet::IpNet>() else {
                return rule;
            };
            let excepted: Vec<ipnet::IpNet> =
                r.except.iter().filter_map(|e| e.parse().ok()).collect();
            for p in &protected {
                let inside = allow.prefix_len() < p.prefix_len() && allow.contains(p);
                let covered = excepted.iter().any(|e| e.contains(p));
                if inside && !covered {
                    rule.except.push(p.to_string());
                }
            }
            rule
        })
        .collect()
}

/// The workspace's NetworkPolicy. Only the agent reaches the workspace: pods labelled
/// `warren.dev/component: agent` (a label the agent refuses on tenants' objects) in the agent's
/// namespace (by `kubernetes.io/metadata.name`, which only the API server sets). In the
/// workspace's own namespace the policy covers every pod — the devfile's `kubernetes`
/// components' too — and lets them reach each other; in a shared namespace it covers the
/// workspace's pods only (components are refused there).
pub(super) fn network_policy(ctx: &Ctx<'_>, cfg: &AgentConfig) -> net::NetworkPolicy {
    let own_namespace = cfg.shared_namespace.is_none();
    let dns_ports = ["UDP", "TCP"]
        .iter()
        .map(|p| net::NetworkPolicyPort {
            port: Some(IntOrString::Int(53)),
            protocol: Some((*p).into()),
            end_port: None,
        })
        .collect();
    let neighbours = || net::NetworkPolicyPeer {
        pod_selector: Some(LabelSelector::default()),
        ..Default::default()
    };
    let mut egress = vec![net::NetworkPolicyEgressRule {
        ports: Some(dns_ports),
        to: None,
    }];
    if own_namespace {
        egress.push(net::NetworkPolicyEgressRule {
            ports: None,
            to: Some(vec![neighbours()]),
        });
    }
    if !cfg.network_policy.egress.is_empty() {
        egress.push(net::NetworkPolicyEgressRule {
            ports: None,
            to: Some(
                protected_egress(&cfg.network_policy.egress)
                    .iter()
                    .map(|r| net::NetworkPolicyPeer {
                        ip_block: Some(net::IPBlock {
                            cidr: r.allow.clone(),
                            except: (!r.except.is_empty()).then(|| r.except.clone()),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
    }
    let mut from = vec![net::NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(
                [(
                    NAMESPACE_NAME_LABEL.to_owned(),
                    cfg.network_policy.agent_namespace.clone(),
                )]
                .into(),
            ),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some([(LABEL_COMPONENT.to_owned(), AGENT_COMPONENT.to_owned())].into()),
            match_expressions: None,
        }),
        ip_block: None,
    }];
    if own_namespace {
        from.push(neighbours());
    }
    net::NetworkPolicy {
        metadata: ctx.meta(object_name(ctx.name)),
        spec: Some(net::NetworkPolicySpec {
            pod_selector: Some(if own_namespace {
                LabelSelector::default()
            } else {
                LabelSelector {
                    match_labels: Some(ctx.selector.clone()),
                    match_expressions: None,
                }
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![net::NetworkPolicyIngressRule {
                from: Some(from),
                ports: None,
            }]),
            egress: Some(egress),
        }),
    }
}

/// The label the API server puts on every namespace, holding its name (Kubernetes 1.21+).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
