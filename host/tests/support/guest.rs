//! What the tests of plugins in guest languages (`cli_js`, `cli_python`) share: the
//! language's example email sender, copied with its SDK pointed at this checkout, and the
//! jobs every email sender is put through on a running host.

use std::path::Path;

use super::cli::{Host, PROCESSING, json_of, logged_id};

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
