//! Answers of the engine that say nothing about the request and are asked again briefly.

use std::time::Duration;

/// Podman reports a container that has just exited as `stopped` for a few milliseconds, a
/// state Docker's API (and so bollard's types) does not have, a listing that races with a
/// container's exit can fail with a 500 naming the vanished process, and a listing of images
/// that races with an image's removal (another workspace's build going) with a 500 saying the
/// image is "not known"; these answers are retried briefly.
pub(super) async fn retry_transient<T, F, Fut>(mut call: F) -> Result<T, bollard::errors::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, bollard::errors::Error>>,
{
    let mut attempts = 0;
    loop {
        match call().await {
            Err(e) if attempts < 40 && is_transient(&e) => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

fn is_transient(e: &bollard::errors::Error) -> bool {
    match e {
        bollard::errors::Error::JsonDataError { .. } => true,
        // e.g. "read /proc/24709/cgroup: no such process" while a container exits.
        bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message,
        } => {
            message.contains("no such process")
                || message.contains("no such file or directory")
                || message.contains("image not known")
        }
        _ => false,
    }
}
