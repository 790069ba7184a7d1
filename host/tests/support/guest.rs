//! What the tests of plugins in guest languages (`cli_js`, `cli_python`) share: the
//! language's example email sender, copied with its SDK pointed at this checkout, the
//! jobs every email sender is put through on a running host, the schedule and unique key
//! it declares as the host sees them, and the local [`Relay`] its HTTP calls go to.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cli::{Host, PROCESSING, json_of, logged_id, stdout_of};

/// Copy the `files` of the example `plugins/{example}` into `plugins`, replacing `sdk`
/// (the example's path to its SDK, relative to the repository) in its `manifest` by the
/// SDK's absolute path in this checkout.
pub fn copy_example(plugins: &Path, example: &str, files: &[&str], manifest: &str, sdk: &str) {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate is in the repository");
    let from = repository.join("plugins").join(example);
    let to = plugins.join(example);
    for file in files {
        let dest = to.join(file);
        std::fs::create_dir_all(dest.parent().expect("a parent")).expect("the directories");
        std::fs::copy(from.join(file), &dest).expect("the example's file copies");
    }
    let manifest = to.join(manifest);
    let text = std::fs::read_to_string(&manifest).expect("the manifest reads");
    let relative = format!("../../{sdk}");
    assert!(text.contains(&relative), "{text}");
    let absolute = repository.join(sdk).display().to_string();
    std::fs::write(&manifest, text.replace(&relative, &absolute)).expect("it writes");
}

/// Enqueue `payload` as `job_type` and return the job's id.
pub fn enqueue(host: &Host, job_type: &str, payload: &str) -> String {
    let enqueued = json_of(&host.cli(&["enqueue", job_type, payload, "--json"]));
    enqueued["job_id"].as_str().expect("a job id").to_owned()
}

/// The host's line about job `id` that contains every one of `parts`.
pub fn line_of(host: &Host, id: &str, parts: &[&str]) -> String {
    host.wait_for_line(PROCESSING, |l| {
        l.contains(logged_id(id)) && parts.iter().all(|part| l.contains(part))
    })
}

