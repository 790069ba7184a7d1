//! Headless Chromium driven through chromedriver (WebDriver, with `fantoccini`), for the
//! dashboard's browser tests: a fresh profile per browser, every wait bounded, the
//! driver killed when dropped, screenshots written under `target/dashboard-screenshots/`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tempfile::TempDir;

/// Where Debian's `chromium` and `chromium-driver` packages put them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Set to `1` to skip the browser tests on a machine without Chromium; without it, a
/// missing browser fails them, so a missing browser never passes silently.
pub const SKIP_VARIABLE: &str = "JOBHOST_SKIP_BROWSER_TESTS";
/// How long the driver and the browser may take to start.
const STARTUP: Duration = Duration::from_secs(60);
/// The laptop screen the dashboard must read well on.
pub const LAPTOP: (u32, u32) = (1366, 768);

/// A chromedriver process and a headless Chromium session on it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: TempDir,
}

/// Whether the browser tests run: `false` (skip) only when Chromium or chromedriver is
/// missing and [`SKIP_VARIABLE`] asks to skip; a missing browser fails otherwise.
pub fn available() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|path| !Path::new(path).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var(SKIP_VARIABLE).as_deref() == Ok("1"),
        "{missing:?} missing: install Debian's `chromium` and `chromium-driver` (`.ci/run` does), \
         or set {SKIP_VARIABLE}=1 to skip the browser tests"
    );
    eprintln!("skipping: {missing:?} missing and {SKIP_VARIABLE}=1");
    false
}

impl Browser {
    /// Start chromedriver on a free port and open a headless Chromium with a fresh
    /// profile and a window of `size`.
    pub async fn start(size: (u32, u32)) -> Self {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let deadline = Instant::now() + STARTUP;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver listens within {STARTUP:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("a fresh browser profile");
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            format!("--window-size={},{}", size.0, size.1),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object literal")
        };
        let client = tokio::time::timeout(
            STARTUP,
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities)
                .connect(&format!("http://127.0.0.1:{port}")),
        )
        .await
        .expect("Chromium starts in time")
        .expect("a WebDriver session");
        Self {
            client,
            driver,
            _profile: profile,
        }
    }

    /// The result of the JavaScript expression `expression` on the page.
    pub async fn eval(&self, expression: &str) -> Value {
        self.client
            .execute(&format!("return ({expression});"), vec![])
            .await
            .unwrap_or_else(|err| panic!("`{expression}` runs on the page: {err}"))
    }

    /// The text of the first element matching `css`, `None` while there is none.
    pub async fn text(&self, css: &str) -> Option<String> {
        let css = serde_json::to_string(css).expect("a string");
        let text = self
            .eval(&format!(
                "document.querySelector({css})?.textContent ?? null"
            ))
            .await;
        text.as_str().map(str::to_owned)
    }

    /// Wait at most `limit` until the page's JavaScript `condition` is true, failing with
    /// `what` and the page's visible text otherwise.
    pub async fn until(&self, limit: Duration, what: &str, condition: &str) {
        let deadline = Instant::now() + limit;
        loop {
            if self.eval(condition).await == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                let page = self.eval("document.body.innerText").await;
                panic!(
                    "timed out after {limit:?} waiting for {what}; the page:\n{}",
                    page.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Click the first element matching `css`.
    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("`{css}` is on the page: {err}"))
            .click()
            .await
            .unwrap_or_else(|err| panic!("`{css}` takes a click: {err}"));
    }

    /// Save a screenshot of the window as `name.png` for review; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        path
    }

    /// Close the session and the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `target/dashboard-screenshots`.
pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("dashboard-screenshots")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}
