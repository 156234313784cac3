//! [`PeerProcess`]: a Python process running `benchmarks/peers/peer_server.py` for one
//! framework (PyTorch or CuPy), asked for one sample at a time so that its samples
//! interleave with ours in the same rounds.
//!
//! The script travels inside the binary (`include_str!`) and runs as `python3 -c`, so
//! the packed `bench` needs no file beside it. Every answer is awaited at most
//! [`ANSWER_LIMIT`]: a peer that hangs is an error naming the request, never a hang.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use crate::error::{Error, Result};

/// The peer side's source.
pub const SERVER: &str = include_str!("../../peers/peer_server.py");

/// The kernel rows' module, which the server imports as `peer_kernels`.
pub const KERNELS: &str = include_str!("../../peers/peer_kernels.py");

/// What [`PeerProcess::start`] runs: `python -c` has no directory to import from, so
/// the script first makes [`KERNELS`] the module `peer_kernels` (its text in a raw
/// triple-quoted string: it holds no `'''`, a test checks), then runs the server.
fn server_script() -> String {
    format!(
        "import sys, types\npeer_kernels = types.ModuleType(\"peer_kernels\")\n\
         exec(r'''{KERNELS}''', peer_kernels.__dict__)\n\
         sys.modules[\"peer_kernels\"] = peer_kernels\n{SERVER}"
    )
}

/// How long one answer may take (the first includes importing the framework and
/// creating its CUDA context; a sample of 1 GiB pageable copies takes well under this).
pub const ANSWER_LIMIT: Duration = Duration::from_secs(120);

/// What starting a peer gave.
pub enum Started {
    /// Running; its framework's version.
    Ready(PeerProcess, String),
    /// Not available here, and why (no interpreter, framework not importable, ...).
    Absent(String),
}

/// One answer to a `sample` request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The figure, in the row's unit.
    Figure(f64),
    /// The peer cannot make this measurement here, and why.
    Absent(String),
}

/// A running peer: its stdin, and its stdout's lines arriving on a channel.
pub struct PeerProcess {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    framework: &'static str,
}

impl PeerProcess {
    /// Starts `python -c SERVER framework ordinal NAME=value...` (with [`KERNELS`]
    /// before it; `loop_sizes`: the
    /// loops both sides time) and reads its first line.
    pub fn start(
        python: &str,
        framework: &'static str,
        ordinal: usize,
        loop_sizes: &[(&str, usize)],
    ) -> Result<Started> {
        Self::start_script(python, &server_script(), framework, ordinal, loop_sizes)
    }

