//! Stage 5, semantics, for container components: each container's resources, sources,
//! endpoints (names unique in the devfile, ports unique across the pod), volume mounts,
//! environment and annotations, and the volumes (see `semantics`).

use super::semantics::Kind;
use super::*;

/// The volumes, and the containers with their details checked; endpoint names and ports
/// are unique across the containers (they share the pod's network).
pub(super) fn containers(
    raw: &RawDevfile,
    kinds: &BTreeMap<String, Kind>,
    init_only: &BTreeSet<String>,
    errors: &mut Errors,
) -> (Vec<Container>, Vec<Volume>) {
    let mut containers = Vec::new();
    let mut volumes = Vec::new();
    let mut endpoint_names: BTreeMap<String, String> = BTreeMap::new();
    let mut ports: BTreeMap<u16, (String, String)> = BTreeMap::new();
    for (i, c) in raw.components.iter().enumerate() {
        let path = format!("components[{i}]");
        if let Some(v) = &c.volume {
            quantity(&v.size, format!("{path}.volume.size"), false, errors);
            volumes.push(Volume {
                name: c.name.clone(),
                size: v.size.clone(),
                ephemeral: v.ephemeral.unwrap_or(false),
            });
        }
        let Some(ct) = &c.container else { continue };
        containers.push(container(
            c,
            ct,
            &path,
            kinds,
            init_only,
            &mut endpoint_names,
            &mut ports,
            errors,
        ));
    }
    (containers, volumes)
}

/// One container component: its resources, sources, endpoints, mounts, environment,
/// annotations and whether it is marked the main one.
#[allow(clippy::too_many_arguments)]
fn container(
    c: &RawComponent,
    ct: &RawContainer,
    path: &str,
    kinds: &BTreeMap<String, Kind>,
    init_only: &BTreeSet<String>,
    endpoint_names: &mut BTreeMap<String, String>,
    ports: &mut BTreeMap<u16, (String, String)>,
    errors: &mut Errors,
) -> Container {
    let (cpu_request, cpu_limit, memory_request, memory_limit) = resources(c, ct, path, errors);
    let cp = format!("{path}.container");
    let source_mapping = ct
        .source_mapping
        .clone()
        .unwrap_or_else(|| "/projects".into());
    if let Some(why) = mount_path_problem(&source_mapping) {
        errors.push(unsupported(
            format!("{cp}.sourceMapping"),
            &format!("sourceMapping {source_mapping:?} is"),
            why,
        ));
    }
    let endpoints = endpoints(c, ct, &cp, endpoint_names, ports, errors);
    let (mount_sources, volume_mounts) = volume_mounts(ct, &cp, &source_mapping, kinds, errors);
    let env = env_list(
        ct.env.as_ref().map(|v| {
            v.iter()
                .map(|x| RawEnv {
                    name: x.name.clone(),
                    value: x.value.clone(),
                })
                .collect()
        }),
        &format!("{cp}.env"),
        false,
        errors,
    );
    let (deployment_annotations, service_annotations) = match &ct.annotation {
        Some(a) => (
            a.deployment.clone().unwrap_or_default(),
            a.service.clone().unwrap_or_default(),
        ),
        None => Default::default(),
    };
    check_annotations(
        &deployment_annotations,
        &format!("{cp}.annotation.deployment"),
        errors,
    );
    check_annotations(
        &service_annotations,
        &format!("{cp}.annotation.service"),
        errors,
    );
    let main = match is_main_attr(c.attributes.as_ref()) {
        None => false,
        Some(Ok(b)) => b,
        Some(Err(())) => {
            errors.push(DevfileError::new(
                format!("{path}.attributes.warren.dev/main"),
                "expected true or false",
            ));
            false
        }
    };
    let healthcheck = healthcheck(c.attributes.as_ref(), path, errors);
    let isolation = isolation(c.attributes.as_ref(), path, errors);
    Container {
        name: c.name.clone(),
        image: ct.image.clone(),
        command: ct.command.clone().unwrap_or_default(),
        args: ct.args.clone().unwrap_or_default(),
        env,
        cpu_request: cpu_request.clone(),
        cpu_limit: cpu_limit.clone(),
        memory_request: memory_request.clone(),
        memory_limit: memory_limit.clone(),
        mount_sources,
        source_mapping,
        endpoints,
        volume_mounts,
        deployment_annotations,
        service_annotations,
        init_only: init_only.contains(&c.name),
        main,
        healthcheck,
        isolation,
    }
}

