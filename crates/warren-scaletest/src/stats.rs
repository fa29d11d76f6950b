//! What each operation of a scale test took and how often it failed, and the percentiles the
//! report prints. Every sample is kept (a few bytes each: an hour at 500 requests a second is
//! under 10 MB), so the percentiles are exact rather than estimated.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Most distinct error messages kept per operation (each with its count).
const MAX_ERROR_KINDS: usize = 8;

#[derive(Debug, Default)]
struct Samples {
    micros: Vec<u64>,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
}

/// Samples of every operation, shared by the tasks that run them.
#[derive(Debug, Default)]
pub struct Recorder {
    ops: Mutex<BTreeMap<&'static str, Samples>>,
}

/// One operation's figures over a span of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpStats {
    pub op: String,
    pub count: u64,
    pub errors: u64,
    /// Completed calls per second over the span.
    pub per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The errors seen, by message, with their counts (the first few kinds).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub error_kinds: BTreeMap<String, u64>,
}

impl Recorder {
    /// Records one call of `op`: how long it took, and its error if it failed.
    pub fn record(&self, op: &'static str, took: Duration, error: Option<String>) {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let s = ops.entry(op).or_default();
        s.micros
            .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        if let Some(e) = error {
            s.errors += 1;
            let kinds = s.error_kinds.len();
            match s.error_kinds.get_mut(&e) {
                Some(n) => *n += 1,
                None if kinds < MAX_ERROR_KINDS => {
                    s.error_kinds.insert(e, 1);
                }
                None => {}
            }
        }
    }

    /// The figures of every operation so far, over `elapsed`.
    pub fn stats(&self, elapsed: Duration) -> Vec<OpStats> {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.iter()
            .map(|(op, s)| summarise(op, s, elapsed))
            .collect()
    }

    /// Every error recorded so far.
    pub fn errors(&self) -> u64 {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        ops.values().map(|s| s.errors).sum()
    }
}

fn summarise(op: &str, s: &Samples, elapsed: Duration) -> OpStats {
    let mut sorted = s.micros.clone();
    sorted.sort_unstable();
    let ms = |v: u64| v as f64 / 1000.0;
    OpStats {
        op: op.to_owned(),
        count: sorted.len() as u64,
        errors: s.errors,
        per_second: if elapsed.is_zero() {
            0.0
        } else {
            sorted.len() as f64 / elapsed.as_secs_f64()
        },
        p50_ms: ms(percentile(&sorted, 50.0)),
        p95_ms: ms(percentile(&sorted, 95.0)),
        p99_ms: ms(percentile(&sorted, 99.0)),
        max_ms: ms(sorted.last().copied().unwrap_or(0)),
        error_kinds: s.error_kinds.clone(),
    }
}

/// The nearest-rank percentile of sorted samples (0 for none).
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The figures as a table, one operation per line.
pub fn table(stats: &[OpStats]) -> String {
    let mut out = format!(
        "{:<10} {:>8} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
        "OP", "COUNT", "ERRORS", "RPS", "P50 MS", "P95 MS", "P99 MS", "MAX MS"
    );
    for s in stats {
        out.push_str(&format!(
            "{:<10} {:>8} {:>7} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}\n",
            s.op, s.count, s.errors, s.per_second, s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms
        ));
        for (e, n) in &s.error_kinds {
            out.push_str(&format!("           {n} × {e}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 95.0), 95);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 95.0), 7);
        assert_eq!(percentile(&[], 95.0), 0);
    }

    #[test]
    fn errors_are_counted_and_their_kinds_bounded() {
        let r = Recorder::default();
        r.record("show", Duration::from_millis(3), None);
        for i in 0..20 {
            r.record("show", Duration::from_millis(5), Some(format!("e{i}")));
        }
        r.record("show", Duration::from_millis(5), Some("e0".into()));
        let s = &r.stats(Duration::from_secs(2))[0];
        assert_eq!((s.count, s.errors), (22, 21));
        assert_eq!(s.error_kinds.len(), MAX_ERROR_KINDS);
        assert_eq!(s.error_kinds["e0"], 2);
        assert!((s.per_second - 11.0).abs() < 1e-9);
        assert_eq!(s.max_ms, 5.0);
        assert_eq!(r.errors(), 21);
    }
}
