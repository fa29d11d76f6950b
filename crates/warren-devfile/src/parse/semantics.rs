//! Stage 5, semantics: what a structurally valid devfile means to Warren, read in the order
//! its parts depend on each other — the schema version, the components, the commands, the
//! start events, notices of what Warren does not use, the projects, the containers and
//! volumes, the main container, the init-only containers. Every stage pushes its errors and
//! notices and none stops the others, so a user sees every problem at once; the order of the
//! stages is the order of the messages.

use super::containers::containers;
use super::*;

/// What a component is, as commands, events and mounts refer to it.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Container,
    Volume,
    Image,
    Manifest(&'static str),
}

/// The components by name and kind, with the image and manifest components read.
struct Components {
    kinds: BTreeMap<String, Kind>,
    images: Vec<ImageComponent>,
    manifests: Vec<ManifestComponent>,
}

/// The commands read, with the kind of each id.
struct Commands {
    list: Vec<Command>,
    kinds: BTreeMap<String, &'static str>,
    /// No composite command is broken (a cycle, an unknown member): events may expand them.
    composites_ok: bool,
}

/// The start events as leaf command ids, and the components preStart applies (which then
/// only run as init containers).
struct Events {
    pre_start: Vec<String>,
    post_start: Vec<String>,
    init_only: BTreeSet<String>,
}

pub(super) fn semantics(raw: RawDevfile, errors: &mut Errors) -> Option<Devfile> {
    check_version(&raw, errors);
    let mut notices = Vec::new();
    let components = components(&raw, errors, &mut notices);
    let commands = commands(&raw, &components.kinds, errors);
    let events = events(&raw, &commands, &components.kinds, errors, &mut notices);
    notice_unapplied(&raw, &commands.list, &components, &events, &mut notices);
    refused_and_unused(&raw, errors, &mut notices);
    let (devfile_projects, starter_projects) = projects_of(&raw, errors, &mut notices);
    let (mut containers, volumes) = containers(&raw, &components.kinds, &events.init_only, errors);
    let main = main_container(&raw, &mut containers, errors, &mut notices);
    check_init_only(
        &raw,
        &containers,
        &commands.list,
        &events.post_start,
        errors,
    );
    let main = main?;
    Some(Devfile {
        schema_version: raw.schema_version,
        metadata_name: raw.metadata.and_then(|m| m.name),
        variables: raw.variables,
        containers,
        volumes,
        commands: commands.list,
        pre_start: events.pre_start,
        post_start: events.post_start,
        main,
        projects: devfile_projects,
        starter_projects,
        notices,
        images: components.images,
        manifests: components.manifests,
        host_aliases: super::attributes::host_aliases(&raw.attributes, errors),
        editor: super::attributes::editor(&raw.attributes, errors),
        post_attach: Vec::new(),
        wait_for: None,
        prebuild: Vec::new(),
        host_requirements: super::attributes::host_requirements(&raw.attributes, errors),
    })
    .map(|mut d| {
        d.post_attach = super::attributes::post_attach(&raw.attributes, &d, errors);
        d.wait_for = super::attributes::wait_for(&raw.attributes, &d, errors);
        d.prebuild = super::attributes::prebuild(&raw.attributes, &d, errors);
        d
    })
}

/// The schema allows versions 2–9.x; Warren knows 2.0–2.3. Also the top-level attributes.
fn check_version(raw: &RawDevfile, errors: &mut Errors) {
    // Schema version: the schema allows 2–9.x; Warren knows 2.0–2.3.
    let supported_version = {
        let mut it = raw.schema_version.split(['.', '-', '+']);
        matches!(
            (it.next(), it.next()),
            (Some("2"), Some("0" | "1" | "2" | "3"))
        )
    };
    if !supported_version {
        errors.push(unsupported(
            "schemaVersion",
            &format!("schemaVersion {}", raw.schema_version),
            "Warren reads devfiles 2.0.0 to 2.3.x",
        ));
    }
    check_override_attributes(Some(&raw.attributes), "attributes", errors);
}

