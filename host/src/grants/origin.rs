//! Outbound origins as Spin writes them, and the origin of a request.
//!
//! A grant is `scheme://host[:port]`: scheme `http`, `https` or `*`; host a name, an IP
//! literal (IPv6 in brackets), `*` (every host) or `*.suffix` (every name below `suffix`,
//! not `suffix` itself); port a number or `*`, and when left out the scheme's default
//! (80, 443; with scheme `*`, the default of the request's scheme). Names compare without
//! regard to case. No path, query, user or trailing text.

use std::fmt;
use std::net::IpAddr;

/// A request's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `http`
    Http,
    /// `https`
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            _ => None,
        }
    }

    /// The port of a URL that names none.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }

    /// As written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// Where a request goes: scheme, host (lowercase; IPv6 without brackets) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOrigin {
    /// The scheme.
    pub scheme: Scheme,
    /// The host name or IP literal, lowercase, IPv6 without brackets.
    pub host: String,
    /// The port, the scheme's default when the URL names none.
    pub port: u16,
}

impl RequestOrigin {
    /// The origin of a request URL's parts; `None` for a scheme other than http(s).
    pub fn new(scheme: &str, host: &str, port: Option<u16>) -> Option<Self> {
        let scheme = Scheme::parse(&scheme.to_ascii_lowercase())?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        Some(Self {
            scheme,
            port: port.unwrap_or(scheme.default_port()),
            host,
        })
    }

    /// The host as an IP address, when it is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// The grant that allows exactly this origin, as the operator would write it: the port
    /// only when it is not the scheme's default.
    pub fn suggested_grant(&self) -> String {
        let host = self.host_in_url();
        if self.port == self.scheme.default_port() {
            format!("{}://{host}", self.scheme.as_str())
        } else {
            format!("{}://{host}:{}", self.scheme.as_str(), self.port)
        }
    }

    fn host_in_url(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

impl fmt::Display for RequestOrigin {
    /// `scheme://host:port`, the port always shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}:{}",
            self.scheme.as_str(),
            self.host_in_url(),
            self.port
        )
    }
}

/// The host part of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `*`
    Any,
    /// `*.example.com`, stored as `.example.com`.
    Below(String),
    /// A name or an IP literal (IPv6 without brackets), lowercase.
    Exact(String),
}

/// The port part of a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortPattern {
    Any,
    Default,
    Exact(u16),
}

/// One entry of `allowed_outbound_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPattern {
    text: String,
    scheme: Option<Scheme>,
    host: HostPattern,
    port: PortPattern,
}

/// How a grant matched a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// The grant names this very host as an IP literal or `localhost`: loopback and private
    /// addresses are allowed for it.
    Explicit,
    /// A wildcard or a name: the host's addresses must all be public.
    PublicOnly,
}

impl OriginPattern {
    /// Parse one grant; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| "it needs a scheme: `http://`, `https://` or `*://`".to_owned())?;
        let scheme = match scheme {
            "*" => None,
            other => Some(
                Scheme::parse(other)
                    .ok_or_else(|| format!("scheme `{other}` is not `http`, `https` or `*`"))?,
            ),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err("only `scheme://host[:port]` is allowed: no path, query or user".into());
        }
        let (host, port) = split_host_port(rest)?;
        let port = match port {
            None => PortPattern::Default,
            Some("*") => PortPattern::Any,
            Some(port) => PortPattern::Exact(
                port.parse()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("port `{port}` is not 1..=65535 or `*`"))?,
            ),
        };
        Ok(Self {
            text: text.to_owned(),
            scheme,
            host: host_pattern(host)?,
            port,
        })
    }

    /// As the operator wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this grant allows `origin`, and how.
    pub fn matches(&self, origin: &RequestOrigin) -> Option<Match> {
        if self.scheme.is_some_and(|scheme| scheme != origin.scheme) {
            return None;
        }
        let port_ok = match self.port {
            PortPattern::Any => true,
            PortPattern::Default => origin.port == origin.scheme.default_port(),
            PortPattern::Exact(port) => origin.port == port,
        };
        if !port_ok {
            return None;
        }
        match &self.host {
            HostPattern::Any => Some(Match::PublicOnly),
            HostPattern::Below(suffix) => origin
                .host
                .ends_with(suffix.as_str())
                .then_some(Match::PublicOnly),
            HostPattern::Exact(host) if *host == origin.host => {
                let literal = host == "localhost" || host.parse::<IpAddr>().is_ok();
                Some(if literal {
                    Match::Explicit
                } else {
                    Match::PublicOnly
                })
            }
            HostPattern::Exact(_) => None,
        }
    }
}

