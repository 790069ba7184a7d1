//! TLS for `https://` requests: rustls with ring and the webpki roots, the same stack as the
//! broker's `amqps://`; built only with the `tls` feature.

use std::sync::{Arc, LazyLock};

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use wasmtime_wasi_http::Error;

/// Built once: the root store holds ~150 certificates.
static CONFIG: LazyLock<Arc<ClientConfig>> = LazyLock::new(|| {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    Arc::new(config)
});

/// A TLS session over `stream` with `host`, its certificate checked against the roots.
pub(super) async fn connect(stream: TcpStream, host: &str) -> Result<TlsStream<TcpStream>, Error> {
    let name = ServerName::try_from(host.to_owned()).map_err(|_| Error::HttpRequestUriInvalid)?;
    tokio_rustls::TlsConnector::from(Arc::clone(&CONFIG))
        .connect(name, stream)
        .await
        .map_err(Error::Tls)
}
