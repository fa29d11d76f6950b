//! Isolation of engine workspaces: the NetworkPolicy the server renders, enforced as
//! nftables rules the agent owns, since a container engine has no NetworkPolicy of its own.
//!
//! One table per agent installation (`inet warren_<owner>_<agent>`), written whole (`nft -f`)
//! at start, then changed one workspace network at a time (a chain per network, reached
//! through verdict maps) whenever networks or their policies change, and before a
//! workspace's containers are created; an update costs the same with one workspace or
//! hundreds. For traffic a workspace's network sends on (forward)
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
use std::collections::BTreeMap;
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

/// What one workspace network's chains hold: the rules of its traffic through the host
/// (`w_…`) and to the host itself (`h_…`), one rule per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRules {
    workspace: Vec<String>,
    host: Vec<String>,
}

/// The rules in force, by workspace subnet.
pub type Applied = BTreeMap<Ipv4Net, NetRules>;

/// The rules for `nets` (a subnet listed twice keeps its first entry: subnets are unique
/// among existing networks).
pub fn rules(nets: &[WorkspaceNet]) -> Applied {
    let mut out = Applied::new();
    for n in nets {
        out.entry(n.subnet).or_insert_with(|| net_rules(n));
    }
    out
}

fn net_rules(n: &WorkspaceNet) -> NetRules {
    let mut host = vec![
        // Comments name the workspace for a person reading the ruleset.
        format!(
            "udp dport 53 accept comment \"workspace {}\"",
            n.workspace.replace(['"', '\n', '\\'], "_")
        ),
        "tcp dport 53 accept".to_owned(),
    ];
    match restricting(&n.egress) {
        // No policy, or one allowing everything: the admin chose an open workspace.
        None => host.push("accept".to_owned()),
        Some(e) => {
            for (allow, _) in e.allow.iter().filter(|(a, _)| a.prefix_len() == 32) {
                host.push(format!("ip daddr {allow} accept"));
            }
            host.push("reject with icmpx type admin-prohibited".to_owned());
        }
    }
    let mut workspace = vec![
        format!(
            "udp dport 53 accept comment \"workspace {}\"",
            n.workspace.replace(['"', '\n', '\\'], "_")
        ),
        "tcp dport 53 accept".to_owned(),
        format!("ip daddr {} accept", n.subnet),
        "ip daddr @workspaces reject with icmpx type admin-prohibited".to_owned(),
    ];
    match restricting(&n.egress) {
        None => workspace.push("accept".to_owned()),
        Some(e) => {
            for (allow, except) in &e.allow {
                if except.is_empty() {
                    workspace.push(format!("ip daddr {allow} accept"));
                } else {
                    let list: Vec<String> = except.iter().map(|e| e.to_string()).collect();
                    workspace.push(format!(
                        "ip daddr {allow} ip daddr != {{ {} }} accept",
                        list.join(", ")
                    ));
                }
            }
            workspace.push("reject with icmpx type admin-prohibited".to_owned());
        }
    }
    NetRules { workspace, host }
}

/// The chain names of a subnet: `w_10_89_3_0_24` and `h_10_89_3_0_24`.
fn chains(subnet: &Ipv4Net) -> (String, String) {
    let key = subnet.to_string().replace(['.', '/'], "_");
    (format!("w_{key}"), format!("h_{key}"))
}

/// The nftables script replacing the table `table` with `rules`.
///
/// Traffic from a workspace subnet is dispatched through a verdict map (`ws_forward` for
/// traffic the host forwards, `ws_input` for traffic to the host) to the subnet's own
/// chain, so the rules of one network can be added, changed or removed without touching
/// the others ([`update`]): replacing the whole table cost time in proportion to every
/// workspace.
pub fn ruleset(table: &str, rules: &Applied) -> String {
    let mut s = String::new();
    // Declaring then deleting makes the replace work whether or not the table exists.
    let _ = writeln!(s, "table inet {table}");
    let _ = writeln!(s, "delete table inet {table}");
    if rules.is_empty() {
        // Nothing to enforce: the table goes with the last workspace.
        return s;
    }
    let _ = writeln!(s, "table inet {table} {{");
    // Intervals without auto-merge: each subnet stays an element of its own, so it can be
    // deleted alone.
    let _ = writeln!(s, "  set workspaces {{ type ipv4_addr; flags interval; }}");
    let _ = writeln!(
        s,
        "  map ws_forward {{ type ipv4_addr : verdict; flags interval; }}"
    );
    let _ = writeln!(
        s,
        "  map ws_input {{ type ipv4_addr : verdict; flags interval; }}"
    );
    for (subnet, r) in rules {
        let (w, h) = chains(subnet);
        for (name, lines) in [(&w, &r.workspace), (&h, &r.host)] {
            let _ = writeln!(s, "  chain {name} {{");
            for line in lines {
                let _ = writeln!(s, "    {line}");
            }
            let _ = writeln!(s, "  }}");
        }
    }
    for hook in ["forward", "input"] {
        let _ = writeln!(s, "  chain {hook} {{");
        let _ = writeln!(
            s,
            "    type filter hook {hook} priority filter - 5; policy accept;"
        );
        let _ = writeln!(s, "    ct state established,related accept");
        if hook == "forward" {
            let _ = writeln!(s, "    ip saddr vmap @ws_forward");
            // Every workspace chain ends in a verdict, so what gets here comes from outside
            // the workspaces: an image build's `RUN` step, any other container of the
            // engine. None of it may open a connection to a workspace (the agent and the
            // proxy dial from the host itself, which is not forwarding).
            let _ = writeln!(
                s,
                "    ip daddr @workspaces reject with icmpx type admin-prohibited"
            );
        } else {
            let _ = writeln!(s, "    ip saddr vmap @ws_input");
        }
        let _ = writeln!(s, "  }}");
    }
    let _ = writeln!(s, "}}");
    let elements =
        |f: &dyn Fn(&Ipv4Net) -> String| rules.keys().map(f).collect::<Vec<_>>().join(", ");
    let _ = writeln!(
        s,
        "add element inet {table} workspaces {{ {} }}",
        elements(&|n| n.to_string())
    );
    let _ = writeln!(
        s,
        "add element inet {table} ws_forward {{ {} }}",
        elements(&|n| format!("{n} : jump {}", chains(n).0))
    );
    let _ = writeln!(
        s,
        "add element inet {table} ws_input {{ {} }}",
        elements(&|n| format!("{n} : jump {}", chains(n).1))
    );
    s
}

