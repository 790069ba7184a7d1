//! A job's outbound HTTP (`wasi:http/outgoing-handler`) under the operator's grants.
//!
//! # Contract
//! - Every request is checked against the plugin's grants when the guest sends it
//!   ([`Grants::check`]), found by the plugin's [`Identity`] (its file), never by its
//!   manifest's name; a refused request fails in the guest with
//!   `error-code.internal-error` carrying the [`Refusal`](crate::grants::Refusal) message,
//!   and nothing leaves the host. The first refusal of a job is logged at `warn` with the
//!   plugin and the job id; the rest at `debug`, so a guest looping on a refusal cannot
//!   flood the log.
//! - A granted request goes only to addresses that were checked: the host resolves the
//!   name, refuses if any address is loopback, private, link-local or unspecified (unless
//!   the grant names the address itself or `localhost`), and connects to a checked address
//!   (see [`send`]).
//! - Limits, from the plugin's section: at most `max_concurrent_requests` in flight across
//!   its jobs (by default as many as the host runs jobs, so a request waits for a slot only
//!   under a lower limit the operator set, and then at most until the job's deadline:
//!   `error-code.connection-limit-reached`), a response body cut at `max_response_bytes`
//!   (`error-code.http-response-body-size`), and the whole request, body included, within
//!   `request_timeout` from when it has its slot, never past the job's deadline.
//! - What a job hands `wasi:http` and the resources it holds are budgeted per job, before
//!   anything is copied: calls, part sizes, bytes, resources and body buffers (see
//!   [`budget`]).
//! - `wasi:http` follows no redirects: a guest that follows one sends a new request, which
//!   is checked like any other.
//! - `https://` (feature `tls`, on by default) trusts the webpki roots and the operator's
//!   `[outbound] ca_certificates`, as the grants in force when the job started say. A
//!   server certificate they refuse fails in the guest with
//!   `error-code.TLS-certificate-error`, logged like a refusal with rustls' reason.

mod budget;
mod send;
#[cfg(feature = "tls")]
mod tls;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use http_body_util::BodyExt as _;
use uuid::Uuid;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::tape::{Answer, Tape};
use crate::grants::{Grants, Identity, PluginGrants, Refusal, RequestOrigin};
use send::Target;

pub(super) use budget::add_to_linker as add_budget_to_linker;

/// What a job may do beyond the sandbox: the grants in force when it started, for its
/// plugin, and its deadline.
pub(super) struct JobGrants {
    refuser: Refuser,
    deadline: Instant,
    /// Records each request's answer, or answers it from a recording.
    tape: Option<Tape>,
}

impl JobGrants {
    pub(super) fn new(
        plugin: Identity,
        job_id: Uuid,
        grants: Arc<Grants>,
        deadline: Instant,
        tape: Option<Tape>,
    ) -> Self {
        Self {
            refuser: Refuser {
                plugin,
                job_id,
                grants,
                logged: Arc::new(AtomicBool::new(false)),
            },
            deadline,
            tape,
        }
    }

    /// The plugin's own grants: its config values and secrets, limits and origins; none
    /// when its section pins another binary.
    pub(super) fn plugin_grants(&self) -> Option<&Arc<PluginGrants>> {
        self.refuser.grants.granted(&self.refuser.plugin)
    }

    /// Where `request` may go, or the error the guest gets.
    fn target(&self, request: &http::Request<WasiBody>) -> Result<Target, Error> {
        let uri = request.uri();
        let origin = uri
            .scheme_str()
            .zip(uri.host())
            .and_then(|(scheme, host)| RequestOrigin::new(scheme, host, uri.port_u16()))
            .ok_or(Error::HttpRequestUriInvalid)?;
        let refuser = &self.refuser;
        let matched = refuser
            .grants
            .check(&refuser.plugin, &origin)
            .map_err(|refusal| refuser.error(&refusal))?;
        let grants = Arc::clone(
            self.plugin_grants()
                .expect("a grant matched, so the plugin has a section"),
        );
        // On tokio's clock, which a test may pause; `send` cuts it to the request's
        // timeout once the request has its slot.
        let job_deadline =
            tokio::time::Instant::now() + self.deadline.saturating_duration_since(Instant::now());
        Ok(Target {
            origin,
            matched,
            grants,
            deadline: job_deadline,
            refuse: refuser.clone(),
        })
    }
}

