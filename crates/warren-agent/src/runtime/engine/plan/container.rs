//! One container of a pod plan: its create body (user, capabilities, mounts, environment),
//! and the files its Secret and ConfigMap volumes project.

use super::*;

/// Where a pod volume comes from on the engine.
pub(super) enum Source {
    Volume(String),
    Dir(PathBuf),
}

pub(super) struct EnvContext<'a> {
    pub(super) workspace: &'a WorkspaceKey,
    pub(super) secrets: &'a DataSets,
    pub(super) config_maps: &'a DataSets,
}

/// The container's create body, and what to check of its image's user when it runs as that.
pub(super) fn container_body(
    c: &Container,
    pod_sc: Option<&PodSecurityContext>,
    sources: &HashMap<String, Source>,
    files_dir: &Path,
    env_cx: &EnvContext<'_>,
    kubernetes: Option<KubernetesPods>,
) -> Result<(ContainerCreateBody, Option<ImageUser>), PlanError> {
    let err = |m: String| PlanError::Spec(format!("container {:?}: {m}", c.name));
    let image = c
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| err("no image".into()))?;
    let sc = c.security_context.as_ref();
    if sc.and_then(|s| s.privileged) == Some(true) {
        return Err(err("privileged containers are not allowed".into()));
    }
    let default_uid = kubernetes.is_none().then_some(DEFAULT_UID);
    let user = pod_user(pod_sc, sc, default_uid)?;
    let mut image_user = None;
    let user_field = match (user.uid, user.gid) {
        (Some(uid), Some(gid)) => Some(format!("{uid}:{gid}")),
        // As the engine and the kubelet do: the group is the image's for that user.
        (Some(uid), None) => Some(uid.to_string()),
        (None, group) => {
            image_user = Some(ImageUser {
                non_root: user.non_root,
                root_allowed: kubernetes.is_some_and(KubernetesPods::root_allowed),
                group,
            });
            None
        }
    };
    if kubernetes.is_some_and(|k| !k.root_allowed()) && user.uid == Some(0) {
        return Err(err(
            "runAsUser 0 is not allowed on this engine: it cannot give the container a user \
             namespace (Docker without userns-remap), so root in it would be root on the host"
                .into(),
        ));
    }
    let mut security_opt = Vec::new();
    // Without a user namespace, a set-user-id binary of the image would be root on the host.
    let no_escalation = sc.and_then(|s| s.allow_privilege_escalation) == Some(false)
        || kubernetes.is_some_and(|k| !k.root_allowed());
    if no_escalation {
        security_opt.push("no-new-privileges".to_owned());
    }
    // What the server rendered because the agent's admin allows it for this workspace
    // (`security.allowed_security_options`); a pod from Git never gets here with it, as its
    // admission refuses unconfined profiles.
    if sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .is_some_and(|p| p.type_ == "Unconfined")
    {
        security_opt.push("seccomp=unconfined".to_owned());
    }
    if sc
        .and_then(|s| s.app_armor_profile.as_ref())
        .is_some_and(|p| p.type_ == "Unconfined")
    {
        security_opt.push("apparmor=unconfined".to_owned());
    }
    let cap_add = capabilities(sc, kubernetes);
    let (memory, nano_cpus) = limits(c).map_err(err)?;
    let mounts = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| mount(m, sources, files_dir))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;

    let mut env = resolve_env(c, env_cx).map_err(err)?;
    // The editor listens on the container's network address: the agent reaches declared ports
    // through published ones, which the engine forwards to that address, and the firewall
    // keeps every other workspace off it. A devfile's own value gives way.
    env.retain(|e| !e.starts_with(&format!("{EDITOR_ADDRESS_ENV}=")));
    env.push(format!("{EDITOR_ADDRESS_ENV}=0.0.0.0"));
    let readonly_rootfs = sc.and_then(|s| s.read_only_root_filesystem).filter(|r| *r);
    // A pod from Git's processes carry its fsGroup and supplemental groups, as on
    // Kubernetes (its files are the fsGroup's).
    let group_add: Vec<String> = match (kubernetes, pod_sc) {
        (Some(_), Some(p)) => p
            .fs_group
            .into_iter()
            .chain(p.supplemental_groups.iter().flatten().copied())
            .filter(|g| *g >= 0)
            .map(|g| g.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };

    let body = ContainerCreateBody {
        image: Some(image),
        entrypoint: c.command.clone(),
        cmd: c.args.clone(),
        working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
        env: Some(env),
        user: user_field,
        tty: c.tty,
        open_stdin: c.stdin,
        host_config: Some(HostConfig {
            init: Some(true),
            memory,
            nano_cpus,
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: (!cap_add.is_empty()).then_some(cap_add),
            security_opt: (!security_opt.is_empty()).then_some(security_opt),
            privileged: Some(false),
            readonly_rootfs,
            group_add: (!group_add.is_empty()).then_some(group_add),
            mounts: Some(mounts),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok((body, image_user))
}

/// The capabilities a container adds to none. A workspace has none it does not ask for; a
/// pod from Git has the container runtime's defaults (Kubernetes' baseline set), less what
/// it drops, plus what it adds.
fn capabilities(sc: Option<&SecurityContext>, kubernetes: Option<KubernetesPods>) -> Vec<String> {
    let named = |list: Option<&Vec<String>>| -> BTreeSet<String> {
        list.into_iter()
            .flatten()
            .map(|c| c.trim_start_matches("CAP_").to_ascii_uppercase())
            .collect()
    };
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let added = named(caps.and_then(|c| c.add.as_ref()));
    if kubernetes.is_none() {
        return added.into_iter().collect();
    }
    let dropped = named(caps.and_then(|c| c.drop.as_ref()));
    let mut set: BTreeSet<String> = if dropped.contains("ALL") {
        BTreeSet::new()
    } else {
        warren_admission::BASELINE_CAPABILITIES
            .iter()
            .map(|c| (*c).to_owned())
            .filter(|c| !dropped.contains(c))
            .collect()
    };
    set.extend(added);
    set.into_iter().collect()
}

/// The container's memory (bytes) and CPU (nano-CPUs) limits, as the engine takes them.
fn limits(c: &Container) -> Result<(Option<i64>, Option<i64>), String> {
    let (mut memory, mut nano_cpus) = (None, None);
    let Some(limits) = c.resources.as_ref().and_then(|r| r.limits.as_ref()) else {
        return Ok((None, None));
    };
    if let Some(m) = limits.get("memory") {
        let bytes = warren_types::quantity::parse_memory_bytes(&m.0)
            .map_err(|e| format!("resources.limits.memory: {e}"))?;
        memory = Some(i64::try_from(bytes).map_err(|_| "memory limit too large".to_owned())?);
    }
    if let Some(cpu) = limits.get("cpu") {
        let millis = warren_types::quantity::parse_cpu_millis(&cpu.0)
            .map_err(|e| format!("resources.limits.cpu: {e}"))?;
        let nanos = millis
            .checked_mul(1_000_000)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| "cpu limit too large".to_owned())?;
        nano_cpus = Some(nanos);
    }
    Ok((memory, nano_cpus))
}

/// One volume mount on the engine: a named volume (a subPath inside it), or the directory of
/// a Secret's or ConfigMap's files, always read-only as on Kubernetes.
fn mount(
    m: &k8s_openapi::api::core::v1::VolumeMount,
    sources: &HashMap<String, Source>,
    files_dir: &Path,
) -> Result<Mount, String> {
    let source = sources
        .get(&m.name)
        .ok_or_else(|| format!("volumeMount {:?} names no volume", m.name))?;
    let sub = m.sub_path.clone().filter(|s| !s.is_empty());
    if let Some(s) = sub.as_ref().filter(|s| !is_safe_relative(s)) {
        return Err(format!(
            "volumeMount {:?}: subPath {s:?} is not allowed",
            m.name
        ));
    }
    Ok(match source {
        Source::Volume(v) => Mount {
            target: Some(m.mount_path.clone()),
            source: Some(v.clone()),
            typ: Some(MountType::VOLUME),
            read_only: Some(m.read_only.unwrap_or(false)),
            volume_options: sub.map(|s| bollard::models::MountVolumeOptions {
                subpath: Some(s),
                ..Default::default()
            }),
            ..Default::default()
        },
        Source::Dir(dir) => {
            let mut path = files_dir.join(dir);
            if let Some(s) = sub {
                path = path.join(s);
            }
            Mount {
                target: Some(m.mount_path.clone()),
                source: Some(path.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            }
        }
    })
}

/// The user a container's securityContext (then its pod's) names.
pub(super) struct PodUser {
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) non_root: bool,
}

/// The permission bits of a projected file on Kubernetes: `defaultMode`, else 0644. In a
/// user namespace the files' owner (the host's root) is no one, so what their owner may read
/// every user of the pod may (the agent's 0700 state directory keeps them from the host).
pub(super) fn file_mode(default_mode: Option<i32>, k: KubernetesPods) -> u32 {
    let mode = default_mode
        .and_then(|m| u32::try_from(m).ok())
        .map_or(0o644, |m| m & 0o777);
    if k.user_namespace && mode & 0o400 != 0 {
        mode | 0o044
    } else {
        mode
    }
}

/// The uid/gid a container runs as: the container's securityContext, then the pod's, then
/// `default_uid` (a workspace's 5001, with group 0); none for a pod from Git that names
/// none (its image's). Root is refused when `runAsNonRoot` is set.
pub(super) fn pod_user(
    pod: Option<&PodSecurityContext>,
    container: Option<&SecurityContext>,
    default_uid: Option<i64>,
) -> Result<PodUser, PlanError> {
    let uid = container
        .and_then(|s| s.run_as_user)
        .or(pod.and_then(|s| s.run_as_user))
        .or(default_uid);
    let gid = container
        .and_then(|s| s.run_as_group)
        .or(pod.and_then(|s| s.run_as_group))
        .or(default_uid.map(|_| 0));
    let non_root = container
        .and_then(|s| s.run_as_non_root)
        .or(pod.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if non_root && uid == Some(0) {
        return Err(PlanError::Spec(
            "runAsNonRoot is set but runAsUser is 0".into(),
        ));
    }
    let uid = uid
        .map(|uid| {
            u32::try_from(uid).map_err(|_| PlanError::Spec(format!("runAsUser {uid} is invalid")))
        })
        .transpose()?;
    let gid = gid
        .map(|gid| {
            u32::try_from(gid).map_err(|_| PlanError::Spec(format!("runAsGroup {gid} is invalid")))
        })
        .transpose()?;
    Ok(PodUser { uid, gid, non_root })
}

/// The names of `c`'s environment whose values come from Secrets and ConfigMaps (`envFrom`,
/// `valueFrom` key references). Kubernetes reads them when it makes a pod, so a change of
/// them alone leaves a running pod as it is and reaches the next one; the engine does the
/// same: they are left out of the pod's hash and kept in a hash of their own, compared only
/// when a stopped pod is about to start (`OBJECTS_ENV_LABEL`).
pub(super) fn object_env_names(c: &Container, cx: &EnvContext<'_>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(s) = &from.secret_ref {
            cx.secrets.get(&s.name)
        } else if let Some(m) = &from.config_map_ref {
            cx.config_maps.get(&m.name)
        } else {
            None
        };
        for k in data.into_iter().flat_map(|d| d.keys()) {
            names.insert(format!("{prefix}{k}"));
        }
    }
    // Later entries win, as in `resolve_env`.
    for e in c.env.iter().flatten() {
        let from_object = e.value.is_none()
            && e.value_from
                .as_ref()
                .is_some_and(|f| f.secret_key_ref.is_some() || f.config_map_key_ref.is_some());
        if from_object {
            names.insert(e.name.clone());
        } else {
            names.remove(&e.name);
        }
    }
    names
}

pub(super) fn resolve_env(c: &Container, cx: &EnvContext<'_>) -> Result<Vec<String>, String> {
    // Later entries win, as on Kubernetes (env over envFrom).
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: String, v: String| {
        vars.retain(|(name, _)| *name != k);
        vars.push((k, v));
    };
    let text = |bytes: &[u8], what: &str| {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8 text"))
    };
    for from in c.env_from.clone().unwrap_or_default() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (set_name, optional, data) = if let Some(s) = &from.secret_ref {
            (
                s.name.clone(),
                s.optional == Some(true),
                cx.secrets.get(&s.name),
            )
        } else if let Some(m) = &from.config_map_ref {
            (
                m.name.clone(),
                m.optional == Some(true),
                cx.config_maps.get(&m.name),
            )
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (k, v) in data {
                    set(format!("{prefix}{k}"), text(v, &format!("{set_name}.{k}"))?);
                }
            }
            None if optional => {}
            None => {
                return Err(format!(
                    "envFrom names {set_name:?}, which is not among the objects"
                ))
            }
        }
    }
    for e in c.env.clone().unwrap_or_default() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, None) => String::new(),
            (None, Some(from)) => {
                let lookup = |sets: &DataSets, name: &str, key: &str, optional: bool| match sets
                    .get(name)
                    .and_then(|d| d.get(key))
                {
                    Some(v) => text(v, &format!("{name}.{key}")).map(Some),
                    None if optional => Ok(None),
                    None => Err(format!(
                        "env {:?}: {name}.{key} is not among the objects",
                        e.name
                    )),
                };
                let found = if let Some(s) = &from.secret_key_ref {
                    lookup(cx.secrets, &s.name, &s.key, s.optional == Some(true))?
                } else if let Some(m) = &from.config_map_key_ref {
                    lookup(cx.config_maps, &m.name, &m.key, m.optional == Some(true))?
                } else if let Some(f) = &from.field_ref {
                    Some(match f.field_path.as_str() {
                        "metadata.name" => cx.workspace.name.clone(),
                        "metadata.namespace" => cx.workspace.namespace.clone(),
                        other => {
                            return Err(format!(
                                "env {:?}: fieldRef {other:?} is not supported by the \
                                 container-engine runtime",
                                e.name
                            ))
                        }
                    })
                } else {
                    return Err(format!(
                        "env {:?}: this valueFrom is not supported by the container-engine runtime",
                        e.name
                    ));
                };
                match found {
                    Some(v) => v,
                    None => continue,
                }
            }
        };
        set(e.name.clone(), value);
    }
    for (k, _) in &vars {
        if k.is_empty() || k.contains('=') {
            return Err(format!("environment variable name {k:?} is invalid"));
        }
    }
    Ok(vars.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

/// The files of one Secret/ConfigMap volume: every key, or the listed items.
pub(super) fn project(
    volume: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: &[k8s_openapi::api::core::v1::KeyToPath],
    object: &str,
    modes: Option<(Option<i32>, KubernetesPods)>,
) -> Result<Vec<PlannedFile>, PlanError> {
    let mut out = Vec::new();
    let mode = modes.map(|(default, k)| file_mode(default, k));
    let pairs: Vec<(String, String, Option<u32>)> = if items.is_empty() {
        data.keys().map(|k| (k.clone(), k.clone(), mode)).collect()
    } else {
        items
            .iter()
            .map(|i| {
                // An item's own mode, where the pod's files have modes at all.
                let own = modes.map(|(default, k)| file_mode(i.mode.or(default), k));
                (i.key.clone(), i.path.clone(), own)
            })
            .collect()
    };
    for (key, path, mode) in pairs {
        if !is_safe_relative(&path) {
            return Err(PlanError::Spec(format!(
                "volume {volume:?}: file path {path:?} must be relative and stay inside the volume"
            )));
        }
        let contents = data.get(&key).cloned().ok_or_else(|| {
            PlanError::Spec(format!("volume {volume:?}: {object} has no key {key:?}"))
        })?;
        out.push(PlannedFile {
            path: Path::new(volume).join(path),
            contents,
            mode,
        });
    }
    Ok(out)
}

/// A relative path without `..`, absolute parts or empty components.
pub(super) fn is_safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}
