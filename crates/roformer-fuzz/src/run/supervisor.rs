//! The fuzzer's side of a worker process: sends it inputs, waits for each reply with a time
//! limit, and tells a panic from a crash (the process died: abort, stack overflow, out of
//! memory) and from a hang (no reply in time: the process is killed).

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::protocol::{read_frame, write_frame, PanicReport, Reply};
use crate::outcome::Outcome;
use crate::targets::{scratch_of, Target};

/// Lines of the worker's stderr kept to describe a crash.
const STDERR_LINES: usize = 200;

/// What became of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The target returned.
    Outcome(Outcome),
    /// The target panicked.
    Panic(PanicReport),
    /// The worker died: how, and the last lines it wrote to stderr.
    Crash {
        /// The exit status, e.g. `signal 6 (SIGABRT)`.
        status: String,
        /// The end of its stderr.
        stderr: Vec<String>,
    },
    /// No reply within the time limit; the worker was killed.
    Hang,
}

/// A running worker process.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<Reply>,
    stderr: Option<JoinHandle<VecDeque<String>>>,
}

impl Worker {
    /// Starts this executable as a worker for `target` under a `mem_mb` MiB address-space
    /// limit, with one rayon thread unless `RAYON_NUM_THREADS` says otherwise, and
    /// backtraces on.
    ///
    /// # Errors
    /// When the process cannot be started.
    pub fn spawn(target: Target, mem_mb: u64) -> io::Result<Worker> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args([target.name(), "--worker", "--mem-mb", &mem_mb.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if std::env::var_os("RAYON_NUM_THREADS").is_none() {
            command.env("RAYON_NUM_THREADS", "1");
        }
        // Aborts on allocation failure print a backtrace only with this set; the worker's
        // panic hook captures its own either way.
        command.env("RUST_BACKTRACE", "1");
        let mut child = command.spawn()?;
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => return Err(io::Error::other("worker pipes missing")),
            };
        let (send, replies) = mpsc::channel();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            while let Ok(Some(frame)) = read_frame(&mut stdout) {
                let Ok(reply) = serde_json::from_slice::<Reply>(&frame) else {
                    break;
                };
                if send.send(reply).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut tail = VecDeque::new();
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(String::from_utf8_lossy(&line).trim_end().to_string());
                line.clear();
            }
            tail
        });
        Ok(Worker {
            child,
            stdin: Some(stdin),
            replies,
            stderr: Some(stderr),
        })
    }

    /// Runs one input. After a [`Verdict::Crash`] or [`Verdict::Hang`] the worker is gone:
    /// start another.
    pub fn run(&mut self, data: &[u8], timeout: Duration) -> Verdict {
        let sent = match self.stdin.as_mut() {
            Some(stdin) => write_frame(stdin, data),
            None => Err(io::Error::other("worker already stopped")),
        };
        if sent.is_err() {
            return self.crashed();
        }
        match self.replies.recv_timeout(timeout) {
            Ok(Reply::Outcome(outcome)) => Verdict::Outcome(outcome),
            Ok(Reply::Panic(report)) => Verdict::Panic(report),
            Err(RecvTimeoutError::Disconnected) => self.crashed(),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                let _ = self.finish();
                Verdict::Hang
            }
        }
    }

    /// Closes the worker's input, waits for it to end and removes the scratch files a worker
    /// that died could not.
    ///
    /// # Errors
    /// When waiting fails.
    pub fn finish(&mut self) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        let status = self.child.wait();
        let _ = std::fs::remove_dir_all(scratch_of(self.child.id()));
        status
    }

    fn crashed(&mut self) -> Verdict {
        let status = match self.finish() {
            Ok(status) => describe(status),
            Err(e) => format!("unknown ({e})"),
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .map(Vec::from)
            .unwrap_or_default();
        Verdict::Crash { status, stderr }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// `exit code N` or `signal N (NAME)`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                libc::SIGABRT => "SIGABRT",
                libc::SIGSEGV => "SIGSEGV",
                libc::SIGBUS => "SIGBUS",
                libc::SIGILL => "SIGILL",
                libc::SIGKILL => "SIGKILL",
                _ => "",
            };
            format!("signal {signal} ({name})")
        }
        _ => "unknown".into(),
    }
}
