//! The lease that lets one server replica run the housekeeping jobs: taken, renewed,
//! refused to others while valid, taken over once expired, given up; and of many servers
//! racing for it, exactly one wins. On SQLite and PostgreSQL.

use crate::common;

use common::{databases, TestDb};
use warren_server::crypto::SecretBox;
use warren_server::db::Db;
use warren_server::store::Store;

async fn store(db: &TestDb) -> Store {
    let d = Db::connect(&db.url, 8).await.expect("connect");
    Store::new(d, SecretBox::new([7; 32]))
}

#[tokio::test]
async fn one_holder_at_a_time() {
    for choice in databases() {
        let label = choice.label();
        let db = TestDb::new(&choice).await;
        let s = store(&db).await;
        let hold = |holder: &'static str, now: i64| {
            let s = s.clone();
            async move { s.hold_lease("jobs", holder, now, now + 1000).await.unwrap() }
        };
        assert!(hold("a", 0).await, "{label}: a free lease is taken");
        assert!(!hold("b", 500).await, "{label}: a valid lease is refused");
        assert!(hold("a", 900).await, "{label}: the holder renews");
        assert!(
            !hold("b", 1500).await,
            "{label}: renewed, so still valid at 1500"
        );
        assert_eq!(
            s.lease_holder("jobs").await.unwrap(),
            Some(("a".into(), 1900))
        );
        assert!(hold("b", 1900).await, "{label}: expired, so taken over");
        assert!(!hold("a", 2000).await, "{label}: the old holder lost it");
        // Giving up a lease one does not hold changes nothing.
        s.release_lease("jobs", "a").await.unwrap();
        assert!(!hold("a", 2100).await, "{label}: b still holds it");
        s.release_lease("jobs", "b").await.unwrap();
        assert_eq!(s.lease_holder("jobs").await.unwrap(), None);
        assert!(hold("a", 2200).await, "{label}: a released lease is free");
        // Leases are independent of each other.
        assert!(s.hold_lease("other", "b", 2200, 3200).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_servers_elect_exactly_one() {
    for choice in databases() {
        let label = choice.label();
        let db = TestDb::new(&choice).await;
        let s = store(&db).await;
        for round in 0..5i64 {
            // Every round starts after the previous lease expired.
            let now = round * 10_000;
            let racers: Vec<_> = (0..8)
                .map(|i| {
                    let s = s.clone();
                    tokio::spawn(async move {
                        s.hold_lease("jobs", &format!("server-{i}"), now, now + 5_000)
                            .await
                            .unwrap()
                    })
                })
                .collect();
            let mut winners = 0;
            for r in racers {
                winners += usize::from(r.await.unwrap());
            }
            assert_eq!(winners, 1, "{label} round {round}: exactly one holder");
        }
    }
}
