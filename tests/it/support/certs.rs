//! Test certificates made with `openssl`: a CA, a server certificate for 127.0.0.1
//! and localhost, and a client certificate.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
pub struct Certs {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (for test certificates)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new P-256 key, unencrypted.
const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// Makes the certificates in `dir`.
pub fn certs(dir: &Path) -> Certs {
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &EC,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=jetrelay test CA",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    signed(dir, "server", "server.ext");
    signed(dir, "client", "client.ext");
    Certs {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    }
}

/// Another client certificate signed by the CA of `certs` (made in `dir`), named
/// `name`: a rotated one.
pub fn another_client(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    signed(dir, name, "client.ext")
}

/// A key `<name>.key` and a certificate `<name>.pem` for it, `/CN=<name>`, signed by
/// the CA in `dir` with the extensions of `ext`.
fn signed(dir: &Path, name: &str, ext: &str) -> (PathBuf, PathBuf) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let subject = format!("/CN={name}");
    openssl(
        dir,
        &[
            &["req"][..],
            &EC,
            &["-keyout", &key, "-out", &csr, "-subj", &subject],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            ext,
        ],
    );
    (dir.join(pem), dir.join(key))
}
