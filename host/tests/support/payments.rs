//! A payment service that refuses every charge, and a project directory whose plugin
//! `replayable` is granted it: the recording and replay tests' world (docs/replay.md).

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tempfile::TempDir;

use super::cli::write_grants;

/// The secret the grants give `api_key`.
pub(crate) const API_KEY: &str = "sk_live_9f8e7d6c5b4a";

/// What the payment service answers every request, with status 500.
pub(crate) const ALREADY: &str = "already charged: order o-17 on 2026-12-07";

/// A payment service that answers every request `500` [`ALREADY`] until stopped.
pub(crate) struct Service {
    pub(crate) origin: String,
    stop: Arc<AtomicBool>,
}

impl Service {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let origin = format!("http://{}", listener.local_addr().expect("its address"));
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                // One request per connection: its head and its whole body, then the answer.
                // A body left unread would make the close a reset, which the guest may
                // meet while it still writes the body.
                let mut seen = Vec::new();
                let mut buf = [0; 4096];
                while !request_read(&seen) {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{ALREADY}",
                    ALREADY.len()
                );
            }
        });
        Self { origin, stop }
    }

    /// Stop answering: the port refuses from now on.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag and drops the listener.
        let _ = std::net::TcpStream::connect(self.origin.trim_start_matches("http://"));
    }
}

/// Whether `seen` holds a whole request: its head and as many body bytes as its
/// `content-length` says.
fn request_read(seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    body.len() >= length
}

/// A working directory holding `plugins/replayable.wasm` and a grants file granting it
/// `origin`, a region and a secret, and the two other versions of the plugin beside it.
pub(crate) fn workspace(origin: &str) -> TempDir {
    let dir = tempfile::tempdir().expect("a temp directory");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("the plugin directory");
    std::fs::copy(
        jobhost_fixtures::wasm("replayable"),
        plugins.join("replayable.wasm"),
    )
    .expect("the plugin copies");
    for version in ["replayable-fixed", "replayable-moved"] {
        std::fs::copy(
            jobhost_fixtures::wasm(version),
            dir.path().join(format!("{version}.wasm")),
        )
        .expect("the other versions copy");
    }
    std::fs::write(dir.path().join("api.key"), API_KEY).expect("the secret's file");
    write_grants(
        &dir.path().join("jobhost.toml"),
        &format!(
            "[plugins.replayable]\nallowed_outbound_hosts = [\"{origin}\"]\n\
             [plugins.replayable.config]\nregion = \"eu-west\"\n\
             [plugins.replayable.secrets]\napi_key = {{ file = \"api.key\" }}\n"
        ),
    );
    dir
}
