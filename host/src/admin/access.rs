//! Who may use the admin API: its owner on this machine, not a web page nor another user.
//!
//! # Contract
//! Every request passes three checks, in this order:
//! 1. **`Host`** is a loopback name (`localhost`, `127.0.0.1`, `[::1]`) or the address the
//!    API was configured or bound with, and names the API's port if it names one; anything
//!    else is `421 Misdirected Request`. Because a DNS-rebinding page reaches the API under
//!    its own host name, this keeps browsers out even of the read-only routes.
//! 2. **`Origin`**, when a browser sends one, names an allowed host too, and
//!    `Sec-Fetch-Site` is not `cross-site`; anything else is `403 Forbidden`, so a page of
//!    another site cannot make a browser call the API.
//! 3. **Mutating requests** (any method but `GET` and `HEAD`: enqueue, replay, purge)
//!    carry `Authorization: Bearer TOKEN` with the token the host generated at start, or
//!    come from the dashboard: the session cookie and an `Origin` (which check 2 found to
//!    be this API's); without either, `401 Unauthorized`. The token is in a `0600` file
//!    only this user reads, so another user of the machine cannot enqueue or drop jobs.
//!
//! # The dashboard's session
//! A browser cannot read the token file, so the host logs a login link at start,
//! `http://ADDR/?token=LOGIN` (as Jupyter does). `LOGIN` is a second random token, good
//! for one use: [`AdminAccess::redeem`] exchanges it for the session cookie
//! (`HttpOnly`, `SameSite=Strict`, so neither the page's scripts nor another site's
//! requests carry it) and replaces it with a fresh one, which the host logs for the next
//! browser. A link copied from the log or the browser's history after its use opens
//! nothing. The session lasts as long as the host process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::server::ApiError;

/// Browsers send it with every request; `cross-site` means another site's page.
const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
/// The host names that always mean this machine.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The name of the dashboard's session cookie.
const SESSION_COOKIE: &str = "jobhost_session";

/// The admin API's checks: the bearer token, the dashboard's login and session, and the
/// host names it answers to.
#[derive(Clone)]
pub struct AdminAccess {
    token: Arc<str>,
    /// The one-time login token of the dashboard's next login link.
    login: Arc<Mutex<String>>,
    /// The value of the dashboard's session cookie.
    session: Arc<str>,
    names: Vec<String>,
    port: u16,
}

impl std::fmt::Debug for AdminAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAccess")
            .field("token", &"***")
            .field("names", &self.names)
            .field("port", &self.port)
            .finish()
    }
}

impl AdminAccess {
    /// Accept `token` for mutating requests, and requests addressed to a loopback name,
    /// to the host part of `configured` (the `--admin` address as given) or to `bound`'s
    /// IP, on `bound`'s port.
    pub fn new(token: impl Into<Arc<str>>, configured: &str, bound: SocketAddr) -> Self {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|n| (*n).to_owned()).collect();
        let bound_ip = match bound {
            SocketAddr::V4(v4) => v4.ip().to_string(),
            SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
        };
        let configured_host = split_port(configured).0.to_ascii_lowercase();
        for name in [bound_ip, configured_host] {
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
        Self {
            token: token.into(),
            login: Arc::new(Mutex::new(Self::generate_token())),
            session: Self::generate_token().into(),
            names,
            port: bound.port(),
        }
    }

    /// The dashboard's login link on `addr` (`host:port`), good for one login.
    pub fn login_link(&self, addr: &str) -> String {
        let login = self.login.lock().expect("login token poisoned");
        format!("http://{addr}/?token={login}")
    }

    /// Exchange `login`, the token of a login link, for the `Set-Cookie` value of a
    /// dashboard session; `None` unless it is the current login token, which a login
    /// then replaces with a fresh one.
    pub fn redeem(&self, login: &str) -> Option<String> {
        let mut current = self.login.lock().expect("login token poisoned");
        if !same_secret(login, &current) {
            return None;
        }
        *current = Self::generate_token();
        Some(format!(
            "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            self.session
        ))
    }

    /// Whether `headers` may change jobs: the bearer token, or the dashboard's session
    /// cookie on a request that names its origin.
    pub(super) fn may_change(&self, headers: &HeaderMap) -> bool {
        self.has_token(headers) || (headers.contains_key(ORIGIN) && self.has_session(headers))
    }