/// The component's [`crate::ISOLATION_ATTRIBUTE`], each value checked and spelled as the
/// engines spell it (whether the agent allows it is the renderer's to say).
fn isolation(
    attrs: Option<&Map<String, Value>>,
    path: &str,
    errors: &mut Errors,
) -> IsolationExceptions {
    let Some(v) = attrs.and_then(|a| a.get(crate::ISOLATION_ATTRIBUTE)) else {
        return IsolationExceptions::default();
    };
    let at = format!("{path}.attributes.{}", crate::ISOLATION_ATTRIBUTE);
    let asked: IsolationExceptions = match serde_json::from_value(v.clone()) {
        Ok(x) => x,
        Err(e) => {
            errors.push(DevfileError::new(
                at,
                format!("expected {{capAdd: [capability…], securityOpt: [option…]}}: {e}"),
            ));
            return IsolationExceptions::default();
        }
    };
    let mut out = IsolationExceptions::default();
    for (i, c) in asked.cap_add.iter().enumerate() {
        match warren_types::isolation::capability(c) {
            Ok(c) if !out.cap_add.iter().any(|x| x == c) => out.cap_add.push(c.to_owned()),
            Ok(_) => {}
            Err(e) => errors.push(DevfileError::new(format!("{at}.capAdd[{i}]"), e)),
        }
    }
    for (i, o) in asked.security_opt.iter().enumerate() {
        match warren_types::isolation::SecurityOption::parse(o) {
            Ok(o) if !out.security_opt.iter().any(|x| x == o.as_str()) => {
                out.security_opt.push(o.as_str().to_owned())
            }
            Ok(_) => {}
            Err(e) => errors.push(DevfileError::new(format!("{at}.securityOpt[{i}]"), e)),
        }
    }
    out
}

/// Most words of a healthcheck, and most bytes of each.
const MAX_HEALTHCHECK_WORDS: usize = 64;
const MAX_HEALTHCHECK_WORD_BYTES: usize = 4096;
/// The longest any of a healthcheck's times may be (an hour).
const MAX_HEALTHCHECK_SECONDS: u32 = 3600;

/// The component's [`crate::HEALTHCHECK_ATTRIBUTE`], checked.
fn healthcheck(
    attrs: Option<&Map<String, Value>>,
    path: &str,
    errors: &mut Errors,
) -> Option<Healthcheck> {
    let v = attrs?.get(crate::HEALTHCHECK_ATTRIBUTE)?;
    let at = format!("{path}.attributes.{}", crate::HEALTHCHECK_ATTRIBUTE);
    let h: Healthcheck = match serde_json::from_value(v.clone()) {
        Ok(h) => h,
        Err(e) => {
            errors.push(DevfileError::new(
                at,
                format!("expected {{test: [program, args…], intervalSeconds, timeoutSeconds, retries, startPeriodSeconds}}: {e}"),
            ));
            return None;
        }
    };
    let mut bad =
        |field: &str, why: String| errors.push(DevfileError::new(format!("{at}.{field}"), why));
    if h.test.is_empty() || h.test[0].is_empty() {
        bad("test", "must name the program to run".into());
    }
    if h.test.len() > MAX_HEALTHCHECK_WORDS
        || h.test
            .iter()
            .any(|w| w.len() > MAX_HEALTHCHECK_WORD_BYTES || w.contains('\0'))
    {
        bad(
            "test",
            format!("at most {MAX_HEALTHCHECK_WORDS} words of at most {MAX_HEALTHCHECK_WORD_BYTES} bytes, without NUL"),
        );
    }
    for (field, value, least) in [
        ("intervalSeconds", h.interval_seconds, 1),
        ("timeoutSeconds", h.timeout_seconds, 1),
        ("retries", h.retries, 1),
        ("startPeriodSeconds", h.start_period_seconds, 0),
    ] {
        if value < least || value > MAX_HEALTHCHECK_SECONDS {
            bad(
                field,
                format!("{value} is not within {least}..={MAX_HEALTHCHECK_SECONDS}"),
            );
        }
    }
    Some(h)
}

