//! Every registry devfile renders as published, or is refused naming the unsupported part
//! (outcome snapshot: today all 90 render).

use crate::common;

use common::*;
use warren_devfile::{objects_to_yaml, parse_devfile, render};
use warren_types::config::AgentConfig;

fn outcome(text: &str) -> String {
    let config = AgentConfig::default();
    match parse_devfile(text) {
        Ok(d) => match render(&d, &request(&config, &[])) {
            Ok(r) => format!(
                "rendered: {} objects, {} endpoints, main {}; {} commands ({}), {} images, {} manifests, {} notices",
                r.objects.len(),
                r.endpoints.len(),
                d.main_container().name,
                d.commands.len(),
                d.commands
                    .iter()
                    .filter(|c| c.kind() != "exec")
                    .map(|c| format!("{} {}", c.kind(), c.id))
                    .collect::<Vec<_>>()
                    .join(", "),
                d.images.len(),
                d.manifests.len(),
                d.notices.len()
            ),
            Err(e) => format!("render refused: {e}"),
        },
        Err(errs) => {
            let paths: Vec<&str> = errs.0.iter().map(|e| e.path.as_str()).collect();
            format!(
                "refused ({}: {}); first: {}",
                errs.0.len(),
                paths.join(", "),
                errs.0[0]
            )
        }
    }
}

#[test]
fn registry_outcomes() {
    let mut table = String::new();
    let (mut ok, mut refused) = (0, 0);
    for (name, text) in registry() {
        let as_is = outcome(&text);
        if as_is.starts_with("rendered") {
            ok += 1;
        } else {
            refused += 1;
            // A refusal of a registry devfile is about unsupported features, never a crash or a
            // bogus structural complaint: the schema accepts every one of them.
            let errs = parse_devfile(&text).expect_err("refused");
            assert!(
                errs.0.iter().any(|e| e.is_unsupported()),
                "{name}: refused without naming an unsupported feature: {errs}"
            );
        }
        table.push_str(&format!("{name}\n  {as_is}\n"));
    }
    table.push_str(&format!("\ntotal: {ok} rendered, {refused} refused\n"));
    insta::assert_snapshot!("registry_outcomes", table);
}

#[test]
fn every_registry_devfile_renders_deterministically() {
    let config = AgentConfig::default();
    for (name, text) in registry() {
        let d = parse_devfile(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = objects_to_yaml(&render(&d, &request(&config, &[])).expect("render").objects);
        let b = objects_to_yaml(&render(&d, &request(&config, &[])).expect("render").objects);
        assert_eq!(a, b, "{name}: rendering is not deterministic");
    }
}
