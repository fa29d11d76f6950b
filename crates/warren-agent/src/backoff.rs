//! The agent's one retry delay: exponential from an initial delay, capped, with jitter so
//! that many agents (or workspaces) that failed together do not retry together.

use rand::Rng;
use std::time::Duration;

/// The delay before retry number `failures + 1`: uniformly in [d/2, d], where d is `initial`
/// doubled per earlier failure, at most `max`.
pub fn jittered(initial: Duration, max: Duration, failures: u32) -> Duration {
    let d = initial.saturating_mul(1u32 << failures.min(20)).min(max);
    let half = d / 2;
    half + rand::thread_rng().gen_range(Duration::ZERO..=half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_is_bounded_and_jittered_within_half() {
        let (initial, max) = (Duration::from_secs(1), Duration::from_secs(60));
        let first = jittered(initial, max, 0);
        assert!(first >= Duration::from_millis(500) && first <= initial);
        let third = jittered(initial, max, 2);
        assert!(third >= Duration::from_secs(2) && third <= Duration::from_secs(4));
        for failures in [6, 20, 1000, u32::MAX] {
            let d = jittered(initial, max, failures);
            assert!(d >= max / 2 && d <= max, "{failures}: {d:?}");
        }
    }
}
