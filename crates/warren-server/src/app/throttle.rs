//! Password guessing throttle for the two places that take a password (the OAuth login form
//! and `POST /api/v1/session`).
//!
//! Failures are counted per account and per client address. A key gets a few free failures;
//! after those, each further failure doubles the wait (up to [`MAX_DELAY_MS`]) before the
//! next attempt for that key is even checked, and attempts during the wait are refused
//! without looking at the password, so a guesser gets a handful of tries per hour instead of
//! thousands per second. A success clears the account's count but not the address's, so an
//! attacker cannot reset an address by signing in to an account of their own.
//!
//! Counts live in this process only: several servers behind one database each keep their
//! own (a guesser gains at most a factor of the instance count). Time comes from the
//! server's [`Clock`](crate::clock::Clock), so tests move it by hand.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Failures an account gets before it is slowed down.
const FREE_PER_ACCOUNT: u32 = 5;
/// Failures one client address gets (across accounts) before it is slowed down.
const FREE_PER_ADDRESS: u32 = 20;
/// The longest wait between attempts.
pub const MAX_DELAY_MS: i64 = 5 * 60 * 1000;
/// A key with no failure for this long is forgotten.
const FORGET_AFTER_MS: i64 = 15 * 60 * 1000;
/// Keys kept at most; past it, forgotten keys are pruned, then the oldest.
const MAX_KEYS: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Account(String),
    Address(IpAddr),
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last_ms: i64,
}

impl Failures {
    /// When the next attempt may be checked, for a key with `free` free failures.
    fn next_allowed_ms(&self, free: u32) -> i64 {
        if self.count < free {
            return i64::MIN;
        }
        let doublings = (self.count - free).min(20);
        let delay = (1000i64 << doublings).min(MAX_DELAY_MS);
        self.last_ms + delay
    }
}

/// Refused: too many recent failures; the caller may try again in `retry_after_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after_secs: u64,
}

impl Throttled {
    pub fn message(&self) -> String {
        format!(
            "too many failed sign-in attempts; try again in {} s",
            self.retry_after_secs
        )
    }
}

#[derive(Debug, Default)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<Key, Failures>>,
}

fn keys(username: &str, addr: Option<IpAddr>) -> impl Iterator<Item = (Key, u32)> {
    // Names are matched case-insensitively so `Alice` and `alice` share one count.
    let account = (
        Key::Account(username.trim().to_lowercase()),
        FREE_PER_ACCOUNT,
    );
    std::iter::once(account).chain(addr.map(|a| (Key::Address(a), FREE_PER_ADDRESS)))
}

impl LoginThrottle {
    /// Whether an attempt for `username` from `addr` may be checked now.
    pub fn check(
        &self,
        username: &str,
        addr: Option<IpAddr>,
        now_ms: i64,
    ) -> Result<(), Throttled> {
        let failures = self.failures.lock().expect("throttle lock poisoned");
        let wait = keys(username, addr)
            .filter_map(|(k, free)| {
                failures
                    .get(&k)
                    .map(|f| f.next_allowed_ms(free).saturating_sub(now_ms))
            })
            .max()
            .unwrap_or(0);
        if wait > 0 {
            // Round up: "try again in 0 s" would be wrong for any wait.
            return Err(Throttled {
                retry_after_secs: (wait as u64).div_ceil(1000),
            });
        }
        Ok(())
    }

    /// Counts a wrong password (or unknown user) for both keys.
    pub fn failed(&self, username: &str, addr: Option<IpAddr>, now_ms: i64) {
        let mut failures = self.failures.lock().expect("throttle lock poisoned");
        if failures.len() >= MAX_KEYS {
            failures.retain(|_, f| now_ms - f.last_ms < FORGET_AFTER_MS);
            if failures.len() >= MAX_KEYS {
                // Still full (a flood of fresh keys): drop the oldest half.
                let mut ages: Vec<i64> = failures.values().map(|f| f.last_ms).collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                failures.retain(|_, f| f.last_ms > cut);
            }
        }
        for (key, _) in keys(username, addr) {
            let f = failures.entry(key).or_insert(Failures {
                count: 0,
                last_ms: now_ms,
            });
            if now_ms - f.last_ms >= FORGET_AFTER_MS {
                f.count = 0;
            }
            f.count = f.count.saturating_add(1);
            f.last_ms = now_ms;
        }
    }

    /// A correct password: the account starts afresh (the address does not).
    pub fn succeeded(&self, username: &str) {
        let mut failures = self.failures.lock().expect("throttle lock poisoned");
        failures.remove(&Key::Account(username.trim().to_lowercase()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)));
    const B: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2)));

    #[test]
    fn an_account_gets_free_failures_then_doubling_waits() {
        let t = LoginThrottle::default();
        let mut now = 1_000_000;
        for _ in 0..FREE_PER_ACCOUNT {
            assert_eq!(t.check("alice", A, now), Ok(()));
            t.failed("alice", A, now);
        }
        // The sixth attempt waits a second, from another address and spelled differently too.
        assert_eq!(
            t.check("Alice", B, now),
            Err(Throttled {
                retry_after_secs: 1
            })
        );
        now += 1000;
        assert_eq!(t.check("alice", A, now), Ok(()));
        t.failed("alice", A, now);
        assert_eq!(
            t.check("alice", A, now + 1999),
            Err(Throttled {
                retry_after_secs: 1
            })
        );
        assert_eq!(t.check("alice", A, now + 2000), Ok(()));
        // Other accounts are not affected.
        assert_eq!(t.check("bob", B, now), Ok(()));
    }

    #[test]
    fn waits_are_capped_and_forgotten() {
        let t = LoginThrottle::default();
        let now = 0;
        for _ in 0..40 {
            t.failed("alice", None, now);
        }
        assert_eq!(
            t.check("alice", None, now),
            Err(Throttled {
                retry_after_secs: (MAX_DELAY_MS / 1000) as u64
            })
        );
        assert_eq!(t.check("alice", None, now + MAX_DELAY_MS), Ok(()));
        // Long after, a failure starts a fresh count.
        t.failed("alice", None, now + FORGET_AFTER_MS);
        assert_eq!(t.check("alice", None, now + FORGET_AFTER_MS), Ok(()));
    }

    #[test]
    fn success_clears_the_account_but_not_the_address() {
        let t = LoginThrottle::default();
        for i in 0..FREE_PER_ADDRESS {
            t.failed(&format!("user{i}"), A, 0);
        }
        t.failed("alice", A, 0);
        t.succeeded("alice");
        // The address sprayed many accounts: still slowed, for any account.
        assert!(t.check("carol", A, 0).is_err());
        assert_eq!(t.check("carol", B, 0), Ok(()));
        for _ in 0..FREE_PER_ACCOUNT {
            t.failed("dave", B, 0);
        }
        t.succeeded("dave");
        assert_eq!(t.check("dave", B, 0), Ok(()));
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = LoginThrottle::default();
        for i in 0..(MAX_KEYS as i64 + 10) {
            t.failed(&format!("u{i}"), None, i);
        }
        assert!(t.failures.lock().unwrap().len() <= MAX_KEYS);
    }
}
