//! What the server's benchmarks share: running one benchmark on SQLite and, when
//! `WARREN_TEST_DATABASE_URL` is set, on PostgreSQL in a schema of its own, dropped after.

/// Runs `bench(label, database URL, home)` on each database, on a multi-threaded runtime.
pub fn on_each_database<F, Fut>(bench: F)
where
    F: Fn(&'static str, String, std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("bench.db").display()
        );
        bench("sqlite", url, dir.path().to_owned()).await;
        match std::env::var("WARREN_TEST_DATABASE_URL") {
            Ok(base) if !base.is_empty() => {
                sqlx::any::install_default_drivers();
                let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
                let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&base)
                    .await
                    .unwrap();
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
                let pg_home = tempfile::tempdir().unwrap();
                bench("postgres", url, pg_home.path().to_owned()).await;
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            _ => eprintln!("skipping PostgreSQL: WARREN_TEST_DATABASE_URL is not set"),
        }
    });
}