    /// A fresh random token: 32 bytes from the thread's CSPRNG, as hex.
    pub fn generate_token() -> String {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `authority` (`host[:port]`) names this API.
    fn allows(&self, authority: &str) -> bool {
        let (host, port) = split_port(authority);
        let port_ok = match port {
            None => true,
            Some(port) => port.parse::<u16>() == Ok(self.port),
        };
        port_ok && self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
    }

    fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        let host = headers.get(HOST).and_then(|v| v.to_str().ok());
        if !host.is_some_and(|host| self.allows(host)) {
            return Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "the admin API answers only to `localhost`, `127.0.0.1`, `[::1]` or its own address, not to host `{}`",
                    crate::text::bounded(host.unwrap_or(""), crate::text::NAME_MAX)
                ),
            ));
        }
        let cross_site = headers
            .get(SEC_FETCH_SITE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
        let foreign_origin = headers.get(ORIGIN).is_some_and(|origin| {
            let origin = origin.to_str().unwrap_or("");
            !origin
                .strip_prefix("http://")
                .is_some_and(|authority| self.allows(authority))
        });
        if cross_site || foreign_origin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the admin API refuses requests from web pages of other sites".to_owned(),
            ));
        }
        if matches!(*method, Method::GET | Method::HEAD) || self.may_change(headers) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this request changes jobs and needs `Authorization: Bearer TOKEN` with the token the host wrote at start (its `--admin-token-file`, which the jobhost client commands read), or the dashboard opened through the login link the host logged".to_owned(),
        ))
    }

    fn has_token(&self, headers: &HeaderMap) -> bool {
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        same_secret(given.trim(), &self.token)
    }

    pub(super) fn has_session(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == SESSION_COOKIE && same_secret(value, &self.session))
    }
}

/// Whether `given` is `secret`. Comparing digests rather than the secrets keeps the time
/// taken independent of how much of a guess is right.
fn same_secret(given: &str, secret: &str) -> bool {
    Sha256::digest(given) == Sha256::digest(secret)
}

/// `host[:port]` split at the port's colon; `[v6]:port` keeps its brackets.
fn split_port(authority: &str) -> (&str, Option<&str>) {
    match authority.rfind(':') {
        Some(colon) if !authority[colon..].contains(']') => {
            (&authority[..colon], Some(&authority[colon + 1..]))
        }
        _ => (authority, None),
    }
}

/// The middleware that runs [`AdminAccess`]'s checks before every route.
pub(super) async fn guard(
    State(access): State<Arc<AdminAccess>>,
    request: Request,
    next: Next,
) -> Response {
    match access.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(err) => {
            let unauthorized = err.status == StatusCode::UNAUTHORIZED;
            let mut response = err.into_response();
            if unauthorized {
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, "Bearer".parse().expect("a valid header"));
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> AdminAccess {
        AdminAccess::new(
            "secret",
            "jobs.internal:7878",
            "10.0.0.5:7878".parse().expect("an address"),
        )
    }

    #[test]
    fn loopback_names_and_the_configured_and_bound_addresses_are_allowed_on_the_port() {
        let access = access();
        for host in [
            "localhost:7878",
            "127.0.0.1:7878",
            "[::1]:7878",
            "LOCALHOST",
            "jobs.internal:7878",
            "10.0.0.5:7878",
        ] {
            assert!(access.allows(host), "`{host}` is allowed");
        }
        for host in [
            "evil.example:7878",
            "127.0.0.1:7879",
            "127.0.0.1.evil:7878",
            "",
        ] {
            assert!(!access.allows(host), "`{host}` is refused");
        }
    }

    fn login_of(link: &str) -> &str {
        link.split_once("?token=").expect("a token").1
    }

    #[test]
    fn a_login_link_opens_one_session_and_is_replaced_by_another() {
        let access = access();
        let link = access.login_link("127.0.0.1:7878");
        assert!(link.starts_with("http://127.0.0.1:7878/?token="), "{link}");
        assert_eq!(
            access.redeem("a guess"),
            None,
            "a wrong token opens nothing"
        );
        let cookie = access.redeem(login_of(&link)).expect("the link logs in");
        assert!(cookie.contains("HttpOnly; SameSite=Strict"), "{cookie}");
        assert_eq!(access.redeem(login_of(&link)), None, "the link is used up");
        let next = access.login_link("127.0.0.1:7878");
        assert_ne!(next, link, "a fresh link for the next browser");
        assert!(access.redeem(login_of(&next)).is_some());
    }

    #[test]
    fn the_session_cookie_changes_jobs_only_on_a_request_naming_its_origin() {
        let access = access();
        let link = access.login_link("127.0.0.1:7878");
        let set_cookie = access.redeem(login_of(&link)).expect("logs in");
        let cookie = set_cookie.split(';').next().expect("name=value");
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            format!("theme=dark; {cookie}").parse().expect("a header"),
        );
        assert!(!access.may_change(&headers), "no origin: not from the page");
        headers.insert(ORIGIN, "http://127.0.0.1:7878".parse().expect("a header"));
        assert!(access.may_change(&headers));
        headers.insert(COOKIE, "jobhost_session=forged".parse().expect("a header"));
        assert!(!access.may_change(&headers), "a forged cookie");
    }
}
