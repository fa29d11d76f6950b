//! `parent` resolution and merging, with an in-memory fetcher standing in for HTTP (the
//! server's and the CLI's real fetches are tested against a registry served on port 0).

use futures::executor::block_on;
use std::collections::BTreeMap;
use std::sync::Mutex;
use warren_devfile::parent::{resolve, ParentFetcher, Resolved};
use warren_devfile::{parse_devfile, CommandAction, DevfileErrors};

#[derive(Default)]
struct Map {
    files: BTreeMap<String, String>,
    fetched: Mutex<Vec<String>>,
}

impl ParentFetcher for Map {
    async fn fetch(&self, url: &str) -> Result<String, String> {
        self.fetched.lock().unwrap().push(url.to_owned());
        self.files
            .get(url)
            .cloned()
            .ok_or_else(|| "HTTP 404 Not Found".to_owned())
    }
}

const PARENT: &str = r#"schemaVersion: 2.2.0
metadata: {name: nodejs}
variables: {tag: "18"}
components:
  - name: runtime
    container:
      image: "node:{{tag}}"
      memoryLimit: 1Gi
      env: [{name: A, value: parent}, {name: B, value: parent}]
      endpoints: [{name: http, targetPort: 3000}]
commands:
  - id: install
    exec: {component: runtime, commandLine: npm install}
  - id: run
    exec: {component: runtime, commandLine: npm start}
starterProjects:
  - name: starter
    git: {remotes: {origin: "https://example.com/starter.git"}}
"#;

fn registry() -> Map {
    let mut m = Map::default();
    m.files.insert(
        "http://reg/index".into(),
        r#"[{"name":"nodejs","versions":[{"version":"2.1.0","default":true},{"version":"2.2.0"},{"version":"1.0.0"}]},{"name":"go","versions":[{"version":"1.0.0"}]}]"#.into(),
    );
    for v in ["1.0.0", "2.1.0", "2.2.0"] {
        m.files.insert(
            format!("http://reg/devfiles/nodejs/{v}"),
            PARENT.replace("tag: \"18\"", &format!("tag: \"{v}\"")),
        );
    }
    m.files
        .insert("http://files/parent.yaml".into(), PARENT.into());
    m
}

fn resolved(child: &str, registries: &[&str], m: &Map) -> Result<Resolved, DevfileErrors> {
    let regs: Vec<String> = registries.iter().map(|s| s.to_string()).collect();
    block_on(resolve(child, &regs, m))
}

#[test]
fn a_parent_by_uri_is_merged_with_overrides_and_the_childs_own_parts() {
    let m = registry();
    let child = r#"schemaVersion: 2.2.0
metadata: {name: app}
parent:
  uri: http://files/parent.yaml
  variables: {tag: "20"}
  components:
    - name: runtime
      container:
        memoryLimit: 2Gi
        env: [{name: B, value: child}]
  commands:
    - id: run
      exec: {commandLine: npm run dev}
components:
  - name: db
    container: {image: postgres, mountSources: false}
commands:
  - id: test
    exec: {component: runtime, commandLine: npm test}
"#;
    let r = resolved(child, &[], &m).unwrap();
    assert_eq!(r.parents, ["http://files/parent.yaml"]);
    let d = parse_devfile(&r.text).unwrap_or_else(|e| panic!("{e}\n{}", r.text));
    assert_eq!(d.metadata_name.as_deref(), Some("app"));
    let rt = d.container("runtime").unwrap();
    assert_eq!(rt.image, "node:20", "the override's variable wins");
    assert_eq!(rt.memory_limit.as_deref(), Some("2Gi"));
    let env: Vec<(&str, &str)> = rt
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(env, [("A", "parent"), ("B", "child")], "env merged by name");
    assert_eq!(rt.endpoints.len(), 1, "endpoints kept");
    assert!(d.container("db").is_some());
    let ids: Vec<&str> = d.commands.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["install", "run", "test"], "the parent's first");
    let CommandAction::Exec {
        command_line,
        component,
        ..
    } = &d.command("run").unwrap().action
    else {
        panic!("exec")
    };
    assert_eq!(
        (command_line.as_str(), component.as_str()),
        ("npm run dev", "runtime")
    );
    assert_eq!(d.starter_projects.len(), 1);
    assert!(
        d.notices
            .iter()
            .any(|n| n.path == "parent" && n.message.contains("http://files/parent.yaml")),
        "{:?}",
        d.notices
    );
}

