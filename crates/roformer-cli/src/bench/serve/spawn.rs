//! `bench serve` without `--url`: a `roformer serve` of this same binary, started on
//! 127.0.0.1 port 0 and stopped when the benchmark ends.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::blocking::Client;

/// How long the server may take to print its address, then to answer `/health` with 200.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How much of the server's stderr is kept, to quote when it fails to start.
const STDERR_TAIL: usize = 8192;

/// A `roformer serve` child process, killed when dropped.
pub struct OwnServer {
    child: Child,
    /// Its base URL, `http://HOST:PORT`.
    pub url: String,
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `roformer serve --port 0` with `--model` and `--gguf` when given, and waits until it
/// is ready.
///
/// # Errors
/// The binary cannot be found or started, or the server exits, prints no `listening on` line
/// or is not healthy within two minutes (its stderr is quoted).
pub fn start(
    model: Option<&Path>,
    gguf: Option<&Path>,
    client: &Client,
) -> anyhow::Result<OwnServer> {
    let exe = std::env::current_exe().context("locating the roformer binary")?;
    let mut command = Command::new(exe);
    command.args(["serve", "--host", "127.0.0.1", "--port", "0"]);
    if let Some(dir) = model {
        command.arg("--model").arg(dir);
    }
    if let Some(file) = gguf {
        command.arg("--gguf").arg(file);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting `roformer serve`")?;
    let first = first_line(&mut child);
    let stderr = drain_stderr(&mut child);
    let url = match first {
        Some(line) if line.starts_with("listening on http://") => {
            line["listening on ".len()..].trim().to_owned()
        }
        other => {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_default();
            bail!("`roformer serve` did not print `listening on http://HOST:PORT` (first line: {other:?}); its stderr:\n{err}");
        }
    };
    let server = OwnServer { child, url };
    wait_ready(client, &server.url, "/health")?;
    Ok(server)
}

/// The first line the child prints, within [`START_TIMEOUT`]; its stdout is drained after it.
fn first_line(child: &mut Child) -> Option<String> {
    let stdout = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
        for _ in lines {}
    });
    rx.recv_timeout(START_TIMEOUT).ok().flatten()
}

/// Reads the child's stderr to its end in the background (so the server never blocks on a
/// full pipe); its last [`STDERR_TAIL`] bytes arrive on the channel once the child closed it.
fn drain_stderr(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut chunk) {
                tail.extend_from_slice(&chunk[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL);
                tail.drain(..excess);
            }
            let _ = tx.send(String::from_utf8_lossy(&tail).into_owned());
        });
    }
    rx
}

/// Polls `GET {url}{path}` (`/health`, or a route that answers once the model is loaded) until
/// it answers 200.
///
/// # Errors
/// No 200 within [`START_TIMEOUT`].
pub fn wait_ready(client: &Client, url: &str, path: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let health = format!("{}{path}", url.trim_end_matches('/'));
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        match client.get(&health).send() {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => last = format!("HTTP {}", r.status()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "{health} did not answer 200 within {} s (last: {last})",
        START_TIMEOUT.as_secs()
    )
}
