//! The parts of a devfile beyond the workspace's own containers: `image` and
//! `kubernetes`/`openshift` components, `container-overrides`, and composite commands.
//!
//! Warren acts on these on demand (`warren ws run` of an `apply` or `composite` command);
//! building or deploying them at workspace start is refused until the runtimes can do it,
//! with a message naming the component.

use super::raw::{RawComponent, RawImage, RawKubernetes};
use super::{features, unsupported, Errors};
use crate::model::*;
use crate::DevfileError;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Most bytes of an inlined manifest.
const MAX_INLINED_BYTES: usize = 256 << 10;

/// A path inside the project's sources (relative, no `..`), or an `http(s)` URL.
fn location_problem(s: &str) -> Option<&'static str> {
    if s.starts_with("https://") || s.starts_with("http://") {
        return None;
    }
    let rest = s
        .strip_prefix("${PROJECT_SOURCE}")
        .map(|r| r.trim_start_matches('/'))
        .unwrap_or(s);
    if s.trim().is_empty() {
        Some("must not be empty")
    } else if rest.starts_with('/') {
        Some("must be relative to the project's sources (or an http(s) URL), not an absolute path")
    } else if rest.split('/').any(|p| p == "..") || rest.contains('\0') {
        Some("must stay inside the project's sources: `..` is not allowed")
    } else if s.contains("://") {
        Some("only http and https URLs can be fetched")
    } else {
        None
    }
}

/// A name a Dockerfile's `FROM … AS <name>` can give.
fn is_stage_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

pub(super) fn image(
    c: &RawComponent,
    im: &RawImage,
    path: &str,
    errors: &mut Errors,
) -> Option<ImageComponent> {
    let p = format!("{path}.image");
    if im.image_name.trim().is_empty() {
        errors.push(DevfileError::new(
            format!("{p}.imageName"),
            "must not be empty",
        ));
    } else if im
        .image_name
        .chars()
        .any(|ch| ch.is_whitespace() || ch.is_control())
    {
        errors.push(DevfileError::new(
            format!("{p}.imageName"),
            format!(
                "{:?} is not an image name (no spaces or control characters)",
                im.image_name
            ),
        ));
    }
    let features = features::read(c.attributes.as_ref(), path, errors);
    let base_image = features.as_ref().and_then(|f| f.base_image.as_ref());
    if let (Some(base), Some(_)) = (base_image, &im.dockerfile) {
        errors.push(DevfileError::new(
            format!("{p}.dockerfile"),
            format!("component {:?}: the image is built either from a Dockerfile or on top of {base}, not both", c.name),
        ));
        return None;
    }
    if base_image.is_some() {
        if im.auto_build != Some(true) {
            errors.push(DevfileError::new(
                format!("{p}.autoBuild"),
                format!("component {:?}: a dev container's image is built at the workspace's start (`autoBuild: true`)", c.name),
            ));
        }
        return Some(ImageComponent {
            name: c.name.clone(),
            image_name: im.image_name.clone(),
            dockerfile: String::new(),
            build_context: ".".into(),
            args: vec![],
            root_required: false,
            auto_build: true,
            target: None,
            features,
        });
    }
    let Some(df) = &im.dockerfile else {
        errors.push(DevfileError::new(
            format!("{p}.dockerfile"),
            format!(
                "component {:?}: an image component needs a dockerfile",
                c.name
            ),
        ));
        return None;
    };
    let dp = format!("{p}.dockerfile");
    if df.git.is_some() || df.devfile_registry.is_some() {
        let which = if df.git.is_some() {
            "git"
        } else {
            "devfileRegistry"
        };
        errors.push(unsupported(
            format!("{dp}.{which}"),
            &format!("component {:?}: a Dockerfile from `{which}` is", c.name),
            "Warren builds from a Dockerfile in the project's sources or at an http(s) `uri`",
        ));
        return None;
    }
    let uri = df.uri.clone().unwrap_or_default();
    if let Some(why) = location_problem(&uri) {
        errors.push(DevfileError::new(
            format!("{dp}.uri"),
            format!("{uri:?} {why}"),
        ));
    }
    let context = df.build_context.clone().unwrap_or_else(|| ".".into());
    if context.starts_with("http://") || context.starts_with("https://") {
        errors.push(DevfileError::new(
            format!("{dp}.buildContext"),
            "the build context must be a directory of the project's sources, not a URL",
        ));
    } else if let Some(why) = location_problem(&context) {
        errors.push(DevfileError::new(
            format!("{dp}.buildContext"),
            format!("{context:?} {why}"),
        ));
    }
    let image = ImageComponent {
        name: c.name.clone(),
        image_name: im.image_name.clone(),
        dockerfile: uri,
        build_context: context,
        args: df.args.clone().unwrap_or_default(),
        root_required: df.root_required.unwrap_or(false),
        auto_build: im.auto_build == Some(true),
        target: None,
        features,
    };
    let mut image = image;
    if let Some(t) = c
        .attributes
        .as_ref()
        .and_then(|a| a.get(crate::BUILD_TARGET_ATTRIBUTE))
    {
        match t.as_str() {
            Some(t) if is_stage_name(t) => image.target = Some(t.to_owned()),
            _ => errors.push(DevfileError::new(
                format!("{path}.attributes.{}", crate::BUILD_TARGET_ATTRIBUTE),
                format!("{t} is not a Dockerfile stage name (letters, digits, `-`, `_` and `.`)"),
            )),
        }
    }
    if image.features.is_some() && !image.auto_build {
        errors.push(DevfileError::new(
            format!("{p}.autoBuild"),
            format!("component {:?}: Features are installed in a build at the workspace's start (`autoBuild: true`)", c.name),
        ));
    }
    // Checked here, not when the workspace starts: a build at start has no one to tell.
    if image.auto_build {
        if let Err(why) = image.build_paths() {
            errors.push(DevfileError::new(format!("{p}.autoBuild"), why));
        }
    }
    Some(image)
}

