//! `warren ws open`: the address of a workspace's editor, endpoint or terminal, handed to the
//! user's browser.
//!
//! The terminal's host is the endpoints' host with `terminal` in place of the port
//! (`8080-dev.ws.example.com` → `terminal-dev.ws.example.com`, access.md), so it is derived
//! from any endpoint address the server gave.

use crate::CliError;
use std::process::{Command, Stdio};
use warren_types::api::Workspace;

/// What to open: `endpoint` by devfile name, the terminal, or else the editor (unless `main`
/// asks for the devfile's main endpoint), else the main endpoint.
pub fn address(
    w: &Workspace,
    endpoint: Option<&str>,
    terminal: bool,
    main: bool,
) -> Result<String, CliError> {
    let no_endpoint = || {
        CliError::Failed(format!(
            "workspace {:?} declares no public endpoint; reach it with `warren ws ssh {}`",
            w.name, w.name
        ))
    };
    if let Some(name) = endpoint {
        return w.endpoints.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = w.endpoints.keys().map(String::as_str).collect();
            CliError::Failed(format!(
                "workspace {:?} has no public endpoint {name:?} (it has: {})",
                w.name,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))
        });
    }
    if !terminal && !main {
        if let Some(editor) = &w.editor_url {
            return Ok(editor.clone());
        }
    }
    let any = w
        .url
        .as_ref()
        .or_else(|| w.endpoints.values().next())
        .ok_or_else(no_endpoint)?;
    if !terminal {
        return Ok(any.clone());
    }
    terminal_address(any).ok_or_else(|| {
        CliError::Failed(format!(
            "cannot derive the terminal address of workspace {:?} from {any}",
            w.name
        ))
    })
}

/// `scheme://{port}-{name}.{domain}[:p]/…` → `scheme://terminal-{name}.{domain}[:p]/`.
fn terminal_address(endpoint: &str) -> Option<String> {
    let mut u = url::Url::parse(endpoint).ok()?;
    let host = u.host_str()?.to_owned();
    let (port, rest) = host.split_once('-')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || rest.is_empty() {
        return None;
    }
    u.set_host(Some(&format!("terminal-{rest}"))).ok()?;
    u.set_path("/");
    u.set_query(None);
    u.set_fragment(None);
    Some(u.into())
}

/// Prints `url` when asked to (`--print`) or when nothing could open it, else opens it and
/// says so.
pub fn hand_over(url: &str, print: bool) {
    if print || !launch(url) {
        println!("{url}");
    } else {
        eprintln!("opened {url}");
    }
}

/// Starts the user's browser on `url` ($BROWSER, else the desktop's opener); `false` when
/// none could be started.
pub fn launch(url: &str) -> bool {
    launch_with(std::env::var("BROWSER").ok(), url)
}

/// [`launch`] with the `$BROWSER` value given: a `:`-separated list of commands, `%s` standing
/// for the address (appended when absent), as the convention has it.
pub fn launch_with(browser: Option<String>, url: &str) -> bool {
    let candidates: Vec<String> = match browser.filter(|b| !b.trim().is_empty()) {
        Some(b) => b.split(':').map(str::to_owned).collect(),
        None if cfg!(target_os = "macos") => vec!["open".into()],
        None => vec!["xdg-open".into()],
    };
    candidates.iter().any(|c| start(c, url))
}

fn start(command: &str, url: &str) -> bool {
    let mut words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        return false;
    }
    if words.iter().any(|w| w.contains("%s")) {
        for w in &mut words {
            *w = w.replace("%s", url);
        }
    } else {
        words.push(url.to_owned());
    }
    // Not waited for: a browser may run until the user closes it.
    Command::new(&words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(endpoints: &[(&str, &str)], main: Option<&str>) -> Workspace {
        Workspace {
            url: main.map(str::to_owned),
            endpoints: endpoints
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..crate::sample::workspace()
        }
    }

    #[test]
    fn addresses_of_endpoints_and_terminal() {
        let main = "http://8080-dev.ws.localhost:7080/app?x=1";
        let w = ws(
            &[("web", main), ("api", "http://3000-dev.ws.localhost:7080/")],
            Some(main),
        );
        assert_eq!(address(&w, None, false, false).unwrap(), main);
        assert_eq!(
            address(&w, Some("api"), false, false).unwrap(),
            "http://3000-dev.ws.localhost:7080/"
        );
        assert_eq!(
            address(&w, None, true, false).unwrap(),
            "http://terminal-dev.ws.localhost:7080/"
        );
        let err = address(&w, Some("db"), false, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"db\"") && err.contains("api, web"), "{err}");
        let https = ws(&[("web", "https://443-a-b.ws.example.com/")], None);
        assert_eq!(
            address(&https, None, true, false).unwrap(),
            "https://terminal-a-b.ws.example.com/"
        );
        let none = ws(&[], None);
        let err = address(&none, None, true, false).unwrap_err().to_string();
        assert!(err.contains("no public endpoint"), "{err}");
        assert!(terminal_address("http://dev.ws.localhost/").is_none());
        // The editor, where the agent injects one, is what opens by default.
        let editor = "http://13337-dev.ws.localhost:7080/";
        let mut with_editor = ws(&[("web", main), ("warren-editor", editor)], Some(main));
        with_editor.editor_url = Some(editor.into());
        assert_eq!(address(&with_editor, None, false, false).unwrap(), editor);
        assert_eq!(address(&with_editor, None, false, true).unwrap(), main);
        assert_eq!(
            address(&with_editor, None, true, false).unwrap(),
            "http://terminal-dev.ws.localhost:7080/"
        );
    }

    #[test]
    // A plain test without a runtime: it polls with the standard clock and sleep.
    #[allow(clippy::disallowed_methods)]
    fn the_browser_command_gets_the_address() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("opened");
        let script = dir.path().join("browser");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$1\" > {}.tmp && mv {0}.tmp {0}\n",
                out.display()
            ),
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let browser = format!("/nonexistent/browser:{} %s", script.display());
        assert!(launch_with(Some(browser), "http://8080-dev.ws.localhost/"));
        // The browser is not waited for: wait for what it wrote.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !out.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the browser never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "http://8080-dev.ws.localhost/\n"
        );
        assert!(!launch_with(
            Some("/nonexistent/a:/nonexistent/b".into()),
            "http://x/"
        ));
    }
}
