//! `[target.tls]`: which servers the client trusts and how it proves itself, validated once.
//!
//! Every file is read and parsed here, before anything is sent: a CA bundle that holds no
//! certificate, a client key that does not parse or does not belong to its certificate, and a
//! system trust store with nothing in it are each refused (exit 2) naming the key and the path.
//! The plan keeps the parsed certificates and the loaded key; `request::worker` builds the one
//! rustls configuration both HTTP clients use from them. What is written (the scenario in the
//! artifact) is only which trust was used: never a file's contents, never a path (see
//! [`TlsSettings`]'s `Serialize`).

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use serde::Serialize;
use serde::ser::SerializeStruct;

use super::checker::Checker;
use super::raw::RawTls;
use super::{Endpoint, ScenarioError};

/// The validated `[target.tls]`. Absent from the plan when the scenario has no such table: the
/// bundled WebPKI roots, as before the table existed.
#[derive(Clone)]
pub struct TlsSettings {
    /// The certificates of `ca_file`, trusted beside the roots below.
    pub ca_certificates: Vec<CertificateDer<'static>>,
    /// `system_roots = true`: the operating system's trust store, loaded at validation, trusted
    /// instead of the bundled WebPKI roots. `None`: the WebPKI roots.
    pub system_roots: Option<Vec<CertificateDer<'static>>>,
    /// `client_cert` and `client_key`: the certificate chain and its key, checked to match.
    pub client_identity: Option<Arc<CertifiedKey>>,
    /// `server_name`: the name the server's certificate is checked against (and sent as SNI)
    /// instead of the base URL's host.
    pub server_name: Option<ServerName<'static>>,
    /// `insecure_skip_verify = true`: the server's certificate is not checked at all.
    pub insecure_skip_verify: bool,
}

impl TlsSettings {
    /// Which roots are trusted, as the artifact names them: `webpki` or `system`, with
    /// `+ca_file` when a CA bundle adds to them; `none` when nothing is checked.
    pub fn roots(&self) -> &'static str {
        match (self.insecure_skip_verify, self.system_roots.is_some(), !self.ca_certificates.is_empty()) {
            (true, _, _) => "none",
            (false, false, false) => "webpki",
            (false, false, true) => "webpki+ca_file",
            (false, true, false) => "system",
            (false, true, true) => "system+ca_file",
        }
    }
}

/// What the artifact keeps: which trust, never a file's contents or its path.
impl Serialize for TlsSettings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("TlsSettings", 5)?;
        out.serialize_field("roots", self.roots())?;
        out.serialize_field("ca_file_certificates", &self.ca_certificates.len())?;
        out.serialize_field("client_certificate", &self.client_identity.is_some())?;
        out.serialize_field("insecure_skip_verify", &self.insecure_skip_verify)?;
        match &self.server_name {
            Some(name) => out.serialize_field("server_name", &name.to_str())?,
            None => out.skip_field("server_name")?,
        }
        out.end()
    }
}

/// Certificates and keys are not printed, not even in debug logs.
impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("roots", &self.roots())
            .field("ca_certificates", &self.ca_certificates.len())
            .field("client_certificate", &self.client_identity.is_some())
            .field("server_name", &self.server_name.as_ref().map(|n| n.to_str()))
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .finish()
    }
}

/// `[target.tls]` validated; `None` when the table is absent.
pub(super) fn tls(
    c: &Checker,
    raw: Option<&RawTls>,
    endpoint: &Endpoint,
) -> Result<Option<TlsSettings>, ScenarioError> {
    let Some(raw) = raw else { return Ok(None) };
    let https = "use an https:// base_url, or remove [target.tls]";
    match endpoint {
        Endpoint::Simulator { .. } => {
            return Err(c.err(
                "target.tls",
                "is set but no base_url is given: the embedded simulator speaks plain HTTP",
                https,
            ));
        }
        Endpoint::Remote { base_url } if !base_url.starts_with("https://") => {
            return Err(c.err("target.tls", "is set but the base_url is not an https:// URL", https));
        }
        Endpoint::Remote { .. } => {}
    }
    let ca_certificates = match &raw.ca_file {
        Some(file) => ca_file(c, file)?,
        None => Vec::new(),
    };
    let system_roots = if raw.system_roots == Some(true) { Some(system_roots(c)?) } else { None };
    let client_identity = match (&raw.client_cert, &raw.client_key) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(c.err(
                "target.tls.client_key",
                "is missing while target.tls.client_cert is set",
                "give both client_cert and client_key (PEM files), or neither",
            ));
        }
        (None, Some(_)) => {
            return Err(c.err(
                "target.tls.client_cert",
                "is missing while target.tls.client_key is set",
                "give both client_cert and client_key (PEM files), or neither",
            ));
        }
        (Some(cert), Some(key)) => Some(client_identity(c, cert, key)?),
    };
    let server_name = match &raw.server_name {
        None => None,
        Some(name) => Some(ServerName::try_from(name.trim().to_string()).map_err(|_| {
            c.err(
                "target.tls.server_name",
                format!("{name:?} is not a DNS name or an IP address"),
                "give the name the server's certificate is issued for, e.g. server_name = \"llm.internal.example\"",
            )
        })?),
    };
    let insecure_skip_verify = raw.insecure_skip_verify == Some(true);
    if insecure_skip_verify && (!ca_certificates.is_empty() || system_roots.is_some()) {
        return Err(c.err(
            "target.tls.insecure_skip_verify",
            "is true together with ca_file or system_roots, which it would make pointless",
            "keep the roots and remove insecure_skip_verify (preferred), or remove ca_file and system_roots",
        ));
    }
    Ok(Some(TlsSettings { ca_certificates, system_roots, client_identity, server_name, insecure_skip_verify }))
}

