//! Who may use the admin API: its owner on this machine, not a web page nor another user.
//!
//! # Contract
//! Every request passes four checks, in this order:
//! 1. **`Host`** is a loopback name (`localhost`, `127.0.0.1`, `[::1]`) or the address the
//!    API was configured or bound with, and names the API's port if it names one; anything
//!    else is `421 Misdirected Request`. Because a DNS-rebinding page reaches the API under
//!    its own host name, this keeps browsers out even of the open routes.
//! 2. **`Origin`**, when a browser sends one, is `http://` and an allowed host with the
//!    API's port, and `Sec-Fetch-Site` is neither `cross-site` nor `same-site`; anything
//!    else is `403 Forbidden`, so a page of another site cannot make a browser call the
//!    API. Another port of this machine is another origin but the same site, which
//!    browsers send a `SameSite` cookie to, hence `same-site` too. An origin without a port
//!    is port 80's, another server of this machine, so it is refused unless the API itself
//!    is on port 80. The one exception is a browser opening the page itself (`GET /`
//!    without an `Origin`) from a link on another site, such as `jobhost dashboard
//!    --open`'s redirect file: the page shows nothing without a session.
//! 3. **The caller** is the holder of the token (`Authorization: Bearer TOKEN`, the token
//!    the host wrote at start into a `0600` file only this user reads) or a dashboard
//!    session (its cookie). The routes that reveal payloads, failure reasons or grants
//!    need one ([`require_caller`]; the list is the [router's](super::router)); without,
//!    `401 Unauthorized`.
//! 4. **Mutating requests** (any method but `GET` and `HEAD`: enqueue, replay, purge, a
//!    login) need the token, or a session on a request that names its origin (which check
//!    2 found to be this API's); without either, `401 Unauthorized`.
//!
//! # The dashboard's logins and sessions
//! A browser cannot read the token file, and the token never leaves it: not in the log,
//! not in a link. `jobhost dashboard` reads the token file and asks `POST /api/login` for
//! a login token (the token holder only), and prints `http://ADDR/?login=LOGIN`.
//! [`AdminAccess::redeem`] exchanges `LOGIN` (once, within its lifetime) for a session of
//! its own: a random secret in the cookie `jobhost_session_PORT` (`HttpOnly`,
//! `SameSite=Strict`, so neither the page's scripts nor another site's requests carry it).
//! The cookie's name carries the API's port because browsers send a cookie of `127.0.0.1`
//! to every port of it: two hosts on one machine keep their sessions apart, and a server
//! on another port never sees a name it could mistake for its own. Lifetimes and caps are
//! the [`session`](super::session) store's.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::session::{SESSION_LIFETIME, SessionId, Sessions, random_secret};

/// Browsers send it with every request; `cross-site` means another site's page, and
/// `same-site` another origin of the same site, such as another port of this machine.
const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
/// The host names that always mean this machine.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Who a request comes from, once [`guard`] has checked it; routes read it from the
/// request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Caller {
    /// The holder of the admin token: the client commands.
    Token,
    /// A dashboard session.
    Session(SessionId),
}

