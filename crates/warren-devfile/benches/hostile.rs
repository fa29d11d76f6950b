//! Worst-case devfile texts at the size cap: how long `parse_devfile` takes to accept or
//! refuse each (goal: under 1 s each), printed beside a baseline measured in the same run —
//! parsing an ordinary devfile of the same size — and the time the same text would cost
//! `serde_yaml` alone without the bounds check, where that stays affordable.
//!
//! Run: `cargo bench -p warren-devfile --bench hostile`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};
use warren_devfile::{parse_devfile, MAX_DEVFILE_BYTES};

const HEAD: &str =
    "schemaVersion: 2.2.0\ncomponents:\n  - name: dev\n    container:\n      image: busybox\n";

/// Just under the cap.
const SIZE: usize = MAX_DEVFILE_BYTES - 4096;

fn fill(unit: &str, head: &str, tail: &str) -> String {
    let n = (SIZE - head.len() - tail.len()) / unit.len();
    let mut s = String::with_capacity(SIZE);
    s.push_str(head);
    for _ in 0..n {
        s.push_str(unit);
    }
    s.push_str(tail);
    s
}

/// The cases: name, text.
fn cases() -> Vec<(&'static str, String)> {
    let mut v = vec![];
    // Ordinary structure: many commands (the baseline's shape).
    let mut i = 0;
    let mut ordinary = format!("{HEAD}commands:\n");
    while ordinary.len() < SIZE - 200 {
        ordinary.push_str(&format!(
            "  - id: c{i}\n    exec:\n      component: dev\n      commandLine: echo {i} && ls -l /projects\n"
        ));
        i += 1;
    }
    v.push(("ordinary (baseline)", ordinary));
    // Flow nesting as deep as the whole file allows: refused before parsing.
    let depth = (SIZE - HEAD.len() - 32) / 2;
    v.push((
        "flow nesting, depth ~500k",
        format!(
            "{HEAD}attributes:\n  x: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    ));
    // Flow nesting at the limit, repeated to fill the file: accepted structure, full cost.
    let unit = format!("    - {}1{}\n", "[".repeat(64), "]".repeat(64));
    v.push((
        "flow nesting at the limit (64), repeated",
        fill(&unit, &format!("{HEAD}attributes:\n  x:\n"), ""),
    ));
    // Block nesting as deep as the size allows (indentation grows quadratically).
    let mut block = format!("{HEAD}attributes:\n");
    let mut d = 1;
    while block.len() + 2 * d + 8 < SIZE {
        block.push_str(&format!("{}k:\n", "  ".repeat(d)));
        d += 1;
    }
    v.push(("block nesting, depth ~700", block));
    // One key as long as the file.
    let key = "k".repeat(SIZE - HEAD.len() - 32);
    v.push(("one long key", format!("{HEAD}attributes:\n  {key}: 1\n")));
    // Aliases: each repeats a large node (billion laughs, capped at 100 aliases).
    let big = format!("[{}]", vec!["xxxxxxxx"; 1000].join(", "));
    let mut laughs = format!("{HEAD}attributes:\n  a: &a {big}\n  b: [");
    laughs.push_str(&vec!["*a"; 100].join(", "));
    laughs.push_str("]\n");
    v.push(("100 aliases of a 10 KB node", laughs));
    // Too many aliases: refused before parsing.
    let many = fill(
        "*a, ",
        &format!("{HEAD}attributes:\n  a: &a 1\n  b: ["),
        "1]\n",
    );
    v.push(("aliases filling the file", many));
    // Many small flow collections.
    v.push((
        "small flow collections filling the file",
        fill("[[1]], ", &format!("{HEAD}attributes:\n  x: ["), "1]\n"),
    ));
    v
}

fn time(text: &str) -> (Duration, String) {
    let start = Instant::now();
    let outcome = match parse_devfile(black_box(text)) {
        Ok(_) => "accepted".to_owned(),
        Err(e) => {
            let m = e.to_string();
            let first = m
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            format!("refused: {}", first.chars().take(90).collect::<String>())
        }
    };
    (start.elapsed(), outcome)
}

fn main() {
    let cases = cases();
    let (baseline, _) = time(&cases[0].1);
    println!(
        "baseline: an ordinary {} KiB devfile parses in {:.1} ms",
        cases[0].1.len() >> 10,
        baseline.as_secs_f64() * 1000.0
    );
    let mut worst = Duration::ZERO;
    for (name, text) in &cases {
        // Median of three.
        let mut runs: Vec<(Duration, String)> = (0..3).map(|_| time(text)).collect();
        runs.sort_by_key(|r| r.0);
        let (t, outcome) = runs.swap_remove(1);
        worst = worst.max(t);
        println!(
            "{name:<42} {:>5} KiB {:>9.1} ms  {:>6.2}x baseline  {outcome}",
            text.len() >> 10,
            t.as_secs_f64() * 1000.0,
            t.as_secs_f64() / baseline.as_secs_f64()
        );
    }
    // Without the bounds check, for scale: serde_yaml alone on nesting depth 10,000 and
    // 20,000 (the rest of the file would take hours).
    for depth in [10_000usize, 20_000] {
        let text = format!("x: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        let start = Instant::now();
        let _ = black_box(serde_yaml::from_str::<serde_yaml::Value>(&text));
        println!(
            "unbounded serde_yaml, flow depth {depth:>6}: {:>9.1} ms  {:>6.2}x baseline",
            start.elapsed().as_secs_f64() * 1000.0,
            start.elapsed().as_secs_f64() / baseline.as_secs_f64()
        );
    }
    println!(
        "worst case through parse_devfile: {:.1} ms (goal < 1000 ms)",
        worst.as_secs_f64() * 1000.0
    );
}
