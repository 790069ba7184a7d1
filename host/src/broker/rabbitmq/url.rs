//! Broker URLs: parsed once by us, shown only with their password masked.
//!
//! Because a URL is parsed (WHATWG rules, as lapin parses it), not scanned, a password
//! with an unencoded `@` is masked whole. A password with an unencoded `/`, `?` or `#`
//! ends the authority early and leaves an `@` in the path, query or fragment: such a URL
//! is refused, and shown as its scheme alone, since any part of it may be the password.
//! lapin never sees the text of a URL (its own parse error repeats it verbatim); it gets
//! the parsed [`AMQPUri`].

use std::str::FromStr;

use lapin::uri::AMQPUri;
use url::Url;

use super::options::RabbitMqOptions;

/// `url` with its password replaced by `***`, so that logs and errors never carry
/// credentials. The user name stays: it helps tell brokers apart and is no secret.
pub(crate) fn redact(url: &str) -> String {
    let Some(parsed) = parse_whole(url) else {
        return concealed(url);
    };
    let mut shown = format!("{}://", parsed.scheme());
    if !parsed.username().is_empty() || parsed.password().is_some() {
        shown.push_str(parsed.username());
        if parsed.password().is_some() {
            shown.push_str(":***");
        }
        shown.push('@');
    }
    shown.push_str(parsed.host_str().unwrap_or(""));
    if let Some(port) = parsed.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(parsed.path());
    if let Some(query) = parsed.query() {
        shown.push('?');
        shown.push_str(query);
    }
    shown
}

/// The broker to connect to: `url` parsed, with `options`' password in place of the
/// URL's when it has one. The error never repeats the URL's text.
pub(super) fn target(url: &str, options: &RabbitMqOptions) -> Result<AMQPUri, String> {
    let unparsable = || {
        format!(
            "the broker URL `{}` cannot be parsed: percent-encode `/ ? # @ :` in its user name \
             and password, or leave the password out and pass `--amqp-password-file` or \
             `JOBHOST_AMQP_PASSWORD`",
            redact(url)
        )
    };
    if parse_whole(url).is_none() {
        return Err(unparsable());
    }
    let mut uri = AMQPUri::from_str(url).map_err(|_| unparsable())?;
    if let Some(password) = &options.password {
        uri.authority.userinfo.password.clone_from(&password.0);
    }
    Ok(uri)
}

/// `url` parsed, unless it is not a URL with an authority or an `@` after the authority
/// shows that a user name or password ended it early.
fn parse_whole(url: &str) -> Option<Url> {
    let parsed = Url::parse(url).ok()?;
    let tail = [
        parsed.path(),
        parsed.query().unwrap_or(""),
        parsed.fragment().unwrap_or(""),
    ];
    let misparsed = parsed.cannot_be_a_base() || tail.iter().any(|part| part.contains('@'));
    (!misparsed).then_some(parsed)
}

/// A URL that does not parse, shown as its scheme alone: any other part may be a secret.
fn concealed(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("{scheme}://<unparsable, not shown>")
        }
        _ => "<an unparsable URL, not shown>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_masked_and_everything_else_kept() {
        assert_eq!(
            redact("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            redact("amqps://u:p%40ss@h/v?heartbeat=5"),
            "amqps://u:***@h/v?heartbeat=5"
        );
    }

    #[test]
    fn a_password_containing_an_at_sign_is_masked_entirely() {
        assert_eq!(redact("amqp://u:p@ss@host/"), "amqp://u:***@host/");
    }

    #[test]
    fn a_password_with_an_unencoded_separator_is_never_shown_nor_accepted() {
        for (url, secret) in [
            ("amqp://u:se/cret@host/", "cret"),
            ("amqp://u:12/cret@host/", "cret"),
            ("amqp://u:se?cret@host/", "cret"),
            ("amqp://u:12?cret@host/", "cret"),
            ("amqp://u:se#cret@host/", "cret"),
            ("amqp://u:12#cret@host/", "cret"),
            ("amqp://u:12#c@ret@host/", "ret"),
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains(secret) && !shown.contains("12"),
                "`{url}` shows as `{shown}`"
            );
            let refused =
                target(url, &RabbitMqOptions::default()).expect_err("a misparsed URL is refused");
            assert!(
                !refused.contains(secret),
                "`{url}` is refused as `{refused}`"
            );
        }
    }

    #[test]
    fn urls_without_a_password_are_unchanged() {
        for url in [
            "amqp://127.0.0.1:5672/%2f",
            "amqp://user@host/",
            "amqp://host/vhost?heartbeat=5",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn a_password_option_replaces_the_urls() {
        let options = RabbitMqOptions::default().password("s3/cr?t#@");
        let uri = target("amqp://app@host/%2f", &options).expect("parses");
        assert_eq!(uri.authority.userinfo.username, "app");
        assert_eq!(uri.authority.userinfo.password, "s3/cr?t#@");
        assert_eq!(uri.vhost, "/");
    }
}
