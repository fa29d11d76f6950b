//! Compose dev containers: the services become containers of the workspace's pod, reached
//! by name, started in dependency order (a healthy dependency holding the next, a completed
//! one as an init container), their volumes, ports and environment kept; what would reach
//! past the workspace's isolation is refused by name.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use warren_devcontainer::{convert, needed_files, Converted, Input, Problems};
use warren_devfile::{parse_devfile, render_preview, Devfile};

static NO_SECRETS: BTreeSet<String> = BTreeSet::new();

/// A repository holding `.devcontainer/devcontainer.json` (`config`) and `files`.
fn run(config: &str, files: &[(&str, &str)], env: &[(&str, &str)]) -> Result<Converted, Problems> {
    let files: BTreeMap<String, String> = files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    convert(&Input {
        text: config,
        path: ".devcontainer/devcontainer.json",
        project: "shop",
        local_env: &env,
        secrets: &NO_SECRETS,
        files: &files,
    })
}

fn ok(config: &str, files: &[(&str, &str)]) -> (Converted, Devfile) {
    let c = run(config, files, &[]).unwrap_or_else(|p| panic!("{p}"));
    let d = parse_devfile(&c.devfile).unwrap_or_else(|e| panic!("{e}\n{}", c.devfile));
    (c, d)
}

fn problems(config: &str, files: &[(&str, &str)]) -> Vec<String> {
    run(config, files, &[])
        .expect_err("refused")
        .0
        .iter()
        .map(ToString::to_string)
        .collect()
}

const CONFIG: &str = r#"{
    "name": "Shop & PostgreSQL",
    "dockerComposeFile": "docker-compose.yml",
    "service": "app",
    "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
    "forwardPorts": [8000, "db:5432"],
    "postCreateCommand": "psql -h db -c 'select 1'"
}"#;

/// The shape of the project's own Postgres template.
const TEMPLATE: &str = r#"
version: '3.8'
services:
  app:
    build:
      context: ..
      dockerfile: .devcontainer/Dockerfile
    env_file: .env
    volumes:
      - ../..:/workspaces:cached
    command: sleep infinity
    network_mode: service:db
  db:
    image: postgres:${PG_VERSION:-16}
    restart: unless-stopped
    volumes:
      - postgres-data:/var/lib/postgresql/data
    env_file: .env
volumes:
  postgres-data:
"#;

const DOT_ENV: &str = "POSTGRES_USER=shop\nPOSTGRES_PASSWORD=secret\n";

#[test]
fn the_services_of_a_template_become_the_workspace_containers() {
    let files = [
        (".devcontainer/docker-compose.yml", TEMPLATE),
        (".devcontainer/.env", DOT_ENV),
    ];
    let (c, d) = ok(CONFIG, &files);
    // The dependency first: the dev container shares its network.
    let names: Vec<&str> = d.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["db", "app"]);
    let app = d.main_container();
    assert_eq!(app.name, "app");
    assert!(app.mount_sources);
    assert_eq!(app.source_mapping, "/workspaces");
    assert_eq!(app.image, warren_devcontainer::build::IMAGE);
    assert_eq!(app.args, ["/bin/sh", "-c", "sleep infinity"]);
    let env = |c: &warren_devfile::Container, k: &str| {
        c.env.iter().find(|e| e.name == k).map(|e| e.value.clone())
    };
    assert_eq!(env(app, "POSTGRES_USER").as_deref(), Some("shop"));
    // Built from the repository's root (the Compose file's `..`).
    let image = &d.images[0];
    assert_eq!(image.dockerfile, ".devcontainer/Dockerfile");
    assert_eq!(image.build_context, ".");
    assert!(image.auto_build);
    let db = d.container("db").unwrap();
    assert_eq!(db.image, "postgres:16");
    assert!(!db.mount_sources);
    assert_eq!(env(db, "POSTGRES_PASSWORD").as_deref(), Some("secret"));
    let volume = &db.volume_mounts[0];
    assert_eq!(volume.path, "/var/lib/postgresql/data");
    let v = d.volumes.iter().find(|v| v.name == volume.name).unwrap();
    assert!(!v.ephemeral, "a named volume is persistent");
    // forwardPorts: the dev container's own port, and the database's.
    assert_eq!(app.endpoints[0].target_port, 8000);
    assert_eq!(db.endpoints[0].target_port, 5432);
    assert_eq!(d.host_aliases, ["db", "app"]);
    // The lifecycle runs in the dev container's service.
    let post_create = d.command("post-create").unwrap();
    assert!(
        matches!(&post_create.action, warren_devfile::CommandAction::Exec { component, .. } if component == "app")
    );
    let said: Vec<String> = c.notices.iter().map(ToString::to_string).collect();
    assert!(
        said.iter()
            .any(|n| n.starts_with("services.app.volumes[0]: the repository is not bound")),
        "{said:#?}"
    );
    assert!(
        said.iter().any(|n| n.starts_with("services.db.restart:")),
        "{said:#?}"
    );
}

