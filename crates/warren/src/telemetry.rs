//! Logging set-up for the long-running services: `RUST_LOG`-style filter, `WARREN_LOG_FORMAT=json`.

use tracing_subscriber::{fmt, EnvFilter};

pub fn init() {
    init_at("info");
}

/// As [`init`], logging at `default` when neither variable says otherwise (`warren
/// scaletest` keeps its thousand simulated agents' routine lines out of its progress).
pub fn init_at(default: &str) {
    let filter = EnvFilter::try_from_env("WARREN_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default));
    let json = std::env::var("WARREN_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
