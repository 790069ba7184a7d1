//! TLS for `https://` requests: rustls with the trust of the grants file the job started
//! with ([`OutboundTrust`](crate::grants::OutboundTrust)); built only with the `tls` feature.

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, pki_types::ServerName};
use wasmtime_wasi_http::Error;

use super::send::Target;

/// A TLS session over `stream` with the target's host, its certificate checked against
/// the trust. A certificate the trust refuses is `error-code.TLS-certificate-error` in the
/// guest, and logged with the reason and the way to trust a private CA.
pub(super) async fn connect(
    stream: TcpStream,
    target: &Target,
) -> Result<TlsStream<TcpStream>, Error> {
    let host = &target.origin.host;
    let name = ServerName::try_from(host.clone()).map_err(|_| Error::HttpRequestUriInvalid)?;
    let config = target.refuse.grants.outbound().client_config();
    tokio_rustls::TlsConnector::from(Arc::clone(config))
        .connect(name, stream)
        .await
        .map_err(|err| match certificate_error(&err) {
            Some(reason) => target.refuse.untrusted(&target.origin, &reason),
            None => Error::Tls(err),
        })
}

/// Why rustls refused the server's certificate, if that is why the handshake failed.
fn certificate_error(err: &std::io::Error) -> Option<&rustls::Error> {
    match err.get_ref()?.downcast_ref::<rustls::Error>()? {
        err @ rustls::Error::InvalidCertificate(_) => Some(err),
        _ => None,
    }
}
