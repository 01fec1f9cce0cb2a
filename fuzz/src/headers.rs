//! The NATS header block as the (patched) async-nats client reads every message's:
//! `async_nats::fuzzing::parse_header_block`, the client's own parser. A lone CR in
//! a value once panicked it and crash-looped every source.

use async_nats::HeaderMap;

/// One header block (`NATS/1.0[ <status> <description>]\r\n`, `name: value\r\n`
/// lines, `\r\n`) as the server sends it, any bytes. Besides not panicking: no
/// header name kept is empty, no name or value, nor the description, holds a line
/// break, values are trimmed; and the headers kept, written back as a block, read
/// back as the same headers, with nothing marked malformed.
pub fn nats_headers(data: &[u8]) {
    let (status, description, headers) = async_nats::fuzzing::parse_header_block(data);
    let kept = pairs(&headers);
    for (n, v) in &kept {
        // An empty name (a line `: v`) is left out, as Go's textproto does.
        assert!(!n.is_empty(), "an empty name kept: {v:?}");
        assert!(!n.contains([':', ' ', '\r', '\n']), "name {n:?}");
        assert!(!v.contains(['\r', '\n']), "{n}: {v:?} holds a line break");
        // Values are trimmed (a value folded onto an empty first line too, as Go's
        // textproto reads `X:\r\n a`).
        assert_eq!(v.trim(), v, "{n}: {v:?} not trimmed");
    }
    if let Some(d) = &description {
        assert!(
            !d.contains(['\r', '\n']),
            "description {d:?} holds a line break"
        );
    }
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
