//! Broker URLs as they may appear in logs and errors.

/// `url` with its password replaced by `***`, so that logs and errors never carry
/// credentials. The user name stays: it helps tell brokers apart and is no secret.
pub(crate) fn redact(url: &str) -> String {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let authority_len = url[authority_start..]
        .find(['/', '?', '#'])
        .unwrap_or(url.len() - authority_start);
    let authority = &url[authority_start..authority_start + authority_len];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.to_owned();
    };
    let password_start = authority_start + colon + 1;
    let password_end = authority_start + at;
    format!("{}***{}", &url[..password_start], &url[password_end..])
}

#[cfg(test)]
mod tests {
    use super::redact;

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
    fn urls_without_a_password_are_unchanged() {
        for url in [
            "amqp://127.0.0.1:5672/%2f",
            "amqp://user@host/",
            "amqp://host/path@x",
            "host",
        ] {
            assert_eq!(redact(url), url);
        }
    }
}
