//! Hashes as data: SHA-256 over parts ([`sha256`]), HMAC-SHA256 over parts
//! ([`hmac_sha256_parts`]), PBKDF2-HMAC-SHA256 ([`pbkdf2`]),
//! random bytes ([`random`]) and lower-case hex ([`hex`]). The one room that names
//! `ring` (already in the build through rustls): a marker's digest of its message and
//! a secret's fingerprint are made here.

use std::num::NonZeroU32;

/// SHA-256 of `parts`, one after another.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// HMAC-SHA256 of `data` under `key` (the tests' fast hash to compare a fingerprint
/// with).
#[cfg(test)]
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    hmac_sha256_parts(key, &[data])
}

/// HMAC-SHA256 of `parts`, one after another, under `key` (a Standard Webhooks
/// signature: `crate::app::signing`).
pub fn hmac_sha256_parts(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

/// PBKDF2-HMAC-SHA256 of `secret` with `salt`, `rounds` times (at least once), into
/// `out`.
pub fn pbkdf2(salt: &[u8], secret: &[u8], rounds: u32, out: &mut [u8]) {
    let rounds = NonZeroU32::new(rounds).unwrap_or(NonZeroU32::MIN);
    ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA256, rounds, salt, secret, out);
}

/// Bytes from the system's random source; `None` when it cannot give them (it does
/// not fail on the systems jetrelay runs on).
pub fn random<const N: usize>() -> Option<[u8; N]> {
    let mut out = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut out).ok()?;
    Some(out)
}

/// `N` bytes from exactly `2 × N` hex digits (either case); `None` for anything else.
pub fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // FIPS 180-2's "abc", in two parts.
        assert_eq!(
            hex(&sha256(&[b"a", b"bc"])),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // RFC 4231, test case 2.
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // RFC 7914 section 11 (PBKDF2-HMAC-SHA256, 1 round).
        let mut out = [0u8; 16];
        pbkdf2(b"salt", b"passwd", 1, &mut out);
        assert_eq!(hex(&out), "55ac046e56e3089fec1691c22544b605");
        assert_ne!(random::<16>(), random::<16>());
        assert_eq!(unhex::<2>("0aFf"), Some([0x0a, 0xff]));
        assert_eq!(unhex::<2>(&hex(&[1, 254])), Some([1, 254]));
        for bad in ["0a", "0aff00", "+f0a", "0a f", "zzzz"] {
            assert_eq!(unhex::<2>(bad), None, "{bad}");
        }
    }
}