/// The container's resources (its `container-overrides` over its own), each checked and
/// within what runtimes accept; and what it may not be (an empty image, a dedicated pod).
fn resources(
    c: &RawComponent,
    ct: &RawContainer,
    path: &str,
    errors: &mut Errors,
) -> (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let ov =
        outer::container_overrides(c.attributes.as_ref(), &format!("{path}.attributes"), errors);
    let cpu_limit = ov.cpu_limit.or_else(|| ct.cpu_limit.clone());
    let cpu_request = ov.cpu_request.or_else(|| ct.cpu_request.clone());
    let memory_limit = ov.memory_limit.or_else(|| ct.memory_limit.clone());
    let memory_request = ov.memory_request.or_else(|| ct.memory_request.clone());
    let cp = format!("{path}.container");
    if ct.dedicated_pod == Some(true) {
        errors.push(unsupported(
            format!("{cp}.dedicatedPod"),
            &format!("component {:?}: `dedicatedPod` is", c.name),
            "every container of a Warren workspace runs in the workspace's one pod",
        ));
    }
    if ct.image.trim().is_empty() {
        errors.push(DevfileError::new(
            format!("{cp}.image"),
            "the image must not be empty",
        ));
    }
    let cpu_req = quantity(&cpu_request, format!("{cp}.cpuRequest"), true, errors);
    let cpu_lim = quantity(&cpu_limit, format!("{cp}.cpuLimit"), true, errors);
    let mem_req = quantity(
        &memory_request,
        format!("{cp}.memoryRequest"),
        false,
        errors,
    );
    let mem_lim = quantity(&memory_limit, format!("{cp}.memoryLimit"), false, errors);
    // Below these, container runtimes refuse to create the container (runc: memory under
    // 6 MiB; Docker and Podman: under 0.01 CPU) with an error naming none of this.
    if mem_lim.is_some_and(|m| m < MIN_MEMORY_LIMIT_BYTES) {
        errors.push(DevfileError::new(
            format!("{cp}.memoryLimit"),
            format!(
                "{} is below 6Mi, the least memory a container can be given",
                memory_limit.as_deref().unwrap_or_default()
            ),
        ));
    }
    if cpu_lim.is_some_and(|c| c < MIN_CPU_LIMIT_MILLIS) {
        errors.push(DevfileError::new(
            format!("{cp}.cpuLimit"),
            format!(
                "{} is below 10m, the least CPU a container can be given",
                cpu_limit.as_deref().unwrap_or_default()
            ),
        ));
    }
    if matches!((cpu_req, cpu_lim), (Some(r), Some(l)) if r > l) {
        errors.push(DevfileError::new(
            format!("{cp}.cpuRequest"),
            format!(
                "cpuRequest {} is more than cpuLimit {}",
                cpu_request.as_deref().unwrap_or_default(),
                cpu_limit.as_deref().unwrap_or_default()
            ),
        ));
    }
    if matches!((mem_req, mem_lim), (Some(r), Some(l)) if r > l) {
        errors.push(DevfileError::new(
            format!("{cp}.memoryRequest"),
            format!(
                "memoryRequest {} is more than memoryLimit {}",
                memory_request.as_deref().unwrap_or_default(),
                memory_limit.as_deref().unwrap_or_default()
            ),
        ));
    }
    (cpu_request, cpu_limit, memory_request, memory_limit)
}

/// The container's endpoints: names unique in the devfile, ports unique across containers.
fn endpoints(
    c: &RawComponent,
    ct: &RawContainer,
    cp: &str,
    endpoint_names: &mut BTreeMap<String, String>,
    ports: &mut BTreeMap<u16, (String, String)>,
    errors: &mut Errors,
) -> Vec<DevfileEndpoint> {
    let mut endpoints = Vec::new();
    for (j, e) in ct.endpoints.iter().flatten().enumerate() {
        let ep = format!("{cp}.endpoints[{j}]");
        if let Some(other) = endpoint_names.insert(e.name.clone(), c.name.clone()) {
            errors.push(DevfileError::new(
                format!("{ep}.name"),
                format!(
                    "endpoint name {:?} is already used in component {other:?}",
                    e.name
                ),
            ));
        }
        check_reserved(&e.name, "endpoint", format!("{ep}.name"), errors);
        if e.annotation.is_some() {
            errors.push(unsupported(
                format!("{ep}.annotation"),
                &format!(
                    "endpoint {:?}: `annotation` (for an Ingress or Route) is",
                    e.name
                ),
                "Warren exposes endpoints through its own proxy, not an Ingress or Route",
            ));
        }
        let visibility = visibility_of(e, &ep, errors);
        let port = match u16::try_from(e.target_port) {
            Ok(p) if p > 0 => p,
            _ => {
                errors.push(DevfileError::new(
                    format!("{ep}.targetPort"),
                    format!("{} is not a port number (1 to 65535)", e.target_port),
                ));
                continue;
            }
        };
        // Endpoints of one container may share a port (the specification allows it:
        // e.g. two paths of one server); containers of one pod share its network, so
        // two containers cannot.
        match ports.get(&port) {
            Some((container, other)) if *container != c.name => {
                errors.push(DevfileError::new(
                    format!("{ep}.targetPort"),
                    format!(
                        "port {port} is already used by endpoint {other:?} of container {container:?}; \
                         the containers of a workspace share one network"
                    ),
                ));
            }
            Some(_) => {}
            None => {
                ports.insert(port, (c.name.clone(), e.name.clone()));
            }
        }
        endpoints.push(DevfileEndpoint {
            name: e.name.clone(),
            target_port: port,
            exposure: e.exposure.unwrap_or(Exposure::Public),
            protocol: e.protocol.unwrap_or(Protocol::Http),
            // The specification does not require the leading `/` URLs need.
            path: e.path.as_ref().filter(|p| !p.is_empty()).map(|p| {
                if p.starts_with('/') {
                    p.clone()
                } else {
                    format!("/{p}")
                }
            }),
            secure: e.secure.unwrap_or(false),
            visibility,
        });
    }
    endpoints
}

