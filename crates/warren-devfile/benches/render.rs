//! Parse+render time per registry devfile (median and max, target < 1 ms median) and the
//! server's per-workspace reconcile cost (`set_replicas` + `objects_to_yaml`), each printed as
//! a ratio to a baseline measured in the same run: plain `serde_yaml::from_str` of the file.
//!
//! Run: `cargo bench -p warren-devfile --bench render`.

use std::hint::black_box;
use std::time::{Duration, Instant};
use warren_devfile::{
    objects_to_yaml, parse_devfile, render, set_replicas, ProjectSource, RenderRequest,
};
use warren_types::config::AgentConfig;
use warren_types::{AgentId, DesiredState, WorkspaceId};

const DATA_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/devfiles/registry"
);

/// Median time of `f` over enough repetitions to be stable.
fn time<F: FnMut()>(mut f: F) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..3 {
        f(); // warm-up
    }
    for _ in 0..25 {
        let start = Instant::now();
        f();
        samples.push(start.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

/// A registry devfile with the parts Warren refuses removed (as in the tests), so the whole
/// pipeline runs; the unmodified file is parsed too (most are refused after full validation).
fn strip(text: &str) -> String {
    let mut v: serde_json::Value = serde_yaml::from_str(text).expect("yaml");
    let obj = v.as_object_mut().expect("mapping");
    for k in ["starterProjects", "projects", "dependentProjects", "parent"] {
        obj.remove(k);
    }
    let mut kept = std::collections::BTreeSet::new();
    if let Some(serde_json::Value::Array(cs)) = obj.get_mut("components") {
        cs.retain(|c| c.get("container").is_some() || c.get("volume").is_some());
        for c in cs.iter_mut() {
            if let Some(serde_json::Value::Object(a)) = c.get_mut("attributes") {
                a.remove("pod-overrides");
                a.remove("container-overrides");
            }
        }
        // Mark the first container as main so multi-container stacks render too.
        if let Some(c) = cs.iter_mut().find(|c| c.get("container").is_some()) {
            c["attributes"]["warren.dev/main"] = serde_json::Value::Bool(true);
        }
        for c in cs.iter() {
            kept.insert(c["name"].as_str().unwrap_or_default().to_owned());
        }
    }
    let mut ids = std::collections::BTreeSet::new();
    if let Some(serde_json::Value::Array(cmds)) = obj.get_mut("commands") {
        cmds.retain(|c| {
            c.get("exec")
                .or_else(|| c.get("apply"))
                .and_then(|x| x.get("component"))
                .and_then(|x| x.as_str())
                .is_some_and(|n| kept.contains(n))
        });
        for c in cmds.iter() {
            ids.insert(c["id"].as_str().unwrap_or_default().to_owned());
        }
    }
    if let Some(serde_json::Value::Object(ev)) = obj.get_mut("events") {
        ev.remove("preStop");
        ev.remove("postStop");
        for list in ev.values_mut() {
            if let serde_json::Value::Array(items) = list {
                items.retain(|i| i.as_str().is_some_and(|s| ids.contains(s)));
            }
        }
    }
    serde_yaml::to_string(&v).expect("yaml")
}

fn main() {
    let mut files: Vec<_> = std::fs::read_dir(DATA_DIR)
        .expect("registry dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let cfg = AgentConfig::default();
    let req = RenderRequest {
        workspace_name: "brave-otter-x7k2",
        workspace_id: WorkspaceId(42),
        agent_id: AgentId(7),
        agent_config: &cfg,
        project: Some(ProjectSource {
            name: "demo",
            git_url: "https://example.com/demo.git",
            git_ref: "main",
            credential: None,
        }),
        resources: None,
        variables: &[],
        desired_state: DesiredState::Running,
        dotfiles_url: None,
        starter: None,
    };

    let (mut baseline, mut as_is, mut full, mut reconcile, mut yaml_base) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut rendered_count = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read");
        let stripped = strip(&text);
        baseline.push(time(|| {
            black_box(serde_yaml::from_str::<serde_yaml::Value>(black_box(&stripped)).ok());
        }));
        as_is.push(time(|| {
            black_box(parse_devfile(black_box(&text)).is_ok());
        }));
        let Ok(d) = parse_devfile(&stripped) else {
            continue;
        };
        let Ok(r) = render(&d, &req) else { continue };
        rendered_count += 1;
        full.push(time(|| {
            let d = parse_devfile(black_box(&stripped)).expect("valid");
            black_box(render(&d, &req).expect("renders"));
        }));
        let stored = r.objects.clone();
        reconcile.push(time(|| {
            let mut objs = stored.clone();
            set_replicas(&mut objs, 0);
            black_box(objects_to_yaml(&objs));
        }));
        yaml_base.push(time(|| {
            black_box(serde_yaml::from_str::<serde_yaml::Value>(black_box(&stripped)).ok());
        }));
    }
    let (b_med, b_max) = stats(baseline);
    let (a_med, a_max) = stats(as_is);
    let (f_med, f_max) = stats(full);
    let (r_med, r_max) = stats(reconcile);
    let (y_med, _) = stats(yaml_base);
    let ratio = |x: Duration, base: Duration| x.as_secs_f64() / base.as_secs_f64();
    println!(
        "registry devfiles: {} ({} render after stripping unsupported parts)",
        files.len(),
        rendered_count
    );
    println!("baseline serde_yaml::from_str        median {b_med:>10.2?}  max {b_max:>10.2?}");
    println!(
        "parse_devfile (as is, mostly refused) median {a_med:>10.2?}  max {a_max:>10.2?}  ({:.1}x baseline)",
        ratio(a_med, b_med)
    );
    println!(
        "parse + render (stripped)            median {f_med:>10.2?}  max {f_max:>10.2?}  ({:.1}x baseline; target < 1 ms median: {})",
        ratio(f_med, y_med),
        if f_med < Duration::from_millis(1) { "met" } else { "MISSED" }
    );
    println!(
        "set_replicas + objects_to_yaml       median {r_med:>10.2?}  max {r_max:>10.2?}  ({:.1}x baseline; 1,000 workspaces ≈ {:.0?})",
        ratio(r_med, y_med),
        r_med * 1000
    );
}
