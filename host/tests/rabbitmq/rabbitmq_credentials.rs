//! Broker passwords stay out of every log line and error, however nasty, and can be given
//! without putting them in the URL. Runs the real binary against the broker on
//! `127.0.0.1:5672` (guest/guest), as `.ci/run` starts it.

use std::process::Output;

use crate::support;
use crate::support::cli::jobhost;

/// Passwords with every character that ends a URL part early, or is encoded in it; each
/// piece between those characters is distinctive, so finding one in a line means a leak.
const NASTY: &[&str] = &[
    "Qz7/Wv8@Jx9#Kp2?Gh1",
    "Lm4@Nb5@Tr8",
    "12?Rt6:Yu7",
    "99#Hg3@Df4",
    "Sa1%2FPo0",
    "Ce5 Vb6&Zw2;=Xn3",
];

/// `jobhost enqueue` straight to the broker (no host needed), with a log level that shows
/// everything the connection attempt logs.
fn enqueue_with(url: &str, extra: &[&str], env: Option<(&str, &str)>) -> Output {
    let mut command = jobhost();
    command
        .env("RUST_LOG", "trace")
        .args([
            "enqueue",
            "tests.Creds",
            "{}",
            "--queue",
            "test.credentials",
            "--amqp",
            url,
        ])
        .args(extra);
    if let Some((name, value)) = env {
        command.env(name, value);
    }
    command.output().expect("jobhost runs")
}

fn assert_hidden(output: &Output, password: &str, how: &str) {
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "{how}: a wrong password fails:\n{all}"
    );
    let encoded = url_encoded(password);
    for line in all.lines() {
        assert!(
            !line.contains(password) && !line.contains(&encoded),
            "{how}: no line shows the password `{password}`: {line}"
        );
        // Nor any telling fragment of it, as a naive scanner would leave behind.
        for fragment in password
            .split(['/', '?', '#', '@', ':', ' ', '%', '&', ';', '='])
            .filter(|f| f.len() >= 3)
        {
            assert!(
                !line.contains(fragment),
                "{how}: no line shows `{fragment}` of the password `{password}`: {line}"
            );
        }
    }
}

fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_failing_connect_never_shows_the_password_in_any_log_line_or_error() {
    let file = tempfile::NamedTempFile::new().expect("a password file");
    for password in NASTY {
        let raw = format!("amqp://guest:{password}@127.0.0.1:5672/%2f");
        assert_hidden(&enqueue_with(&raw, &[], None), password, "raw in the URL");
        let encoded = format!("amqp://guest:{}@127.0.0.1:5672/%2f", url_encoded(password));
        assert_hidden(
            &enqueue_with(&encoded, &[], None),
            password,
            "encoded in the URL",
        );
        std::fs::write(file.path(), format!("{password}\n")).expect("the file is written");
        let path = file.path().to_str().expect("a UTF-8 path");
        let no_password = "amqp://guest@127.0.0.1:5672/%2f";
        assert_hidden(
            &enqueue_with(no_password, &["--amqp-password-file", path], None),
            password,
            "in --amqp-password-file",
        );
        assert_hidden(
            &enqueue_with(no_password, &[], Some(("JOBHOST_AMQP_PASSWORD", password))),
            password,
            "in JOBHOST_AMQP_PASSWORD",
        );
    }
}

#[test]
fn the_password_can_come_from_a_file_or_the_environment_instead_of_the_url() {
    let _cleanup = support::Cleanup::new(&["test.credentials"]);
    let file = tempfile::NamedTempFile::new().expect("a password file");
    std::fs::write(file.path(), "guest\n").expect("the file is written");
    let path = file.path().to_str().expect("a UTF-8 path");
    // The URL's wrong password is replaced by the file's.
    let url = "amqp://guest:wrong@127.0.0.1:5672/%2f";
    for (extra, env) in [
        (&["--amqp-password-file", path][..], None),
        (&[][..], Some(("JOBHOST_AMQP_PASSWORD", "guest"))),
    ] {
        let output = enqueue_with(url, extra, env);
        assert!(
            output.status.success(),
            "the job is enqueued with the given password:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let purged = jobhost()
        .args([
            "dead",
            "purge",
            "test.credentials",
            "--amqp",
            url,
            "--amqp-password-file",
            path,
        ])
        .output()
        .expect("jobhost runs");
    assert!(
        purged.status.success(),
        "the dead-letter queue is reachable the same way"
    );
}
