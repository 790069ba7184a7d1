//! The little of URLs that sending a request needs: splitting `http(s)://authority/path?query`
//! into the parts `wasi:http` takes, resolving a redirect's `Location`, and a redacted form
//! for reasons. Hand-written rather than the `url` crate, whose IDNA tables would triple a
//! plugin's size; hosts are sent as written and dot segments are left to the server.

use super::outcome::bounded;

/// The longest URL a reason quotes.
const LABEL_BYTES: usize = 256;

/// A URL split for `wasi:http`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target<'a> {
    /// `http` or `https`, lowercase.
    pub(super) https: bool,
    /// `host` or `host:port`.
    pub(super) authority: &'a str,
    /// The path and query, at least `/`; without the fragment, which is never sent.
    pub(super) path_and_query: String,
}

/// `url` split, or why it cannot be sent.
pub(super) fn split(url: &str) -> Result<Target<'_>, &'static str> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("it is no absolute URL (`http://host/path`)")?;
    let https = if scheme.eq_ignore_ascii_case("https") {
        true
    } else if scheme.eq_ignore_ascii_case("http") {
        false
    } else {
        return Err("its scheme is neither `http` nor `https`");
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err("it names no host");
    }
    if authority.contains('@') {
        return Err(
            "it carries user information, which is not sent: use an `authorization` header",
        );
    }
    let tail = tail.split('#').next().unwrap_or_default();
    let path_and_query = match tail.chars().next() {
        Some('/') => tail.to_owned(),
        _ => format!("/{tail}"),
    };
    Ok(Target {
        https,
        authority,
        path_and_query,
    })
}

/// The scheme and authority of `url`, lowercase, to tell whether two URLs share an origin.
pub(super) fn origin(url: &str) -> Option<(bool, String)> {
    let target = split(url).ok()?;
    Some((target.https, target.authority.to_ascii_lowercase()))
}

/// `url` without its query, fragment and user information, bounded, for reasons: a query
/// often carries an API key, and reasons go to logs and dead letters.
pub(super) fn redacted(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let shown = match without_query.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit('@').next().unwrap_or_default();
            format!("{scheme}://{host}{path}")
        }
        None => without_query.to_owned(),
    };
    bounded(shown.as_bytes(), LABEL_BYTES)
}

/// The absolute URL a redirect from `base` to `location` leads to; `None` when it does not
/// lead to an http(s) URL.
pub(super) fn resolve(base: &str, location: &str) -> Option<String> {
    let location = location.trim();
    let resolved = if location.contains("://") {
        location.to_owned()
    } else {
        let target = split(base).ok()?;
        let scheme = if target.https { "https" } else { "http" };
        if let Some(rest) = location.strip_prefix("//") {
            format!("{scheme}://{rest}")
        } else if location.starts_with('/') {
            format!("{scheme}://{}{location}", target.authority)
        } else {
            let path = target.path_and_query.split('?').next().unwrap_or("/");
            let dir = if location.starts_with('?') {
                path
            } else {
                &path[..=path.rfind('/').unwrap_or(0)]
            };
            format!("{scheme}://{}{dir}{location}", target.authority)
        }
    };
    let sendable = split(&resolved).is_ok();
    sendable.then_some(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_splits_into_the_parts_wasi_http_takes() {
        assert_eq!(
            split("https://api.example.com:8443/v1/orders?page=2#top"),
            Ok(Target {
                https: true,
                authority: "api.example.com:8443",
                path_and_query: "/v1/orders?page=2".to_owned(),
            })
        );
        assert_eq!(
            split("HTTP://127.0.0.1:7879").map(|t| t.path_and_query),
            Ok("/".to_owned())
        );
        assert_eq!(
            split("http://h?q=1").map(|t| t.path_and_query),
            Ok("/?q=1".to_owned())
        );
    }

    #[test]
    fn urls_that_cannot_be_sent_say_why() {
        assert!(split("/v1/orders").unwrap_err().contains("no absolute URL"));
        assert!(
            split("ftp://h/f")
                .unwrap_err()
                .contains("neither `http` nor `https`")
        );
        assert!(split("http:///path").unwrap_err().contains("no host"));
        assert!(
            split("http://me:pw@h/")
                .unwrap_err()
                .contains("user information")
        );
    }

    #[test]
    fn a_reason_shows_no_query_fragment_or_user_information() {
        assert_eq!(
            redacted("https://me:secret@api.example.com/v1/orders?api_key=s3cr3t#x"),
            "https://api.example.com/v1/orders"
        );
        assert_eq!(redacted("http://h\n/x"), "http://h\\n/x", "one line");
        assert!(redacted(&format!("http://h/{}", "a".repeat(1000))).len() < 300);
    }

    #[test]
    fn a_location_resolves_against_the_request_it_answers() {
        let base = "https://api.example.com/v1/orders/7?full=1";
        for (location, expected) in [
            ("http://other.example/x", "http://other.example/x"),
            ("//cdn.example/y", "https://cdn.example/y"),
            ("/v2/orders/7", "https://api.example.com/v2/orders/7"),
            ("8", "https://api.example.com/v1/orders/8"),
            ("?full=0", "https://api.example.com/v1/orders/7?full=0"),
        ] {
            assert_eq!(
                resolve(base, location).as_deref(),
                Some(expected),
                "{location}"
            );
        }
        assert_eq!(resolve(base, "mailto://x@y"), None, "no http(s) URL");
    }

    #[test]
    fn origins_compare_scheme_and_authority_ignoring_case() {
        assert_eq!(origin("http://H:1/a"), origin("http://h:1/b"));
        assert_ne!(origin("http://h/a"), origin("https://h/a"));
        assert_ne!(origin("http://h/a"), origin("http://h:8080/a"));
    }
}
