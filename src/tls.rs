//! TLS files checked when they are configured, before anything connects: a CA bundle
//! or a certificate file holds PEM certificates that parse as X.509, a key file a
//! PEM private key that the crypto provider (ring, as async-nats uses) can sign with.
//! Also the rustls client configs of the app's and the collector's clients, with what
//! they offer in ALPN (`http/1.1`; `h2` first under `http.version = "auto"`), and the
//! client certificate presented to an `https://` app ([`ClientCert`]: read again
//! when its files change, so that a rotated certificate is presented without a
//! restart).
//! The only module that names `rustls` and `rustls-pki-types` types.
//!
//! A missing or broken file is a configuration error naming its key, not a
//! connection that retries forever.

use std::path::Path;
use std::sync::PoisonError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::{ResolvesClientCert, Resumption};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};
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
    /// The key is not the certificate's.
    #[error("its key (http.tls_key_file) is not the certificate's")]
    KeyMismatch,
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
    client_config_for(ca_file, &[b"http/1.1"], None)
}

/// [`client_config`] for the app's requests: ALPN `http/1.1`, or with `auto_alpn`
/// (`http.version = "auto"`) `h2` first, then `http/1.1`, in whichever the app agrees
/// to; presenting `cert` when the app asks for a client certificate.
///
/// # Errors
/// As [`client_config`].
pub fn app_client_config(
    ca_file: &str,
    auto_alpn: bool,
    cert: Option<Arc<ClientCert>>,
) -> Result<ClientConfig, TlsFileError> {
    let alpn: &[&[u8]] = if auto_alpn {
        &[b"h2", b"http/1.1"]
    } else {
        &[b"http/1.1"]
    };
    client_config_for(ca_file, alpn, cert)
}

/// [`client_config`] offering HTTP/2 (ALPN `h2`): the collector's gRPC client.
///
/// # Errors
/// As [`client_config`].
pub fn client_config_h2() -> Result<ClientConfig, TlsFileError> {
    client_config_for("", &[b"h2"], None)
}

fn client_config_for(
    ca_file: &str,
    alpn: &[&[u8]],
    cert: Option<Arc<ClientCert>>,
) -> Result<ClientConfig, TlsFileError> {
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
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| TlsFileError::NoCertificate)?
        .with_root_certificates(roots);
    let mut config = match cert {
        None => builder.with_no_client_auth(),
        Some(cert) => {
            let mut config = builder.with_client_cert_resolver(cert);
            // A resumed session proves the identity of the handshake it resumes: after
            // a rotation every new connection presents the certificate of now.
            config.resumption = Resumption::disabled();
            config
        }
    };
    // reqwest leaves a preconfigured config's ALPN as it is: what is offered here is
    // what the app can agree to.
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// How often a client certificate's files are looked at, at most.
const CERT_CHECK_EVERY: Duration = Duration::from_secs(1);

/// `http.tls_cert_file` and `http.tls_key_file`: where the client certificate
/// presented to an `https://` app is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertFiles {
    /// The certificate (its chain, leaf first), PEM.
    pub cert_file: String,
    /// Its private key, PEM.
    pub key_file: String,
}

/// A file's modification time and size (`None`: cannot be seen).
type FileStamp = Option<(SystemTime, u64)>;

