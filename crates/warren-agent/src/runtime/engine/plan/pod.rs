//! The pod plan, phase by phase: the pod spec checked, its volumes placed, its user, the
//! Service's ports, its containers (the first app container owning the network), the shared
//! tools volume's filler, then the hash and the labels that carry it.

use super::*;

/// Builds the pod plan. `secrets`/`config_maps` are the objects' data merged with what was
/// stored from earlier applies (partial reconciles may omit Secrets, reconcile.md).
pub fn plan(
    objects: &Objects,
    secrets: &DataSets,
    config_maps: &DataSets,
    cx: &PlanContext<'_>,
) -> Result<PodPlan, PlanError> {
    let ws = cx.workspace.name.as_str();
    let dspec = objects
        .deployment
        .spec
        .as_ref()
        .ok_or_else(|| spec_err("the Deployment has no spec"))?;
    let replicas = dspec.replicas.unwrap_or(1);
    if !(0..=1).contains(&replicas) {
        return Err(spec_err(format!(
            "spec.replicas is {replicas}; a workspace runs 0 or 1 replicas"
        )));
    }
    let pod = dspec
        .template
        .spec
        .as_ref()
        .ok_or_else(|| spec_err("the Deployment has no spec.template.spec"))?;
    if pod.containers.is_empty() {
        return Err(spec_err("spec.template.spec.containers is empty"));
    }
    let mut init_containers = pod.init_containers.clone().unwrap_or_default();
    // The renderer's tools init container filling an emptyDir: one shared volume instead.
    let tools_volume_is_empty_dir = pod
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == warren_types::config::TOOLS_VOLUME && v.empty_dir.is_some());
    let tools_init = init_containers
        .iter()
        .position(|c| c.name == warren_types::config::TOOLS_VOLUME)
        .filter(|_| tools_volume_is_empty_dir)
        .map(|i| init_containers.remove(i));
    check_pod(pod, &init_containers, cx)?;
    let placed = volumes(pod, objects, secrets, config_maps, tools_init.as_ref(), cx)?;
    let (uid, gid) = pod_owner(pod, cx)?;
    let ports = service_ports(objects, pod)?;
    let env_cx = EnvContext {
        workspace: cx.workspace,
        secrets,
        config_maps,
    };
    let network = network_name(ws);
    let pod_cx = PodContext {
        pod,
        sources: &placed.sources,
        env: &env_cx,
        plan: cx,
        network: &network,
        ports: &ports,
    };
    let mut containers = Vec::new();
    for (role, list) in [(Role::Init, &init_containers), (Role::App, &pod.containers)] {
        for (order, c) in list.iter().enumerate() {
            containers.push(container_plan(&pod_cx, role, order, c)?);
        }
    }
    let tools = match &tools_init {
        Some(init) => Some(tools_plan(&pod_cx, init)?),
        None => None,
    };
    let from_objects: Vec<BTreeSet<String>> = [(&init_containers), (&pod.containers)]
        .into_iter()
        .flat_map(|list| list.iter().map(|c| object_env_names(c, &env_cx)))
        .collect();
    let hash = pod_hash(&containers, &from_objects, &placed.volumes)?;
    let env_hash = objects_env_hash(&containers, &from_objects);
    // Labels last: they carry the hashes.
    for c in &mut containers {
        let mut labels = container_labels(cx, c, &hash, &ports);
        labels.insert(OBJECTS_ENV_LABEL.into(), env_hash.clone());
        c.body.labels = Some(labels);
    }
    Ok(PodPlan {
        hash,
        env_hash,
        replicas,
        network,
        volumes: placed.volumes,
        shared_volumes: placed.shared_volumes,
        seeds: placed.seeds,
        files: placed.files,
        ports,
        uid,
        gid,
        kubernetes: cx.kubernetes.is_some(),
        containers,
        tools,
    })
}

fn spec_err(message: impl Into<String>) -> PlanError {
    PlanError::Spec(message.into())
}