/// The admin API's checks: the bearer token, the dashboard's logins and sessions, and the
/// host names it answers to.
#[derive(Clone)]
pub struct AdminAccess {
    token: Arc<str>,
    sessions: Arc<Mutex<Sessions>>,
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
            sessions: Arc::default(),
            names,
            port: bound.port(),
        }
    }

    /// A fresh random token: 32 bytes from the thread's CSPRNG, as hex.
    pub fn generate_token() -> String {
        random_secret()
    }

    /// The name of the session cookie of this API: `jobhost_session_PORT`.
    pub fn cookie_name(&self) -> String {
        format!("jobhost_session_{}", self.port)
    }

    /// A login token for the dashboard's link, good once within its lifetime.
    pub(super) fn mint_login(&self) -> String {
        self.store().mint_login(Instant::now())
    }

    /// Exchange `login`, the token of a login link, for the `Set-Cookie` value of a new
    /// dashboard session; `None` unless it is a pending, unexpired login token.
    pub(super) fn redeem(&self, login: &str) -> Option<String> {
        let secret = self.store().redeem(login, Instant::now())?;
        Some(format!(
            "{}={secret}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            self.cookie_name(),
            SESSION_LIFETIME.as_secs()
        ))
    }

    /// Whether `caller` may still call: the token always, a session until it expires.
    pub(super) fn is_current(&self, caller: Caller) -> bool {
        match caller {
            Caller::Token => true,
            Caller::Session(id) => self.store().is_open(id, Instant::now()),
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().expect("the session store poisoned")
    }

    /// Who `headers` come from: the bearer token first, else an open session's cookie.
    fn caller(&self, headers: &HeaderMap) -> Option<Caller> {
        if self.has_token(headers) {
            return Some(Caller::Token);
        }
        let name = self.cookie_name();
        let secret = headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find_map(|(key, value)| (key == name).then_some(value))?;
        self.store()
            .session(secret, Instant::now())
            .map(Caller::Session)
    }

    /// Whether `authority` (`host[:port]`, a `Host` header) names this API; without a
    /// port it means the scheme's, which a client that reached this socket did use.
    fn allows(&self, authority: &str) -> bool {
        let (host, port) = split_port(authority);
        let port_ok = match port {
            None => true,
            Some(port) => port.parse::<u16>() == Ok(self.port),
        };
        port_ok && self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
    }

    /// Whether `origin` (an `Origin` header) is this API's own: `http://`, an allowed
    /// host and this port. A browser leaves port 80 out of an origin, so an origin
    /// without a port is another server's unless this API is on port 80.
    fn is_own_origin(&self, origin: &str) -> bool {
        let Some(authority) = origin.strip_prefix("http://") else {
            return false;
        };
        let explicit = split_port(authority).1.is_some();
        (explicit || self.port == 80) && self.allows(authority)
    }

    /// Checks 1 to 4 of the module's contract for a request of `method` on `path`; the
    /// caller, if any, for the routes.
    fn check(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Option<Caller>, ApiError> {
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
        let cross_site = headers.get(SEC_FETCH_SITE).is_some_and(|v| {
            v.as_bytes().eq_ignore_ascii_case(b"cross-site")
                || v.as_bytes().eq_ignore_ascii_case(b"same-site")
        });
        let foreign_origin = headers
            .get(ORIGIN)
            .is_some_and(|origin| !self.is_own_origin(origin.to_str().unwrap_or("")));
        // A browser opening the page from a link anywhere, the redirect file of `jobhost
        // dashboard --open` included (a `file://` page is another site): the page shows
        // nothing without a session, and a login link opens one only for whoever its
        // minter gave it to.
        let opens_page = *method == Method::GET && path == "/" && !headers.contains_key(ORIGIN);
        if (cross_site && !opens_page) || foreign_origin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the admin API refuses requests from web pages of other sites".to_owned(),
            ));
        }
        let caller = self.caller(headers);
        let may_change = match caller {
            Some(Caller::Token) => true,
            Some(Caller::Session(_)) => headers.contains_key(ORIGIN),
            None => false,
        };
        if matches!(*method, Method::GET | Method::HEAD) || may_change {
            return Ok(caller);
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this request changes jobs and needs `Authorization: Bearer TOKEN` with the token the host wrote at start (its `--admin-token-file`, which the jobhost client commands read), or the dashboard opened through a link of `jobhost dashboard`".to_owned(),
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

/// `401` with `WWW-Authenticate: Bearer`.
fn unauthorized(err: ApiError) -> Response {
    let mut response = err.into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, "Bearer".parse().expect("a valid header"));
    response
}

/// The middleware that runs [`AdminAccess`]'s checks before every route, and puts the
/// [`Caller`], if any, in the request's extensions.
pub(super) async fn guard(
    State(access): State<Arc<AdminAccess>>,
    mut request: Request,
    next: Next,
) -> Response {
    match access.check(request.method(), request.uri().path(), request.headers()) {
        Ok(caller) => {
            if let Some(caller) = caller {
                request.extensions_mut().insert(caller);
            }
            next.run(request).await
        }
        Err(err) if err.status == StatusCode::UNAUTHORIZED => unauthorized(err),
        Err(err) => err.into_response(),
    }
}