/// Each component: its name unique and not reserved, its type, its attributes.
fn components(raw: &RawDevfile, errors: &mut Errors, notices: &mut Vec<Notice>) -> Components {
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    let mut images = Vec::new();
    let mut manifests = Vec::new();
    for (i, c) in raw.components.iter().enumerate() {
        let path = format!("components[{i}]");
        if kinds.contains_key(&c.name) {
            errors.push(DevfileError::new(
                format!("{path}.name"),
                format!("component name {:?} is used more than once", c.name),
            ));
        }
        check_reserved(&c.name, "component", format!("{path}.name"), errors);
        let kind = if c.container.is_some() {
            Kind::Container
        } else if c.volume.is_some() {
            Kind::Volume
        } else if let Some(k) = &c.kubernetes {
            manifests.extend(outer::manifest(c, k, "kubernetes", &path, errors, notices));
            Kind::Manifest("kubernetes")
        } else if let Some(k) = &c.openshift {
            manifests.extend(outer::manifest(c, k, "openshift", &path, errors, notices));
            Kind::Manifest("openshift")
        } else if let Some(im) = &c.image {
            images.extend(outer::image(c, im, &path, errors));
            Kind::Image
        } else {
            errors.push(DevfileError::new(
                path.clone(),
                format!("component {:?} has no type (container, volume, image, kubernetes or openshift)", c.name),
            ));
            continue;
        };
        kinds.entry(c.name.clone()).or_insert(kind);
        // `container-overrides` of a container component are honoured (resources only).
        let own: Vec<&str> = if kind == Kind::Container {
            vec!["pod-overrides"]
        } else {
            OVERRIDE_ATTRIBUTES.to_vec()
        };
        check_override_attributes_of(
            c.attributes.as_ref(),
            &own,
            &format!("{path}.attributes"),
            errors,
        );
    }
    Components {
        kinds,
        images,
        manifests,
    }
}

/// Each command: its id unique and not reserved, its type, the component it names.
fn commands(raw: &RawDevfile, kinds: &BTreeMap<String, Kind>, errors: &mut Errors) -> Commands {
    let mut commands = Vec::new();
    let mut command_kinds: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut command_paths: BTreeMap<String, String> = BTreeMap::new();
    for (i, c) in raw.commands.iter().enumerate() {
        let path = format!("commands[{i}]");
        if command_kinds.contains_key(&c.id) {
            errors.push(DevfileError::new(
                format!("{path}.id"),
                format!("command id {:?} is used more than once", c.id),
            ));
        }
        command_paths
            .entry(c.id.clone())
            .or_insert_with(|| path.clone());
        check_reserved(&c.id, "command", format!("{path}.id"), errors);
        let refers = |component: &str, p: String, apply: bool, errors: &mut Errors| {
            let problem = match kinds.get(component) {
                None => Some(format!("refers to component {component:?}, which the devfile does not define")),
                Some(Kind::Container) => None,
                Some(Kind::Image | Kind::Manifest(_)) if apply => None,
                Some(Kind::Volume) => Some(format!(
                    "refers to {component:?}, a volume component; commands need a container component"
                )),
                Some(Kind::Image) => Some(format!(
                    "refers to {component:?}, an image component; only apply commands can build it, exec commands need a container component"
                )),
                Some(Kind::Manifest(k)) => Some(format!(
                    "refers to {component:?}, a {k} component; only apply commands can apply it, exec commands need a container component"
                )),
            };
            if let Some(problem) = problem {
                errors.push(DevfileError::new(p, problem));
            }
        };
        if let Some(e) = &c.exec {
            refers(
                &e.component,
                format!("{path}.exec.component"),
                false,
                errors,
            );
            let env = env_list(
                e.env.as_ref().map(|v| {
                    v.iter()
                        .map(|x| RawEnv {
                            name: x.name.clone(),
                            value: x.value.clone(),
                        })
                        .collect()
                }),
                &format!("{path}.exec.env"),
                true,
                errors,
            );
            command_kinds.entry(c.id.clone()).or_insert("exec");
            commands.push(Command {
                id: c.id.clone(),
                label: e.label.clone(),
                group: e.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Exec {
                    component: e.component.clone(),
                    command_line: e.command_line.clone(),
                    working_dir: e.working_dir.clone(),
                    env,
                },
            });
        } else if let Some(a) = &c.apply {
            refers(
                &a.component,
                format!("{path}.apply.component"),
                true,
                errors,
            );
            command_kinds.entry(c.id.clone()).or_insert("apply");
            commands.push(Command {
                id: c.id.clone(),
                label: a.label.clone(),
                group: a.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Apply {
                    component: a.component.clone(),
                },
            });
        } else if let Some(comp) = &c.composite {
            command_kinds.entry(c.id.clone()).or_insert("composite");
            commands.push(Command {
                id: c.id.clone(),
                label: comp.label.clone(),
                group: comp.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Composite {
                    commands: comp.commands.clone().unwrap_or_default(),
                    parallel: comp.parallel.unwrap_or(false),
                },
            });
        } else {
            errors.push(DevfileError::new(
                path.clone(),
                format!("command {:?} has no type (exec, apply or composite)", c.id),
            ));
        }
    }
    outer::check_composites(&commands, &command_paths, errors);
    let composites_ok = !errors
        .iter()
        .any(|e| e.path.contains(".composite.commands"));
    Commands {
        list: commands,
        kinds: command_kinds,
        composites_ok,
    }
}

