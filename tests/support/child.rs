//! Running the current test binary again as a child process, for scenarios that must
//! not happen in the test process itself (a kernel fault poisons the CUDA context for
//! the rest of the process; hiding the GPUs must happen before the driver loads).
//!
//! The child is selected by an environment variable that the binary's `main` checks
//! before it starts the harness; it reports by printing `key = value` lines.

use std::fmt;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libtest_mimic::Failed;

/// What a finished child did: its exit status, its output, and its `key = value` lines.
#[derive(Debug)]
pub struct ChildOutput {
    /// What the child was started for (for messages).
    pub what: String,
    /// How it ended.
    pub status: ExitStatus,
    /// All it printed to stdout.
    pub stdout: String,
    /// All it printed to stderr.
    pub stderr: String,
    /// Its stdout lines of the form `key = value`, trimmed, in order.
    pub lines: Vec<(String, String)>,
}

/// Runs this test binary again with the environment variables `env` added (a value of
/// `None` removes the variable), no arguments, and stdout and stderr captured. A child
/// still running after `limit` is killed, and that is a failure ("a call hung").
pub fn run_self(
    what: &str,
    env: &[(&str, Option<&str>)],
    limit: Duration,
) -> Result<ChildOutput, Failed> {
    let exe = std::env::current_exe()
        .map_err(|e| Failed::from(format!("{what}: cannot find this test binary: {e}")))?;
    run_command(what, Command::new(exe), env, limit)
}

/// [`run_self`] for any command (a launcher that starts this binary, for instance).
pub fn run_command(
    what: &str,
    mut command: Command,
    env: &[(&str, Option<&str>)],
    limit: Duration,
) -> Result<ChildOutput, Failed> {
    for (key, value) in env {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failed::from(format!("{what}: cannot start the child process: {e}")))?;
    let stdout = read_in_background(child.stdout.take());
    let stderr = read_in_background(child.stderr.take());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failed::from(format!(
                "{what}: the child process ran past {limit:?} and was killed: a call hung.\n\
                 --- stdout:\n{}\n--- stderr:\n{}",
                stdout.join().unwrap_or_default(),
                stderr.join().unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let lines = stdout
        .lines()
        .filter_map(|line| line.split_once(" = "))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    Ok(ChildOutput {
        what: what.to_owned(),
        status,
        stdout,
        stderr,
        lines,
    })
}

impl ChildOutput {
    /// The value of the last `key = ...` line, or a failure showing the child's output.
    pub fn value(&self, key: &str) -> Result<&str, Failed> {
        self.lines
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| {
                Failed::from(format!("the child printed no `{key} = ...` line.\n{self}"))
            })
    }

    /// `true` when the child printed a `key = ...` line.
    pub fn has(&self, key: &str) -> bool {
        self.lines.iter().any(|(k, _)| k == key)
    }

    /// `Ok` when `key`'s value is exactly `expected`.
    pub fn expect(&self, key: &str, expected: &str) -> Result<(), Failed> {
        let value = self.value(key)?;
        crate::ensure!(
            value == expected,
            "`{key}` is `{value}`, expected `{expected}`.\n{self}"
        );
        Ok(())
    }
}

impl fmt::Display for ChildOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- child process for {} ({}), stdout:\n{}\n--- stderr:\n{}",
            self.what, self.status, self.stdout, self.stderr
        )
    }
}

/// Reads a child's pipe to its end on a thread, so that a full pipe never blocks it.
fn read_in_background<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

// ---------------------------------------------------------------------------------------
// Fault scenarios: the child reports each call's outcome as `key = ok` or
// `key = err NAME | message`; the parent checks those lines.

/// Runs this binary as a child with `env_var = scenario`, killed and failed past
/// `limit`; one child at a time in this process (measured on an H200: a trapping child
/// sometimes hung when another scenario's child faulted the GPU at the same moment,
/// and ran in a second alone; the tests are about one process's context, so they do
/// not need to overlap).
pub fn run_scenario(env_var: &str, scenario: &str, limit: Duration) -> Result<ChildOutput, Failed> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    run_self(
        &format!("fault scenario {scenario}"),
        &[(env_var, Some(scenario))],
        limit,
    )
}

