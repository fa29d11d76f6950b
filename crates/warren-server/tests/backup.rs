//! `warren admin backup` / `restore` on SQLite: a backup taken while a server keeps writing is
//! consistent and complete up to its moment; restored into a fresh home, a server opens it and
//! reads its sealed secrets with the restored key; restore refuses a damaged or foreign
//! directory, a newer schema, replacing a database or a different key (unless forced); a
//! PostgreSQL installation is pointed at pg_dump.

use crate::common;

use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use warren_server::backup::{self, BackupError};
use warren_server::{Server, ServerConfig};

fn config_of(s: &TestServer) -> ServerConfig {
    let mut c = ServerConfig::new(s.db.dir.path().join("home"));
    c.database_url = Some(s.db.url.clone());
    c
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[tokio::test]
async fn sqlite_backup_while_serving_and_restore() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    s.agent("a1", json!({})).await;
    let ann = s.user("ann", &["api", "workspace"]).await;
    // A workspace's rendered objects are sealed with the installation's key.
    s.workspace(&ann, json!({"name": "kept", "devfile": WEB_DEVFILE}))
        .await;

    // Writes keep coming while the backup is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, state) = (stop.clone(), s.state.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                state
                    .store
                    .insert_user(&format!("w{n}"), "!x", false, 0)
                    .await
                    .expect("a write during the backup");
                n += 1;
                tokio::task::yield_now().await;
            }
            n
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b1");
    let config = config_of(&s);
    let manifest = backup::backup(&config, &out).await.expect("backup");
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 0, "no write ran beside the backup");
    assert_eq!(manifest.schema_version, backup::known_schema_version());
    use std::os::unix::fs::PermissionsExt;
    for (f, mode) in [("", 0o700), ("warren.db", 0o600), ("secret.key", 0o600)] {
        let m = std::fs::metadata(out.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(m, mode, "{f}: {m:o}");
    }
    s.user("after-the-backup", &["api"]).await;

    // Into a non-empty directory: refused, nothing overwritten.
    let err = backup::backup(&config, &out).await.unwrap_err();
    assert!(matches!(err, BackupError::NotEmpty(_)), "{err}");

    // Restored into a fresh home, a server opens it and decrypts what was sealed.
    let home2 = dir.path().join("home2");
    let config2 = ServerConfig::new(&home2);
    backup::restore(&config2, &out, false)
        .await
        .expect("restore");
    let server = Server::prepare(config2.clone())
        .await
        .expect("open restored");
    let store = &server.state().store;
    assert!(store.user_by_name("ann").await.unwrap().is_some());
    assert!(store
        .user_by_name("after-the-backup")
        .await
        .unwrap()
        .is_none());
    let kept = store
        .workspace_by_name("kept")
        .await
        .unwrap()
        .expect("the workspace");
    let objects = kept
        .objects(store)
        .expect("sealed columns decrypt with the restored key");
    assert!(!objects.is_empty());
    // Consistent: every row is there or not, and the copy passes SQLite's own check.
    let row: (String,) = sqlx::query_as("PRAGMA integrity_check")
        .fetch_one(
            &sqlx::SqlitePool::connect(&config2.effective_database_url())
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(row.0, "ok");
    assert!(
        server.bootstrap_admin().is_none(),
        "no new admin on a restored database"
    );
    // Not under a running server, even forced.
    let err = backup::restore(&config2, &out, true).await.unwrap_err();
    assert!(matches!(err, BackupError::InUse(_)), "{err}");
    drop(server);

    // Again onto the same home: the database is there.
    let err = backup::restore(&config2, &out, false).await.unwrap_err();
    assert!(matches!(err, BackupError::Exists(_)), "{err}");

    // A home holding another key: refused, then replaced when forced.
    let home3 = dir.path().join("home3");
    let config3 = ServerConfig::new(&home3);
    std::fs::create_dir_all(home3.join("keys")).unwrap();
    std::fs::write(home3.join("keys/secret.key"), "11".repeat(32)).unwrap();
    let err = backup::restore(&config3, &out, false).await.unwrap_err();
    assert!(matches!(err, BackupError::KeyDiffers(_)), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    backup::restore(&config3, &out, true).await.expect("forced");
    let server = Server::prepare(config3).await.expect("open");
    let store = &server.state().store;
    let kept = store.workspace_by_name("kept").await.unwrap().unwrap();
    kept.objects(store).expect("decrypts with the replaced key");
    drop(server);

    // Damaged, foreign, or from a newer Warren: refused before anything is written.
    let fresh = |n: &str| ServerConfig::new(dir.path().join(n));
    let bad = dir.path().join("damaged");
    copy_dir(&out, &bad);
    let mut bytes = std::fs::read(bad.join("warren.db")).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(bad.join("warren.db"), bytes).unwrap();
    let err = backup::restore(&fresh("h4"), &bad, false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackupError::Damaged { .. }) && err.to_string().contains("checksum"),
        "{err}"
    );
    assert!(!dir.path().join("h4/warren.db").exists());
    let err = backup::restore(&fresh("h5"), dir.path(), false)
        .await
        .unwrap_err();
    assert!(matches!(err, BackupError::NotBackup(_)), "{err}");
    let newer = dir.path().join("newer");
    copy_dir(&out, &newer);
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(newer.join(backup::MANIFEST)).unwrap()).unwrap();
    m["schema_version"] = json!(backup::known_schema_version() + 1);
    std::fs::write(newer.join(backup::MANIFEST), m.to_string()).unwrap();
    let err = backup::restore(&fresh("h6"), &newer, false)
        .await
        .unwrap_err();
    assert!(matches!(err, BackupError::TooNew { .. }), "{err}");

    // PostgreSQL: its own tools.
    let mut pg = fresh("h7");
    pg.database_url = Some("postgres://warren@db/warren".into());
    let err = backup::backup(&pg, &dir.path().join("pg"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("pg_dump"), "{err}");
    s.stop().await;
}
