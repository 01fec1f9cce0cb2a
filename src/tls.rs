//! TLS files checked when they are configured, before anything connects: a CA bundle
//! or a certificate file holds PEM certificates that parse as X.509, a key file a
//! PEM private key that the crypto provider (ring, as async-nats uses) can sign with.
//! Also the rustls client configs of the app's and the collector's clients, with what
//! they offer in ALPN (`http/1.1`; `h2` first under `http.version = "auto"`).
//! The only module that names `rustls` and `rustls-pki-types` types.
//!
//! A missing or broken file is a configuration error naming its key, not a
//! connection that retries forever.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// What a TLS file must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pem {
    /// One or more certificates (a CA bundle, or a certificate chain).
    Certificates,
    /// A private key (PKCS#8, PKCS#1 or SEC1).
    PrivateKey,
}

/// Why a TLS file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    /// The file cannot be read.
    #[error("cannot read it")]
    Read(#[source] std::io::Error),
    /// The file holds no certificate, or one that does not parse.
    #[error("it holds no PEM certificate that parses")]
    NoCertificate,
    /// The file holds no private key, or one that does not parse.
    #[error("it holds no PEM private key that can be used")]
    NoKey,
}

/// Reads `path` and checks that it holds what `kind` says; returns its bytes.
///
/// # Errors
/// [`TlsFileError`].
pub fn read(path: &str, kind: Pem) -> Result<Vec<u8>, TlsFileError> {
    let bytes = std::fs::read(path).map_err(TlsFileError::Read)?;
    check(&bytes, kind)?;
    Ok(bytes)
}

/// Checks PEM text.
///
/// # Errors
/// [`TlsFileError::NoCertificate`], [`TlsFileError::NoKey`].
pub fn check(pem: &[u8], kind: Pem) -> Result<(), TlsFileError> {
    match kind {
        Pem::Certificates => {
            let certs: Result<Vec<CertificateDer<'_>>, _> =
                CertificateDer::pem_slice_iter(pem).collect();
            let certs = certs.map_err(|_| TlsFileError::NoCertificate)?;
            // Parsing each as a trust anchor checks its X.509 structure.
            let (added, ignored) = RootCertStore::empty().add_parsable_certificates(certs);
            if added == 0 || ignored > 0 {
                return Err(TlsFileError::NoCertificate);
            }
            Ok(())
        }
        Pem::PrivateKey => {
            let key = PrivateKeyDer::from_pem_slice(pem).map_err(|_| TlsFileError::NoKey)?;
            rustls::crypto::ring::sign::any_supported_type(&key)
                .map(drop)
                .map_err(|_| TlsFileError::NoKey)
        }
    }
}

/// The TLS client config for the app's requests: the system's roots, plus the
/// certificates of `ca_file` (a private CA) when given; ring as the crypto provider
/// (as async-nats uses); HTTP/1.1.
///
/// # Errors
/// [`TlsFileError`] for `ca_file`; [`TlsFileError::NoCertificate`] when there is no
/// root at all to verify a server with.
pub fn client_config(ca_file: &str) -> Result<ClientConfig, TlsFileError> {
    client_config_for(ca_file, &[b"http/1.1"])
}

/// [`client_config`] offering HTTP/2 first, then HTTP/1.1 (ALPN `h2`, `http/1.1`):
/// the app's requests under `http.version = "auto"`, in whichever the app agrees to.
///
/// # Errors
/// As [`client_config`].
pub fn client_config_auto(ca_file: &str) -> Result<ClientConfig, TlsFileError> {
    client_config_for(ca_file, &[b"h2", b"http/1.1"])
}

/// [`client_config`] offering HTTP/2 (ALPN `h2`): the collector's gRPC client.
///
/// # Errors
/// As [`client_config`].
pub fn client_config_h2() -> Result<ClientConfig, TlsFileError> {
    client_config_for("", &[b"h2"])
}