/// What the engine cannot run as Kubernetes would is refused by name, never ignored: a pod
/// from Git that does not always restart, a probe the engine cannot run; a container name
/// that is not a DNS label or is used twice.
fn check_pod(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    init_containers: &[Container],
    cx: &PlanContext<'_>,
) -> Result<(), PlanError> {
    if cx.kubernetes.is_some() {
        // A Deployment's pods always restart (`restarts`), as the API server insists.
        if let Some(policy) = pod.restart_policy.as_deref().filter(|p| *p != "Always") {
            return Err(spec_err(format!(
                "spec.template.spec.restartPolicy {policy:?} is not allowed for a Deployment \
                 (only \"Always\")"
            )));
        }
        // Probes are honoured for a pod from Git (`probes`).
        if let Some(why) = pod
            .containers
            .iter()
            .find_map(super::super::probes::unsupported)
        {
            return Err(spec_err(why));
        }
    }
    let mut seen = BTreeSet::new();
    for c in init_containers.iter().chain(&pod.containers) {
        let label = |ch: char| ch.is_ascii_alphanumeric() || ch == '-';
        if c.name.is_empty() || !c.name.chars().all(label) {
            return Err(spec_err(format!(
                "container name {:?} is not a DNS label",
                c.name
            )));
        }
        if !seen.insert(c.name.clone()) {
            return Err(spec_err(format!(
                "container name {:?} is used twice",
                c.name
            )));
        }
    }
    Ok(())
}

/// The pod's volumes placed on the engine.
struct Placed {
    /// Engine volume → the claim or emptyDir it stands for.
    volumes: BTreeMap<String, String>,
    /// Of those, the ones the pod does not own.
    shared_volumes: BTreeSet<String>,
    /// Of those, the ones that start as copies of a prebuild's.
    seeds: BTreeMap<String, VolumeSeed>,
    /// The Secret and ConfigMap files.
    files: Vec<PlannedFile>,
    /// Pod volume name → where it comes from.
    sources: HashMap<String, Source>,
}

/// The prebuild volume claim `claim` of workspace `ws` starts as a copy of: the same volume
/// of the prebuild's workspace (`<ws>-data` ← `warren-<prebuild>-data`).
fn seed_of(ws: &str, claim: &str, objects: &Objects) -> Option<VolumeSeed> {
    let (from, id) = objects.seeds.get(claim)?;
    let volume = claim.strip_prefix(&format!("{ws}-"))?;
    if !warren_types::is_dns_label(from, 63) {
        return None;
    }
    Some(VolumeSeed {
        source: volume_name(from, &format!("{from}-{volume}")),
        workspace: from.clone(),
        workspace_id: id.clone(),
    })
}

/// Places each volume: a PVC and an emptyDir become named volumes (a claim the pod does not
/// own, the volume it shares), a Secret or ConfigMap becomes files, the tools emptyDir the
/// one shared tools volume; any other kind is refused by name.
fn volumes(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    objects: &Objects,
    secrets: &DataSets,
    config_maps: &DataSets,
    tools_init: Option<&Container>,
    cx: &PlanContext<'_>,
) -> Result<Placed, PlanError> {
    let ws = cx.workspace.name.as_str();
    let mut placed = Placed {
        volumes: BTreeMap::new(),
        shared_volumes: BTreeSet::new(),
        seeds: BTreeMap::new(),
        files: Vec::new(),
        sources: HashMap::new(),
    };
    let empty = BTreeMap::new();
    for v in pod.volumes.clone().unwrap_or_default() {
        let shared_tools = tools_init.filter(|_| v.name == warren_types::config::TOOLS_VOLUME);
        let source = if let Some(init) = shared_tools {
            let image = init.image.clone().unwrap_or_default();
            // Not in `volumes`: no workspace owns it, so none creates or removes it.
            Source::Volume(tools_volume_name(&image))
        } else if let Some(pvc) = &v.persistent_volume_claim {
            let engine = match objects.claim_volumes.get(&pvc.claim_name) {
                Some(shared) => {
                    placed.shared_volumes.insert(shared.clone());
                    shared.clone()
                }
                None => {
                    let engine = volume_name(ws, &pvc.claim_name);
                    if let Some(seed) = seed_of(ws, &pvc.claim_name, objects) {
                        placed.seeds.insert(engine.clone(), seed);
                    }
                    engine
                }
            };
            placed
                .volumes
                .insert(engine.clone(), pvc.claim_name.clone());
            Source::Volume(engine)
        } else if v.empty_dir.is_some() {
            let engine = volume_name(ws, &format!("{ws}-{}", v.name));
            placed.volumes.insert(engine.clone(), v.name.clone());
            Source::Volume(engine)
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = match secrets.get(&name) {
                Some(d) => d,
                None if s.optional == Some(true) => &empty,
                None => return Err(missing(&v.name, "Secret", &name)),
            };
            let items = s.items.clone().unwrap_or_default();
            let modes = cx.kubernetes.map(|k| (s.default_mode, k));
            placed
                .files
                .extend(project(&v.name, data, &items, &name, modes)?);
            Source::Dir(PathBuf::from(&v.name))
        } else if let Some(c) = &v.config_map {
            let name = c.name.clone();
            let data = match config_maps.get(&name) {
                Some(d) => d,
                None if c.optional == Some(true) => &empty,
                None => return Err(missing(&v.name, "ConfigMap", &name)),
            };
            let items = c.items.clone().unwrap_or_default();
            let modes = cx.kubernetes.map(|k| (c.default_mode, k));
            placed
                .files
                .extend(project(&v.name, data, &items, &name, modes)?);
            Source::Dir(PathBuf::from(&v.name))
        } else {
            return Err(spec_err(format!(
                "volume {:?}: only persistentVolumeClaim, emptyDir, secret and configMap volumes \
                 are supported by the container-engine runtime",
                v.name
            )));
        };
        if !is_safe_relative(&v.name) {
            return Err(spec_err(format!(
                "volume name {:?} is not a DNS label",
                v.name
            )));
        }
        placed.sources.insert(v.name.clone(), source);
    }
    Ok(placed)
}

