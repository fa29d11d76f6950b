//! Kubernetes' Pod Security Standards (the `baseline` and `restricted` profiles, as the API
//! server's PodSecurity admission checks them at version `latest`), over any object that makes
//! pods: a Pod, a Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController or Job
//! template, a CronJob's job template, a PodTemplate.
//!
//! The agent checks before it applies so a tenant hears which field broke the rule, at once and
//! in Warren's words, instead of a Deployment whose pods silently never appear.

use crate::Violation;
use serde_json::Value;

/// A Pod Security Standards profile; `restricted` includes everything `baseline` requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Baseline,
    Restricted,
}

impl Level {
    /// The profile's name, as the `pod-security.kubernetes.io/enforce` label spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// Capabilities `baseline` lets a container add.
pub const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
/// Sysctls `baseline` allows (namespaced, and harmless to neighbours).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];
const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];
/// Volume sources `restricted` allows: none of them reaches the node's files or devices.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
const CONTAINER_LISTS: &[&str] = &["initContainers", "containers", "ephemeralContainers"];
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The pod templates of `object`: the path of each pod spec, and the value holding its
/// `metadata` and `spec` (for a Pod, the object itself). Kinds that make no pods have none.
pub fn templates(object: &Value) -> Vec<(String, &Value)> {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let at = |pointer: &str, path: &str| {
        object
            .pointer(pointer)
            .map(|t| vec![(path.to_owned(), t)])
            .unwrap_or_default()
    };
    match kind {
        "Pod" => vec![("spec".to_owned(), object)],
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "ReplicationController"
        | "Job" => at("/spec/template", "spec.template.spec"),
        "CronJob" => at(
            "/spec/jobTemplate/spec/template",
            "spec.jobTemplate.spec.template.spec",
        ),
        "PodTemplate" => at("/template", "template.spec"),
        _ => vec![],
    }
}

/// What keeps every pod `object` makes from meeting `level`; empty when they all do (and for
/// kinds that make no pods).
pub fn pod_security(object: &Value, level: Level) -> Vec<Violation> {
    let mut found = vec![];
    for (path, template) in templates(object) {
        let null = Value::Null;
        let spec = template.get("spec").unwrap_or(&null);
        check_pod(
            &path,
            template.get("metadata").unwrap_or(&null),
            spec,
            level,
            &mut found,
        );
    }
    found
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn bool_at(v: &Value, pointer: &str) -> Option<bool> {
    v.pointer(pointer).and_then(Value::as_bool)
}

fn strings_at<'a>(v: &'a Value, pointer: &str) -> Vec<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn items<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect()
}

