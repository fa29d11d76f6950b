//! Upgrades: a database written by every released schema version (the fixtures in
//! `tests/fixtures/schema/{sqlite,postgres}/v<N>.sql`, dumps of an installation populated
//! through the API by that release, sealed with `tests/fixtures/schema/secret.key`) opens with
//! this release on both databases: the migrations since run forward, and every kind of row is
//! still there, its sealed secrets readable. It also guards the migrations themselves: sqlx
//! refuses a database whose recorded checksum of an applied migration differs from the file,
//! so editing a released migration fails here.
//!
//! At each release, add its fixtures:
//! `WARREN_TEST_DATABASE_URL=… cargo test -p warren-server --test it upgrades:: -- --ignored`
//! (needs `sqlite3` and `pg_dump`).

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::json;
use std::path::{Path, PathBuf};
use warren_server::{backup, Server, ServerConfig};
use warren_testkit::process::output_ok;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema");
/// Stands for the PostgreSQL schema a fixture is loaded into.
const SCHEMA: &str = "__SCHEMA__";

/// The fixtures of `kind`, oldest first: (schema version, file).
fn fixtures(kind: &str) -> Vec<(i64, PathBuf)> {
    let mut v: Vec<(i64, PathBuf)> = std::fs::read_dir(Path::new(FIXTURES).join(kind))
        .map(|d| {
            d.filter_map(|e| {
                let p = e.ok()?.path();
                let n = p
                    .file_name()?
                    .to_str()?
                    .strip_prefix('v')?
                    .strip_suffix(".sql")?
                    .parse()
                    .ok()?;
                Some((n, p))
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Every kind of row a release writes, through its API.
async fn populate(s: &TestServer) {
    s.agent("upgrade-agent", json!({})).await;
    let ann = s.user("ann", &["api", "workspace"]).await;
    let (st, b) = s
        .admin(
            Method::POST,
            "/api/v1/spaces",
            Some(json!({"path": "acme"})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s
        .admin(
            Method::PUT,
            "/api/v1/spaces/acme/members/ann",
            Some(json!({"role": "developer"})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    s.workspace(
        &ann,
        json!({"name": "upgrade-ws", "space": "acme", "devfile": WEB_DEVFILE}),
    )
    .await;
    let (st, b) = s
        .call(
            Method::POST,
            "/api/v1/mounts",
            Some(&ann),
            Some(
                json!({"name": "old-upgrade-ws", "type": "redirect", "ref": "upgrade-ws",
                        "space": "acme"}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s
        .admin(
            Method::POST,
            "/api/v1/oauth/clients",
            Some(json!({"client_id": "upgrade-client", "name": "Upgrade",
                        "redirect_uris": ["https://tool.example.com/cb"]})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
}

/// A connector mount's agent row as releases before the `kind` column wrote it: only its
/// name said what it is.
const OLD_CONNECTOR_ROW: &str = "INSERT INTO agents (name, token_hash, config, created_at, \
     updated_at) VALUES ('connector-before', 'digest-before', '{}', 1, 1)";

/// Agent rows are told apart by `kind`: the one made for a connector before the column
/// existed, and one the previous release makes beside this one during a rolling upgrade
/// (an insert that knows nothing of `kind`), are connectors; the fixture's agent runs
/// workspaces. Only the latter is listed as an agent.
async fn check_agent_kinds(store: &warren_server::store::Store, what: &str) {
    use warren_server::store::agents::AgentKind;
    sqlx::query(
        "INSERT INTO agents (name, token_hash, config, created_at, updated_at) \
         VALUES ('connector-during', 'digest-during', '{}', 2, 2)",
    )
    .execute(&store.db.pool)
    .await
    .unwrap_or_else(|e| panic!("{what}: the previous release's insert: {e}"));
    for (name, kind) in [
        ("connector-before", AgentKind::Connector),
        ("connector-during", AgentKind::Connector),
        ("upgrade-agent", AgentKind::Runtime),
    ] {
        let row = store.agent_by_key(name).await.unwrap();
        assert_eq!(row.map(|a| a.kind), Some(kind), "{what}: agent {name}");
    }
    let listed: Vec<String> = store
        .list_agents()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(listed, ["upgrade-agent"], "{what}");
}

/// What [`populate`] wrote, read back by this release.
async fn check(server: &Server, what: &str) {
    let store = &server.state().store;
    let ann = store.user_by_name("ann").await.unwrap();
    assert!(ann.is_some(), "{what}: the user");
    let ws = store
        .workspace_by_name("upgrade-ws")
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: the workspace"));
    assert_eq!(ws.space_path, "acme", "{what}");
    assert!(
        !ws.objects(store)
            .expect("sealed objects decrypt")
            .is_empty(),
        "{what}"
    );
    assert!(
        store
            .list_spaces()
            .await
            .unwrap()
            .iter()
            .any(|s| s.path == "acme"),
        "{what}: the space"
    );
    assert!(
        store
            .mount_by_name("old-upgrade-ws")
            .await
            .unwrap()
            .is_some(),
        "{what}: the mount"
    );
    assert!(
        store
            .oauth_client("upgrade-client")
            .await
            .unwrap()
            .is_some(),
        "{what}: the OAuth client"
    );
    // Tokens are issued on the upgraded rows (the write path works, not only reads).
    warren_server::app::tokens::issue_for(server.state(), "ann", "t", 1)
        .await
        .unwrap_or_else(|e| panic!("{what}: a token for ann: {e}"));
}

fn key_file() -> PathBuf {
    Path::new(FIXTURES).join("secret.key")
}

#[tokio::test]
async fn every_released_schema_opens_with_its_data() {
    let sqlite = fixtures("sqlite");
    assert!(!sqlite.is_empty(), "no SQLite fixture in {FIXTURES}");
    for (version, file) in &sqlite {
        assert!(*version <= backup::known_schema_version());
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("warren.db");
        let url = format!("sqlite://{}?mode=rwc", db.display());
        let sql = std::fs::read_to_string(file).unwrap();
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::raw_sql(&sql)
            .execute(&pool)
            .await
            .expect("load the fixture");
        sqlx::raw_sql(OLD_CONNECTOR_ROW)
            .execute(&pool)
            .await
            .expect("a connector row as the fixture's release wrote it");
        pool.close().await;
        let mut config = ServerConfig::new(dir.path().join("home"));
        config.database_url = Some(url);
        config.secret_key_file = Some(key_file());
        let server = Server::prepare(config)
            .await
            .unwrap_or_else(|e| panic!("sqlite v{version}: {e:?}"));
        check(&server, &format!("sqlite v{version}")).await;
        check_agent_kinds(&server.state().store, &format!("sqlite v{version}")).await;
    }
    let Ok(base) = std::env::var("WARREN_TEST_DATABASE_URL") else {
        eprintln!("skipping the PostgreSQL fixtures: WARREN_TEST_DATABASE_URL is not set");
        return;
    };
    let postgres = fixtures("postgres");
    assert!(!postgres.is_empty(), "no PostgreSQL fixture in {FIXTURES}");
    for (version, file) in &postgres {
        let schema = format!("u_{}", uuid::Uuid::new_v4().simple());
        let sql = std::fs::read_to_string(file)
            .unwrap()
            .replace(SCHEMA, &schema);
        let pool = sqlx::PgPool::connect(&base).await.unwrap();
        sqlx::raw_sql(&sql)
            .execute(&pool)
            .await
            .expect("load the fixture");
        sqlx::raw_sql(&format!("SET search_path TO {schema}; {OLD_CONNECTOR_ROW}"))
            .execute(&pool)
            .await
            .expect("a connector row as the fixture's release wrote it");
        let sep = if base.contains('?') { '&' } else { '?' };
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::new(dir.path().join("home"));
        config.database_url = Some(format!("{base}{sep}options=-c%20search_path%3D{schema}"));
        config.secret_key_file = Some(key_file());
        let opened = Server::prepare(config).await;
        let result = match opened {
            Ok(server) => {
                check(&server, &format!("postgres v{version}")).await;
                check_agent_kinds(&server.state().store, &format!("postgres v{version}")).await;
                Ok(())
            }
            Err(e) => Err(format!("postgres v{version}: {e:?}")),
        };
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&pool)
            .await
            .unwrap();
        result.unwrap();
    }
}

/// A rolling upgrade runs old replicas on a schema a newer release migrated: one of them
/// restarting there still starts (the migrations it does not know are accepted, and said).
#[tokio::test]
async fn a_database_migrated_by_a_newer_release_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("warren.db").display()
    );
    let mut config = ServerConfig::new(dir.path().join("home"));
    config.database_url = Some(url.clone());
    drop(
        Server::prepare(config.clone())
            .await
            .expect("a new database"),
    );
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'from a newer release', 1, x'00', 0)",
    )
    .execute(&pool)
    .await
    .expect("record a migration this release does not know");
    pool.close().await;
    let server = Server::prepare(config)
        .await
        .expect("an older replica starts on the newer schema");
    drop(server);
}

/// Writes this release's fixtures (run at each release; see the top of the file).
#[tokio::test]
#[ignore = "writes fixtures: run at a release"]
async fn write_fixtures() {
    let version = backup::known_schema_version();
    let key = key_file();
    // One key for every fixture: sealed rows of any of them open with it.
    if !key.exists() {
        std::fs::create_dir_all(FIXTURES).unwrap();
        std::fs::write(&key, hex_key()).unwrap();
    }
    for db in databases() {
        let k = key.clone();
        let s = TestServer::start_with(&db, move |c| c.secret_key_file = Some(k)).await;
        populate(&s).await;
        let out = Path::new(FIXTURES)
            .join(s.label)
            .join(format!("v{version}.sql"));
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let dump = match &db {
            DbChoice::Sqlite => {
                let file =
                    s.db.url
                        .trim_start_matches("sqlite://")
                        .split('?')
                        .next()
                        .unwrap()
                        .to_owned();
                let o = output_ok(std::process::Command::new("sqlite3").args([&file, ".dump"]));
                String::from_utf8(o.stdout).unwrap()
            }
            DbChoice::Postgres(base) => {
                let schema = s.db.url.rsplit("search_path%3D").next().unwrap().to_owned();
                let o = output_ok(std::process::Command::new("pg_dump").args([
                    "--inserts",
                    "--no-owner",
                    "--no-privileges",
                    "--schema",
                    &schema,
                    base,
                ]));
                // psql's meta-commands (`\restrict`) are not SQL.
                String::from_utf8(o.stdout)
                    .unwrap()
                    .lines()
                    .filter(|l| !l.starts_with('\\'))
                    .collect::<Vec<_>>()
                    .join("\n")
                    .replace(&schema, SCHEMA)
            }
        };
        std::fs::write(&out, dump).unwrap();
        eprintln!("wrote {}", out.display());
        s.stop().await;
    }
}

fn hex_key() -> String {
    use rand::RngCore;
    let mut k = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut k);
    hex::encode(k)
}