/// The endpoint's `warren.dev/visibility` attribute: one of the levels, and only on an
/// endpoint the proxy serves (`exposure: public`).
fn visibility_of(
    e: &super::raw::RawEndpoint,
    ep: &str,
    errors: &mut Errors,
) -> Option<warren_types::sharing::PortVisibility> {
    use warren_types::sharing::VISIBILITY_ATTRIBUTE;
    let value = e.attributes.as_ref()?.get(VISIBILITY_ATTRIBUTE)?;
    let path = format!("{ep}.attributes.{VISIBILITY_ATTRIBUTE}");
    let parsed = match value.as_str() {
        Some(s) => s.parse(),
        None => Err(format!("{value} is not a string")),
    };
    match parsed {
        Ok(v) if e.exposure.unwrap_or(Exposure::Public) == Exposure::Public => Some(v),
        Ok(_) => {
            errors.push(DevfileError::new(
                path,
                format!(
                    "endpoint {:?} is not exposed (`exposure: {}`): only a public endpoint is reached through Warren's proxy, so only it has a visibility",
                    e.name,
                    e.exposure.unwrap_or(Exposure::Public).as_str()
                ),
            ));
            None
        }
        Err(why) => {
            errors.push(DevfileError::new(path, why));
            None
        }
    }
}

/// Whether the container mounts the sources, and its volume mounts: of volume components,
/// at distinct paths that Warren may use.
fn volume_mounts(
    ct: &RawContainer,
    cp: &str,
    source_mapping: &str,
    kinds: &BTreeMap<String, Kind>,
    errors: &mut Errors,
) -> (bool, Vec<VolumeMount>) {
    let mut mount_paths: BTreeSet<String> = BTreeSet::new();
    let mount_sources = ct.mount_sources.unwrap_or(true);
    if mount_sources {
        mount_paths.insert(normalize_path(source_mapping));
    }
    let mut volume_mounts = Vec::new();
    for (j, m) in ct.volume_mounts.iter().flatten().enumerate() {
        let mp = format!("{cp}.volumeMounts[{j}]");
        match kinds.get(&m.name) {
            Some(Kind::Volume) => {}
            Some(_) => errors.push(DevfileError::new(
                format!("{mp}.name"),
                format!("{:?} is not a volume component", m.name),
            )),
            None => errors.push(DevfileError::new(
                format!("{mp}.name"),
                format!(
                    "refers to volume {:?}, which the devfile does not define",
                    m.name
                ),
            )),
        }
        let path = m.path.clone().unwrap_or_else(|| format!("/{}", m.name));
        if let Some(why) = mount_path_problem(&path) {
            errors.push(unsupported(
                format!("{mp}.path"),
                &format!("mount path {path:?} is"),
                why,
            ));
        } else if normalize_path(&path) == "/warren" || path.starts_with("/warren/") {
            errors.push(DevfileError::new(
                format!("{mp}.path"),
                format!("{path:?}: /warren is reserved for Warren"),
            ));
        } else if !mount_paths.insert(normalize_path(&path)) {
            errors.push(DevfileError::new(
                format!("{mp}.path"),
                format!("{path:?} is already a mount point in this container"),
            ));
        }
        volume_mounts.push(VolumeMount {
            name: m.name.clone(),
            path,
        });
    }
    (mount_sources, volume_mounts)
}
