//! Warren's own top-level devfile attributes, checked: the names that resolve to the pod
//! (`warren.dev/host-aliases`), the injected editor's extensions and settings
//! (`warren.dev/editor`), the commands run when a session attaches
//! (`warren.dev/post-attach`), when the workspace is usable (`warren.dev/wait-for`), what a
//! prebuild runs (`warren.dev/prebuild`) and the least its machine must have
//! (`warren.dev/host-requirements`).

use super::*;

/// The top-level [`crate::POST_ATTACH_ATTRIBUTE`]: ids of exec commands of the main
/// container.
pub(super) fn post_attach(
    attrs: &Map<String, Value>,
    d: &Devfile,
    errors: &mut Errors,
) -> Vec<String> {
    let main = d.containers.get(d.main).map(|c| c.name.as_str());
    command_ids(
        attrs,
        d,
        crate::POST_ATTACH_ATTRIBUTE,
        ("command ids", "an exec command of the main container"),
        |c| matches!(&c.action, CommandAction::Exec { component, .. } if Some(component.as_str()) == main),
        errors,
    )
}

/// A top-level attribute that lists command ids, each one a command `fits`: those ids, in the
/// attribute's order; the rest named by their index. `words` says what the list holds and
/// what each id must be, for the errors.
fn command_ids(
    attrs: &Map<String, Value>,
    d: &Devfile,
    attribute: &str,
    words: (&str, &str),
    fits: impl Fn(&crate::model::Command) -> bool,
    errors: &mut Errors,
) -> Vec<String> {
    let Some(v) = attrs.get(attribute) else {
        return vec![];
    };
    let at = format!("attributes.{attribute}");
    let Some(ids) = v.as_array() else {
        errors.push(DevfileError::new(
            at,
            format!("expected a list of {}", words.0),
        ));
        return vec![];
    };
    let mut out = vec![];
    for (i, id) in ids.iter().enumerate() {
        match id.as_str() {
            Some(id) if d.command(id).is_some_and(&fits) => out.push(id.to_owned()),
            _ => errors.push(DevfileError::new(
                format!("{at}[{i}]"),
                format!("{id} is not the id of {}", words.1),
            )),
        }
    }
    out
}

/// The top-level [`crate::WAIT_FOR_ATTRIBUTE`]: `""` or the id of a `postStart` exec command
/// of the main container.
pub(super) fn wait_for(
    attrs: &Map<String, Value>,
    d: &Devfile,
    errors: &mut Errors,
) -> Option<String> {
    let v = attrs.get(crate::WAIT_FOR_ATTRIBUTE)?;
    let at = format!("attributes.{}", crate::WAIT_FOR_ATTRIBUTE);
    let main = d.containers.get(d.main).map(|c| c.name.as_str());
    match v.as_str() {
        Some("") => Some(String::new()),
        Some(id) => {
            let found = d.post_start.iter().find(|p| p.as_str() == id);
            let of_main = found
                .and_then(|id| d.command(id))
                .is_some_and(|c| matches!(&c.action, CommandAction::Exec { component, .. } if Some(component.as_str()) == main));
            if of_main {
                Some(id.to_owned())
            } else {
                errors.push(DevfileError::new(
                    at,
                    format!("{id} is not the id of a postStart exec command of the main container"),
                ));
                None
            }
        }
        None => {
            errors.push(DevfileError::new(
                at,
                "expected a command id, or \"\" for \"once the sources are in place\"",
            ));
            None
        }
    }
}

/// The top-level [`crate::PREBUILD_ATTRIBUTE`]: ids of `postStart` exec commands, kept in
/// `postStart`'s order (the order they run in).
pub(super) fn prebuild(
    attrs: &Map<String, Value>,
    d: &Devfile,
    errors: &mut Errors,
) -> Vec<String> {
    let named = command_ids(
        attrs,
        d,
        crate::PREBUILD_ATTRIBUTE,
        ("postStart command ids", "a postStart exec command"),
        |c| matches!(c.action, CommandAction::Exec { .. }) && d.post_start.contains(&c.id),
        errors,
    );
    d.post_start
        .iter()
        .filter(|id| named.contains(id))
        .cloned()
        .collect()
}

/// The top-level [`crate::HOST_REQUIREMENTS_ATTRIBUTE`], each field checked by name.
pub(super) fn host_requirements(
    attrs: &Map<String, Value>,
    errors: &mut Errors,
) -> Option<warren_types::host_requirements::HostRequirements> {
    let v = attrs.get(crate::HOST_REQUIREMENTS_ATTRIBUTE)?;
    let at = format!("attributes.{}", crate::HOST_REQUIREMENTS_ATTRIBUTE);
    let r: warren_types::host_requirements::HostRequirements =
        match serde_json::from_value(v.clone()) {
            Ok(r) => r,
            Err(e) => {
                errors.push(DevfileError::new(
                    at,
                    format!("expected {{cpus, memory, storage, gpu: no|optional|required}}: {e}"),
                ));
                return None;
            }
        };
    let problems = r.problems();
    for (field, why) in &problems {
        errors.push(DevfileError::new(format!("{at}.{field}"), why.clone()));
    }
    (problems.is_empty() && !r.is_empty()).then_some(r)
}