fn missing(volume: &str, kind: &str, name: &str) -> PlanError {
    spec_err(format!(
        "volume {volume:?} uses {kind} {name:?}, which is not among the objects"
    ))
}

/// Who owns the pod's files: a workspace's belong to its user; a pod from Git's to root and
/// its fsGroup.
fn pod_owner(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    cx: &PlanContext<'_>,
) -> Result<(u32, u32), PlanError> {
    match cx.kubernetes {
        None => {
            let user = pod_user(pod.security_context.as_ref(), None, Some(DEFAULT_UID))?;
            Ok((user.uid.unwrap_or_default(), user.gid.unwrap_or_default()))
        }
        Some(_) => {
            let fs_group = pod.security_context.as_ref().and_then(|s| s.fs_group);
            let gid = u32::try_from(fs_group.unwrap_or(0))
                .map_err(|_| spec_err(format!("fsGroup {} is invalid", fs_group.unwrap_or(0))))?;
            Ok((0, gid))
        }
    }
}

/// The Service's ports as the target ports the pod publishes (`8080/tcp`), each once.
fn service_ports(
    objects: &Objects,
    pod: &k8s_openapi::api::core::v1::PodSpec,
) -> Result<Vec<String>, PlanError> {
    let mut ports = BTreeSet::new();
    let Some(svc) = objects.service.as_ref().and_then(|s| s.spec.as_ref()) else {
        return Ok(Vec::new());
    };
    for p in svc.ports.clone().unwrap_or_default() {
        let target = match &p.target_port {
            None => p.port,
            Some(IntOrString::Int(i)) => *i,
            Some(IntOrString::String(named)) => pod
                .containers
                .iter()
                .flat_map(|c| c.ports.clone().unwrap_or_default())
                .find(|cp| cp.name.as_deref() == Some(named.as_str()))
                .map(|cp| cp.container_port)
                .ok_or_else(|| {
                    spec_err(format!(
                        "Service targetPort {named:?} names no container port"
                    ))
                })?,
        };
        if !(1..=65535).contains(&target) {
            return Err(spec_err(format!(
                "Service targetPort {target} is out of range"
            )));
        }
        let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
        if proto != "tcp" && proto != "udp" {
            return Err(spec_err(format!(
                "Service port protocol {proto:?} is not supported"
            )));
        }
        ports.insert(format!("{target}/{proto}"));
    }
    Ok(ports.into_iter().collect())
}

/// What every container of the pod is planned with.
struct PodContext<'a> {
    pod: &'a k8s_openapi::api::core::v1::PodSpec,
    sources: &'a HashMap<String, Source>,
    env: &'a EnvContext<'a>,
    plan: &'a PlanContext<'a>,
    network: &'a str,
    ports: &'a [String],
}

