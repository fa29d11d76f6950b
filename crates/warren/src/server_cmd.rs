//! `warren server`: parse the server's configuration and run it.

#[derive(Debug, clap::Args)]
pub struct ServerArgs {}

pub async fn run(_args: ServerArgs) -> anyhow::Result<()> {
    anyhow::bail!("the server is being wired up")
}
