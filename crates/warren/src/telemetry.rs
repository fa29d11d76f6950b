//! Logging set-up for the long-running services: `RUST_LOG`-style filter, `WARREN_LOG_FORMAT=json`.

use tracing_subscriber::{fmt, EnvFilter};

pub fn init() {
    let filter = EnvFilter::try_from_env("WARREN_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("WARREN_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