/// One container: its body, in the pod's namespaces. The first app container owns the pod's
/// network namespace (it joins the workspace network under the workspace's name and
/// publishes the ports); the other app containers join it; init containers finish before
/// the app containers start, so nothing is shared on localhost: they only need the network.
fn container_plan(
    pcx: &PodContext<'_>,
    role: Role,
    order: usize,
    c: &Container,
) -> Result<ContainerPlan, PlanError> {
    let cx = pcx.plan;
    let ws = cx.workspace.name.as_str();
    let owner = container_name(ws, Role::App, &pcx.pod.containers[0].name);
    let security = pcx.pod.security_context.as_ref();
    let (mut body, image_user) = container_body(
        c,
        security,
        pcx.sources,
        cx.files_dir,
        pcx.env,
        cx.kubernetes,
    )?;
    let host_config = body.host_config.get_or_insert_with(Default::default);
    let injected = devices(c, cx.cdi, cx.kubernetes.is_some())?;
    if !injected.devices.is_empty() {
        host_config.devices = Some(injected.devices);
    }
    if !injected.requests.is_empty() {
        // The engine applies these itself, hooks included (`cdi::EngineCdi::Applies`).
        host_config.device_requests = Some(vec![bollard::models::DeviceRequest {
            driver: Some("cdi".into()),
            device_ids: Some(injected.requests),
            ..Default::default()
        }]);
    }
    host_config
        .mounts
        .get_or_insert_with(Vec::new)
        .extend(injected.mounts);
    if !injected.env.is_empty() {
        let env = body.env.get_or_insert_with(Vec::new);
        for e in injected.env {
            let key = e.split('=').next().unwrap_or_default().to_owned();
            env.retain(|x| x.split('=').next() != Some(key.as_str()));
            env.push(e);
        }
    }
    let host_config = body.host_config.get_or_insert_with(Default::default);
    if cx.kubernetes.is_some_and(|k| k.user_namespace) {
        // The app containers share the owner's, as they share its network; init containers
        // run before it exists, each in one of its own.
        host_config.userns_mode = Some(if role == Role::App && order > 0 {
            format!("container:{owner}")
        } else {
            AUTO_USER_NAMESPACE.to_owned()
        });
    }
    if role != Role::App || order == 0 {
        // The pod's `hostAliases`, in the hosts file of each network namespace it has (the
        // joiners share the owner's).
        let aliases: Vec<String> = pcx
            .pod
            .host_aliases
            .iter()
            .flatten()
            .flat_map(|a| {
                a.hostnames
                    .iter()
                    .flatten()
                    .map(move |h| format!("{h}:{}", a.ip))
            })
            .collect();
        host_config.extra_hosts = (!aliases.is_empty()).then_some(aliases);
    }
    if role == Role::App && order == 0 {
        host_config.network_mode = Some(pcx.network.to_owned());
        let loopback = || PortBinding {
            host_ip: Some("127.0.0.1".into()),
            host_port: Some(String::new()),
        };
        let bindings = pcx
            .ports
            .iter()
            .map(|p| (p.clone(), Some(vec![loopback()])));
        host_config.port_bindings = Some(bindings.collect());
        body.exposed_ports = Some(pcx.ports.to_vec());
        body.hostname = Some(ws.to_owned());
        let endpoint = EndpointSettings {
            aliases: Some(vec![ws.to_owned()]),
            ..Default::default()
        };
        body.networking_config = Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(pcx.network.to_owned(), endpoint)])),
        });
    } else if role == Role::App {
        host_config.network_mode = Some(format!("container:{owner}"));
    } else {
        host_config.network_mode = Some(pcx.network.to_owned());
    }
    Ok(ContainerPlan {
        role,
        name: c.name.clone(),
        engine_name: container_name(ws, role, &c.name),
        order,
        pull_policy: c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| "IfNotPresent".into()),
        body,
        image_user,
        post_start: post_start_hook(c)?,
    })
}

/// A container's `postStart` hook: an exec hook runs as the kubelet runs it (`start`); an
/// HTTP, TCP or sleep hook is refused by name rather than skipped.
fn post_start_hook(c: &Container) -> Result<Option<Vec<String>>, PlanError> {
    let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
        return Ok(None);
    };
    match &hook.exec {
        Some(exec)
            if hook.http_get.is_none() && hook.tcp_socket.is_none() && hook.sleep.is_none() =>
        {
            Ok(exec.command.clone().filter(|c| !c.is_empty()))
        }
        _ => Err(spec_err(format!(
            "container {:?}: only an exec postStart hook is supported on the container engine",
            c.name
        ))),
    }
}

/// The filler of the shared tools volume: filled once for every workspace, by root (on
/// Docker a new volume is root's), with no capability and no network, every file left
/// readable by all.
fn tools_plan(pcx: &PodContext<'_>, init: &Container) -> Result<ToolsPlan, PlanError> {
    let security = pcx.pod.security_context.as_ref();
    let cx = pcx.plan;
    let (mut body, _) = container_body(init, security, pcx.sources, cx.files_dir, pcx.env, None)?;
    body.user = Some("0:0".into());
    let host_config = body.host_config.get_or_insert_with(Default::default);
    host_config.network_mode = Some("none".into());
    let image = init.image.clone().unwrap_or_default();
    body.labels = Some(HashMap::from([(TOOLS_IMAGE_LABEL.into(), image.clone())]));
    Ok(ToolsPlan {
        volume: tools_volume_name(&image),
        image,
        body,
    })
}