#[test]
fn compose_variables_come_from_the_workspace_then_the_env_file() {
    let files = [
        (".devcontainer/docker-compose.yml", TEMPLATE),
        (".devcontainer/.env", "PG_VERSION=15\nPOSTGRES_USER=u\n"),
    ];
    let db_image = |env: &[(&str, &str)]| {
        let c = run(CONFIG, &files, env).unwrap();
        parse_devfile(&c.devfile)
            .unwrap()
            .container("db")
            .unwrap()
            .image
            .clone()
    };
    assert_eq!(db_image(&[]), "postgres:15");
    assert_eq!(db_image(&[("PG_VERSION", "17")]), "postgres:17");
    let required = TEMPLATE.replace("${PG_VERSION:-16}", "${PG_VERSION:?pick one}");
    let p = problems(
        CONFIG,
        &[
            (".devcontainer/docker-compose.yml", &required),
            (".devcontainer/.env", ""),
        ],
    );
    assert!(
        p.iter()
            .any(|p| p.contains("PG_VERSION is required (pick one)")),
        "{p:#?}"
    );
}

#[test]
fn the_files_read_are_named_before_they_are_given() {
    let env = BTreeMap::new();
    let mut files = BTreeMap::new();
    let named = |files: &BTreeMap<String, String>| -> Vec<(String, bool)> {
        needed_files(&Input {
            text: r#"{"dockerComposeFile": ["docker-compose.yml", "../extra.yml"], "service": "app"}"#,
            path: ".devcontainer/devcontainer.json",
            project: "shop",
            local_env: &env,
            secrets: &NO_SECRETS,
            files,
        })
        .into_iter()
        .map(|n| (n.path, n.optional))
        .collect()
    };
    assert_eq!(
        named(&files),
        [
            (".devcontainer/docker-compose.yml".to_owned(), false),
            ("extra.yml".to_owned(), false),
            (".devcontainer/.env".to_owned(), true),
        ]
    );
    files.insert(
        ".devcontainer/docker-compose.yml".to_owned(),
        "services:\n  app:\n    image: x\n    env_file: [../app.env, {path: local.env, required: false}]\n".to_owned(),
    );
    let more = named(&files);
    assert!(more.contains(&("app.env".to_owned(), false)), "{more:?}");
    assert!(
        more.contains(&(".devcontainer/local.env".to_owned(), true)),
        "{more:?}"
    );
    // A missing required file is named; a missing optional one is not a problem.
    let p = problems(
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#,
        &[(".devcontainer/docker-compose.yml", "services:\n  app:\n    image: x\n    env_file: [../app.env, {path: local.env, required: false}]\n")],
    );
    assert_eq!(
        p,
        ["services.app.env_file: \"../app.env\" is not in the repository"]
    );
}