/// Most extensions (ids and files together) an editor is given, and most bytes of its
/// settings.
const MAX_EXTENSIONS: usize = 64;
const MAX_SETTINGS_BYTES: usize = 64 * 1024;

/// The top-level [`crate::EDITOR_ATTRIBUTE`], checked: ids as VS Code writes them, files
/// inside the repository, settings of a bounded size.
pub(super) fn editor(
    attrs: &Map<String, Value>,
    errors: &mut Errors,
) -> Option<EditorCustomizations> {
    let v = attrs.get(crate::EDITOR_ATTRIBUTE)?;
    let at = format!("attributes.{}", crate::EDITOR_ATTRIBUTE);
    let e: EditorCustomizations = match serde_json::from_value(v.clone()) {
        Ok(e) => e,
        Err(e) => {
            errors.push(DevfileError::new(
                at,
                format!("expected {{extensions: [ids], vsix: [paths], settings: {{…}}}}: {e}"),
            ));
            return None;
        }
    };
    if e.extensions.len() + e.vsix.len() > MAX_EXTENSIONS {
        errors.push(DevfileError::new(
            &at,
            format!("at most {MAX_EXTENSIONS} extensions"),
        ));
    }
    for (i, id) in e.extensions.iter().enumerate() {
        if !is_extension_id(id) {
            errors.push(DevfileError::new(
                format!("{at}.extensions[{i}]"),
                format!("{id:?} is not an extension id (publisher.name, optionally @version)"),
            ));
        }
    }
    for (i, p) in e.vsix.iter().enumerate() {
        let inside = !p.starts_with('/')
            && !p.split('/').any(|s| s.is_empty() || s == "." || s == "..")
            && p.ends_with(".vsix")
            && p.len() <= 1024
            && !p.chars().any(char::is_control);
        if !inside {
            errors.push(DevfileError::new(
                format!("{at}.vsix[{i}]"),
                format!("{p:?} is not the path of a .vsix file inside the repository"),
            ));
        }
    }
    let size = serde_json::to_string(&e.settings).map_or(usize::MAX, |s| s.len());
    if size > MAX_SETTINGS_BYTES {
        errors.push(DevfileError::new(
            format!("{at}.settings"),
            format!("{size} bytes; at most {MAX_SETTINGS_BYTES}"),
        ));
    }
    Some(e)
}

/// `publisher.name` or `publisher.name@version`, as the extension galleries name them.
pub(crate) fn is_extension_id(id: &str) -> bool {
    let (name, version) = id.split_once('@').unwrap_or((id, ""));
    let word = |w: &str| {
        !w.is_empty()
            && w.len() <= 128
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let named = matches!(name.split_once('.'), Some((p, n)) if word(p) && word(n));
    let versioned = version.is_empty()
        || (version.len() <= 64
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')));
    named && versioned && (!id.contains('@') || !version.is_empty())
}

/// Most names [`crate::HOST_ALIASES_ATTRIBUTE`] may give.
const MAX_HOST_ALIASES: usize = 64;

/// The top-level [`crate::HOST_ALIASES_ATTRIBUTE`]: host names (dot-separated DNS labels).
pub(super) fn host_aliases(attrs: &Map<String, Value>, errors: &mut Errors) -> Vec<String> {
    let Some(v) = attrs.get(crate::HOST_ALIASES_ATTRIBUTE) else {
        return vec![];
    };
    let at = format!("attributes.{}", crate::HOST_ALIASES_ATTRIBUTE);
    let Some(list) = v.as_array().filter(|l| l.len() <= MAX_HOST_ALIASES) else {
        errors.push(DevfileError::new(
            at,
            format!("expected a list of at most {MAX_HOST_ALIASES} host names"),
        ));
        return vec![];
    };
    let mut out = vec![];
    for (i, name) in list.iter().enumerate() {
        let ok = name.as_str().filter(|n| {
            n.len() <= 253
                && n.split('.').all(|l| warren_types::is_dns_label(l, 63))
                && *n != "localhost"
        });
        match ok {
            Some(n) if !out.iter().any(|o| o == n) => out.push(n.to_owned()),
            Some(_) => {}
            None => errors.push(DevfileError::new(
                format!("{at}[{i}]"),
                format!("{name} is not a host name (DNS labels separated by dots; not localhost)"),
            )),
        }
    }
    out
}
