//! `warren ws run`: prints a devfile command's events as they come — step headers on
//! stderr, output to stdout/stderr as the step wrote it (prefixed per line with `[ID]` once
//! steps run side by side) — and answers the command's exit code.

use crate::CliError;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use warren_client::CommandRun;
use warren_types::api::{CommandRunEvent, OutputStream};

/// Follows `run` to its end; the exit code of the command (0–255).
pub async fn follow(mut run: CommandRun) -> Result<u8, CliError> {
    let mut printer = Printer::default();
    while let Some(event) = run.next().await? {
        if let Some(code) = printer.event(event)? {
            return Ok(code);
        }
    }
    Err(CliError::Failed(
        "the server ended the run before the command ended (it is shutting down, or the connection broke)".into(),
    ))
}

#[derive(Default)]
struct Printer {
    running: BTreeSet<String>,
    /// Set once two steps ran at the same time: output is then line-buffered and prefixed.
    prefixed: bool,
    partial: BTreeMap<(String, bool), String>,
}

fn write(stream: OutputStream, text: &str) -> Result<(), CliError> {
    let r = match stream {
        OutputStream::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(text.as_bytes()).and_then(|()| o.flush())
        }
        OutputStream::Stderr => {
            let mut o = std::io::stderr().lock();
            o.write_all(text.as_bytes()).and_then(|()| o.flush())
        }
    };
    r.map_err(|e| CliError::Failed(format!("writing the output: {e}")))
}

impl Printer {
    fn event(&mut self, event: CommandRunEvent) -> Result<Option<u8>, CliError> {
        match event {
            CommandRunEvent::Started {
                command,
                kind,
                component,
            } => {
                eprintln!("==> {command} ({kind} in {component})");
                self.running.insert(command);
                if self.running.len() > 1 {
                    self.prefixed = true;
                }
            }
            CommandRunEvent::Output {
                command,
                stream,
                data,
            } => {
                if self.prefixed {
                    let key = (command.clone(), stream == OutputStream::Stderr);
                    let buf = self.partial.entry(key).or_default();
                    buf.push_str(&data);
                    while let Some(i) = buf.find('\n') {
                        let line: String = buf.drain(..=i).collect();
                        write(stream, &format!("[{command}] {line}"))?;
                    }
                } else {
                    write(stream, &data)?;
                }
            }
            CommandRunEvent::Finished {
                command,
                exit_code,
                message,
            } => {
                for stream in [OutputStream::Stdout, OutputStream::Stderr] {
                    let key = (command.clone(), stream == OutputStream::Stderr);
                    if let Some(rest) = self.partial.remove(&key).filter(|r| !r.is_empty()) {
                        write(stream, &format!("[{command}] {rest}\n"))?;
                    }
                }
                self.running.remove(&command);
                let how = match exit_code {
                    Some(0) => "done".to_owned(),
                    Some(c) => format!("failed (exit code {c})"),
                    None => "failed".to_owned(),
                };
                match message {
                    Some(m) => eprintln!("==> {command} {how}: {m}"),
                    None if exit_code != Some(0) => eprintln!("==> {command} {how}"),
                    None => {}
                }
            }
            CommandRunEvent::Done { exit_code, failed } => {
                if let Some(f) = failed {
                    eprintln!("==> failed at {f}");
                }
                return Ok(Some(u8::try_from(exit_code).unwrap_or(1)));
            }
        }
        Ok(None)
    }
}