/// The middleware of the routes that reveal payloads, failure reasons or grants: `401`
/// unless [`guard`] found a caller.
pub(super) async fn require_caller(request: Request, next: Next) -> Response {
    if request.extensions().get::<Caller>().is_some() {
        return next.run(request).await;
    }
    unauthorized(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this route shows payloads, failure reasons or grants and needs `Authorization: Bearer TOKEN` with the token the host wrote at start (its `--admin-token-file`, which the jobhost client commands read), or a dashboard session: `jobhost dashboard` prints a login link".to_owned(),
    ))
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

    #[test]
    fn an_origin_without_a_port_is_refused_unless_the_api_is_on_port_80() {
        let on_7878 = access();
        let on_80 = AdminAccess::new(
            "secret",
            "127.0.0.1:80",
            "127.0.0.1:80".parse().expect("an address"),
        );
        let table = [
            ("http://127.0.0.1:7878", true, false),
            ("http://localhost:7878", true, false),
            ("http://127.0.0.1", false, true),
            ("http://localhost", false, true),
            ("http://[::1]", false, true),
            ("http://127.0.0.1:80", false, true),
            ("https://127.0.0.1:7878", false, false),
            ("http://evil.example", false, false),
            ("null", false, false),
        ];
        for (origin, own_on_7878, own_on_80) in table {
            assert_eq!(
                on_7878.is_own_origin(origin),
                own_on_7878,
                "`{origin}` on port 7878"
            );
            assert_eq!(
                on_80.is_own_origin(origin),
                own_on_80,
                "`{origin}` on port 80"
            );
        }
    }

    fn session_cookie(access: &AdminAccess) -> String {
        let set_cookie = access.redeem(&access.mint_login()).expect("logs in");
        set_cookie.split(';').next().expect("name=value").to_owned()
    }

    #[test]
    fn the_session_cookie_is_named_after_the_port_and_works_only_on_that_port() {
        let access = access();
        let set_cookie = access.redeem(&access.mint_login()).expect("logs in");
        assert!(
            set_cookie.starts_with("jobhost_session_7878="),
            "{set_cookie}"
        );
        assert!(
            set_cookie.contains("HttpOnly; SameSite=Strict"),
            "{set_cookie}"
        );
        assert!(
            set_cookie.contains(&format!("Max-Age={}", SESSION_LIFETIME.as_secs())),
            "{set_cookie}"
        );
        let value = set_cookie
            .split(';')
            .next()
            .expect("name=value")
            .split_once('=')
            .expect("=")
            .1;
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            format!("jobhost_session_7879={value}")
                .parse()
                .expect("a header"),
        );
        assert_eq!(access.caller(&headers), None, "another port's cookie name");
    }

    #[test]
    fn the_session_cookie_reads_anywhere_but_changes_jobs_only_on_a_request_naming_its_origin() {
        let access = access();
        let cookie = session_cookie(&access);
        let get = Method::GET;
        let post = Method::POST;
        let mut headers = HeaderMap::new();
        headers.insert(HOST, "127.0.0.1:7878".parse().expect("a header"));
        headers.insert(
            COOKIE,
            format!("theme=dark; {cookie}").parse().expect("a header"),
        );
        assert!(matches!(
            access.check(&get, "/dead/q", &headers),
            Ok(Some(Caller::Session(_)))
        ));
        assert!(
            access.check(&post, "/dead/q", &headers).is_err(),
            "no origin: not from the page"
        );
        headers.insert(ORIGIN, "http://127.0.0.1:7878".parse().expect("a header"));
        assert!(matches!(
            access.check(&post, "/dead/q", &headers),
            Ok(Some(Caller::Session(_)))
        ));
        headers.insert(
            COOKIE,
            "jobhost_session_7878=forged".parse().expect("a header"),
        );
        assert!(
            access.check(&post, "/dead/q", &headers).is_err(),
            "a forged cookie"
        );
        assert!(
            matches!(access.check(&get, "/dead/q", &headers), Ok(None)),
            "reads as nobody"
        );
    }

    #[test]
    fn each_login_opens_a_session_of_its_own() {
        let access = access();
        let first = session_cookie(&access);
        let second = session_cookie(&access);
        assert_ne!(first, second);
        let caller = |cookie: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(COOKIE, cookie.parse().expect("a header"));
            access.caller(&headers).expect("an open session")
        };
        assert_ne!(caller(&first), caller(&second), "two sessions, two callers");
        assert!(access.is_current(caller(&first)));
    }
}
