//! Isolation of engine workspaces: the NetworkPolicy the server renders, enforced as
//! nftables rules the agent owns, since a container engine has no NetworkPolicy of its own.
//!
//! One table per agent installation (`inet warren_<owner>_<agent>`), replaced atomically
//! (`nft -f`) whenever the set of workspace networks or their policies changes, and before a
//! workspace's containers are created. For traffic a workspace's network sends on (forward)
//! it allows replies, DNS, the workspace's own network, and the NetworkPolicy's egress blocks
//! (CIDR minus its exceptions); it rejects traffic to any other workspace's network, and
//! everything else when the workspace has a policy. Traffic to the host itself (input: its
//! public and private addresses, the bridge's gateway) is where the relay's internal port,
//! metrics, sshd or an engine's TCP API listen, so under a policy only replies, DNS and
//! addresses the policy names one by one (a `/32` block) reach it: a broad `0.0.0.0/0`
//! does not open the host. Nothing else the engine runs (an image build's `RUN` steps, other
//! containers) may open a connection into a workspace's network. Rejecting
//! (not dropping) makes a refused connection fail at once with "administratively
//! prohibited", so nothing hangs. A workspace without a NetworkPolicy (the agent
//! configuration's `network_policy.enabled = false`) is still cut off from other workspaces.
//!
//! Where the agent cannot do this — no `nft`, not root or without CAP_NET_ADMIN, a rootless
//! engine (its containers live in another network namespace) or an engine on another host —
//! it says so once at start, and with every full reconcile, so `warren ws show` shows it.

use ipnet::Ipv4Net;
use std::fmt::Write as _;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// What a workspace may reach, from its NetworkPolicy.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Egress {
    /// Allowed blocks, each minus its exceptions.
    pub allow: Vec<(Ipv4Net, Vec<Ipv4Net>)>,
    /// The policy allows every destination (an egress rule without `to`).
    pub allow_all: bool,
}

impl Egress {
    /// The egress of a NetworkPolicy object; `None` when it does not restrict egress. CIDRs
    /// that are not IPv4 are left out (workspace networks are IPv4).
    pub fn from_policy(policy: &k8s_openapi::api::networking::v1::NetworkPolicy) -> Option<Egress> {
        let spec = policy.spec.as_ref()?;
        let restricts = spec
            .policy_types
            .as_ref()
            .is_some_and(|t| t.iter().any(|t| t == "Egress"))
            || spec.egress.is_some();
        if !restricts {
            return None;
        }
        let mut egress = Egress::default();
        for rule in spec.egress.iter().flatten() {
            match &rule.to {
                // Ports only (DNS): allowed for every workspace anyway.
                None if rule.ports.is_some() => {}
                None => egress.allow_all = true,
                Some(peers) => {
                    for peer in peers {
                        let Some(block) = &peer.ip_block else {
                            continue;
                        };
                        let Ok(cidr) = block.cidr.parse::<Ipv4Net>() else {
                            continue;
                        };
                        let except: Vec<Ipv4Net> = block
                            .except
                            .iter()
                            .flatten()
                            .filter_map(|e| e.parse::<Ipv4Net>().ok())
                            .collect();
                        // nftables refuses overlapping elements: keep the widest.
                        let mut kept: Vec<Ipv4Net> = Vec::new();
                        for e in &except {
                            let covered =
                                except.iter().any(|o| o != e && o.contains(e)) || kept.contains(e);
                            if !covered {
                                kept.push(*e);
                            }
                        }
                        egress.allow.push((cidr, kept));
                    }
                }
            }
        }
        Some(egress)
    }
}

/// One workspace network and what its policy allows.
#[derive(Debug, Clone)]
pub struct WorkspaceNet {
    pub workspace: String,
    pub subnet: Ipv4Net,
    /// `None`: no NetworkPolicy, so only other workspaces are refused.
    pub egress: Option<Egress>,
}

