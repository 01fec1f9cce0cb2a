//! The NATS header block as the (patched) async-nats client reads every message's:
//! `async_nats::fuzzing::parse_header_block`, the client's own parser. A lone CR in
//! a value once panicked it and crash-looped every source.

use async_nats::HeaderMap;

/// One header block (`NATS/1.0[ <status> <description>]\r\n`, `name: value\r\n`
/// lines, `\r\n`) as the server sends it, any bytes. Besides not panicking: no
/// header name or value kept, nor the description, holds a line break; and the
/// headers kept (values trimmed), written back as a block, read back as the same
/// headers, with nothing marked malformed.
pub fn nats_headers(data: &[u8]) {
    let (status, description, headers) = async_nats::fuzzing::parse_header_block(data);
    let kept = pairs(&headers);
    for (n, v) in &kept {
        // An empty name (a line `: v`) is kept by the client, where Go's textproto
        // skips the line; reported, and let through here so that a run goes past it.
        assert!(!n.contains([':', ' ', '\r', '\n']), "name {n:?}");
        assert!(!v.contains(['\r', '\n']), "{n}: {v:?} holds a line break");
    }
    if let Some(d) = &description {
        assert!(
            !d.contains(['\r', '\n']),
            "description {d:?} holds a line break"
        );
    }
    // A value folded onto an empty first line keeps the fold's leading blank
    // (`X:\r\n a` is " a"; Go's textproto reads "a"): reported, and compared
    // trimmed here, as the block written back reads it.
    let kept: Vec<(String, String)> = kept
        .into_iter()
        .map(|(n, v)| (n, v.trim().to_string()))
        .collect();
    let mut block = String::from("NATS/1.0\r\n");
    for (n, v) in &kept {
        block.push_str(&format!("{n}: {v}\r\n"));
    }
    block.push_str("\r\n");
    let (status_again, description_again, again) =
        async_nats::fuzzing::parse_header_block(block.as_bytes());
    assert_eq!(status_again, None);
    assert_eq!(
        description_again, None,
        "{block:?} (from {status:?} {description:?})"
    );
    assert_eq!(pairs(&again), kept, "{block:?}");
}

/// The headers as (name, value) pairs, in order of name then as they came.
fn pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = headers
        .iter()
        .flat_map(|(n, values)| {
            values
                .iter()
                .map(move |v| (n.to_string(), v.as_str().to_string()))
        })
        .collect();
    // A name's values keep their order (a stable sort by name only).
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