pub(super) fn manifest(
    c: &RawComponent,
    k: &RawKubernetes,
    kind: &'static str,
    path: &str,
    errors: &mut Errors,
    notices: &mut Vec<Notice>,
) -> Option<ManifestComponent> {
    let p = format!("{path}.{kind}");
    if k.deploy_by_default == Some(true) {
        errors.push(unsupported(
            format!("{p}.deployByDefault"),
            &format!("component {:?}: deploying a {kind} component at workspace start is", c.name),
            "Warren applies manifests on demand only; remove `deployByDefault` and run an apply command of it with `warren ws run`",
        ));
    }
    let source = match (&k.inlined, &k.uri) {
        (Some(text), None) => {
            if text.len() > MAX_INLINED_BYTES {
                errors.push(DevfileError::new(
                    format!("{p}.inlined"),
                    format!(
                        "{} bytes; at most {MAX_INLINED_BYTES} are allowed",
                        text.len()
                    ),
                ));
            } else if let Err(why) = check_objects(text) {
                errors.push(DevfileError::new(format!("{p}.inlined"), why));
            }
            ManifestSource::Inlined(text.clone())
        }
        (None, Some(uri)) => {
            if let Some(why) = location_problem(uri) {
                errors.push(DevfileError::new(
                    format!("{p}.uri"),
                    format!("{uri:?} {why}"),
                ));
            }
            ManifestSource::Uri(uri.clone())
        }
        _ => {
            errors.push(DevfileError::new(
                p.clone(),
                format!(
                    "component {:?}: exactly one of `inlined` and `uri` is needed",
                    c.name
                ),
            ));
            return None;
        }
    };
    let mut endpoints = Vec::new();
    for (j, e) in k.endpoints.iter().flatten().enumerate() {
        let Some(port) = u16::try_from(e.target_port).ok().filter(|p| *p > 0) else {
            errors.push(DevfileError::new(
                format!("{p}.endpoints[{j}].targetPort"),
                format!("{} is not a port number (1 to 65535)", e.target_port),
            ));
            continue;
        };
        endpoints.push(DevfileEndpoint {
            name: e.name.clone(),
            target_port: port,
            exposure: e.exposure.unwrap_or(Exposure::Public),
            protocol: e.protocol.unwrap_or(Protocol::Http),
            path: e.path.clone(),
            secure: e.secure.unwrap_or(false),
            visibility: None,
        });
    }
    if !endpoints.is_empty() {
        let names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
        notices.push(Notice {
            path: format!("{p}.endpoints"),
            message: format!(
                "component {:?}: endpoints of applied objects ({}) are not routed by Warren; reach them inside the namespace or with `warren ws port-forward` to a workspace container",
                c.name,
                names.join(", ")
            ),
        });
    }
    Some(ManifestComponent {
        name: c.name.clone(),
        kind: kind.into(),
        source,
        endpoints,
    })
}

/// Every document of `text` is an object with `apiVersion`, `kind` and `metadata.name`.
pub fn check_objects(text: &str) -> Result<usize, String> {
    use serde::Deserialize;
    let mut n = 0;
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v =
            Value::deserialize(doc).map_err(|e| format!("document {}: not YAML: {e}", i + 1))?;
        if v.is_null() {
            continue;
        }
        let o = v
            .as_object()
            .ok_or_else(|| format!("document {}: not an object", i + 1))?;
        for key in ["apiVersion", "kind"] {
            if o.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(format!("document {}: `{key}` is missing", i + 1));
            }
        }
        let name = o
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str);
        if name.is_none_or(str::is_empty) {
            return Err(format!("document {}: `metadata.name` is missing", i + 1));
        }
        n += 1;
    }
    if n == 0 {
        return Err("holds no object".into());
    }
    Ok(n)
}