/// An example email sender's jobs of type `send` (on a queue of 4 attempts), as its module
/// doc tells them: a flaky address retried twice then sent and receipted by a follow-up on
/// attempt 3, an address without `@` dead-lettered at once, a greylisted one deferred 1s
/// without spending an attempt, then sent and receipted.
pub fn email_sender_works_through_retries_a_fatal_error_a_deferral_and_follow_ups(
    host: &Host,
    send: &str,
) {
    let email = |to: &str| format!(r#"{{"to": "{to}", "subject": "s", "body": "b"}}"#);
    let receipted = |to: &str, attempt: &str| {
        host.wait_for_line(PROCESSING, |l| {
            l.contains("receipt recorded")
                && l.contains(&format!(r#"to="{to}""#))
                && l.contains(&format!(r#"attempt="{attempt}""#))
        })
    };

    let flaky = enqueue(host, send, &email("flaky@example.com"));
    for attempt in ["attempt=1", "attempt=2"] {
        line_of(
            host,
            &flaky,
            &["job failed, retrying", attempt, "smtp server busy"],
        );
    }
    line_of(host, &flaky, &["email sent", r#"to="flaky@example.com""#]);
    receipted("flaky@example.com", "3");

    let invalid = enqueue(host, send, &email("nobody"));
    let dead = line_of(host, &invalid, &["job dead-lettered"]);
    assert!(
        dead.contains("invalid address `nobody`") && dead.contains("attempt=1"),
        "a fatal error dead-letters on the first attempt: {dead}"
    );

    let greylisted = enqueue(host, send, &email("greylisted@example.com"));
    let deferred = line_of(host, &greylisted, &["job deferred"]);
    assert!(deferred.contains("delay=1s"), "{deferred}");
    line_of(host, &greylisted, &["email sent"]);
    receipted("greylisted@example.com", "1");
}

/// An example email sender's declarations in force on a running host, as a Rust plugin
/// with the same attributes would have them: its `digest` job type scheduled by plugin
/// `plugin` every morning at 07:00 in Paris (`jobhost schedules`), and its `send` job type
/// unique by `message_id` for an hour (`jobhost plugins`), so a second email of one id,
/// enqueued while the first is held, is refused naming the first.
pub fn email_sender_declares_a_daily_digest_and_unique_message_ids(
    host: &Host,
    plugin: &str,
    send: &str,
    digest: &str,
) {
    let schedules = json_of(&host.cli(&["schedules", "--json"]));
    let declared = schedules
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == digest))
        .unwrap_or_else(|| panic!("`{digest}` is scheduled: {schedules}"));
    assert_eq!(declared["from"], format!("plugin {plugin}"), "{declared}");
    assert_eq!(declared["job_type"], digest, "{declared}");
    assert_eq!(
        (&declared["cron"], &declared["tz"], &declared["enabled"]),
        (
            &serde_json::json!("0 7 * * *"),
            &serde_json::json!("Europe/Paris"),
            &serde_json::json!(true)
        ),
        "{declared}"
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let next_ms = declared["next_ms"].as_i64().expect("a next tick");
    assert!(
        next_ms > now_ms && next_ms - now_ms <= 25 * 3_600_000,
        "the next 07:00 in Paris is within a day: {declared}"
    );

    let plugins = json_of(&host.cli(&["plugins", "--json"]));
    let job = plugins
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["jobs"].as_array())
        .flatten()
        .find(|j| j["name"] == send)
        .unwrap_or_else(|| panic!("`{send}` is listed: {plugins}"));
    assert_eq!(
        job["unique"],
        serde_json::json!({ "key": "message_id", "for_ms": 3_600_000 }),
        "{job}"
    );

    let email = format!(
        r#"{{"to": "once@example.com", "subject": "s", "body": "b", "message_id": "m-{plugin}"}}"#
    );
    let held = json_of(&host.cli(&["enqueue", send, &email, "--delay", "10m", "--json"]));
    let held = held["job_id"].as_str().expect("a job id");
    let duplicate = host.cli(&["enqueue", send, &email]);
    let refused = String::from_utf8_lossy(&duplicate.stderr);
    assert!(
        !duplicate.status.success()
            && refused.contains("with this unique key is already queued, held or running")
            && refused.contains(held),
        "a second email of one message_id is refused naming the first ({held}): {refused}"
    );
    let other = email.replace(&format!("m-{plugin}"), &format!("m-{plugin}-2"));
    stdout_of(&host.cli(&["enqueue", send, &other, "--delay", "10m"]));
}

/// One request a [`Relay`] received.
#[derive(Debug, Clone)]
pub struct Relayed {
    pub method: String,
    /// The request target: path and query.
    pub path: String,
    pub authorization: Option<String>,
    pub body: String,
}

/// What a [`Relay`] answers: a status line (`"503 Service Unavailable"`), extra header
/// lines each ending in CRLF, and a body.
pub type Answer = (&'static str, &'static str, String);

/// A local HTTP server an example's calls go to: it records every request and answers it
/// as `answer` says, given the request and the ones received before it. One request per
/// connection, each closed after its answer.
pub struct Relay {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Relayed>>>,
}

impl Relay {
    pub fn start(answer: impl Fn(&Relayed, &[Relayed]) -> Answer + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let addr = listener.local_addr().expect("its address");
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let Ok(request) = read_request(&stream) else {
                    continue;
                };
                let mut log = log.lock().expect("the relay's log");
                let (status, headers, body) = answer(&request, &log);
                log.push(request);
                drop(log);
                let answer = format!(
                    "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = (&stream).write_all(answer.as_bytes());
            }
        });
        Self { addr, received }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Relayed> {
        self.received.lock().expect("the relay's log").clone()
    }
}

/// One HTTP/1.1 request with a `content-length` body, as the host sends it.
fn read_request(stream: &TcpStream) -> std::io::Result<Relayed> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next(), parts.next());
    let (method, path) = (
        method.unwrap_or_default().to_owned(),
        path.unwrap_or_default().to_owned(),
    );
    let (mut length, mut authorization) = (0, None);
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Relayed {
        method,
        path,
        authorization,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