fn client_config_for(ca_file: &str, alpn: &[&[u8]]) -> Result<ClientConfig, TlsFileError> {
    let mut roots = RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(system.certs);
    if !system.errors.is_empty() {
        tracing::debug!(
            errors = system.errors.len(),
            added,
            "some system root certificates could not be read"
        );
    }
    if !ca_file.is_empty() {
        let pem = read(ca_file, Pem::Certificates)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| TlsFileError::NoCertificate)?;
        roots.add_parsable_certificates(certs);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| TlsFileError::NoCertificate)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // reqwest leaves a preconfigured config's ALPN as it is: what is offered here is
    // what the app can agree to.
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Whether a failure was the TLS handshake's (somewhere in its chain of causes, or
/// inside the I/O errors that carry it: an `io::Error` hides the error it wraps from
/// `source()`).
pub fn is_handshake_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        let mut inner: &(dyn std::error::Error + 'static) = c;
        loop {
            if inner.downcast_ref::<rustls::Error>().is_some() {
                return true;
            }
            match inner
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
            {
                Some(wrapped) => inner = wrapped,
                None => break,
            }
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    // A self-signed certificate and its key, made for these tests only.
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBljCCATugAwIBAgIUOSBVy+WC3BykIT+CqbAu3v0O+/8wCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVamV0cmVsYXktdGVzdC1maXh0dXJlMB4XDTI2MTEzMDIzMTAz
OFoXDTM2MTEyNzIzMTAzOFowIDEeMBwGA1UEAwwVamV0cmVsYXktdGVzdC1maXh0
dXJlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEnqHRppbi/uoWRP2+xrbFMDtk
Ewgj728Er5JbzPbOgmIVCa0Wl1FTU/1UW8/b36gnJWnzhVyIrN5S7FIs1EdyF6NT
MFEwHQYDVR0OBBYEFLXnU6AOmCLWAsR3Nd2TIQRIZsmHMB8GA1UdIwQYMBaAFLXn
U6AOmCLWAsR3Nd2TIQRIZsmHMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID
SQAwRgIhALUw0ITe0nOXLbQF0kCF0d80eGtXWkOovGoC9iHZB9xuAiEA2awRj4DJ
bTp8+mlV4z4rUMT27LTpm7pVHvaO6qjzQ90=
-----END CERTIFICATE-----
";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgaU9RHjvNduT3iUev
Ov10ARFAiXZrb9SzonSV6nts9PqhRANCAASeodGmluL+6hZE/b7GtsUwO2QTCCPv
bwSvklvM9s6CYhUJrRaXUVNT/VRbz9vfqCclafOFXIis3lLsUizUR3IX
-----END PRIVATE KEY-----
";

    #[test]
    fn pem_kinds_table() {
        assert!(check(CERT.as_bytes(), Pem::Certificates).is_ok());
        assert!(check(KEY.as_bytes(), Pem::PrivateKey).is_ok());
        let bundle = format!("{CERT}{CERT}");
        assert!(check(bundle.as_bytes(), Pem::Certificates).is_ok());
        assert!(matches!(
            check(CERT.as_bytes(), Pem::PrivateKey),
            Err(TlsFileError::NoKey)
        ));
        for bad in [
            "",
            "not pem",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        ] {
            assert!(
                matches!(
                    check(bad.as_bytes(), Pem::Certificates),
                    Err(TlsFileError::NoCertificate)
                ),
                "{bad:?}"
            );
        }
        // PEM framing around bytes that are no certificate or key.
        let fake_cert = "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n";
        assert!(check(fake_cert.as_bytes(), Pem::Certificates).is_err());
        let fake_key = "-----BEGIN PRIVATE KEY-----\nAAECAwQF\n-----END PRIVATE KEY-----\n";
        assert!(check(fake_key.as_bytes(), Pem::PrivateKey).is_err());
        assert!(matches!(
            read("/nonexistent/ca.pem", Pem::Certificates),
            Err(TlsFileError::Read(_))
        ));
    }
}