/// The pod's hash: what the containers are created from and the volumes they mount, not the
/// contents of mounted files (those are rewritten in place, as Kubernetes updates Secret
/// volumes in place) nor the values of variables from objects (`from_objects`, one set per
/// container: see `object_env_names`).
fn pod_hash(
    containers: &[ContainerPlan],
    from_objects: &[BTreeSet<String>],
    volumes: &BTreeMap<String, String>,
) -> Result<String, PlanError> {
    let mut hasher = Sha256::new();
    let none = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        let masked = from_objects.get(i).unwrap_or(&none);
        let mut body = c.body.clone();
        if let Some(env) = &mut body.env {
            for e in env.iter_mut() {
                let name = e.split_once('=').map_or(e.as_str(), |(n, _)| n);
                if masked.contains(name) {
                    *e = name.to_owned();
                }
            }
        }
        let v = serde_json::to_value(&body).map_err(|e| spec_err(e.to_string()))?;
        hasher.update(c.role.label());
        hasher.update([0]);
        hasher.update(&c.engine_name);
        hasher.update([0]);
        hasher.update(canonical_json(&v));
        hasher.update([0]);
        if let Some(hook) = &c.post_start {
            hasher.update(canonical_json(&serde_json::json!(hook)));
            hasher.update([0]);
        }
    }
    for (engine, claim) in volumes {
        hasher.update(format!("volume {engine} {claim}\0"));
    }
    Ok(hex::encode(&hasher.finalize()[..12]))
}

/// The hash of the values `pod_hash` leaves out: compared when a stopped pod starts.
fn objects_env_hash(containers: &[ContainerPlan], from_objects: &[BTreeSet<String>]) -> String {
    let mut hasher = Sha256::new();
    for (c, names) in containers.iter().zip(from_objects) {
        hasher.update(&c.engine_name);
        hasher.update([0]);
        for e in c.body.env.iter().flatten() {
            let name = e.split_once('=').map_or(e.as_str(), |(n, _)| n);
            if names.contains(name) {
                hasher.update(e);
                hasher.update([0]);
            }
        }
    }
    hex::encode(&hasher.finalize()[..12])
}

/// A container's labels: the workspace's, the pod hash, its role, name and order, and on the
/// network's owner the published ports.
fn container_labels(
    cx: &PlanContext<'_>,
    c: &ContainerPlan,
    hash: &str,
    ports: &[String],
) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = cx
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(POD_HASH_LABEL.into(), hash.to_owned());
    labels.insert(ROLE_LABEL.into(), c.role.label().into());
    labels.insert(CONTAINER_LABEL.into(), c.name.clone());
    labels.insert(ORDER_LABEL.into(), c.order.to_string());
    if c.role == Role::App && c.order == 0 {
        labels.insert(PORTS_LABEL.into(), ports.join(","));
    }
    labels
}

/// What the extended resources container `c` asks for (`nvidia.com/gpu: 1` in its limits,
/// or requests when it has no limit for them) add to it: the host's CDI devices of that kind.
/// Only a workspace's pod gets them, by its machine class (an admin's choice): a pod from
/// Git asking for one is refused, so a GitOps repository cannot reach the host's devices.
fn devices(c: &Container, cdi: &CdiDevices, from_git: bool) -> Result<cdi::Injected, PlanError> {
    let mut out = cdi::Injected::default();
    let Some(r) = c.resources.as_ref() else {
        return Ok(out);
    };
    let mut wanted: BTreeMap<&str, &str> = BTreeMap::new();
    for list in [r.requests.as_ref(), r.limits.as_ref()]
        .into_iter()
        .flatten()
    {
        for (name, q) in list {
            // Only vendors' resources: `cpu`, `memory`, `ephemeral-storage`, `hugepages-…`
            // are the engine's own limits.
            if name.contains('/') && !name.starts_with("kubernetes.io/") {
                wanted.insert(name, &q.0);
            }
        }
    }
    if let (true, Some(kind)) = (from_git, wanted.keys().next()) {
        return Err(PlanError::Spec(format!(
            "container {:?} asks for {kind}: on the container engine only a workspace's machine class gives devices, never a pod from Git",
            c.name
        )));
    }
    for (kind, count) in wanted {
        let count: u32 = count.parse().map_err(|_| {
            PlanError::Spec(format!(
                "container {:?}: {kind} must be a whole number of devices, not {count:?}",
                c.name
            ))
        })?;
        if count > 0 {
            cdi.inject(kind, count, &mut out)
                .map_err(|e| PlanError::Spec(format!("container {:?}: {e}", c.name)))?;
        }
    }
    Ok(out)
}
