//! The one way a push webhook's secret is set, generated or removed, for GitOps repositories
//! and projects' prebuilds alike: the arguments, and the secret they ask for.

use crate::commands::read_stdin_line;
use crate::CliError;
use clap::Args;
use rand::RngCore;

/// What to do with a webhook's secret: exactly one of these.
#[derive(Debug, Args)]
pub struct SecretChoice {
    /// Read the new secret from standard input.
    #[arg(long, conflicts_with_all = ["generate", "remove"])]
    pub stdin: bool,
    /// Generate a secret and print it once.
    #[arg(long, conflicts_with = "remove")]
    pub generate: bool,
    /// Remove the secret: the webhook's pushes are refused.
    #[arg(long)]
    pub remove: bool,
}

impl SecretChoice {
    /// The new secret (`None`: remove it), read or generated as asked.
    pub fn secret(&self) -> Result<Option<String>, CliError> {
        match (self.stdin, self.generate, self.remove) {
            (true, _, _) => Ok(Some(read_stdin_line("webhook secret")?)),
            (_, true, _) => Ok(Some(new_webhook_secret())),
            (_, _, true) => Ok(None),
            _ => Err(CliError::Usage(
                "say what to do: --stdin, --generate or --remove".into(),
            )),
        }
    }
}

/// 32 random bytes, hex-encoded: a webhook secret the forge is given once.
pub(crate) fn new_webhook_secret() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
