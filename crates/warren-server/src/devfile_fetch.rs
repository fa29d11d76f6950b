//! Fetches the parents of devfiles (`parent.uri`, devfile registries) over HTTP, bounded in
//! size and time, and keeps what it fetched for a few minutes: creating ten workspaces from
//! one registry stack reads the registry once.
//!
//! The URLs are chosen by users, so every fetch goes through the server's outbound guard
//! ([`warren_netguard::Guard`]): no loopback, private, link-local or other special-purpose
//! address, before or after a redirect, unless the operator allows it; and failures say
//! what kind of failure it was, never what the network answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How long a fetched document is reused.
const TTL: Duration = Duration::from_secs(300);
/// Most documents kept.
const CAPACITY: usize = 256;
/// Longest a fetch may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// URL → when it was fetched, and its text.
type Cache = HashMap<String, (Instant, Arc<str>)>;

#[derive(Debug, Clone)]
pub struct DevfileFetcher {
    client: Option<reqwest::Client>,
    guard: warren_netguard::Guard,
    /// Registries for parents named by `id` without `registryUrl`, in order.
    pub registries: Arc<Vec<String>>,
    cache: Arc<Mutex<Cache>>,
}

impl DevfileFetcher {
    pub fn new(registries: Vec<String>, guard: &warren_netguard::Guard) -> Self {
        DevfileFetcher {
            // A client that cannot be built is no reason to fetch without the guard.
            client: guard
                .client(reqwest::Client::builder().timeout(TIMEOUT), 5)
                .build()
                .map_err(|e| tracing::error!(error = %warren_types::error_chain(&e), "cannot build the guarded HTTP client; devfile parents cannot be fetched"))
                .ok(),
            guard: guard.clone(),
            registries: Arc::new(registries),
            cache: Arc::default(),
        }
    }

    /// `url`'s body as text: from the cache when fetched lately, else over HTTP(S). The
    /// error is a sentence for the user.
    pub async fn fetch(&self, url: &str) -> Result<Arc<str>, String> {
        if let Some((at, text)) = self.lock().get(url) {
            if at.elapsed() < TTL {
                return Ok(text.clone());
            }
        }
        let text: Arc<str> = self.fetch_now(url).await?.into();
        let mut cache = self.lock();
        if cache.len() >= CAPACITY {
            // Drop the oldest: the cache is small, a scan is cheap.
            if let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            {
                cache.remove(&oldest);
            }
        }
        cache.insert(url.to_owned(), (Instant::now(), text.clone()));
        Ok(text)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // A panic while holding the lock leaves a map that is still valid.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn fetch_now(&self, url: &str) -> Result<String, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        match self.guard.check_url(&parsed) {
            Ok(()) => {}
            Err(warren_netguard::GuardError::Scheme(_)) => {
                return Err("only http and https URLs are fetched".into())
            }
            Err(warren_netguard::GuardError::Credentials) => {
                return Err(
                    "URLs with credentials are refused (they would be stored with the workspace)"
                        .into(),
                )
            }
            Err(e) => return Err(format!("cannot fetch: {e}")),
        }
        let Some(client) = &self.client else {
            return Err("the server cannot fetch URLs (see its log)".into());
        };
        let mut resp = client
            .get(parsed)
            .send()
            .await
            .map_err(|e| format!("cannot fetch: {}", warren_netguard::user_message(&e)))?;
        if !resp.status().is_success() {
            return Err(format!(
                "HTTP {} {}",
                resp.status().as_u16(),
                resp.status().canonical_reason().unwrap_or("")
            )
            .trim_end()
            .to_owned());
        }
        let max = warren_devfile_limit();
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| format!("reading the answer: {}", warren_netguard::user_message(&e)))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > max {
                return Err(format!("larger than {} KiB", max >> 10));
            }
        }
        String::from_utf8(body).map_err(|_| "not UTF-8 text".to_owned())
    }
}

/// The largest document fetched (a devfile or a registry index).
fn warren_devfile_limit() -> usize {
    crate::app::render::MAX_FETCHED_BYTES
}