#[test]
fn a_parent_by_id_comes_from_a_registry_at_the_version_asked_for() {
    let m = registry();
    let image = |child: &str, regs: &[&str]| {
        let r = resolved(child, regs, &m).unwrap_or_else(|e| panic!("{e}"));
        (
            parse_devfile(&r.text)
                .unwrap()
                .container("runtime")
                .unwrap()
                .image
                .clone(),
            r.parents,
        )
    };
    let base = "schemaVersion: 2.2.0\nparent: {id: nodejs";
    assert_eq!(
        image(&format!("{base}, registryUrl: 'http://reg'}}\n"), &[]).0,
        "node:2.1.0",
        "the default"
    );
    assert_eq!(
        image(
            &format!("{base}, registryUrl: 'http://reg', version: 2.2.0}}\n"),
            &[]
        )
        .0,
        "node:2.2.0"
    );
    assert_eq!(
        image(
            &format!("{base}, version: latest}}\n"),
            &["http://down", "http://reg/"]
        )
        .0,
        "node:2.2.0",
        "the configured registries in order"
    );
    let (_, parents) = image(&format!("{base}, version: 1.0.0}}\n"), &["http://reg"]);
    assert_eq!(parents, ["id nodejs 1.0.0 from http://reg"]);

    let e = resolved(
        &format!("{base}, registryUrl: 'http://reg', version: 9.9.9}}\n"),
        &[],
        &m,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("has no version 9.9.9 (it has 1.0.0, 2.1.0, 2.2.0)"),
        "{e}"
    );
    let e = resolved(&format!("{base}}}\n"), &[], &m).unwrap_err();
    assert!(
        e.to_string().contains("no devfile registry is configured"),
        "{e}"
    );
    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {id: ruby}\n",
        &["http://reg"],
        &m,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no stack \"ruby\""), "{e}");
}

#[test]
fn overrides_may_not_add_and_the_child_may_not_redefine() {
    let m = registry();
    let e = resolved(
        "schemaVersion: 2.2.0\nparent:\n  uri: http://files/parent.yaml\n  components:\n    - name: extra\n      container: {image: x}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(
        e.0.iter().any(|x| x.path == "parent.components[0].name"
            && x.message.contains("no component \"extra\"")),
        "{e}"
    );
    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {uri: http://files/parent.yaml}\ncommands:\n  - id: run\n    exec: {component: runtime, commandLine: x}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(
        e.0.iter().any(|x| x.path == "commands[0].id"
            && x.message.contains("change it under `parent.commands`")),
        "{e}"
    );
}

#[test]
fn parents_of_parents_loops_depth_and_failures_are_named() {
    let mut m = registry();
    m.files.insert(
        "http://files/middle.yaml".into(),
        "schemaVersion: 2.2.0\nparent: {uri: http://files/parent.yaml}\ncomponents:\n  - name: cache\n    container: {image: redis, mountSources: false}\n".into(),
    );
    let r = resolved(
        "schemaVersion: 2.2.0\nparent: {uri: http://files/middle.yaml}\n",
        &[],
        &m,
    )
    .unwrap();
    assert_eq!(
        r.parents,
        ["http://files/middle.yaml", "http://files/parent.yaml"]
    );
    let d = parse_devfile(&r.text).unwrap();
    assert!(d.container("cache").is_some() && d.container("runtime").is_some());

    m.files.insert(
        "http://files/a.yaml".into(),
        "schemaVersion: 2.2.0\nparent: {uri: http://files/b.yaml}\n".into(),
    );
    m.files.insert(
        "http://files/b.yaml".into(),
        "schemaVersion: 2.2.0\nparent: {uri: http://files/a.yaml}\n".into(),
    );
    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {uri: http://files/a.yaml}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(e.to_string().contains("loop"), "{e}");

    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {uri: http://files/missing.yaml}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("fetching http://files/missing.yaml: HTTP 404"),
        "{e}"
    );
    m.files
        .insert("http://files/bad.yaml".into(), "components: [".into());
    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {uri: http://files/bad.yaml}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("the parent (http://files/bad.yaml) not valid YAML"),
        "{e}"
    );
    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {uri: 'file:///etc/passwd'}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(e.to_string().contains("http or https only"), "{e}");
    let e = resolved(
        "schemaVersion: 2.2.0\nparent: {kubernetes: {name: t}}\n",
        &[],
        &m,
    )
    .unwrap_err();
    assert!(e.0[0].is_unsupported(), "{e}");
    // Nothing fetched for a devfile without a parent.
    let before = m.fetched.lock().unwrap().len();
    let r = resolved("schemaVersion: 2.2.0\ncomponents: []\n", &[], &m).unwrap();
    assert!(r.parents.is_empty());
    assert_eq!(m.fetched.lock().unwrap().len(), before);
}