/// A service written once: `include` adds another file's services and volumes, `extends`
/// merges a service (of the same document or of a file beside it) under another, as Compose
/// does, before the services are read; the files are asked for before they are given.
#[test]
fn include_and_extends_are_resolved_as_compose_resolves_them() {
    let config = r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#;
    let main = "include: [db.yml]\nservices:\n  app:\n    extends: {file: common.yml, service: job}\n    image: x\n    environment: {B: '3'}\n  worker:\n    extends: app\n    command: [run]\n";
    let common = "services:\n  job:\n    image: z\n    environment: {B: '2', C: '4'}\n";
    let db = "services:\n  db:\n    image: postgres:16\n    volumes: [data:/var/lib/postgresql/data]\nvolumes:\n  data: {}\n";
    let files = [
        (".devcontainer/docker-compose.yml", main),
        (".devcontainer/common.yml", common),
        (".devcontainer/db.yml", db),
    ];
    let (_, d) = ok(config, &files);
    let env = |name: &str| -> Vec<(String, String)> {
        let c = d
            .containers
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        c.env
            .iter()
            .filter(|e| e.name.len() == 1)
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect()
    };
    let both = vec![
        ("B".to_owned(), "3".to_owned()),
        ("C".to_owned(), "4".to_owned()),
    ];
    assert_eq!(env("app"), both);
    assert_eq!(env("worker"), both, "extends what app extends, too");
    let image = |name: &str| {
        d.containers
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .image
            .clone()
    };
    assert_eq!(
        (image("app"), image("worker"), image("db")),
        ("x".into(), "x".into(), "postgres:16".into())
    );
    assert_eq!(
        d.containers
            .iter()
            .find(|c| c.name == "worker")
            .unwrap()
            .args,
        ["run"]
    );

    // Asked for before they are given.
    let env = BTreeMap::new();
    let given: BTreeMap<String, String> = [files[0]]
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    let named: Vec<String> = needed_files(&Input {
        text: config,
        path: ".devcontainer/devcontainer.json",
        project: "shop",
        local_env: &env,
        secrets: &NO_SECRETS,
        files: &given,
    })
    .into_iter()
    .map(|n| n.path)
    .collect();
    for f in [".devcontainer/db.yml", ".devcontainer/common.yml"] {
        assert!(named.contains(&f.to_owned()), "{f}: {named:?}");
    }

    // A cycle, a service defined twice, a file elsewhere, a base that is not there.
    for (compose, extra, want) in [
        ("services:\n  app:\n    extends: b\n  b:\n    extends: app\n", None, "services.app.extends: a chain of `extends` that does not end: app → b → app"),
        ("include: [db.yml]\nservices:\n  app: {image: x}\n  db: {image: y}\n", Some((".devcontainer/db.yml", db)), "include[0]: .devcontainer/db.yml defines services.db, which this project defines already"),
        ("include: [../db.yml]\nservices:\n  app: {image: x}\n", Some(("db.yml", db)), "include[0]: a Compose file in another folder (db.yml) is not supported by Warren"),
        ("services:\n  app:\n    extends: {service: nowhere}\n", None, "services.app.extends: \"nowhere\" is not a service"),
        ("include: [docker-compose.yml]\nservices:\n  app: {image: x}\n", None, "include[0]: includes itself again"),
    ] {
        let mut files = vec![(".devcontainer/docker-compose.yml", compose)];
        files.extend(extra);
        let p = problems(config, &files);
        assert!(p.iter().any(|p| p.starts_with(want)), "{compose}: {p:#?}");
    }
}

const HEALTHY: &str = r#"
x-db: &db
  image: postgres:16
services:
  app:
    image: mcr.microsoft.com/devcontainers/base:debian
    command: ["sleep", "infinity"]
    depends_on:
      db: {condition: service_healthy}
      migrate: {condition: service_completed_successfully}
      cache: {condition: service_started}
  db:
    <<: *db
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U postgres"]
      interval: 2s
      timeout: 1s
      retries: 5
      start_period: 10s
  migrate:
    image: migrate/migrate
    command: ["-path", "/m", "up"]
  cache:
    image: redis:7
    ports: ["6379"]
    healthcheck:
      test: redis-cli ping
  extra:
    image: busybox
    profiles: [debug]
"#;