/// The start events: composites stand for their exec and apply commands, run one after
/// another; stop events are refused.
fn events(
    raw: &RawDevfile,
    commands: &Commands,
    kinds: &BTreeMap<String, Kind>,
    errors: &mut Errors,
    notices: &mut Vec<Notice>,
) -> Events {
    let Commands {
        list: commands,
        kinds: command_kinds,
        composites_ok,
    } = commands;
    let composites_ok = *composites_ok;
    let mut pre_start = Vec::new();
    let mut post_start = Vec::new();
    let mut init_only: BTreeSet<String> = BTreeSet::new();
    if let Some(ev) = &raw.events {
        for (key, list) in [("preStop", &ev.pre_stop), ("postStop", &ev.post_stop)] {
            if list.is_some() {
                errors.push(unsupported(
                    format!("events.{key}"),
                    &format!("`{key}` events are"),
                    "Warren stops a workspace by scaling it to zero and runs nothing at stop time; remove them",
                ));
            }
        }
        let probe = Devfile {
            commands: commands.clone(),
            ..Devfile::empty()
        };
        for (key, list, out) in [
            ("preStart", &ev.pre_start, &mut pre_start),
            ("postStart", &ev.post_start, &mut post_start),
        ] {
            for (i, id) in list.iter().flatten().enumerate() {
                let p = format!("events.{key}[{i}]");
                if !command_kinds.contains_key(id) {
                    errors.push(DevfileError::new(
                        p,
                        format!("refers to command {id:?}, which the devfile does not define"),
                    ));
                    continue;
                }
                if !composites_ok {
                    continue;
                }
                let leaves = probe.leaf_commands(id);
                if matches!(
                    probe.command(id).map(|c| &c.action),
                    Some(CommandAction::Composite { parallel: true, .. })
                ) {
                    notices.push(Notice {
                        path: p.clone(),
                        message: format!("composite command {id:?} is parallel; at workspace start its commands run one after another"),
                    });
                }
                for leaf in leaves {
                    let what = match (&leaf.action, leaf.component().and_then(|n| kinds.get(n))) {
                        (CommandAction::Exec { .. }, _) => None,
                        (CommandAction::Apply { .. }, Some(Kind::Container)) if key == "preStart" => None,
                        (CommandAction::Apply { .. }, Some(Kind::Container)) => Some(format!(
                            "apply command {:?}: postStart events run exec commands only (apply commands of containers belong in preStart)",
                            leaf.id
                        )),
                        (CommandAction::Apply { component }, Some(Kind::Image)) => Some(format!(
                            "apply command {:?} builds image component {component:?}, which Warren does on demand only (`warren ws run`), not at workspace start",
                            leaf.id
                        )),
                        (CommandAction::Apply { component }, Some(Kind::Manifest(k))) => Some(format!(
                            "apply command {:?} applies {k} component {component:?}, which Warren does on demand only (`warren ws run`), not at workspace start",
                            leaf.id
                        )),
                        _ => None,
                    };
                    if let Some(why) = what {
                        errors.push(DevfileError::new(
                            p.clone(),
                            format!("{why} {UNSUPPORTED_MARKER}"),
                        ));
                        continue;
                    }
                    if out.contains(&leaf.id) {
                        errors.push(DevfileError::new(
                            p.clone(),
                            format!("command {:?} is listed more than once", leaf.id),
                        ));
                        continue;
                    }
                    if let CommandAction::Apply { component } = &leaf.action {
                        init_only.insert(component.clone());
                    }
                    out.push(leaf.id.clone());
                }
            }
        }
    }
    Events {
        pre_start,
        post_start,
        init_only,
    }
}