/// Turns a refusal into the guest's error, and logs it.
#[derive(Clone)]
struct Refuser {
    plugin: Identity,
    job_id: Uuid,
    grants: Arc<Grants>,
    /// Whether a refusal of this job was logged at `warn` already.
    logged: Arc<AtomicBool>,
}

impl Refuser {
    fn error(&self, refusal: &Refusal) -> Error {
        let (plugin, job_id) = (&*self.plugin.name, self.job_id);
        if self.logged.swap(true, Ordering::Relaxed) {
            tracing::debug!(plugin, %job_id, %refusal, "outbound request refused");
        } else {
            tracing::warn!(plugin, %job_id, %refusal, "outbound request refused");
        }
        Error::InternalError(Some(refusal.to_string()))
    }

    fn restricted(&self, origin: &RequestOrigin, address: IpAddr, kind: &'static str) -> Error {
        self.error(
            &self
                .grants
                .restricted(&self.plugin.name, origin, address, kind),
        )
    }

    /// The server of `origin` presented a certificate the trust refuses, for `reason`.
    #[cfg(feature = "tls")]
    fn untrusted(&self, origin: &RequestOrigin, reason: &dyn std::fmt::Display) -> Error {
        let (plugin, job_id) = (&*self.plugin.name, self.job_id);
        let grants = self.grants.file().display();
        if self.logged.swap(true, Ordering::Relaxed) {
            tracing::debug!(plugin, %job_id, %origin, %reason, %grants, "{UNTRUSTED}");
        } else {
            tracing::warn!(plugin, %job_id, %origin, %reason, %grants, "{UNTRUSTED}");
        }
        Error::TlsCertificateError
    }
}

/// The log line of a server certificate the trust refuses, with the way to trust a
/// private CA.
#[cfg(feature = "tls")]
const UNTRUSTED: &str = "outbound TLS refused the server's certificate; if a private CA \
                         signed it, name that CA's PEM file in [outbound] ca_certificates \
                         of the grants file";

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;
type SendFuture =
    Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), Error>> + Send>;

impl WasiHttpHooks for JobGrants {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _request_done: IoFuture,
    ) -> SendFuture {
        let Some(tape) = self.tape.clone() else {
            return match self.target(&request) {
                Ok(target) => Box::new(send::send(request, options, target)),
                Err(err) => Box::new(std::future::ready(Err(err))),
            };
        };
        let (method, url) = (request.method().to_string(), request.uri().to_string());
        // A replay answers from the recording, sending nothing; the body the guest writes
        // is read and dropped, as a server would take it.
        match tape.http_answer(&method, &url) {
            Some(Answer::Now(answer)) => {
                let mut body = request.into_body();
                let done: IoFuture = Box::new(async move {
                    while let Some(frame) = body.frame().await {
                        frame?;
                    }
                    Ok(())
                });
                return Box::new(std::future::ready(answer.map(|response| (response, done))));
            }
            Some(Answer::Never) => return Box::new(std::future::pending()),
            None => {}
        }
        let index = tape.http_request(&method, &url);
        match self.target(&request) {
            Ok(target) => Box::new(async move {
                match send::send(request, options, target).await {
                    Ok((response, io)) => Ok((tape.http_sent(index, response), io)),
                    Err(err) => Err(tape.http_failed(index, err)),
                }
            }),
            Err(err) => Box::new(std::future::ready(Err(tape.http_failed(index, err)))),
        }
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        budget::BODY_CHUNK
    }
}