#[test]
fn dependencies_start_first_and_hold_the_start_until_healthy() {
    let config = r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#;
    let (c, d) = ok(config, &[(".devcontainer/docker-compose.yml", HEALTHY)]);
    let names: Vec<&str> = d.containers.iter().map(|c| c.name.as_str()).collect();
    // The completed one first (an init container), then the others in dependency order;
    // a service with a profile does not run.
    assert_eq!(names, ["migrate", "cache", "db", "app"]);
    assert!(d.container("migrate").unwrap().init_only);
    assert_eq!(d.pre_start, ["run-migrate"]);
    let h = d
        .container("db")
        .unwrap()
        .healthcheck
        .clone()
        .expect("held");
    assert_eq!(h.test, ["/bin/sh", "-c", "pg_isready -U postgres"]);
    assert_eq!(
        (
            h.interval_seconds,
            h.timeout_seconds,
            h.retries,
            h.start_period_seconds
        ),
        (2, 1, 5, 10)
    );
    // Nothing waits for the cache to be healthy: not held.
    assert!(d.container("cache").unwrap().healthcheck.is_none());
    assert_eq!(d.container("cache").unwrap().endpoints[0].target_port, 6379);
    let said: Vec<String> = c.notices.iter().map(ToString::to_string).collect();
    assert!(
        said.iter()
            .any(|n| n.contains("migrate runs to completion before every other service")),
        "{said:#?}"
    );

    // As the pod runs it: the init container, the hold on the database, the names.
    let agent = warren_types::config::AgentConfig::default();
    let rendered = render_preview(&d, "compose", &agent).unwrap();
    let deployment = rendered
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let order: Vec<&str> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["cache", "db", "app"]);
    let inits: Vec<&Value> = pod["initContainers"].as_array().unwrap().iter().collect();
    assert!(
        inits
            .iter()
            .any(|c| c["args"] == serde_json::json!(["-path", "/m", "up"])),
        "{inits:#?}"
    );
    let hook = &pod["containers"][1]["lifecycle"]["postStart"]["exec"]["command"];
    let hook: Vec<&str> = hook
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(hook[..2], ["/bin/sh", "-c"]);
    // name, timeout, bound (start period + interval × retries), then the test.
    assert_eq!(
        hook[3..],
        [
            "warren-healthcheck",
            "db",
            "1",
            "20",
            "/bin/sh",
            "-c",
            "pg_isready -U postgres"
        ]
    );
    assert_eq!(
        pod["hostAliases"],
        serde_json::json!([{"ip": "127.0.0.1", "hostnames": ["migrate", "cache", "db", "app"]}])
    );
}

#[test]
fn what_would_reach_past_the_workspace_is_refused_by_name() {
    let config = r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#;
    let cases: &[(&str, &str)] = &[
        ("privileged: true", "services.app.privileged: `privileged` is not supported by Warren"),
        ("cap_add: [ALL]", "services.app.cap_add[0]: `ALL` is every capability"),
        ("security_opt: [label=disable]", "services.app.security_opt[0]: the security option \"label=disable\" is not supported by Warren"),
        ("network_mode: host", "services.app.network_mode: `network_mode: \"host\"` is not supported by Warren"),
        ("volumes: [/var/run/docker.sock:/var/run/docker.sock]", "services.app.volumes[0]: a bind mount of \"/var/run/docker.sock\" is not supported by Warren"),
        ("devices: [/dev/kvm]", "services.app.devices: `devices` is not supported by Warren"),
        ("pid: host", "services.app.pid: `pid` is not supported by Warren"),
        ("volumes: [data:/data]", "services.app.volumes[0]: the volume \"data\" is not declared"),
        ("depends_on: [nowhere]", "services.app.depends_on.nowhere: \"nowhere\" is not a service"),
        ("frobnicate: 1", "services.app.frobnicate: the Compose key `frobnicate` is not supported by Warren"),
    ];
    for (extra, want) in cases {
        let compose = format!("services:\n  app:\n    image: x\n    {extra}\n");
        let p = problems(config, &[(".devcontainer/docker-compose.yml", &compose)]);
        assert!(p.iter().any(|p| p.starts_with(want)), "{extra}: {p:#?}");
    }
    let external = "services:\n  app:\n    image: x\n    volumes: [v:/v]\nvolumes:\n  v:\n    external: true\n";
    let p = problems(config, &[(".devcontainer/docker-compose.yml", external)]);
    assert!(
        p[0].starts_with("volumes.v.external: an external volume is not supported by Warren"),
        "{p:#?}"
    );
}

/// A service's `cap_add` and `security_opt` are asked of the agent's admin, as the dev
/// container's own `capAdd` and `securityOpt` are; the dev container's service gets both.
#[test]
fn capabilities_of_services_are_asked_of_the_agents_admin() {
    let config =
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "app", "capAdd": ["NET_ADMIN"]}"#;
    let compose = "services:\n  app:\n    image: x\n    cap_add: [SYS_PTRACE]\n  db:\n    image: y\n    security_opt: [\"seccomp:unconfined\"]\n";
    let (_, d) = ok(config, &[(".devcontainer/docker-compose.yml", compose)]);
    let app = d.containers.iter().find(|c| c.main).unwrap();
    assert_eq!(app.isolation.cap_add, ["NET_ADMIN", "SYS_PTRACE"]);
    assert!(app.isolation.security_opt.is_empty());
    let db = d.containers.iter().find(|c| c.name == "db").unwrap();
    assert!(db.isolation.cap_add.is_empty());
    assert_eq!(db.isolation.security_opt, ["seccomp=unconfined"]);
}