fn file_stamp(path: &str) -> FileStamp {
    let m = std::fs::metadata(Path::new(path)).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The certificate in use, and what its files looked like when it was read.
struct Presented {
    key: Arc<CertifiedKey>,
    stamps: (FileStamp, FileStamp),
    checked: Instant,
}

/// The client certificate presented to the app: read when it is loaded (a missing or
/// broken file, or a key that is not the certificate's, is a configuration error),
/// and read again at the first handshake after its files change (looked at once a
/// second at most); while the new files cannot be used (one written, the other not
/// yet), the last certificate stays in use.
pub struct ClientCert {
    files: ClientCertFiles,
    presented: Mutex<Presented>,
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ClientCert {
    /// Reads the certificate and its key.
    ///
    /// # Errors
    /// The config key of the file that cannot be used, and why.
    pub fn load(files: &ClientCertFiles) -> Result<ClientCert, (&'static str, TlsFileError)> {
        let stamps = (file_stamp(&files.cert_file), file_stamp(&files.key_file));
        let key = certified(files)?;
        Ok(ClientCert {
            files: files.clone(),
            presented: Mutex::new(Presented {
                key,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate to present now: its files read again when they changed.
    fn now(&self) -> Arc<CertifiedKey> {
        // A poisoned lock means a panic elsewhere while reading; the certificate in
        // it is still whole (it is replaced, never edited in place).
        let mut p = self
            .presented
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if p.checked.elapsed() < CERT_CHECK_EVERY {
            return Arc::clone(&p.key);
        }
        p.checked = Instant::now();
        let stamps = (
            file_stamp(&self.files.cert_file),
            file_stamp(&self.files.key_file),
        );
        if stamps == p.stamps {
            return Arc::clone(&p.key);
        }
        p.stamps = stamps;
        match certified(&self.files) {
            Ok(key) => {
                tracing::info!("the app's client certificate changed: it is read again");
                p.key = key;
            }
            Err((key, e)) => tracing::warn!(
                key,
                error = %e,
                "the app's client certificate cannot be read again: the last one stays in use"
            ),
        }
        Arc::clone(&p.key)
    }
}

impl ResolvesClientCert for ClientCert {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.now())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The certificate and key of `files`, checked to belong together.
fn certified(files: &ClientCertFiles) -> Result<Arc<CertifiedKey>, (&'static str, TlsFileError)> {
    const CERT: &str = "http.tls_cert_file";
    const KEY: &str = "http.tls_key_file";
    let pem = read(&files.cert_file, Pem::Certificates).map_err(|e| (CERT, e))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| (CERT, TlsFileError::NoCertificate))?;
    let pem = read(&files.key_file, Pem::PrivateKey).map_err(|e| (KEY, e))?;
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| (KEY, TlsFileError::NoKey))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&der)
        .map_err(|_| (KEY, TlsFileError::NoKey))?;
    let key = CertifiedKey::new(chain, signer);
    // A key whose public half the provider cannot tell is taken: the handshake says.
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        key.keys_match()
    {
        return Err((KEY, TlsFileError::KeyMismatch));
    }
    Ok(Arc::new(key))
}

/// Whether a failure was the TLS handshake's (somewhere in its chain of causes, or
/// inside the I/O errors that carry it: an `io::Error` hides the error it wraps from
/// `source()`).
pub fn is_handshake_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    has_tls_error(e, |_| true)
}

/// Whether the app refused the handshake with an alert after it had seemed done: TLS
/// 1.3 checks the client's certificate only after the client's last handshake
/// message, so a missing or refused client certificate shows only when the answer is
/// read. The app never saw the request.
pub fn is_refused_handshake(e: &(dyn std::error::Error + 'static)) -> bool {
    use rustls::AlertDescription as A;
    has_tls_error(e, |t| {
        matches!(
            t,
            rustls::Error::AlertReceived(
                A::CertificateRequired
                    | A::BadCertificate
                    | A::UnsupportedCertificate
                    | A::CertificateRevoked
                    | A::CertificateExpired
                    | A::CertificateUnknown
                    | A::UnknownCA
                    | A::AccessDenied
                    | A::HandshakeFailure
            )
        )
    })
}

/// Whether a rustls error that `is` holds of is somewhere in `e`'s chain of causes, or
/// inside the I/O errors that carry it.
fn has_tls_error(
    e: &(dyn std::error::Error + 'static),
    is: impl Fn(&rustls::Error) -> bool,
) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        let mut inner: &(dyn std::error::Error + 'static) = c;
        loop {
            if inner.downcast_ref::<rustls::Error>().is_some_and(&is) {
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

    // Another key, not the certificate's.
    const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgYpPbZAcOrhWezl4P
7K/MkLTxTcWf5vafoAeGb5Riu1mhRANCAASh2ql3iwfAoIRNDJssstcR+hRCERBC
EbjPWeipQXOMEkisjPEcTpe2T2dO/82Kx0BCrNb9l8ApHYHYzoIJEFP9
-----END PRIVATE KEY-----
";

    #[test]
    fn a_client_certificate_is_read_again_when_its_files_change_and_kept_while_they_do_not_match() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, CERT).unwrap();
        std::fs::write(&key, OTHER_KEY).unwrap();
        let files = ClientCertFiles {
            cert_file: cert.display().to_string(),
            key_file: key.display().to_string(),
        };
        let err = ClientCert::load(&files).unwrap_err();
        assert!(
            matches!(err, ("http.tls_key_file", TlsFileError::KeyMismatch)),
            "{err:?}"
        );
        std::fs::write(&key, KEY).unwrap();
        let c = ClientCert::load(&files).unwrap();
        assert!(!format!("{c:?}").contains("PRIVATE"), "never the key");
        let first = c.now();
        assert!(
            Arc::ptr_eq(&first, &c.now()),
            "looked at once a second at most"
        );
        // Half a rotation (the key written, not yet its certificate): the last stays.
        std::fs::write(&key, OTHER_KEY).unwrap();
        c.presented.lock().unwrap().checked -= CERT_CHECK_EVERY;
        assert!(Arc::ptr_eq(&first, &c.now()));
        // The rotation done: read again (the same pair here, read anew).
        std::fs::write(&key, KEY).unwrap();
        std::fs::write(&cert, format!("{CERT}\n")).unwrap();
        c.presented.lock().unwrap().checked -= CERT_CHECK_EVERY;
        let second = c.now();
        assert!(!Arc::ptr_eq(&first, &second), "read again");
        assert_eq!(second.cert, first.cert);
        for missing in [
            ("http.tls_cert_file", "/nonexistent/c"),
            ("http.tls_key_file", ""),
        ] {
            let files = ClientCertFiles {
                cert_file: if missing.0 == "http.tls_cert_file" {
                    missing.1.into()
                } else {
                    cert.display().to_string()
                },
                key_file: if missing.0 == "http.tls_key_file" {
                    "/nonexistent/k".into()
                } else {
                    key.display().to_string()
                },
            };
            let err = ClientCert::load(&files).unwrap_err();
            assert_eq!(err.0, missing.0);
            assert!(matches!(err.1, TlsFileError::Read(_)), "{err:?}");
        }
    }

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