fn split_host_port(rest: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(after) = rest.strip_prefix('[') {
        let (host, tail) = after
            .split_once(']')
            .ok_or_else(|| "an IPv6 address lacks its closing `]`".to_owned())?;
        return match tail {
            "" => Ok((host, None)),
            tail => tail
                .strip_prefix(':')
                .map(|port| (host, Some(port)))
                .ok_or_else(|| format!("unexpected `{tail}` after the IPv6 address")),
        };
    }
    Ok(match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    })
}

fn host_pattern(host: &str) -> Result<HostPattern, String> {
    let host = host.to_ascii_lowercase();
    if host == "*" {
        return Ok(HostPattern::Any);
    }
    if let Some(suffix) = host.strip_prefix("*.") {
        check_name(suffix)?;
        return Ok(HostPattern::Below(format!(".{suffix}")));
    }
    if host.parse::<IpAddr>().is_err() {
        check_name(&host)?;
    }
    Ok(HostPattern::Exact(host))
}

fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "host `{name}` is not a name, an IP address, `*` or `*.name`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(url: &str) -> RequestOrigin {
        let uri: http::Uri = url.parse().expect("a URL");
        RequestOrigin::new(
            uri.scheme_str().expect("a scheme"),
            uri.host().expect("a host"),
            uri.port_u16(),
        )
        .expect("http or https")
    }

    fn allows(grant: &str, url: &str) -> Option<Match> {
        OriginPattern::parse(grant)
            .expect("a valid grant")
            .matches(&origin(url))
    }

    #[test]
    fn a_grant_without_a_port_allows_only_the_default_port_of_its_scheme() {
        assert!(allows("https://hooks.example.com", "https://hooks.example.com/x").is_some());
        assert!(
            allows(
                "https://hooks.example.com",
                "https://hooks.example.com:443/"
            )
            .is_some()
        );
        assert!(
            allows(
                "https://hooks.example.com",
                "https://hooks.example.com:8443/"
            )
            .is_none()
        );
        assert!(
            allows("https://hooks.example.com", "http://hooks.example.com/").is_none(),
            "the scheme is part of the origin"
        );
        assert!(allows("*://hooks.example.com", "http://hooks.example.com/").is_some());
        assert!(allows("http://a.example:*", "http://a.example:9999/").is_some());
    }

    #[test]
    fn a_wildcard_allows_names_below_its_suffix_and_never_asks_for_private_addresses() {
        assert_eq!(
            allows("https://*.example.com", "https://a.b.example.com/"),
            Some(Match::PublicOnly)
        );
        assert!(
            allows("https://*.example.com", "https://example.com/").is_none(),
            "the suffix itself is not below itself"
        );
        assert!(allows("https://*.example.com", "https://badexample.com/").is_none());
        assert_eq!(
            allows("http://*:8080", "http://localhost:8080/"),
            Some(Match::PublicOnly),
            "a wildcard is no explicit grant of localhost"
        );
    }

    #[test]
    fn only_a_literal_address_or_localhost_named_in_the_grant_is_explicit() {
        assert_eq!(
            allows("http://127.0.0.1:7879", "http://127.0.0.1:7879/hook"),
            Some(Match::Explicit)
        );
        assert_eq!(
            allows("http://[::1]:80", "http://[::1]/"),
            Some(Match::Explicit)
        );
        assert_eq!(
            allows("http://LOCALHOST:1", "http://localhost:1/"),
            Some(Match::Explicit)
        );
        assert_eq!(
            allows("https://hooks.example.com", "https://HOOKS.example.com/"),
            Some(Match::PublicOnly)
        );
    }

    #[test]
    fn malformed_grants_are_refused_with_what_is_wrong() {
        let err = |text| OriginPattern::parse(text).expect_err(text);
        assert!(err("hooks.example.com").contains("needs a scheme"));
        assert!(err("ftp://x.example").contains("scheme `ftp`"));
        assert!(err("https://x.example/path").contains("no path"));
        assert!(err("https://x.example:0").contains("port `0`"));
        assert!(err("https://x.example:http").contains("port `http`"));
        assert!(err("https://a.*.example").contains("host `a.*.example`"));
        assert!(err("https://[::1").contains("closing `]`"));
    }

    #[test]
    fn the_suggested_grant_names_the_port_only_when_it_is_not_the_default() {
        assert_eq!(
            origin("https://evil.example/x").suggested_grant(),
            "https://evil.example"
        );
        assert_eq!(
            origin("http://127.0.0.1:7879/").suggested_grant(),
            "http://127.0.0.1:7879"
        );
        assert_eq!(origin("http://[::1]:81/").to_string(), "http://[::1]:81");
        assert_eq!(
            origin("https://evil.example/x").to_string(),
            "https://evil.example:443"
        );
    }
}
