//! Validate+render time per registry devfile as published (median and max, target < 1 ms
//! median), the same with each file as the `parent` of a small child resolved from a warm
//! cache, and the server's per-workspace reconcile cost (`set_replicas` + `objects_to_yaml`),
//! each printed as a ratio to a baseline measured in the same run: plain
//! `serde_yaml::from_str` of the file.
//!
//! Run: `cargo bench -p warren-devfile --bench render`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

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

/// Registry documents from memory: what the server's fetcher gives from its warm cache.
struct Warm(std::collections::BTreeMap<String, String>);

impl warren_devfile::parent::ParentFetcher for Warm {
    async fn fetch(&self, url: &str) -> Result<String, String> {
        self.0
            .get(url)
            .cloned()
            .ok_or_else(|| format!("{url}: not cached"))
    }
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
        machine: None,
        variables: &[],
        desired_state: DesiredState::Running,
        dotfiles_url: None,
        starter: None,
        prebuild: false,
        seed: None,
    };

    // Every registry file, also as the parent of a small child (by id, at its version).
    let mut warm = std::collections::BTreeMap::new();
    let mut index = Vec::new();
    for (i, path) in files.iter().enumerate() {
        let text = std::fs::read_to_string(path).expect("read");
        let id = format!("stack{i}");
        warm.insert(format!("http://registry/devfiles/{id}/1.0.0"), text);
        index.push(
            serde_json::json!({"name": id, "versions": [{"version": "1.0.0", "default": true}]}),
        );
    }
    warm.insert(
        "http://registry/index".into(),
        serde_json::Value::Array(index).to_string(),
    );
    let warm = Warm(warm);
    let registries = vec!["http://registry".to_owned()];

    let (mut baseline, mut full, mut with_parent, mut reconcile) = (vec![], vec![], vec![], vec![]);
    let mut rendered_count = 0;
    for (i, path) in files.iter().enumerate() {
        let text = std::fs::read_to_string(path).expect("read");
        baseline.push(time(|| {
            black_box(serde_yaml::from_str::<serde_yaml::Value>(black_box(&text)).ok());
        }));
        let Ok(d) = parse_devfile(&text) else {
            continue;
        };
        let Ok(r) = render(&d, &req) else { continue };
        rendered_count += 1;
        full.push(time(|| {
            let d = parse_devfile(black_box(&text)).expect("valid");
            black_box(render(&d, &req).expect("renders"));
        }));
        let child = format!(
            "schemaVersion: 2.2.0\nmetadata: {{name: child}}\nparent: {{id: stack{i}, version: 1.0.0}}\n"
        );
        with_parent.push(time(|| {
            let flat = futures::executor::block_on(warren_devfile::parent::resolve(
                black_box(&child),
                &registries,
                &warm,
            ))
            .expect("resolves");
            let d = parse_devfile(&flat.text).expect("valid");
            black_box(render(&d, &req).expect("renders"));
        }));
        let stored = r.objects.clone();
        reconcile.push(time(|| {
            let mut objs = stored.clone();
            set_replicas(&mut objs, 0);
            black_box(objects_to_yaml(&objs));
        }));
    }
    let (b_med, b_max) = stats(baseline);
    let (f_med, f_max) = stats(full);
    let (p_med, p_max) = stats(with_parent);
    let (r_med, r_max) = stats(reconcile);
    let ratio = |x: Duration, base: Duration| x.as_secs_f64() / base.as_secs_f64();
    let met = |d: Duration| {
        if d < Duration::from_millis(1) {
            "met"
        } else {
            "MISSED"
        }
    };
    println!(
        "registry devfiles: {} ({} validate and render as published)",
        files.len(),
        rendered_count
    );
    println!("baseline serde_yaml::from_str          median {b_med:>10.2?}  max {b_max:>10.2?}");
    println!(
        "validate + render (as published)       median {f_med:>10.2?}  max {f_max:>10.2?}  ({:.1}x baseline; target < 1 ms median: {})",
        ratio(f_med, b_med),
        met(f_med)
    );
    println!(
        "as a parent: resolve (warm) + validate + render  median {p_med:>10.2?}  max {p_max:>10.2?}  ({:.1}x baseline; target < 1 ms median: {})",
        ratio(p_med, b_med),
        met(p_med)
    );
    println!(
        "set_replicas + objects_to_yaml         median {r_med:>10.2?}  max {r_max:>10.2?}  ({:.1}x baseline; 1,000 workspaces ≈ {:.0?})",
        ratio(r_med, b_med),
        r_med * 1000
    );
}