/// Image and manifest components no command applies, and the commands run on demand only.
fn notice_unapplied(
    raw: &RawDevfile,
    commands: &[Command],
    components: &Components,
    events: &Events,
    notices: &mut Vec<Notice>,
) {
    let (pre_start, post_start) = (&events.pre_start, &events.post_start);
    let (images, manifests) = (&components.images, &components.manifests);
    let in_events: BTreeSet<&String> = pre_start.iter().chain(post_start.iter()).collect();
    for im in images {
        let applied = commands
            .iter()
            .any(|c| c.component() == Some(im.name.as_str()));
        if !applied {
            notices.push(Notice {
                path: component_path(raw, &im.name),
                message: format!(
                    "image component {:?} is never built: no apply command uses it",
                    im.name
                ),
            });
        }
    }
    for m in manifests {
        let applied = commands
            .iter()
            .any(|c| c.component() == Some(m.name.as_str()));
        if !applied {
            notices.push(Notice {
                path: component_path(raw, &m.name),
                message: format!(
                    "{} component {:?} is never applied: no apply command uses it",
                    m.kind, m.name
                ),
            });
        }
    }
    let on_demand: Vec<&str> = commands
        .iter()
        .filter(|c| !in_events.contains(&c.id))
        .map(|c| c.id.as_str())
        .collect();
    if !on_demand.is_empty() {
        notices.push(Notice {
            path: "commands".into(),
            message: format!(
                "run on demand with `warren ws run WORKSPACE COMMAND`, not at start: {}",
                on_demand.join(", ")
            ),
        });
    }
}

/// Keys that must be merged first (refused), the parent merged in, and what Warren reads but
/// does not use (metadata shown nowhere, hot reload).
fn refused_and_unused(raw: &RawDevfile, errors: &mut Errors, notices: &mut Vec<Notice>) {
    for key in &raw.refused_keys {
        errors.push(DevfileError::new(
            *key,
            format!("`{key}` must be fetched and merged first: the server does that when it creates the workspace, and `warren devfile validate` does too"),
        ));
    }
    if let Some(Value::String(from)) = raw.attributes.get(crate::parent::PARENT_ATTRIBUTE) {
        notices.push(Notice {
            path: "parent".into(),
            message: format!("merged in from {from}"),
        });
    }
    if let Some(Value::Object(dc)) = raw.attributes.get(crate::DEVCONTAINER_ATTRIBUTE) {
        let file = dc
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("devcontainer.json");
        notices.push(Notice {
            path: file.to_owned(),
            message: "the workspace runs this dev container configuration, as the devfile `warren devcontainer render` shows".into(),
        });
        let said = dc.get("notices").and_then(Value::as_array);
        for n in said.into_iter().flatten() {
            let (Some(p), Some(m)) = (n["path"].as_str(), n["message"].as_str()) else {
                continue;
            };
            notices.push(Notice {
                path: format!("{file}: {p}"),
                message: m.to_owned(),
            });
        }
    }
    if let Some(m) = &raw.metadata {
        let shown_nowhere: Vec<&str> = [
            ("architectures", m.architectures.is_some()),
            ("attributes", m.attributes.is_some()),
            ("description", m.description.is_some()),
            ("displayName", m.display_name.is_some()),
            ("globalMemoryLimit", m.global_memory_limit.is_some()),
            ("icon", m.icon.is_some()),
            ("language", m.language.is_some()),
            ("projectType", m.project_type.is_some()),
            ("provider", m.provider.is_some()),
            ("supportUrl", m.support_url.is_some()),
            ("tags", m.tags.is_some()),
            ("version", m.version.is_some()),
            ("website", m.website.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, present)| present.then_some(k))
        .chain(m.other.keys().map(String::as_str))
        .collect();
        if !shown_nowhere.is_empty() {
            notices.push(Notice {
                path: "metadata".into(),
                message: format!(
                    "{} describe the devfile for registries and are not used by Warren (only `name` is)",
                    shown_nowhere.join(", ")
                ),
            });
        }
    }
    for (i, c) in raw.commands.iter().enumerate() {
        if c.exec
            .as_ref()
            .is_some_and(|e| e.hot_reload_capable.is_some())
        {
            notices.push(Notice {
                path: format!("commands[{i}].exec.hotReloadCapable"),
                message: format!(
                    "command {:?}: Warren does not restart commands when files change",
                    c.id
                ),
            });
        }
    }
}

/// The projects and starter projects, never cloned to the same directory.
fn projects_of(
    raw: &RawDevfile,
    errors: &mut Errors,
    notices: &mut Vec<Notice>,
) -> (Vec<DevfileProject>, Vec<DevfileProject>) {
    let devfile_projects = projects::projects(&raw.projects, false, errors, notices);
    let starter_projects = projects::projects(&raw.starter_projects, true, errors, notices);
    if let Some(clash) = starter_projects.iter().find(|s| {
        devfile_projects
            .iter()
            .any(|p| p.clone_path == s.clone_path)
    }) {
        errors.push(DevfileError::new(
            "starterProjects",
            format!(
                "starter project {:?} would go to the same directory as a project ({})",
                clash.name, clash.clone_path
            ),
        ));
    }
    (devfile_projects, starter_projects)
}

