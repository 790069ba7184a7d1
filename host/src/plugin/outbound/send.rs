//! Sending one granted request: a request slot, the name resolved and every address
//! checked, a connection to a checked address, and a response body cut at the cap and at
//! the request's deadline; the connection, and with it the upload of the request body,
//! ends at that deadline too.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, timeout_at};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::{IoFuture, Refuser};
use crate::grants::{Match, PluginGrants, RequestOrigin, RequestPermit, Scheme, address};

/// A granted request's destination and limits.
pub(super) struct Target {
    pub(super) origin: RequestOrigin,
    pub(super) matched: Match,
    pub(super) grants: Arc<PluginGrants>,
    /// When the whole request, body included, must be done: the job's deadline until the
    /// request has its slot, then also at most `request_timeout` from then.
    pub(super) deadline: Instant,
    pub(super) refuse: Refuser,
}

/// A connection's byte stream, plain or TLS.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// The addresses `target`'s origin resolves to before its deadline, each one the
/// grants let a guest reach: an origin matched only by a wildcard may not resolve to a
/// restricted address class.
async fn allowed_addresses(target: &Target) -> Result<Vec<SocketAddr>, Error> {
    let addresses = timeout_at(target.deadline, resolve(&target.origin))
        .await
        .map_err(|_| Error::DnsTimeout)??;
    if target.matched != Match::Explicit {
        for address in &addresses {
            if let Some(kind) = address::restricted(address.ip()) {
                return Err(target.refuse.restricted(&target.origin, address.ip(), kind));
            }
        }
    }
    Ok(addresses)
}

/// The URI as it goes on the wire. It carries scheme and authority for the check; to any
/// server that is not a proxy only the path and query go (the `Host` header names the host).
fn origin_form(uri: &http::Uri) -> Result<http::Uri, Error> {
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)
}

pub(super) async fn send(
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    mut target: Target,
) -> Result<(http::Response<WasiBody>, IoFuture), Error> {
    // Waiting for a slot (only under a limit below the host's concurrency) spends the job's
    // time, not the request's: `request_timeout` runs from when the request has its slot.
    let permit = timeout_at(target.deadline, target.grants.requests().acquire())
        .await
        .map_err(|_| Error::ConnectionLimitReached)?;
    target.deadline = target
        .deadline
        .min(Instant::now() + target.grants.request_timeout);
    let deadline = target.deadline;
    let sooner = |limit: Option<std::time::Duration>| {
        limit.map_or(deadline, |limit| deadline.min(Instant::now() + limit))
    };
    let addresses = allowed_addresses(&target).await?;
    let connect_by = sooner(options.and_then(|o| o.connect_timeout));
    let stream = timeout_at(connect_by, connect(&addresses, &target))
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Hyper)?;
    // The connection carries the request body too, which a guest may go on writing after
    // the server answered: it ends at the request's deadline like the rest, and the body
    // stream closes in the guest.
    let connection =
        wasmtime_wasi::runtime::spawn(async move { timeout_at(deadline, connection).await });
    *request.uri_mut() = origin_form(request.uri())?;
    let first_byte_by = sooner(options.and_then(|o| o.first_byte_timeout));
    let response = timeout_at(first_byte_by, sender.send_request(request))
        .await
        .map_err(|_| Error::ConnectionReadTimeout)?
        .map_err(Error::Hyper)?;
    let cap = target.grants.max_response_bytes;
    let response = response.map(|body| {
        CappedBody {
            inner: body,
            read: 0,
            cap,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            done: false,
            _permit: permit,
        }
        .boxed_unsync()
    });
    let io: IoFuture = Box::new(async move {
        match connection.await {
            // Cut at the deadline: the guest learns it from its streams, and
            // wasmtime-wasi-http would only log this result.
            Ok(Ok(())) | Err(_) => Ok(()),
            Ok(Err(err)) => Err(Error::Hyper(err)),
        }
    });
    Ok((response, io))
}

/// The addresses of the origin's host: the literal itself, or what DNS says.
async fn resolve(origin: &RequestOrigin) -> Result<Vec<SocketAddr>, Error> {
    if let Some(ip) = origin.ip() {
        return Ok(vec![SocketAddr::new(ip, origin.port)]);
    }
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((origin.host.as_str(), origin.port))
        .await
        .map_err(|err| Error::DnsError {
            rcode: Some(err.to_string()),
            info_code: None,
        })?
        .collect();
    if addresses.is_empty() {
        return Err(Error::DestinationNotFound);
    }
    Ok(addresses)
}

/// A connection to the first of the checked `addresses` that answers, in TLS for https.
async fn connect(addresses: &[SocketAddr], target: &Target) -> Result<Box<dyn Stream>, Error> {
    let mut last = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return secure(stream, target).await,
            Err(err) => last = Some(err),
        }
    }
    Err(last.map_or(Error::DestinationNotFound, Error::Connect))
}

#[cfg(feature = "tls")]
async fn secure(stream: TcpStream, target: &Target) -> Result<Box<dyn Stream>, Error> {
    match target.origin.scheme {
        Scheme::Http => Ok(Box::new(stream)),
        Scheme::Https => Ok(Box::new(super::tls::connect(stream, target).await?)),
    }
}

#[cfg(not(feature = "tls"))]
async fn secure(stream: TcpStream, target: &Target) -> Result<Box<dyn Stream>, Error> {
    match target.origin.scheme {
        Scheme::Http => Ok(Box::new(stream)),
        Scheme::Https => Err(Error::InternalError(Some(format!(
            "outbound request to `{}` needs TLS, and this host was built without it: \
             build jobhost with its default feature `tls`",
            target.origin
        )))),
    }
}

/// A response body that fails once it passes `cap` bytes or its deadline, and holds the
/// request's slot until it is dropped.
struct CappedBody {
    inner: hyper::body::Incoming,
    read: u64,
    cap: u64,
    deadline: Pin<Box<Sleep>>,
    done: bool,
    _permit: RequestPermit,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                ready!(self.deadline.as_mut().poll(cx));
                self.done = true;
                return Poll::Ready(Some(Err(Error::HttpResponseTimeout)));
            }
        };
        let result = match frame {
            None => {
                self.done = true;
                return Poll::Ready(None);
            }
            Some(Err(err)) => Err(Error::Hyper(err)),
            Some(Ok(frame)) => {
                let len = frame.data_ref().map_or(0, |data| data.len() as u64);
                self.read = self.read.saturating_add(len);
                if self.read > self.cap {
                    Err(Error::HttpResponseBodySize(Some(self.cap)))
                } else {
                    Ok(frame)
                }
            }
        };
        self.done = result.is_err();
        Poll::Ready(Some(result))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[tokio::test]
    async fn a_literal_address_is_not_resolved() {
        let origin = RequestOrigin::new("http", "127.0.0.1", Some(9)).expect("http");
        let addresses = resolve(&origin).await.expect("a literal");
        assert_eq!(
            addresses,
            vec![SocketAddr::new(IpAddr::from([127, 0, 0, 1]), 9)]
        );
    }
}