fn check_pod(path: &str, meta: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let meta_path = path.strip_suffix("spec").unwrap_or(path).to_owned() + "metadata";
    let mut bad = |field: String, problem: &str| out.push(Violation::new(field, problem));
    // Baseline: nothing of the node's.
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if bool_at(spec, &format!("/{host}")) == Some(true) {
            bad(
                format!("{path}.{host}"),
                "sharing the node's namespaces is not allowed",
            );
        }
    }
    for v in items(spec, "volumes") {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
        let sources = v
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .filter(|k| *k != "name");
        for source in sources {
            if source == "hostPath" {
                bad(
                    format!("{path}.volumes[{name}].hostPath"),
                    "volumes from the node's file system are not allowed",
                );
            } else if level == Level::Restricted && !RESTRICTED_VOLUMES.contains(&source.as_str()) {
                bad(
                    format!("{path}.volumes[{name}].{source}"),
                    "this volume type is not allowed (allowed: configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, secret)",
                );
            }
        }
    }
    let null = Value::Null;
    let psc = spec.get("securityContext").unwrap_or(&null);
    let sc_path = format!("{path}.securityContext");
    check_context(&sc_path, psc, &mut bad);
    for s in items(psc, "sysctls") {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
        if !SAFE_SYSCTLS.contains(&name) {
            bad(
                format!("{sc_path}.sysctls[{name}]"),
                "this sysctl is not allowed",
            );
        }
    }
    let annotations = meta.get("annotations").and_then(Value::as_object);
    for (key, value) in annotations.into_iter().flatten() {
        if key.starts_with(APPARMOR_ANNOTATION) {
            let value = value.as_str().unwrap_or("");
            if value != "runtime/default" && !value.starts_with("localhost/") {
                bad(
                    format!("{meta_path}.annotations[{key}]"),
                    "an AppArmor profile other than runtime/default or localhost/* is not allowed",
                );
            }
        }
    }

    let pod_non_root = bool_at(psc, "/runAsNonRoot") == Some(true);
    let pod_seccomp = str_at(psc, "/seccompProfile/type");
    for list in CONTAINER_LISTS {
        for c in items(spec, list) {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
            let c_path = format!("{path}.{list}[{name}]");
            let sc = c.get("securityContext").unwrap_or(&null);
            let sc_path = format!("{c_path}.securityContext");
            if bool_at(sc, "/privileged") == Some(true) {
                bad(
                    format!("{sc_path}.privileged"),
                    "privileged containers are not allowed",
                );
            }
            check_context(&sc_path, sc, &mut bad);
            if str_at(sc, "/procMount").is_some_and(|m| m != "Default") {
                bad(
                    format!("{sc_path}.procMount"),
                    "only the Default /proc mount is allowed",
                );
            }
            for p in items(c, "ports") {
                // Whatever its type: the API server may coerce what this reads otherwise.
                let host_port = p.get("hostPort").filter(|h| !h.is_null());
                if host_port.is_some_and(|h| h.as_f64() != Some(0.0)) {
                    bad(
                        format!("{c_path}.ports.hostPort"),
                        "ports on the node are not allowed",
                    );
                }
            }
            // Probes and lifecycle handlers reach the pod's own address only (baseline since
            // Kubernetes 1.34): a `host` aims the kubelet — or an engine agent — elsewhere.
            for handler in [
                "livenessProbe/httpGet",
                "livenessProbe/tcpSocket",
                "readinessProbe/httpGet",
                "readinessProbe/tcpSocket",
                "startupProbe/httpGet",
                "startupProbe/tcpSocket",
                "lifecycle/postStart/httpGet",
                "lifecycle/postStart/tcpSocket",
                "lifecycle/preStop/httpGet",
                "lifecycle/preStop/tcpSocket",
            ] {
                if str_at(c, &format!("/{handler}/host")).is_some_and(|h| !h.is_empty()) {
                    bad(
                        format!("{c_path}.{}.host", handler.replace('/', ".")),
                        "a probe or lifecycle handler may not name a host",
                    );
                }
            }
            let added = strings_at(sc, "/capabilities/add");
            for cap in &added {
                let allowed = match level {
                    Level::Baseline => BASELINE_CAPABILITIES.contains(cap),
                    Level::Restricted => *cap == "NET_BIND_SERVICE",
                };
                if !allowed {
                    bad(
                        format!("{sc_path}.capabilities.add[{cap}]"),
                        "adding this capability is not allowed",
                    );
                }
            }
            if level < Level::Restricted {
                continue;
            }
            if bool_at(sc, "/allowPrivilegeEscalation") != Some(false) {
                bad(
                    format!("{sc_path}.allowPrivilegeEscalation"),
                    "must be false",
                );
            }
            match bool_at(sc, "/runAsNonRoot") {
                Some(false) => bad(format!("{sc_path}.runAsNonRoot"), "must not be false"),
                None if !pod_non_root => bad(
                    format!("{sc_path}.runAsNonRoot"),
                    "must be true (here or in the pod's securityContext)",
                ),
                _ => {}
            }
            if sc.get("runAsUser").and_then(Value::as_f64) == Some(0.0) {
                bad(
                    format!("{sc_path}.runAsUser"),
                    "running as root (0) is not allowed",
                );
            }
            let seccomp = str_at(sc, "/seccompProfile/type").or(pod_seccomp);
            if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
                bad(
                    format!("{sc_path}.seccompProfile.type"),
                    "must be RuntimeDefault or Localhost (here or in the pod's securityContext)",
                );
            }
            if !strings_at(sc, "/capabilities/drop").contains(&"ALL") {
                bad(format!("{sc_path}.capabilities.drop"), "must include ALL");
            }
        }
    }
    if level == Level::Restricted && bool_at(psc, "/runAsNonRoot") == Some(false) {
        bad(
            format!("{path}.securityContext.runAsNonRoot"),
            "must not be false",
        );
    }
    if level == Level::Restricted && psc.get("runAsUser").and_then(Value::as_f64) == Some(0.0) {
        bad(
            format!("{path}.securityContext.runAsUser"),
            "running as root (0) is not allowed",
        );
    }
}

