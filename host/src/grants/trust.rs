//! Which servers `https://` requests of plugins trust: the webpki roots, and the CAs of the
//! operator's `[outbound] ca_certificates` file.
//!
//! # Contract
//! - Without the entry, requests trust the webpki roots only (Mozilla's list, built in).
//! - With it, the file (PEM, at most [`CA_FILE_MAX`] bytes, relative to the grants file) is
//!   read when the grants file is, and its CAs are trusted in addition to the roots, by
//!   every plugin. A file that cannot be read, is too large, is not PEM or holds no
//!   certificate refuses the grants file with a reason naming the file; with the `tls`
//!   feature, so does a certificate rustls cannot use as a trust anchor.
//! - Only the path, as the file writes it, is shown (`jobhost plugins`, `GET /plugins`).

use std::path::Path;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

/// The most bytes a CA file may hold; Mozilla's whole root list is ~250 KiB of PEM.
pub const CA_FILE_MAX: u64 = 1024 * 1024;

/// What `https://` requests trust.
#[derive(Clone)]
pub struct OutboundTrust {
    /// The operator's CA file as the grants file writes it, if it names one.
    ca_certificates: Option<String>,
    /// The TLS client configuration of that trust, built once per grants file.
    #[cfg(feature = "tls")]
    client: std::sync::Arc<tokio_rustls::rustls::ClientConfig>,
}

impl Default for OutboundTrust {
    /// The webpki roots only.
    fn default() -> Self {
        Self {
            ca_certificates: None,
            #[cfg(feature = "tls")]
            client: std::sync::Arc::clone(&client::WEBPKI_ROOTS),
        }
    }
}

impl std::fmt::Debug for OutboundTrust {
    /// The file only: the client configuration would list every root.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundTrust")
            .field("ca_certificates", &self.ca_certificates)
            .finish_non_exhaustive()
    }
}

impl OutboundTrust {
    /// The webpki roots and the CAs in the file at `full`, written `as_written` in the
    /// grants file; the error, never a certificate's contents, names `full`.
    pub(super) fn with_ca_file(as_written: &str, full: &Path) -> Result<Self, String> {
        let named = |reason: String| format!("ca_certificates: `{}` {reason}", full.display());
        let rules = crate::files::Rules::capped(CA_FILE_MAX, "a CA file may hold");
        let pem = crate::files::read(full, &rules)
            .map_err(|err| named(format!("cannot be read: {err}")))?;
        let certificates = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| named(format!("is not valid PEM: {err}")))?;
        if certificates.is_empty() {
            return Err(named(
                "holds no certificate (no `-----BEGIN CERTIFICATE-----` block)".to_owned(),
            ));
        }
        #[cfg(feature = "tls")]
        let client = client::with_extra_roots(certificates).map_err(named)?;
        #[cfg(not(feature = "tls"))]
        drop(certificates);
        Ok(Self {
            ca_certificates: Some(as_written.to_owned()),
            #[cfg(feature = "tls")]
            client,
        })
    }

    /// The operator's CA file as the grants file writes it, if it names one.
    pub fn ca_certificates(&self) -> Option<&str> {
        self.ca_certificates.as_deref()
    }

    /// The TLS client configuration for `https://` requests.
    #[cfg(feature = "tls")]
    pub(crate) fn client_config(&self) -> &std::sync::Arc<tokio_rustls::rustls::ClientConfig> {
        &self.client
    }
}

/// rustls client configurations: ring, the safe default protocol versions, no client
/// certificate; the same stack as the broker's `amqps://`.
#[cfg(feature = "tls")]
mod client {
    use std::sync::{Arc, LazyLock};

    use rustls_pki_types::CertificateDer;
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

    /// Built once: the root store holds ~150 certificates.
    pub(super) static WEBPKI_ROOTS: LazyLock<Arc<ClientConfig>> =
        LazyLock::new(|| config(webpki_roots()));

    /// The webpki roots and `extra`; the error says which certificate rustls refused.
    pub(super) fn with_extra_roots(
        extra: Vec<CertificateDer<'static>>,
    ) -> Result<Arc<ClientConfig>, String> {
        let mut roots = webpki_roots();
        for (n, certificate) in extra.into_iter().enumerate() {
            roots.add(certificate).map_err(|err| {
                format!(
                    "holds a certificate that is not a usable CA (number {}): {err}",
                    n + 1
                )
            })?;
        }
        Ok(config(roots))
    }

    fn webpki_roots() -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
        roots
    }

    fn config(roots: RootCertStore) -> Arc<ClientConfig> {
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        Arc::new(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trust of a CA file holding `contents`, and the file's path as errors show it.
    fn with_file(contents: &[u8]) -> (Result<OutboundTrust, String>, String) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, contents).expect("write");
        (
            OutboundTrust::with_ca_file("ca.pem", &file),
            file.display().to_string(),
        )
    }

    #[test]
    fn a_file_without_a_certificate_is_refused_naming_the_file() {
        let (trust, file) = with_file(b"not a certificate\n");
        assert_eq!(
            trust.expect_err("no certificate"),
            format!(
                "ca_certificates: `{file}` holds no certificate (no `-----BEGIN CERTIFICATE-----` \
                 block)"
            )
        );
    }

    #[test]
    fn a_missing_or_oversized_file_is_refused_naming_the_file() {
        let missing = Path::new("/nonexistent/jobhost-test/ca.pem");
        let err = OutboundTrust::with_ca_file("ca.pem", missing).expect_err("missing");
        assert!(
            err.starts_with("ca_certificates: `/nonexistent/jobhost-test/ca.pem` cannot be read: "),
            "{err}"
        );
        let (trust, _) = with_file(&vec![b'-'; CA_FILE_MAX as usize + 1]);
        let err = trust.expect_err("too large");
        assert!(
            err.ends_with("it holds 1048577 bytes, more than the 1048576 bytes a CA file may hold"),
            "{err}"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_pem_block_that_is_no_certificate_is_refused_with_the_tls_feature() {
        let (trust, file) =
            with_file(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
        let err = trust.expect_err("not a CA");
        assert!(
            err.starts_with(&format!(
                "ca_certificates: `{file}` holds a certificate that is not a usable CA (number 1): "
            )),
            "{err}"
        );
    }

    #[test]
    fn the_default_trust_names_no_file() {
        assert_eq!(OutboundTrust::default().ca_certificates(), None);
    }
}