#[test]
fn mistakes_are_named() {
    let compose =
        |text: &str, config: &str| problems(config, &[(".devcontainer/docker-compose.yml", text)]);
    let config = r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#;
    let p = compose("services:\n  web:\n    image: x\n", config);
    assert!(
        p[0].starts_with("service: \"app\" is not a service of the Compose files (web)"),
        "{p:?}"
    );
    let p = compose("services:\n  app:\n    image: x\n    depends_on: [db]\n  db:\n    image: y\n    depends_on: [app]\n", config);
    assert!(
        p[0].contains("depend on each other in a cycle (app, db)"),
        "{p:?}"
    );
    let p = compose("services: [\n", config);
    assert!(
        p[0].starts_with(".devcontainer/docker-compose.yml: not valid YAML"),
        "{p:?}"
    );
    let p = compose(
        "services:\n  App_1:\n    image: x\n",
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "App_1"}"#,
    );
    assert!(p[0].contains("must be a DNS label"), "{p:?}");
    let p = compose(
        "services:\n  app:\n    image: x\n",
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "app", "forwardPorts": ["cache:6379"]}"#,
    );
    assert!(
        p[0].starts_with("forwardPorts[0]: \"cache\" is not a service that runs"),
        "{p:?}"
    );
    let p = problems(
        r#"{"dockerComposeFile": "missing.yml", "service": "app"}"#,
        &[],
    );
    assert_eq!(
        p,
        ["dockerComposeFile: .devcontainer/missing.yml is not in the repository"]
    );
    let p = problems(
        r#"{"dockerComposeFile": "../../up.yml", "service": "app"}"#,
        &[],
    );
    assert!(
        p[0].starts_with("dockerComposeFile: \"../../up.yml\" leaves the repository"),
        "{p:?}"
    );
    let p = problems(r#"{"image": "x", "forwardPorts": ["db:5432"]}"#, &[]);
    assert!(
        p[0].starts_with("forwardPorts[0]: forwarding db:5432"),
        "{p:?}"
    );
    let p = problems(r#"{"image": "x", "service": "app"}"#, &[]);
    assert_eq!(p, ["service: is read only with a `dockerComposeFile`"]);
}

#[test]
fn compose_files_merge_in_order() {
    let config = r#"{"dockerComposeFile": ["base.yml", "dev.yml"], "service": "app", "runServices": ["app"]}"#;
    let base = "services:\n  app:\n    image: x\n    environment: {A: '1', B: '2'}\n    ports: ['3000:3000']\n  worker:\n    image: w\n";
    let dev = "services:\n  app:\n    environment: [B=3]\n    ports: ['9229']\n    command: [sleep, infinity]\n";
    let (_, d) = ok(
        config,
        &[
            (".devcontainer/base.yml", base),
            (".devcontainer/dev.yml", dev),
        ],
    );
    let app = d.main_container();
    let env: Vec<(&str, &str)> = app
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(env, [("A", "1"), ("B", "3")]);
    let ports: Vec<u16> = app.endpoints.iter().map(|e| e.target_port).collect();
    assert_eq!(ports, [3000, 9229]);
    assert_eq!(app.args, ["sleep", "infinity"]);
    // `runServices` leaves the worker out.
    assert_eq!(d.containers.len(), 1);
}

#[test]
fn overriding_the_command_keeps_warren_running_the_dev_container() {
    let compose = "services:\n  app:\n    image: x\n    command: npm start\n";
    let files = [(".devcontainer/docker-compose.yml", compose)];
    let (_, d) = ok(
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "app", "overrideCommand": true}"#,
        &files,
    );
    assert!(d.main_container().args.is_empty());
    let (_, d) = ok(
        r#"{"dockerComposeFile": "docker-compose.yml", "service": "app"}"#,
        &files,
    );
    assert_eq!(d.main_container().args, ["/bin/sh", "-c", "npm start"]);
    // Without Compose, running the image's own command stays refused.
    let p = problems(r#"{"image": "x", "overrideCommand": false}"#, &[]);
    assert!(
        p[0].starts_with("overrideCommand: `overrideCommand: false`"),
        "{p:?}"
    );
}