/// The nftables script replacing the table `table` with rules for `nets`.
pub fn ruleset(table: &str, nets: &[WorkspaceNet]) -> String {
    let mut s = String::new();
    // Declaring then deleting makes the replace work whether or not the table exists.
    let _ = writeln!(s, "table inet {table}");
    let _ = writeln!(s, "delete table inet {table}");
    if nets.is_empty() {
        // Nothing to enforce: the table goes with the last workspace.
        return s;
    }
    let _ = writeln!(s, "table inet {table} {{");
    let subnets: Vec<String> = nets.iter().map(|n| n.subnet.to_string()).collect();
    let _ = writeln!(
        s,
        "  set workspaces {{ type ipv4_addr; flags interval; auto-merge; elements = {{ {} }} }}",
        subnets.join(", ")
    );
    for hook in ["forward", "input"] {
        let _ = writeln!(s, "  chain {hook} {{");
        let _ = writeln!(
            s,
            "    type filter hook {hook} priority filter - 5; policy accept;"
        );
        let _ = writeln!(s, "    ct state established,related accept");
        let chain = if hook == "input" { "host" } else { "ws" };
        for (i, n) in nets.iter().enumerate() {
            let _ = writeln!(s, "    ip saddr {} jump {chain}{i}", n.subnet);
        }
        if hook == "forward" {
            // Every workspace chain ends in a verdict, so what gets here comes from outside
            // the workspaces: an image build's `RUN` step, any other container of the
            // engine. None of it may open a connection to a workspace (the agent and the
            // proxy dial from the host itself, which is not forwarding).
            let _ = writeln!(
                s,
                "    ip daddr @workspaces reject with icmpx type admin-prohibited"
            );
        }
        let _ = writeln!(s, "  }}");
    }
    for (i, n) in nets.iter().enumerate() {
        let _ = writeln!(s, "  chain host{i} {{");
        let _ = writeln!(s, "    udp dport 53 accept");
        let _ = writeln!(s, "    tcp dport 53 accept");
        match restricting(&n.egress) {
            // No policy, or one allowing everything: the admin chose an open workspace.
            None => {
                let _ = writeln!(s, "    accept");
            }
            Some(e) => {
                for (allow, _) in e.allow.iter().filter(|(a, _)| a.prefix_len() == 32) {
                    let _ = writeln!(s, "    ip daddr {allow} accept");
                }
                let _ = writeln!(s, "    reject with icmpx type admin-prohibited");
            }
        }
        let _ = writeln!(s, "  }}");
    }
    for (i, n) in nets.iter().enumerate() {
        let _ = writeln!(s, "  chain ws{i} {{");
        let _ = writeln!(
            s,
            "    # workspace {}",
            n.workspace.replace(['\n', '}'], "_")
        );
        let _ = writeln!(s, "    udp dport 53 accept");
        let _ = writeln!(s, "    tcp dport 53 accept");
        let _ = writeln!(s, "    ip daddr {} accept", n.subnet);
        let _ = writeln!(
            s,
            "    ip daddr @workspaces reject with icmpx type admin-prohibited"
        );
        match restricting(&n.egress) {
            None => {
                let _ = writeln!(s, "    accept");
            }
            Some(e) => {
                for (allow, except) in &e.allow {
                    if except.is_empty() {
                        let _ = writeln!(s, "    ip daddr {allow} accept");
                    } else {
                        let list: Vec<String> = except.iter().map(|e| e.to_string()).collect();
                        let _ = writeln!(
                            s,
                            "    ip daddr {allow} ip daddr != {{ {} }} accept",
                            list.join(", ")
                        );
                    }
                }
                let _ = writeln!(s, "    reject with icmpx type admin-prohibited");
            }
        }
        let _ = writeln!(s, "  }}");
    }
    let _ = writeln!(s, "}}");
    s
}