/// `ok` or `err NAME | message`, on one line: NAME is the driver's error name for a
/// driver error, else the `Error` variant's name.
pub fn describe<T>(result: &stream_core::Result<T>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(e) => {
            let name = match e {
                stream_core::Error::Driver(driver) => driver.name.clone(),
                other => format!("{other:?}")
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or("Error")
                    .to_owned(),
            };
            format!("err {name} | {}", e.to_string().replace('\n', " "))
        }
    }
}

/// Prints `key = ` and [`describe`] of `result` (child side).
pub fn report<T>(key: &str, result: &stream_core::Result<T>) {
    println!("{key} = {}", describe(result));
}

/// `Ok` when `key` reports an error (any).
pub fn any_error(run: &ChildOutput, key: &str) -> Result<(), Failed> {
    let value = run.value(key)?;
    if value.starts_with("err ") {
        Ok(())
    } else {
        Err(Failed::from(format!(
            "`{key}` is `{value}`: after a kernel fault it must return an error.\n{run}"
        )))
    }
}

/// `Ok` when `key` reports a driver error named one of `names`, whose message names it
/// and says that the context is unusable and the process must restart.
pub fn fault_error(run: &ChildOutput, key: &str, names: &[&str]) -> Result<(), Failed> {
    let value = run.value(key)?;
    let Some(rest) = value.strip_prefix("err ") else {
        return Err(Failed::from(format!(
            "`{key}` is `{value}`, expected one of the errors {names:?}.\n{run}"
        )));
    };
    let (name, message) = rest.split_once(" | ").unwrap_or((rest, ""));
    if !names.contains(&name) {
        return Err(Failed::from(format!(
            "`{key}` failed with {name}, expected one of {names:?}.\n{run}"
        )));
    }
    for part in [name, "unusable", "restart the process"] {
        if !message.contains(part) {
            return Err(Failed::from(format!(
                "the message of `{key}` does not contain {part:?}: {message:?}.\n{run}"
            )));
        }
    }
    Ok(())
}

/// `Ok` when the child exited with status 0 after printing `done = ok`.
pub fn exited_normally(run: &ChildOutput) -> Result<(), Failed> {
    if run.status.success() && run.value("done").ok() == Some("ok") {
        Ok(())
    } else {
        Err(Failed::from(format!(
            "the child did not finish normally ({}).\n{run}",
            run.status
        )))
    }
}

/// A child scenario: its mode (the value of the binary's child variable) and what it
/// runs.
pub type ChildMode = (&'static str, fn() -> crate::TestResult);

/// The `main` of a test binary whose tests need two GPUs (NCCL refuses two ranks on
/// one) and run their scenarios as child processes of the binary: as a child (when
/// `child_env` names a mode of `children`), runs it and exits with 0, or prints
/// `failed = <why>` and exits with 1; otherwise registers `tests` unless fewer than two
/// GPUs are present (without a GPU the harness reports them as ignored) and runs them.
pub fn two_gpu_main(
    binary: &str,
    child_env: &str,
    children: &[ChildMode],
    tests: Vec<crate::Test>,
) {
    if let Ok(mode) = std::env::var(child_env) {
        let result = match children.iter().find(|(name, _)| *name == mode) {
            Some((_, run)) => run(),
            None => Err(format!("unknown child mode {mode}").into()),
        };
        std::process::exit(match result {
            Ok(()) => 0,
            Err(e) => {
                println!("failed = {}", e.message().unwrap_or("?"));
                1
            }
        });
    }
    let gpu = match crate::gpu_status() {
        crate::GpuStatus::Present(n) if *n < 2 => {
            eprintln!(
                "{binary}: {n} CUDA device(s): its tests need two GPUs and are not registered \
                 (NCCL refuses two ranks on one GPU)"
            );
            Vec::new()
        }
        _ => tests,
    };
    crate::run(&gpu, &[])
}