/// Resource overrides of `container-overrides` (the only part Warren honours: the security
/// context, ports and the rest are Warren's to set).
#[derive(Default)]
pub(super) struct ResourceOverrides {
    pub cpu_limit: Option<String>,
    pub cpu_request: Option<String>,
    pub memory_limit: Option<String>,
    pub memory_request: Option<String>,
}

pub(super) fn container_overrides(
    attrs: Option<&Map<String, Value>>,
    path: &str,
    errors: &mut Errors,
) -> ResourceOverrides {
    let mut out = ResourceOverrides::default();
    let Some(v) = attrs.and_then(|a| a.get("container-overrides")) else {
        return out;
    };
    let p = format!("{path}.container-overrides");
    let Some(o) = v.as_object() else {
        errors.push(DevfileError::new(
            p,
            "must be an object (a partial container spec)",
        ));
        return out;
    };
    for (key, value) in o {
        if key != "resources" {
            errors.push(unsupported(
                format!("{p}.{key}"),
                &format!("overriding the container's `{key}` is"),
                "Warren sets the container spec itself (security context, ports, probes); only `resources` may be overridden",
            ));
            continue;
        }
        let Some(r) = value.as_object() else {
            errors.push(DevfileError::new(
                format!("{p}.resources"),
                "must be an object",
            ));
            continue;
        };
        for (which, v) in r {
            let rp = format!("{p}.resources.{which}");
            let Some(m) = v
                .as_object()
                .filter(|_| which == "limits" || which == "requests")
            else {
                errors.push(DevfileError::new(
                    rp,
                    "only `limits` and `requests` objects are allowed",
                ));
                continue;
            };
            for (res, q) in m {
                let text = match q {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => {
                        errors.push(DevfileError::new(
                            format!("{rp}.{res}"),
                            "must be a quantity",
                        ));
                        continue;
                    }
                };
                let slot = match (which.as_str(), res.as_str()) {
                    ("limits", "cpu") => &mut out.cpu_limit,
                    ("requests", "cpu") => &mut out.cpu_request,
                    ("limits", "memory") => &mut out.memory_limit,
                    ("requests", "memory") => &mut out.memory_request,
                    _ => {
                        errors.push(unsupported(
                            format!("{rp}.{res}"),
                            &format!("the resource {res:?} is"),
                            "Warren sizes workspaces by cpu and memory only",
                        ));
                        continue;
                    }
                };
                *slot = Some(text);
            }
        }
    }
    out
}

/// Checks a composite's references: each exists, none is the composite itself, and no
/// chain of composites loops or nests deeper than [`MAX_COMPOSITE_DEPTH`].
pub(super) fn check_composites(
    commands: &[Command],
    paths: &BTreeMap<String, String>,
    errors: &mut Errors,
) {
    let by_id: BTreeMap<&str, &Command> = commands.iter().map(|c| (c.id.as_str(), c)).collect();
    for c in commands {
        let CommandAction::Composite { commands: list, .. } = &c.action else {
            continue;
        };
        let p = paths.get(&c.id).cloned().unwrap_or_default();
        if list.is_empty() {
            errors.push(DevfileError::new(
                format!("{p}.composite.commands"),
                "lists no command",
            ));
        }
        for (j, id) in list.iter().enumerate() {
            if !by_id.contains_key(id.as_str()) {
                errors.push(DevfileError::new(
                    format!("{p}.composite.commands[{j}]"),
                    format!("refers to command {id:?}, which the devfile does not define"),
                ));
            }
        }
        // Depth-first walk from this composite; a path that comes back to it is a cycle.
        fn walk<'a>(
            by_id: &BTreeMap<&str, &'a Command>,
            id: &'a str,
            stack: &mut Vec<&'a str>,
        ) -> Result<(), String> {
            if stack.contains(&id) {
                stack.push(id);
                return Err(format!(
                    "the composite commands form a cycle: {}",
                    stack.join(" → ")
                ));
            }
            if stack.len() > MAX_COMPOSITE_DEPTH {
                return Err(format!(
                    "composite commands nest deeper than {MAX_COMPOSITE_DEPTH}"
                ));
            }
            let Some(Command {
                action: CommandAction::Composite { commands, .. },
                ..
            }) = by_id.get(id)
            else {
                return Ok(());
            };
            stack.push(id);
            for c in commands {
                walk(by_id, c, stack)?;
            }
            stack.pop();
            Ok(())
        }
        if let Err(why) = walk(&by_id, &c.id, &mut Vec::new()) {
            errors.push(DevfileError::new(format!("{p}.composite.commands"), why));
        }
    }
}