/// The bytes of the file `key` names, or an error naming both.
fn read(c: &Checker, key: &str, file: &str, what: &str) -> Result<(Vec<u8>, String), ScenarioError> {
    let path = c.path(key, file);
    let shown = path.display().to_string();
    let relative_to = if c.origin(key).is_empty() { "the scenario file" } else { "the working directory" };
    let bytes = crate::sys::read_input(&path).map_err(|e| {
        c.err(key, format!("cannot read {shown}: {e}"), format!("give the path of {what}, relative to {relative_to}"))
    })?;
    Ok((bytes, shown))
}

fn ca_file(c: &Checker, file: &str) -> Result<Vec<CertificateDer<'static>>, ScenarioError> {
    let key = "target.tls.ca_file";
    let (bytes, shown) = read(c, key, file, "a PEM file of CA certificates")?;
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
    let fix = "give a PEM file holding one or more -----BEGIN CERTIFICATE----- blocks (the CA that signed the server's certificate)";
    let certs = certs.map_err(|e| c.err(key, format!("{shown} is not a readable PEM file ({e})"), fix))?;
    if certs.is_empty() {
        return Err(c.err(key, format!("{shown} holds no certificate"), fix));
    }
    // Each must be a CA certificate rustls can use as a root.
    for cert in &certs {
        if let Err(e) = rustls::RootCertStore::empty().add(cert.clone()) {
            return Err(c.err(key, format!("{shown} holds a certificate that cannot be a root ({e})"), fix));
        }
    }
    Ok(certs)
}

fn system_roots(c: &Checker) -> Result<Vec<CertificateDer<'static>>, ScenarioError> {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let why = match found.errors.first() {
            Some(e) => format!(" ({e})"),
            None => String::new(),
        };
        return Err(c.err(
            "target.tls.system_roots",
            format!("the system's trust store holds no certificate{why}"),
            "install the system's CA certificates (e.g. the ca-certificates package, or set SSL_CERT_FILE), or give target.tls.ca_file instead",
        ));
    }
    Ok(found.certs)
}

fn client_identity(c: &Checker, cert: &str, key: &str) -> Result<Arc<CertifiedKey>, ScenarioError> {
    let (bytes, shown) = read(c, "target.tls.client_cert", cert, "the client certificate (PEM)")?;
    let chain: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
    let fix = "give a PEM file holding the client certificate (-----BEGIN CERTIFICATE-----), then any intermediates";
    let chain =
        chain.map_err(|e| c.err("target.tls.client_cert", format!("{shown} is not a readable PEM file ({e})"), fix))?;
    if chain.is_empty() {
        return Err(c.err("target.tls.client_cert", format!("{shown} holds no certificate"), fix));
    }
    let (bytes, shown_key) = read(c, "target.tls.client_key", key, "the client certificate's private key (PEM)")?;
    // The key's own parser's words name no byte of it.
    let private = PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        c.err(
            "target.tls.client_key",
            format!("{shown_key} holds no private key this client can read"),
            "give the PEM private key of the client certificate (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)",
        )
    })?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, private, &provider).map(Arc::new).map_err(|e| {
        let problem = match e {
            rustls::Error::InconsistentKeys(_) => {
                format!("{shown_key} is not the private key of the certificate in {shown}")
            }
            _ => format!("{shown_key} holds a private key of a kind this client cannot use"),
        };
        c.err(
            "target.tls.client_key",
            problem,
            "give the key the client certificate was issued for (an RSA, ECDSA P-256/P-384 or Ed25519 key)",
        )
    })
}
