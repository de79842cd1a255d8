//! A `roformer serve` process for the tests that need a running server: started on port 0,
//! its address read from the first line it prints, its stderr (the access log) collected,
//! killed when dropped; and one HTTP/1.1 exchange over a plain socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A running `roformer serve`.
pub struct ServeChild {
    /// The process (for its pid, signals and exit status).
    pub child: Child,
    /// The base URL, `http://HOST:PORT`, from its `listening on` line.
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl ServeChild {
    /// Starts `roformer serve --port 0` with `args`, waiting up to a minute for its
    /// `listening on http://HOST:PORT` line; panics with its stderr if it exits first.
    pub fn start(args: &[&str]) -> ServeChild {
        let mut child = Command::new(env!("CARGO_BIN_EXE_roformer"))
            .args(["serve", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the roformer binary starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Keep reading so that the server never blocks on a full pipe.
            for _ in lines {}
        });
        let first = rx.recv_timeout(Duration::from_secs(60));
        let url = match first {
            Ok(Some(Ok(line))) if line.starts_with("listening on http://") => {
                line["listening on ".len()..].trim().to_owned()
            }
            other => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = stderr.read_to_string(&mut err);
                }
                panic!("roformer serve {args:?} did not print its address: {other:?}\n{err}");
            }
        };
        // Collect stderr (the access log) in the background; reading it also keeps the server
        // from blocking on a full pipe.
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let sink = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    sink.lock().expect("the log lock").push_str(&text);
                }
            });
        }
        ServeChild { child, url, stderr }
    }

    /// `HOST:PORT`, the URL without its scheme (for a plain socket).
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.stderr.lock().expect("the log lock").clone()
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `METHOD path` to `addr` with `body` sent as `content_type`, on a connection of its own: the
/// status and the body of the answer.
pub fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    // A body refused early may find the connection closed: the answer is read all the same.
    let _ = s.write_all(body);
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}
