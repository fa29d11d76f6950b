//! `warren connect`: attach this machine to the tree as the backing of one `proxy` mount,
//! with the connector token `warren mount create NAME --type proxy --connector` showed.

use crate::relay_cmd::shutdown_on_signals;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use url::Url;
use warren_agent::connection::ConnectionConfig;
use warren_agent::connector::ConnectorConfig;

#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// TOML file with any of the settings below (snake_case keys); flags and variables win.
    #[arg(long, env = "WARREN_CONNECT_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: ConnectSettings,
}

/// The connector's settings, from flags and variables or from the file (every key optional,
/// unknown keys refused).
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ConnectSettings {
    /// The relay's agent listener, e.g. https://relay.example.com:7081.
    #[arg(long, env = "WARREN_RELAY_URL")]
    relay_url: Option<Url>,
    /// CA bundle (PEM) trusted for an https relay besides the public roots.
    #[arg(long, env = "WARREN_RELAY_CA_FILE", value_name = "FILE")]
    relay_ca_file: Option<PathBuf>,
    /// The mount this machine backs (its token must be that mount's).
    #[arg(long, env = "WARREN_CONNECT_MOUNT")]
    mount: Option<String>,
    /// A port of this machine (on 127.0.0.1) to serve as `{port}-{mount}.{domain}`; repeat
    /// for more.
    #[arg(long = "port", env = "WARREN_CONNECT_PORTS", value_delimiter = ',')]
    ports: Vec<u16>,
    /// File holding the connector token (or set WARREN_CONNECTOR_TOKEN).
    #[arg(long, env = "WARREN_CONNECTOR_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

/// Whether this process runs as root: a connector is meant to run as the user whose machine
/// it shares, and everything it starts runs as that user.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

pub async fn run(args: ConnectArgs) -> anyhow::Result<()> {
    let s: ConnectSettings = crate::settings::layered(&args.settings, args.config.as_deref())?;
    let relay_url = s
        .relay_url
        .context("the relay URL is required: --relay-url, WARREN_RELAY_URL or relay_url")?;
    let mount = s
        .mount
        .context("the mount is required: --mount, WARREN_CONNECT_MOUNT or mount")?;
    let mut ports = s.ports;
    if ports.contains(&0) {
        bail!("port 0 is not a port a connector can serve");
    }
    ports.sort_unstable();
    ports.dedup();
    let token = crate::settings::secret("WARREN_CONNECTOR_TOKEN", s.token_file, "connector token")?
        .context(
            "the connector token is required: --token-file, WARREN_CONNECTOR_TOKEN_FILE, \
             WARREN_CONNECTOR_TOKEN or token_file",
        )?;
    if is_root() {
        tracing::warn!(
            "running as root: the web terminal and `warren ws ssh` into this mount get root \
             shells; run `warren connect` as the user whose machine this is"
        );
    }
    let mut connection = ConnectionConfig::new(relay_url, token);
    connection.relay_ca_file = s.relay_ca_file;
    if let Some(path) = &connection.relay_ca_file {
        // Named now rather than at the first dial.
        warren_tls::CaBundle::load(path).context("the relay's CA bundle")?;
    }
    let config = ConnectorConfig {
        connection,
        mount,
        ports,
    };
    warren_agent::connector::run(config, shutdown_on_signals()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_refuses_unknown_keys() {
        let err = toml::from_str::<ConnectSettings>("token = 'x'").unwrap_err();
        assert!(err.to_string().contains("unknown field `token`"), "{err}");
        let ok: ConnectSettings = toml::from_str("mount = 'gpu'\nports = [22, 8888]").unwrap();
        assert_eq!(ok.ports, vec![22, 8888]);
    }
}
