//! Test-only: running a program to its end and failing the test, with the program's own words,
//! when it does not succeed.

use std::process::{Command, Output};

/// Runs `command` to its end and answers its output. The test fails, naming the program, its
/// arguments and its stderr, when it cannot start or ends unsuccessfully; so a failing call says
/// why without every caller writing the same assertion.
#[track_caller]
pub fn output_ok(command: &mut Command) -> Output {
    let out = output(command);
    assert!(
        out.status.success(),
        "{} ({}): {}",
        describe(command),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`output_ok`]'s standard output as text.
#[track_caller]
pub fn stdout_ok(command: &mut Command) -> String {
    String::from_utf8_lossy(&output_ok(command).stdout).into_owned()
}

/// Runs `command` to its end whatever its status, failing the test only when it cannot start.
#[track_caller]
pub fn output(command: &mut Command) -> Output {
    match command.output() {
        Ok(out) => out,
        Err(e) => panic!("{} could not start: {e}", describe(command)),
    }
}

/// The program and its arguments, as a reader would type them.
fn describe(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}
