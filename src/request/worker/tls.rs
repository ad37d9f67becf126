//! The run's one TLS client configuration, from `[target.tls]`, for both HTTP clients (hyper's
//! for the measured requests, reqwest's for the server check and the server's metrics), and the
//! TLS failures they meet, named with what to change.
//!
//! Roots: the bundled WebPKI roots, or the system's (`system_roots`), plus `ca_file`'s
//! certificates. `server_name` checks the certificate against that name instead of the URL's
//! host (the measured requests also send it as SNI). `insecure_skip_verify` accepts any
//! certificate, while the handshake's signatures are still checked, so the connection is at
//! least to whoever holds the certificate's key.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::SingleCertAndKey;
use rustls::{AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::plan::scenario::TlsSettings;

/// The client configuration `tls` describes, with no ALPN set (each client sets its own).
pub fn client_config(tls: &TlsSettings) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if tls.insecure_skip_verify {
        Arc::new(AnyCertificate { algorithms: provider.signature_verification_algorithms })
    } else {
        let mut roots = RootCertStore::empty();
        match &tls.system_roots {
            // A system store may hold a certificate rustls cannot use; the rest still count.
            Some(system) => {
                let _ = roots.add_parsable_certificates(system.iter().cloned());
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        for cert in &tls.ca_certificates {
            roots.add(cert.clone()).map_err(|e| format!("target.tls.ca_file: a certificate cannot be a root ({e})"))?;
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        match &tls.server_name {
            Some(name) => Arc::new(NamedVerifier { inner: webpki, name: name.clone() }),
            None => webpki,
        }
    };
    let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
    Ok(match &tls.client_identity {
        Some(identity) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(identity.clone()))),
        None => builder.with_no_client_auth(),
    })
}

/// Checks the certificate against `name` whatever host the URL named (`server_name`).
#[derive(Debug)]
struct NamedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `insecure_skip_verify`: any certificate, any name; the handshake's signatures still checked.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The TLS failure among `e`'s causes, in words with what to change; `None` when it is not one.
/// rustls's error sits inside I/O errors (one inside another), whose `source` skips what they
/// wrap, so each I/O error is opened instead.
pub fn tls_reason(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(describe(tls));
        }
        next = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// A rustls error as its reason and fix.
fn describe(e: &rustls::Error) -> String {
    use CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => "TLS: the server's certificate is signed by an unknown CA; set target.tls.ca_file to the CA's PEM file (or target.tls.system_roots = true when the system trusts it)".into(),
            C::NotValidForName | C::NotValidForNameContext { .. } => "TLS: the server's certificate is not valid for the host name (hostname mismatch); connect by a name the certificate lists, or set target.tls.server_name to the name it was issued for".into(),
            C::Expired | C::ExpiredContext { .. } => "TLS: the server's certificate has expired; renew it on the server (or check this machine's clock)".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => "TLS: the server's certificate is not valid yet; check this machine's clock".into(),
            C::BadSignature | C::BadEncoding => format!("TLS: the server's certificate is bad ({c:?}); check the certificate the server presents"),
            C::Revoked => "TLS: the server's certificate has been revoked".into(),
            other => format!("TLS: the server's certificate was refused ({other:?}); check the certificate the server presents and target.tls"),
        },
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            "TLS: the server requires a client certificate; set target.tls.client_cert and target.tls.client_key".into()
        }
        rustls::Error::AlertReceived(
            a @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::AccessDenied),
        ) => format!(
            "TLS: the server refused the client certificate (alert {a:?}); set target.tls.client_cert and client_key to a certificate the server's client CA signed"
        ),
        rustls::Error::AlertReceived(AlertDescription::HandshakeFailure) => {
            "TLS: the server ended the handshake (handshake failure): it may require a client certificate (target.tls.client_cert, client_key) or share no cipher suite or protocol version with this client".into()
        }
        other => format!("TLS: {other}"),
    }
}

/// What an answer from nginx-style gateways says when the TLS handshake succeeded but the
/// client certificate did not satisfy them (they answer HTTP 400 with a page, not an alert).
pub fn client_certificate_refusal(status: u16, body: &[u8]) -> Option<&'static str> {
    if status != 400 {
        return None;
    }
    let body = String::from_utf8_lossy(&body[..body.len().min(4096)]).to_ascii_lowercase();
    if body.contains("no required ssl certificate was sent") {
        Some(
            "TLS: the server requires a client certificate (it answered 400 \"No required SSL certificate was sent\"); set target.tls.client_cert and target.tls.client_key",
        )
    } else if body.contains("the ssl certificate error") {
        Some(
            "TLS: the server refused the client certificate (it answered 400 \"The SSL certificate error\"); give a certificate signed by the CA the server trusts for clients",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rustls error as tokio-rustls and hyper wrap it: an I/O error inside an I/O error.
    fn wrapped(e: rustls::Error) -> std::io::Error {
        std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    #[test]
    fn each_certificate_failure_is_named_with_its_fix() {
        let reason = |e| tls_reason(&wrapped(e)).expect("a TLS failure");
        let unknown = reason(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(unknown.contains("unknown CA") && unknown.contains("target.tls.ca_file"), "{unknown}");
        let name = reason(rustls::Error::InvalidCertificate(CertificateError::NotValidForName));
        assert!(name.contains("hostname mismatch") && name.contains("target.tls.server_name"), "{name}");
        assert!(reason(rustls::Error::InvalidCertificate(CertificateError::Expired)).contains("expired"));
        assert!(reason(rustls::Error::InvalidCertificate(CertificateError::BadSignature)).contains("is bad"));
        let required = reason(rustls::Error::AlertReceived(AlertDescription::CertificateRequired));
        assert!(required.contains("requires a client certificate"), "{required}");
        assert!(
            reason(rustls::Error::AlertReceived(AlertDescription::HandshakeFailure)).contains("client certificate")
        );
        assert_eq!(tls_reason(&std::io::Error::other("connection refused")), None);
    }

    #[test]
    fn nginx_pages_about_client_certificates_are_read() {
        let page = b"<html><head><title>400 No required SSL certificate was sent</title></head></html>";
        assert!(client_certificate_refusal(400, page).is_some_and(|r| r.contains("target.tls.client_cert")));
        let page = b"<html><head><title>400 The SSL certificate error</title></head></html>";
        assert!(client_certificate_refusal(400, page).is_some_and(|r| r.contains("refused the client certificate")));
        assert_eq!(client_certificate_refusal(400, b"{\"error\": \"bad request\"}"), None);
        assert_eq!(client_certificate_refusal(404, page), None);
    }

    #[test]
    fn a_configuration_is_built_for_each_kind_of_trust() {
        let base = TlsSettings {
            ca_certificates: Vec::new(),
            system_roots: None,
            client_identity: None,
            server_name: None,
            insecure_skip_verify: false,
        };
        assert!(client_config(&base).is_ok());
        let insecure = TlsSettings { insecure_skip_verify: true, ..base.clone() };
        assert_eq!(insecure.roots(), "none");
        assert!(client_config(&insecure).is_ok());
        let named = TlsSettings { server_name: ServerName::try_from("llm.internal.test").ok(), ..base };
        assert!(client_config(&named).is_ok());
    }
}