/// The egress policy when it restricts anything: `None` for no policy or one allowing all.
fn restricting(egress: &Option<Egress>) -> Option<&Egress> {
    egress.as_ref().filter(|e| !e.allow_all)
}

/// The table name of an installation's agent: letters, digits and `_` only.
pub fn table_name(owner: &str, agent: i64) -> String {
    let owner: String = owner
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    format!("warren_{owner}_{agent}")
}

/// Runs `nft` with `args`, the script on stdin; the error is nft's message.
pub async fn nft(args: &[&str], script: Option<&str>) -> Result<String, String> {
    let mut last = String::new();
    for program in ["nft", "/usr/sbin/nft", "/sbin/nft"] {
        let child = tokio::process::Command::new(program)
            .args(args)
            .stdin(if script.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                last = "nft is not installed (Debian: apt-get install nftables)".into();
                continue;
            }
            Err(e) => return Err(format!("running nft: {e}")),
        };
        if let (Some(text), Some(mut stdin)) = (script, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .await
                .map_err(|e| format!("writing to nft: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| format!("running nft: {e}"))?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Err(last)
}

/// Why rules cannot be enforced here, if they cannot: checked once at start.
pub async fn unavailable(host: &str, rootless: bool) -> Option<String> {
    let prefix = "workspaces on this agent are not isolated from each other or from the \
                  networks the agent configuration blocks";
    if !host.starts_with("unix://") && !host.starts_with('/') {
        return Some(format!(
            "{prefix}: the container engine ({host}) is on another host, where the agent \
             cannot set firewall rules"
        ));
    }
    if rootless {
        return Some(format!(
            "{prefix}: the container engine runs rootless, so its containers' traffic never \
             reaches the host's firewall; run the engine and the agent as root to enforce it"
        ));
    }
    // Creating and deleting a scratch table proves the agent may change the ruleset.
    let probe = "table inet warren_probe\ndelete table inet warren_probe\n";
    match nft(&["-f", "-"], Some(probe)).await {
        Ok(_) => None,
        Err(e) => Some(format!(
            "{prefix}: nftables cannot be used by the agent ({e}); run it as root or with \
             CAP_NET_ADMIN"
        )),
    }
}

/// Owners of `warren_<owner>_<agent>` tables in the ruleset, with the table names.
pub async fn owner_tables() -> Vec<(String, String)> {
    let Ok(out) = nft(&["list", "tables"], None).await else {
        return vec![];
    };
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("table inet "))
        .filter_map(|t| {
            let rest = t.strip_prefix("warren_")?;
            let (owner, _agent) = rest.rsplit_once('_')?;
            Some((owner.to_owned(), t.to_owned()))
        })
        .collect()
}

/// The first IPv4 subnet of a network (as the engine reports it).
pub fn ipv4_subnet(subnets: &[String]) -> Option<Ipv4Net> {
    subnets.iter().find_map(|s| s.parse::<Ipv4Net>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(name: &str, subnet: &str, egress: Option<Egress>) -> WorkspaceNet {
        WorkspaceNet {
            workspace: name.into(),
            subnet: subnet.parse().unwrap(),
            egress,
        }
    }

    #[test]
    fn the_ruleset_isolates_workspaces_and_applies_their_policy() {
        let policy = Egress {
            allow: vec![(
                "0.0.0.0/0".parse().unwrap(),
                vec![
                    "10.0.0.0/8".parse().unwrap(),
                    "192.168.0.0/16".parse().unwrap(),
                ],
            )],
            allow_all: false,
        };
        let s = ruleset(
            "warren_abc_1",
            &[
                net("a", "10.89.1.0/24", Some(policy)),
                net("b", "10.89.2.0/24", None),
            ],
        );
        assert!(s.starts_with("table inet warren_abc_1\ndelete table inet warren_abc_1\n"));
        assert!(
            s.contains("elements = { 10.89.1.0/24, 10.89.2.0/24 }"),
            "{s}"
        );
        assert!(s.contains("ip saddr 10.89.1.0/24 jump ws0"), "{s}");
        assert!(
            s.contains("ip daddr 0.0.0.0/0 ip daddr != { 10.0.0.0/8, 192.168.0.0/16 } accept"),
            "{s}"
        );
        // Each chain refuses the other workspaces before any allow rule.
        for chain in s.split("chain ws").skip(1) {
            let refuse = chain
                .find("@workspaces reject")
                .expect("refuses workspaces");
            let own = chain.find("accept").expect("accepts something");
            assert!(own < refuse, "its own network first: {chain}");
            if let Some(allow) = chain.find("ip daddr 0.0.0.0/0") {
                assert!(refuse < allow, "{chain}");
            }
        }
        let empty = ruleset("warren_abc_1", &[]);
        assert_eq!(
            empty,
            "table inet warren_abc_1\ndelete table inet warren_abc_1\n"
        );
    }

    #[test]
    fn the_host_answers_only_dns_and_addresses_named_one_by_one() {
        let open = Egress {
            allow: vec![
                ("0.0.0.0/0".parse().unwrap(), vec![]),
                ("192.0.2.7/32".parse().unwrap(), vec![]),
            ],
            allow_all: false,
        };
        let s = ruleset(
            "warren_abc_1",
            &[
                net("a", "10.89.1.0/24", Some(open)),
                net("b", "10.89.2.0/24", None),
            ],
        );
        let input = s.split("chain input {").nth(1).expect("input hook");
        let input = &input[..input.find('}').unwrap()];
        assert!(input.contains("ip saddr 10.89.1.0/24 jump host0"), "{s}");
        assert!(
            !input.contains("jump ws"),
            "the host has chains of its own: {s}"
        );
        let forward = s.split("chain forward {").nth(1).expect("forward hook");
        let forward = &forward[..forward.find('}').unwrap()];
        let jumps = forward.rfind("jump ws").expect("jumps");
        let inbound = forward
            .find("ip daddr @workspaces reject")
            .expect("connections into workspaces from elsewhere are refused");
        assert!(
            jumps < inbound,
            "after every workspace's own verdict: {forward}"
        );
        assert!(!input.contains("@workspaces"), "{input}");
        let host0 = s.split("chain host0 {").nth(1).expect("host chain");
        let host0 = &host0[..host0.find('}').unwrap()];
        assert!(host0.contains("udp dport 53 accept"), "{host0}");
        assert!(host0.contains("ip daddr 192.0.2.7/32 accept"), "{host0}");
        assert!(
            !host0.contains("0.0.0.0/0") && !host0.contains("10.89.1.0/24"),
            "neither the broad block nor the workspace's own network (its gateway is the \
             host) opens the host: {host0}"
        );
        assert!(host0
            .trim_end()
            .ends_with("reject with icmpx type admin-prohibited"));
        // Without a policy the admin chose an open workspace, host included.
        let host1 = s.split("chain host1 {").nth(1).expect("host chain");
        assert!(host1[..host1.find('}').unwrap()]
            .trim_end()
            .ends_with("accept"));
    }

    #[test]
    fn egress_from_the_rendered_policy() {
        use k8s_openapi::api::networking::v1 as net;
        let policy: net::NetworkPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w"},
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "egress": [
                    {"ports": [{"port": 53, "protocol": "UDP"}]},
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}},
                            {"ipBlock": {"cidr": "fd00::/8"}}]}
                ]
            }
        }))
        .unwrap();
        let e = Egress::from_policy(&policy).unwrap();
        assert_eq!(
            e.allow,
            vec![(
                "0.0.0.0/0".parse().unwrap(),
                vec!["10.0.0.0/8".parse().unwrap()]
            )]
        );
        assert!(!e.allow_all);
        assert_eq!(table_name("a1-b2!", 3), "warren_a1b2_3");
    }
}