/// The nftables script that turns `old` (in force in `table`) into `new`, one network at
/// a time; `None` when nothing changes.
pub fn update(table: &str, old: &Applied, new: &Applied) -> Option<String> {
    if old == new {
        return None;
    }
    if old.is_empty() || new.is_empty() {
        return Some(ruleset(table, new));
    }
    let mut s = String::new();
    // Elements go before their chains, so no map ever jumps to a missing chain.
    for subnet in old.keys().filter(|k| !new.contains_key(*k)) {
        let (w, h) = chains(subnet);
        let _ = writeln!(s, "delete element inet {table} ws_forward {{ {subnet} }}");
        let _ = writeln!(s, "delete element inet {table} ws_input {{ {subnet} }}");
        let _ = writeln!(s, "delete element inet {table} workspaces {{ {subnet} }}");
        let _ = writeln!(s, "delete chain inet {table} {w}");
        let _ = writeln!(s, "delete chain inet {table} {h}");
    }
    for (subnet, r) in new {
        let (w, h) = chains(subnet);
        let before = old.get(subnet);
        if before == Some(r) {
            continue;
        }
        for (name, lines) in [(&w, &r.workspace), (&h, &r.host)] {
            let _ = writeln!(s, "add chain inet {table} {name}");
            if before.is_some() {
                let _ = writeln!(s, "flush chain inet {table} {name}");
            }
            for line in lines {
                let _ = writeln!(s, "add rule inet {table} {name} {line}");
            }
        }
        if before.is_none() {
            let _ = writeln!(s, "add element inet {table} workspaces {{ {subnet} }}");
            let _ = writeln!(
                s,
                "add element inet {table} ws_forward {{ {subnet} : jump {w} }}"
            );
            let _ = writeln!(
                s,
                "add element inet {table} ws_input {{ {subnet} : jump {h} }}"
            );
        }
    }
    Some(s)
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

    /// The body of chain `name` in a script of either form.
    fn chain<'a>(s: &'a str, name: &str) -> Vec<&'a str> {
        if let Some(at) = s.find(&format!("chain {name} {{")) {
            let body = &s[at..];
            // The chain ends at its own closing brace, on a line of its own.
            return body[..body.find("\n  }").unwrap()]
                .lines()
                .skip(1)
                .map(str::trim)
                .collect();
        }
        s.lines()
            .filter_map(|l| l.strip_prefix(&format!("add rule inet warren_abc_1 {name} ")))
            .collect()
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
            &rules(&[
                net("a", "10.89.1.0/24", Some(policy)),
                net("b", "10.89.2.0/24", None),
            ]),
        );
        assert!(s.starts_with("table inet warren_abc_1\ndelete table inet warren_abc_1\n"));
        assert!(
            s.contains("add element inet warren_abc_1 workspaces { 10.89.1.0/24, 10.89.2.0/24 }"),
            "{s}"
        );
        assert!(
            s.contains("ws_forward { 10.89.1.0/24 : jump w_10_89_1_0_24, 10.89.2.0/24 : jump w_10_89_2_0_24 }"),
            "{s}"
        );
        assert!(
            !s.contains("auto-merge"),
            "each subnet an element of its own: {s}"
        );
        let a = chain(&s, "w_10_89_1_0_24");
        assert!(
            a.contains(&"ip daddr 0.0.0.0/0 ip daddr != { 10.0.0.0/8, 192.168.0.0/16 } accept"),
            "{a:?}"
        );
        // Each chain refuses the other workspaces before any allow rule, after its own.
        for name in ["w_10_89_1_0_24", "w_10_89_2_0_24"] {
            let c = chain(&s, name);
            let refuse = c
                .iter()
                .position(|l| l.contains("@workspaces reject"))
                .expect("refuses workspaces");
            let own = c
                .iter()
                .position(|l| l.starts_with("ip daddr 10.89.") && l.ends_with("accept"))
                .expect("its own network");
            assert!(own < refuse, "{c:?}");
            if let Some(allow) = c.iter().position(|l| l.contains("0.0.0.0/0")) {
                assert!(refuse < allow, "{c:?}");
            }
        }
        let empty = ruleset("warren_abc_1", &Applied::new());
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
            &rules(&[
                net("a", "10.89.1.0/24", Some(open)),
                net("b", "10.89.2.0/24", None),
            ]),
        );
        let input = chain(&s, "input");
        assert!(input.contains(&"ip saddr vmap @ws_input"), "{s}");
        assert!(
            !input.iter().any(|l| l.contains("@workspaces")),
            "{input:?}"
        );
        assert!(
            s.contains("ws_input { 10.89.1.0/24 : jump h_10_89_1_0_24, 10.89.2.0/24 : jump h_10_89_2_0_24 }"),
            "the host has chains of its own: {s}"
        );
        let forward = chain(&s, "forward");
        let dispatch = forward
            .iter()
            .position(|l| *l == "ip saddr vmap @ws_forward")
            .expect("dispatch");
        let inbound = forward
            .iter()
            .position(|l| *l == "ip daddr @workspaces reject with icmpx type admin-prohibited")
            .expect("connections into workspaces from elsewhere are refused");
        assert!(
            dispatch < inbound,
            "after every workspace's own verdict: {forward:?}"
        );
        let host0 = chain(&s, "h_10_89_1_0_24");
        assert!(
            host0.iter().any(|l| l.starts_with("udp dport 53 accept")),
            "{host0:?}"
        );
        assert!(host0.contains(&"ip daddr 192.0.2.7/32 accept"), "{host0:?}");
        assert!(
            !host0
                .iter()
                .any(|l| l.contains("0.0.0.0/0") || l.contains("10.89.1.0/24")),
            "neither the broad block nor the workspace's own network (its gateway is the \
             host) opens the host: {host0:?}"
        );
        assert_eq!(
            host0.last(),
            Some(&"reject with icmpx type admin-prohibited")
        );
        // Without a policy the admin chose an open workspace, host included.
        assert_eq!(chain(&s, "h_10_89_2_0_24").last(), Some(&"accept"));
    }

    #[test]
    fn an_update_touches_only_the_networks_that_changed() {
        let closed = Egress {
            allow: vec![],
            allow_all: false,
        };
        let old = rules(&[
            net("a", "10.89.1.0/24", None),
            net("b", "10.89.2.0/24", None),
            net("c", "10.89.3.0/24", None),
        ]);
        let new = rules(&[
            net("a", "10.89.1.0/24", None),
            net("b", "10.89.2.0/24", Some(closed)),
            net("d", "10.89.4.0/24", None),
        ]);
        assert_eq!(update("warren_abc_1", &old, &old), None);
        let s = update("warren_abc_1", &old, &new).expect("a change");
        assert!(
            !s.contains("10_89_1_0_24") && !s.contains("10.89.1."),
            "a is untouched: {s}"
        );
        // c goes: its elements before its chains.
        let element = s
            .find("delete element inet warren_abc_1 ws_forward { 10.89.3.0/24 }")
            .expect("c's dispatch removed");
        let chain_gone = s
            .find("delete chain inet warren_abc_1 w_10_89_3_0_24")
            .expect("c's chain removed");
        assert!(element < chain_gone, "{s}");
        assert!(s.contains("delete element inet warren_abc_1 workspaces { 10.89.3.0/24 }"));
        // b's chains are rewritten in place, its elements kept.
        assert!(
            s.contains("flush chain inet warren_abc_1 w_10_89_2_0_24"),
            "{s}"
        );
        assert!(
            !s.contains("add element inet warren_abc_1 ws_forward { 10.89.2.0/24"),
            "{s}"
        );
        assert_eq!(
            chain(&s, "w_10_89_2_0_24").last(),
            Some(&"reject with icmpx type admin-prohibited")
        );
        // d arrives: its chains before the elements that jump to them.
        let rules_at = s
            .find("add rule inet warren_abc_1 w_10_89_4_0_24")
            .expect("d's rules");
        let jump = s
            .find("add element inet warren_abc_1 ws_forward { 10.89.4.0/24 : jump w_10_89_4_0_24 }")
            .expect("d's dispatch");
        assert!(rules_at < jump, "{s}");
        assert!(s.contains("add element inet warren_abc_1 workspaces { 10.89.4.0/24 }"));
        // From or to nothing, the table is written whole.
        assert!(update("warren_abc_1", &Applied::new(), &new)
            .unwrap()
            .starts_with("table inet warren_abc_1\ndelete table inet warren_abc_1\n"));
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