/// The rules a pod's and a container's security contexts share.
fn check_context(path: &str, sc: &Value, bad: &mut impl FnMut(String, &str)) {
    // Only `baseline`'s rules: `restricted`'s own are in `check_pod`.
    if bool_at(sc, "/windowsOptions/hostProcess") == Some(true) {
        bad(
            format!("{path}.windowsOptions.hostProcess"),
            "host processes are not allowed",
        );
    }
    if str_at(sc, "/seccompProfile/type") == Some("Unconfined") {
        bad(
            format!("{path}.seccompProfile.type"),
            "an Unconfined seccomp profile is not allowed",
        );
    }
    if str_at(sc, "/appArmorProfile/type") == Some("Unconfined") {
        bad(
            format!("{path}.appArmorProfile.type"),
            "an Unconfined AppArmor profile is not allowed",
        );
    }
    if let Some(se) = sc.get("seLinuxOptions") {
        if !SELINUX_TYPES.contains(&str_at(se, "/type").unwrap_or("")) {
            bad(
                format!("{path}.seLinuxOptions.type"),
                "this SELinux type is not allowed",
            );
        }
        for field in ["user", "role"] {
            if str_at(se, &format!("/{field}")).is_some_and(|v| !v.is_empty()) {
                bad(
                    format!("{path}.seLinuxOptions.{field}"),
                    "setting the SELinux user or role is not allowed",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod that meets `restricted`, as a careful tenant writes it.
    fn good_pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db"},
            "spec": {
                "securityContext": {"runAsNonRoot": true, "runAsUser": 999,
                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "db", "image": "postgres",
                    "ports": [{"containerPort": 5432}],
                    "securityContext": {"allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                    {"name": "tmp", "emptyDir": {}}]}})
    }

    fn fields(object: &Value, level: Level) -> Vec<String> {
        pod_security(object, level)
            .into_iter()
            .map(|v| v.field)
            .collect()
    }

    #[test]
    fn probes_and_hooks_aimed_at_another_host_are_refused_at_baseline() {
        let mut pod = good_pod();
        pod["spec"]["containers"][0]["readinessProbe"] =
            json!({"httpGet": {"host": "169.254.169.254", "port": 80, "path": "/latest"}});
        pod["spec"]["containers"][0]["lifecycle"] =
            json!({"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 6443}}});
        let found = fields(&pod, Level::Baseline);
        assert!(
            found.contains(&"spec.containers[db].readinessProbe.httpGet.host".to_owned()),
            "{found:?}"
        );
        assert!(
            found.contains(&"spec.containers[db].lifecycle.preStop.tcpSocket.host".to_owned()),
            "{found:?}"
        );
        // The pod's own address (no host) is fine.
        let mut pod = good_pod();
        pod["spec"]["containers"][0]["livenessProbe"] = json!({"tcpSocket": {"port": 5432}});
        assert!(fields(&pod, Level::Baseline).is_empty());
    }

    #[test]
    fn a_careful_pod_meets_restricted() {
        assert_eq!(fields(&good_pod(), Level::Restricted), Vec::<String>::new());
    }

    #[test]
    fn the_node_breakout_of_the_issue_is_refused_at_both_levels() {
        let evil = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
            "spec": {"hostPID": true, "hostNetwork": true,
                "containers": [{"name": "x", "image": "alpine",
                    "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}},
                    "ports": [{"containerPort": 22, "hostPort": 22}]}],
                "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}});
        let baseline = fields(&evil, Level::Baseline);
        for f in [
            "spec.hostNetwork",
            "spec.hostPID",
            "spec.volumes[root].hostPath",
            "spec.containers[x].securityContext.privileged",
            "spec.containers[x].securityContext.capabilities.add[SYS_ADMIN]",
            "spec.containers[x].ports.hostPort",
        ] {
            assert!(baseline.contains(&f.to_owned()), "{f} in {baseline:?}");
        }
        let restricted = fields(&evil, Level::Restricted);
        for f in [
            "spec.containers[x].securityContext.allowPrivilegeEscalation",
            "spec.containers[x].securityContext.runAsNonRoot",
            "spec.containers[x].securityContext.seccompProfile.type",
            "spec.containers[x].securityContext.capabilities.drop",
        ] {
            assert!(restricted.contains(&f.to_owned()), "{f} in {restricted:?}");
        }
    }

    #[test]
    fn each_restricted_rule_is_checked_in_every_container_list() {
        let mut p = good_pod();
        p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox",
            "securityContext": {"allowPrivilegeEscalation": false, "runAsUser": 0,
                "runAsNonRoot": false, "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "Unconfined"}, "procMount": "Unmasked",
                "seLinuxOptions": {"type": "spc_t", "user": "system_u"}}}]);
        p["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox"}]);
        p["spec"]["volumes"] = json!([{"name": "nfs", "nfs": {"server": "x", "path": "/"}}]);
        p["spec"]["securityContext"]["sysctls"] = json!([{"name": "kernel.msgmax", "value": "1"},
            {"name": "net.ipv4.tcp_syncookies", "value": "1"}]);
        p["metadata"]["annotations"] = json!({
            "container.apparmor.security.beta.kubernetes.io/db": "unconfined"});
        let found = fields(&p, Level::Restricted);
        for f in [
            "spec.initContainers[init].securityContext.runAsUser",
            "spec.initContainers[init].securityContext.runAsNonRoot",
            "spec.initContainers[init].securityContext.seccompProfile.type",
            "spec.initContainers[init].securityContext.procMount",
            "spec.initContainers[init].securityContext.seLinuxOptions.type",
            "spec.initContainers[init].securityContext.seLinuxOptions.user",
            "spec.ephemeralContainers[debug].securityContext.allowPrivilegeEscalation",
            "spec.ephemeralContainers[debug].securityContext.capabilities.drop",
            "spec.volumes[nfs].nfs",
            "spec.securityContext.sysctls[kernel.msgmax]",
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/db]",
        ] {
            assert!(found.contains(&f.to_owned()), "{f} in {found:?}");
        }
        assert!(!found.iter().any(|f| f.contains("tcp_syncookies")));
        // The pod-level seccomp profile covers the ephemeral container.
        assert!(!found.contains(
            &"spec.ephemeralContainers[debug].securityContext.seccompProfile.type".to_owned()
        ));
        // `baseline` lets a pod run as root (uid 0 too) and keep its capabilities.
        let root = json!({"kind": "Pod", "spec": {"securityContext": {"runAsUser": 0},
            "containers": [{"name": "c",
            "securityContext": {"runAsUser": 0, "capabilities": {"add": ["CHOWN"]}}}]}});
        assert!(fields(&root, Level::Baseline).is_empty());
        let restricted = fields(&root, Level::Restricted);
        assert!(
            restricted.contains(&"spec.securityContext.runAsUser".to_owned()),
            "{restricted:?}"
        );
        // Names as the API server reads them: `CAP_NET_BIND_SERVICE` is not `NET_BIND_SERVICE`,
        // and a host port written as a float is a host port.
        let mut p = good_pod();
        p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
            json!(["CAP_NET_BIND_SERVICE"]);
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 22, "hostPort": 22.0}]);
        let found = fields(&p, Level::Restricted);
        assert!(
            found.contains(
                &"spec.containers[db].securityContext.capabilities.add[CAP_NET_BIND_SERVICE]"
                    .to_owned()
            ),
            "{found:?}"
        );
        assert!(
            found.contains(&"spec.containers[db].ports.hostPort".to_owned()),
            "{found:?}"
        );
    }

    #[test]
    fn workload_templates_are_checked_where_they_are() {
        let spec = json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]});
        for (kind, object, field) in [
            (
                "Deployment",
                json!({"spec": {"template": {"spec": spec}}}),
                "spec.template.spec",
            ),
            (
                "StatefulSet",
                json!({"spec": {"template": {"spec": spec}}}),
                "spec.template.spec",
            ),
            (
                "DaemonSet",
                json!({"spec": {"template": {"spec": spec}}}),
                "spec.template.spec",
            ),
            (
                "Job",
                json!({"spec": {"template": {"spec": spec}}}),
                "spec.template.spec",
            ),
            (
                "CronJob",
                json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}}),
                "spec.jobTemplate.spec.template.spec",
            ),
            (
                "PodTemplate",
                json!({"template": {"spec": spec}}),
                "template.spec",
            ),
        ] {
            let mut o = object;
            o["kind"] = kind.into();
            let found = fields(&o, Level::Baseline);
            assert_eq!(
                found,
                [format!("{field}.containers[c].securityContext.privileged")],
                "{kind}"
            );
        }
        assert!(fields(
            &json!({"kind": "ConfigMap", "spec": spec}),
            Level::Restricted
        )
        .is_empty());
    }
}
