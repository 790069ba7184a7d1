//! A CA made at test time and a server certificate it signs for `localhost` and
//! `127.0.0.1`: what an operator's private CA looks like to the host.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// A CA and a server certificate signed by it.
pub struct Pki {
    /// The CA's certificate, PEM: what `[outbound] ca_certificates` names.
    pub ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

impl Pki {
    pub fn new() -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.distinguished_name
            .push(DnType::CommonName, "jobhost test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("a CA key"))
            .expect("the CA signs itself");
        let server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("server parameters");
        let key = KeyPair::generate().expect("a server key");
        let certificate = server
            .signed_by(&key, &ca)
            .expect("the CA signs the server");
        Self {
            ca_pem: ca.pem(),
            server_chain: vec![certificate.der().clone()],
            server_key: key.serialize_der(),
        }
    }

    /// A TLS server configuration presenting the server certificate.
    pub fn server_config(&self) -> ServerConfig {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(self.server_chain.clone(), key)
        .expect("the server's certificate and key match")
    }
}