    /// [`start`](Self::start) with another script (the tests' fake peers).
    pub fn start_script(
        python: &str,
        script: &str,
        framework: &'static str,
        ordinal: usize,
        loop_sizes: &[(&str, usize)],
    ) -> Result<Started> {
        let spawned = Command::new(python)
            .arg("-c")
            .arg(script)
            .arg(framework)
            .arg(ordinal.to_string())
            .args(
                loop_sizes
                    .iter()
                    .map(|(name, value)| format!("{name}={value}")),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => return Ok(Started::Absent(format!("cannot run {python:?}: {e}"))),
        };
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                return Err(Error::msg(format!(
                    "{framework}: the peer's pipes are missing"
                )))
            }
        };
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = PeerProcess {
            child,
            stdin,
            lines,
            framework,
        };
        let first = peer.answer("start")?;
        match first.split_once(' ') {
            Some(("ready", rest)) => {
                let version = rest.split_once(' ').map_or(rest, |(_, v)| v).to_owned();
                Ok(Started::Ready(peer, version))
            }
            Some(("absent", why)) => Ok(Started::Absent(why.to_owned())),
            _ => Err(Error::msg(format!(
                "{framework}: the peer began with {first:?}, not \"ready ...\""
            ))),
        }
    }

    /// One sample of `key`.
    pub fn sample(&mut self, key: &str) -> Result<Answer> {
        writeln!(self.stdin, "sample {key}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| Error::msg(format!("{}: cannot ask for {key}: {e}", self.framework)))?;
        let line = self.answer(key)?;
        let (kind, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match kind {
            "ok" => rest.trim().parse().map(Answer::Figure).map_err(|_| {
                Error::msg(format!("{}: {key}: not a number: {line:?}", self.framework))
            }),
            "absent" => Ok(Answer::Absent(rest.to_owned())),
            "error" => Err(Error::msg(format!("{}: {key}: {rest}", self.framework))),
            _ => Err(Error::msg(format!(
                "{}: {key}: unexpected answer {line:?}",
                self.framework
            ))),
        }
    }

    /// One sample of `key` as a figure: absent is an error here (the case asks once
    /// with [`sample`](Self::sample) before measuring a key).
    pub fn figure(&mut self, key: &str) -> Result<f64> {
        match self.sample(key)? {
            Answer::Figure(f) => Ok(f),
            Answer::Absent(why) => Err(Error::msg(format!(
                "{}: {key} became absent: {why}",
                self.framework
            ))),
        }
    }

    /// The next line, within [`ANSWER_LIMIT`].
    fn answer(&mut self, request: &str) -> Result<String> {
        match self.lines.recv_timeout(ANSWER_LIMIT) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => Err(Error::msg(format!(
                "{}: no answer to {request} in {} s",
                self.framework,
                ANSWER_LIMIT.as_secs()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string());
                Err(Error::msg(format!(
                    "{}: the peer exited before answering {request} ({})",
                    self.framework,
                    status.unwrap_or_else(|e| e.to_string())
                )))
            }
        }
    }
}

impl Drop for PeerProcess {
    /// Asks the peer to quit, and kills it if it has not within a second.
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit").and_then(|()| self.stdin.flush());
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake peer speaking the protocol: `fast` answers 2.5, `gone` is absent, `bad`
    /// errs, anything else is not a number.
    const FAKE: &str = r#"
import sys
if sys.argv[1] == "missing":
    print("absent ModuleNotFoundError: No module named 'missing'", flush=True)
    sys.exit(0)
print("ready fake 1.2.3", flush=True)
for line in sys.stdin:
    w = line.split()
    if not w or w[0] == "quit":
        break
    k = w[1]
    print({"fast": "ok 2.5", "gone": "absent not here", "bad": "error ValueError: no"}.get(k, "ok x"), flush=True)
"#;

    fn python() -> Option<&'static str> {
        let found = Command::new("python3")
            .arg("-c")
            .arg("pass")
            .status()
            .is_ok_and(|s| s.success());
        found.then_some("python3")
    }

    #[test]
    fn a_peer_answers_figures_absences_and_errors() -> Result<()> {
        let Some(python) = python() else {
            eprintln!("no python3 here: the protocol test cannot run");
            return Ok(());
        };
        let Started::Ready(mut peer, version) =
            PeerProcess::start_script(python, FAKE, "fake", 0, &[])?
        else {
            return Err(Error::msg("the fake peer said absent"));
        };
        assert_eq!(version, "1.2.3");
        assert_eq!(peer.sample("fast")?, Answer::Figure(2.5));
        assert_eq!(peer.figure("fast")?, 2.5);
        assert_eq!(peer.sample("gone")?, Answer::Absent("not here".into()));
        let bad = peer.sample("bad").expect_err("an error answer is an Err");
        assert!(bad.to_string().contains("ValueError: no"), "{bad}");
        let nan = peer.sample("other").expect_err("not a number is an Err");
        assert!(nan.to_string().contains("not a number"), "{nan}");
        Ok(())
    }

    #[test]
    fn a_framework_that_is_not_importable_is_absent_with_its_reason() -> Result<()> {
        let Some(python) = python() else {
            return Ok(());
        };
        match PeerProcess::start_script(python, FAKE, "missing", 0, &[])? {
            Started::Absent(why) => assert!(why.contains("No module named"), "{why}"),
            Started::Ready(..) => return Err(Error::msg("the missing framework was ready")),
        }
        Ok(())
    }

    #[test]
    fn no_interpreter_is_absent_not_an_error() -> Result<()> {
        match PeerProcess::start("/nonexistent/python3", "torch", 0, &[])? {
            Started::Absent(why) => assert!(why.contains("cannot run"), "{why}"),
            Started::Ready(..) => return Err(Error::msg("a missing interpreter was ready")),
        }
        Ok(())
    }

    #[test]
    fn the_kernel_module_fits_in_a_raw_triple_quoted_string() {
        assert!(!KERNELS.contains("'''"), "peer_kernels.py holds '''");
        assert!(!KERNELS.ends_with('\\') && KERNELS.is_ascii());
        assert!(server_script().ends_with(SERVER));
    }

    #[test]
    fn the_real_server_without_its_framework_says_absent() -> Result<()> {
        let Some(python) = python() else {
            return Ok(());
        };
        // Neither framework exists on machines without a GPU stack; where one does, the
        // peer starts (or says why not): either way no error and no hang.
        match PeerProcess::start(python, "cupy", 0, crate::peers::ours::LOOP_SIZES)? {
            Started::Absent(why) => assert!(!why.is_empty()),
            Started::Ready(..) => {}
        }
        Ok(())
    }
}
