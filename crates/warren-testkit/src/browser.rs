//! Headless Chromium driven over the Chrome DevTools Protocol, for tests that need a real
//! browser: cookies, redirects, forms, JavaScript and WebSockets exactly as users get them.
//!
//! Chromium resolves every `*.localhost` name to the loopback address by itself, so
//! workspace hosts work with no DNS set-up, as they do for users of `warren up`.

use anyhow::{bail, Context, Result};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The Chromium binary, if one is installed.
pub fn chromium_path() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| {
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join(name))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .find(|p| p.is_file())
}

/// A headless Chromium with a fresh profile; killed on drop.
pub struct Chromium {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Chromium {
    /// Starts Chromium; `None` when none is installed.
    pub async fn start() -> Result<Option<Chromium>> {
        let Some(bin) = chromium_path() else {
            return Ok(None);
        };
        let profile = tempfile::tempdir().context("creating a Chromium profile directory")?;
        let child = Command::new(bin)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting Chromium")?;
        let mut browser = Chromium {
            child,
            port: 0,
            _profile: profile,
        };
        // Chromium writes the port it bound into the profile once DevTools listens.
        let file = browser._profile.path().join("DevToolsActivePort");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                if let Some(port) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
                    browser.port = port;
                    break;
                }
            }
            if let Ok(Some(status)) = browser.child.try_wait() {
                bail!("Chromium exited at start with {status}");
            }
            if tokio::time::Instant::now() > deadline {
                bail!("Chromium did not open its DevTools port within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Some(browser))
    }

    /// Opens a new tab.
    pub async fn tab(&self) -> Result<Tab> {
        let target: Value = reqwest::Client::new()
            .put(format!(
                "http://127.0.0.1:{}/json/new?about:blank",
                self.port
            ))
            .send()
            .await
            .context("asking Chromium for a new tab")?
            .error_for_status()?
            .json()
            .await?;
        let url = target["webSocketDebuggerUrl"]
            .as_str()
            .context("the new tab has no DevTools URL")?;
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .context("connecting to the tab's DevTools")?;
        let mut tab = Tab {
            ws,
            next_id: 0,
            events: Default::default(),
        };
        tab.call("Page.enable", json!({})).await?;
        tab.call("Runtime.enable", json!({})).await?;
        Ok(tab)
    }
}

/// One browser tab.
pub struct Tab {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// DevTools events received while waiting for answers (newest last, bounded), for
    /// diagnosing a failed test: enable a domain (`Network.enable`) to collect its events.
    pub events: std::collections::VecDeque<Value>,
}

impl Tab {
    /// Fills in and submits the server's login form once the tab shows it.
    pub async fn sign_in(&mut self, user: &crate::TestUser) -> Result<()> {
        self.wait_until("document.getElementById('password') !== null", 30)
            .await
            .context("the server's login page")?;
        self.eval(&format!(
            "document.getElementById('username').value = {u:?}; \
             document.getElementById('password').value = {p:?}; \
             document.getElementById('password').form.submit(); true",
            u = user.username,
            p = user.password
        ))
        .await?;
        Ok(())
    }
    /// Sends a DevTools command and waits for its result (events in between are skipped).
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.ws
            .send(Message::text(
                json!({"id": id, "method": method, "params": params}).to_string(),
            ))
            .await
            .with_context(|| format!("sending {method}"))?;
        let wait = async {
            while let Some(msg) = self.ws.next().await {
                let msg = msg.with_context(|| format!("reading the answer to {method}"))?;
                let Message::Text(text) = msg else { continue };
                let v: Value = serde_json::from_str(&text)?;
                if v["id"].as_u64() == Some(id) {
                    if let Some(e) = v.get("error") {
                        bail!("{method} failed: {e}");
                    }
                    return Ok(v["result"].clone());
                }
                if v.get("method").is_some() {
                    if self.events.len() >= 1000 {
                        self.events.pop_front();
                    }
                    self.events.push_back(v);
                }
            }
            bail!("DevTools closed while waiting for {method}")
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .with_context(|| format!("no answer to {method} within 30 s"))?
    }

    /// Navigates to `url` (returns once the navigation started).
    pub async fn goto(&mut self, url: &str) -> Result<()> {
        let r = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(e) = r.get("errorText").and_then(Value::as_str) {
            bail!("navigating to {url}: {e}");
        }
        Ok(())
    }

    /// Waits until the page shown is a 404 answer that has finished loading: its status is
    /// known from the answer's headers, before its body is there to read.
    pub async fn wait_not_found(&mut self, secs: u64) -> Result<()> {
        self.wait_until(
            "performance.getEntriesByType('navigation')[0]?.responseStatus === 404 \
             && document.readyState === 'complete'",
            secs,
        )
        .await
    }

    /// Evaluates `expression` in the page and returns its value.
    pub async fn eval(&mut self, expression: &str) -> Result<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!("evaluating {expression}: {e}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits until `expression` is truthy in the page (navigations in between are fine);
    /// fails after `secs` seconds with the page's URL and text.
    pub async fn wait_until(&mut self, expression: &str, secs: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            // A navigation may destroy the context mid-evaluation; that is just "not yet".
            if let Ok(v) = self.eval(expression).await {
                if v.as_bool() == Some(true) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                let state = self
                    .eval("location.href + '\\n' + (document.body ? document.body.innerText : '')")
                    .await
                    .unwrap_or(Value::Null);
                bail!("timed out after {secs} s waiting for `{expression}`; page: {state}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The page's URL.
    pub async fn url(&mut self) -> Result<String> {
        Ok(self
            .eval("location.href")
            .await?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Sizes the viewport as a window of `width`×`height` CSS pixels (a phone's under 600 px
    /// wide, with touch and the mobile viewport rules).
    pub async fn set_viewport(&mut self, width: u32, height: u32) -> Result<()> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
        )
        .await?;
        Ok(())
    }

    /// Saves a PNG of the whole page (beyond the viewport) to `path`.
    pub async fn screenshot(&mut self, path: &std::path::Path) -> Result<()> {
        use base64::Engine;
        let r = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await?;
        let data = r["data"].as_str().context("no screenshot data")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("decoding the screenshot")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Presses and releases a key, as a keyboard would (`Tab`, `Enter`, `Escape`, `Space`).
    pub async fn press(&mut self, key: &str) -> Result<()> {
        let (code, vk, text) = match key {
            "Tab" => ("Tab", 9, ""),
            "Enter" => ("Enter", 13, "\r"),
            "Escape" => ("Escape", 27, ""),
            "Space" => ("Space", 32, " "),
            other => bail!("no key code for {other:?}"),
        };
        let key_name = if key == "Space" { " " } else { key };
        let mut down =
            json!({"type": "keyDown", "key": key_name, "code": code, "windowsVirtualKeyCode": vk});
        if !text.is_empty() {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down).await?;
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key_name, "code": code, "windowsVirtualKeyCode": vk}),
        )
        .await?;
        Ok(())
    }

    /// Types `text` into the focused element.
    pub async fn type_text(&mut self, text: &str) -> Result<()> {
        self.call("Input.insertText", json!({"text": text})).await?;
        Ok(())
    }

    /// The HTTP status of the page's last navigation.
    pub async fn status(&mut self) -> Result<u16> {
        let v = self
            .eval("performance.getEntriesByType('navigation')[0].responseStatus")
            .await?;
        v.as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .context("no navigation status")
    }

    /// The page's visible text.
    pub async fn text(&mut self) -> Result<String> {
        Ok(self
            .eval("document.body ? document.body.innerText : ''")
            .await?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }
}