/// The main container: the one marked, or the only candidate, or a deterministic choice
/// among several (said in a notice); it must mount the sources.
fn main_container(
    raw: &RawDevfile,
    containers: &mut [Container],
    errors: &mut Errors,
    notices: &mut Vec<Notice>,
) -> Option<usize> {
    let marked: Vec<usize> = (0..containers.len())
        .filter(|i| containers[*i].main)
        .collect();
    let candidates: Vec<usize> = (0..containers.len())
        .filter(|i| !containers[*i].init_only)
        .collect();
    let main = match (marked.as_slice(), candidates.as_slice()) {
        ([m], _) => {
            if containers[*m].init_only {
                errors.push(DevfileError::new(
                    component_path(raw, &containers[*m].name),
                    format!(
                        "the main container {:?} is applied by a preStart event, so it only runs as an init container",
                        containers[*m].name
                    ),
                ));
            }
            Some(*m)
        }
        ([], [only]) => Some(*only),
        ([], []) => {
            if !errors.iter().any(|e| e.is_unsupported()) || containers.is_empty() {
                errors.push(DevfileError::new(
                    "components",
                    "the devfile has no container component; Warren needs one to run the workspace",
                ));
            }
            None
        }
        ([], many) => {
            // A deterministic choice: among the containers that mount the sources (the
            // main one must), the one with the most endpoints, the first of equals.
            let names: Vec<&str> = many.iter().map(|i| containers[*i].name.as_str()).collect();
            let pool: Vec<usize> = many
                .iter()
                .copied()
                .filter(|i| containers[*i].mount_sources)
                .collect();
            let pool = if pool.is_empty() { many.to_vec() } else { pool };
            let most = pool
                .iter()
                .map(|i| containers[*i].endpoints.len())
                .max()
                .unwrap_or(0);
            let chosen = pool
                .iter()
                .copied()
                .find(|i| containers[*i].endpoints.len() == most)
                .unwrap_or(many[0]);
            let why = if most > 0
                && pool
                    .iter()
                    .filter(|i| containers[**i].endpoints.len() == most)
                    .count()
                    == 1
            {
                "it has the most endpoints"
            } else {
                "it is the first that mounts the sources"
            };
            notices.push(Notice {
                path: "components".into(),
                message: format!(
                    "{} containers ({}) and none is marked as the main one: Warren chose {:?} ({why}); mark one with the attribute `warren.dev/main: true` to choose",
                    names.len(),
                    names.join(", "),
                    containers[chosen].name
                ),
            });
            Some(chosen)
        }
        (many, _) => {
            let names: Vec<&str> = many.iter().map(|i| containers[*i].name.as_str()).collect();
            errors.push(DevfileError::new(
                "components",
                format!(
                    "{} containers are marked `warren.dev/main: true` ({}); exactly one must be",
                    names.len(),
                    names.join(", ")
                ),
            ));
            None
        }
    };
    if let Some(m) = main {
        containers[m].main = true;
        if !containers[m].mount_sources {
            errors.push(DevfileError::new(
                format!("{}.container.mountSources", component_path(raw, &containers[m].name)),
                "the main container must mount the project sources (Warren clones the project there)",
            ));
        }
    }
    main
}

/// Init-only containers (applied by preStart) never run alongside the others: no endpoints,
/// and no postStart command runs in them.
fn check_init_only(
    raw: &RawDevfile,
    containers: &[Container],
    commands: &[Command],
    post_start: &[String],
    errors: &mut Errors,
) {
    for c in containers.iter().filter(|c| c.init_only) {
        if !c.endpoints.is_empty() {
            errors.push(DevfileError::new(
                format!("{}.container.endpoints", component_path(raw, &c.name)),
                format!(
                    "container {:?} is applied by a preStart event and only runs as an init container, so its endpoints would never be reachable",
                    c.name
                ),
            ));
        }
    }
    for (i, id) in post_start.iter().enumerate() {
        let on = commands
            .iter()
            .find(|c| &c.id == id)
            .and_then(|c| c.component());
        if let Some(c) = on.and_then(|n| containers.iter().find(|c| c.name == n && c.init_only)) {
            errors.push(DevfileError::new(
                format!("events.postStart[{i}]"),
                format!(
                    "command {id:?} runs in container {:?}, which is applied by a preStart event and only runs as an init container",
                    c.name
                ),
            ));
        }
    }
}
