//! The NetworkPolicy of a workspace: who may reach its pods, and where they may go.

use super::names::{object_name, Ctx};
use super::{AGENT_COMPONENT, LABEL_COMPONENT};
use k8s_openapi::api::networking::v1 as net;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use warren_types::config::AgentConfig;

pub(super) fn network_policy(ctx: &Ctx<'_>, cfg: &AgentConfig) -> net::NetworkPolicy {
    let dns_ports = ["UDP", "TCP"]
        .iter()
        .map(|p| net::NetworkPolicyPort {
            port: Some(IntOrString::Int(53)),
            protocol: Some((*p).into()),
            end_port: None,
        })
        .collect();
    let mut egress = vec![net::NetworkPolicyEgressRule {
        ports: Some(dns_ports),
        to: None,
    }];
    if !cfg.network_policy.egress.is_empty() {
        egress.push(net::NetworkPolicyEgressRule {
            ports: None,
            to: Some(
                cfg.network_policy
                    .egress
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
    net::NetworkPolicy {
        metadata: ctx.meta(object_name(ctx.name)),
        spec: Some(net::NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(ctx.selector.clone()),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![net::NetworkPolicyIngressRule {
                from: Some(vec![net::NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector::default()),
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(
                            [(LABEL_COMPONENT.to_owned(), AGENT_COMPONENT.to_owned())].into(),
                        ),
                        match_expressions: None,
                    }),
                    ip_block: None,
                }]),
                ports: None,
            }]),
            egress: Some(egress),
        }),
    }
}
