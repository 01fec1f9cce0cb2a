//! W3C trace context (Level 2) as pure functions: a message's `traceparent` and
//! `tracestate` read (an invalid `traceparent` is ignored whole, and so is the
//! `tracestate` with it), the span context jetrelay continues, and the `traceparent`
//! it writes. `baggage` is never parsed: it passes unchanged. Ids come from the
//! caller's random source; nothing here reads a clock.

/// The sampled flag.
pub const SAMPLED: u8 = 0x01;
/// The random-trace-id flag (Level 2): kept while the trace id is kept, set on ids
/// jetrelay draws.
pub const RANDOM: u8 = 0x02;

/// The longest `tracestate` passed on (the spec asks for at least 512 characters;
/// longer ones are cut by whole members, longest first).
pub const MAX_TRACESTATE: usize = 512;

/// One span's place in a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    /// The trace.
    pub trace_id: [u8; 16],
    /// The span.
    pub span_id: [u8; 8],
    /// `SAMPLED`, `RANDOM`; other bits are always zero.
    pub flags: u8,
    /// The vendors' state, validated, passed on unchanged.
    pub tracestate: Option<String>,
}

impl SpanContext {
    /// Whether it is sampled (its spans are exported).
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// Its `traceparent` header value (version 00).
    pub fn traceparent(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        hex(&mut s, &self.trace_id);
        s.push('-');
        hex(&mut s, &self.span_id);
        s.push('-');
        hex(&mut s, &[self.flags]);
        s
    }

    /// A child of this context: the same trace, `span_id`, the same flags and state.
    pub fn child(&self, span_id: [u8; 8]) -> SpanContext {
        SpanContext {
            trace_id: self.trace_id,
            span_id,
            flags: self.flags,
            tracestate: self.tracestate.clone(),
        }
    }
}

fn hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
}

/// Lowercase hex of exactly `N` bytes.
fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// Parses a `traceparent` value: `None` when it is invalid in any way (then the
/// whole header is ignored).
pub fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let v = value.trim_matches([' ', '\t']);
    let version = unhex::<1>(v.get(..2)?)?[0];
    if version == 0xff || v.len() < 55 {
        return None;
    }
    // Version 00 is exactly 55 characters; a later one may add `-<more>`.
    if version == 0 && v.len() != 55 {
        return None;
    }
    if version != 0 && v.len() > 55 && v.as_bytes()[55] != b'-' {
        return None;
    }
    let b = v.as_bytes();
    if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let trace_id = unhex::<16>(&v[3..35])?;
    let parent = unhex::<8>(&v[36..52])?;
    let flags = unhex::<1>(&v[53..55])?[0];
    if trace_id == [0; 16] || parent == [0; 8] {
        return None;
    }
    // Unknown flags are not passed on.
    Some((trace_id, parent, flags & (SAMPLED | RANDOM)))
}

/// Combines and validates `tracestate` values (several headers join with `,`): at
/// most 32 members, each `key=value` in the spec's syntax; `None` when invalid or
/// empty. Longer than [`MAX_TRACESTATE`], whole members are left out (those over 128
/// characters first, then from the end).
pub fn parse_tracestate<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut members: Vec<&str> = Vec::new();
    for v in values {
        for m in v.split(',') {
            let m = m.trim_matches([' ', '\t']);
            if m.is_empty() {
                continue;
            }
            if !valid_member(m) {
                return None;
            }
            members.push(m);
        }
    }
    if members.is_empty() || members.len() > 32 {
        return None;
    }
    let len = |ms: &[&str]| ms.iter().map(|m| m.len()).sum::<usize>() + ms.len().saturating_sub(1);
    if len(&members) > MAX_TRACESTATE {
        members.retain(|m| m.len() <= 128);
        while len(&members) > MAX_TRACESTATE {
            members.pop();
        }
    }
    (!members.is_empty()).then(|| members.join(","))
}

fn valid_member(m: &str) -> bool {
    let Some((key, value)) = m.split_once('=') else {
        return false;
    };
    let key_ok = !key.is_empty()
        && key.len() <= 256
        && key
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/@".contains(&c))
        && key.matches('@').count() <= 1;
    let value_ok = !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=');
    key_ok && value_ok
}

/// The trace context a message's headers carry: `None` without a valid
/// `traceparent` (missing, invalid, or given twice). The `tracestate` comes with it
/// only then.
pub fn from_headers(headers: &[(String, String)]) -> Option<SpanContext> {
    let mut parents = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("traceparent"));
    let (_, first) = parents.next()?;
    if parents.next().is_some() {
        return None;
    }
    let (trace_id, span_id, flags) = parse_traceparent(first)?;
    let tracestate = parse_tracestate(
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("tracestate"))
            .map(|(_, v)| v.as_str()),
    );
    Some(SpanContext {
        trace_id,
        span_id,
        flags,
        tracestate,
    })
}

/// Whether a new trace is sampled at `ratio` (0 to 1): the low 63 bits of the trace
/// id against the ratio's share of them, so one trace gets one answer everywhere.
pub fn sampled_by_ratio(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 || ratio.is_nan() {
        return false;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    // The ratio's share of 2^63, below 2^63.
    let bound = (ratio * (1u64 << 63) as f64) as u64;
    x < bound
}

/// What jetrelay does with a message's context: continue it (its sampled flag is
/// followed), or start a root (sampled at `ratio`) when there is none. `draw`
/// gives random 64-bit numbers.
pub fn continue_or_root(
    parent: Option<&SpanContext>,
    ratio: f64,
    draw: &mut impl FnMut() -> u64,
) -> SpanContext {
    let span_id = span_id(draw);
    match parent {
        Some(p) => p.child(span_id),
        None => {
            let trace_id = trace_id(draw);
            let sampled = sampled_by_ratio(&trace_id, ratio);
            SpanContext {
                trace_id,
                span_id,
                flags: RANDOM | if sampled { SAMPLED } else { 0 },
                tracestate: None,
            }
        }
    }
}

/// A random trace id (never all zeros).
pub fn trace_id(draw: &mut impl FnMut() -> u64) -> [u8; 16] {
    loop {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&draw().to_be_bytes());
        id[8..].copy_from_slice(&draw().to_be_bytes());
        if id != [0; 16] {
            return id;
        }
    }
}

/// A random span id (never all zeros).
pub fn span_id(draw: &mut impl FnMut() -> u64) -> [u8; 8] {
    loop {
        let id = draw().to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn traceparent_table() {
        let ok = |v: &str| parse_traceparent(v).is_some();
        // Valid: the spec's example, with surrounding spaces and tabs, a later
        // version with more after the flags.
        assert!(ok(TP));
        assert!(ok(&format!(" \t{TP}\t ")));
        assert!(ok(
            "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-will-be-like"
        ));
        assert!(ok(
            "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        // Invalid: version ff, 00 with more, a later version with a bad separator,
        // uppercase, zero ids, wrong lengths, non-hex.
        for bad in [
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01.",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-will-be-like",
            "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01.future",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",
            "00-0af7651916cd43dd8448eb211c8031zz-b7ad6b7169203331-01",
            "00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01",
            "+0-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "",
        ] {
            assert!(!ok(bad), "{bad:?}");
        }
        // Unknown flags are dropped; sampled and random are kept.
        let (_, _, flags) =
            parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff").unwrap();
        assert_eq!(flags, SAMPLED | RANDOM);
    }

    #[test]
    fn a_context_written_reads_back_the_same() {
        let (trace_id, span_id, flags) = parse_traceparent(TP).unwrap();
        let c = SpanContext {
            trace_id,
            span_id,
            flags,
            tracestate: None,
        };
        assert_eq!(c.traceparent(), TP);
        let child = c.child([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            child.traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-0102030405060708-01"
        );
    }

    #[test]
    fn tracestate_table() {
        let p = |vs: &[&str]| parse_tracestate(vs.iter().copied());
        assert_eq!(
            p(&["rojo=00f067aa0ba902b7"]).as_deref(),
            Some("rojo=00f067aa0ba902b7")
        );
        assert_eq!(
            p(&["rojo=1, congo=t61rcWkgMzE", " ,  ", "tenant@sys=x"]).as_deref(),
            Some("rojo=1,congo=t61rcWkgMzE,tenant@sys=x"),
            "several headers join, empty members and spaces are dropped"
        );
        for bad in [
            "Rojo=1", "rojo", "rojo=", "rojo=a,b", "rojo=a=b", "@x=1", "a@b@c=1", "r=\u{7f}",
        ] {
            assert_eq!(p(&[bad]), None, "{bad:?}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(p(&many), None, "33 members");
        assert!(p(&many[..32]).is_some(), "32 members");
        // Too long: members over 128 characters go first, then from the end.
        let long = format!("big={}", "x".repeat(200));
        let mid: Vec<String> = (0..6).map(|i| format!("m{i}={}", "y".repeat(90))).collect();
        let mut all = vec![long.as_str()];
        all.extend(mid.iter().map(String::as_str));
        let cut = p(&all).unwrap();
        assert!(cut.len() <= MAX_TRACESTATE, "{}", cut.len());
        assert!(!cut.contains("big="), "the long member went first");
        assert!(cut.starts_with("m0="), "{cut}");
    }

    #[test]
    fn headers_give_a_context_only_with_one_valid_traceparent() {
        let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let c = from_headers(&h(&[
            ("Traceparent", TP),
            ("tracestate", "a=1"),
            ("TraceState", "b=2"),
        ]))
        .unwrap();
        assert_eq!(c.tracestate.as_deref(), Some("a=1,b=2"));
        assert!(c.sampled());
        assert_eq!(
            from_headers(&h(&[("traceparent", TP), ("traceparent", TP)])),
            None
        );
        assert_eq!(
            from_headers(&h(&[("traceparent", "junk"), ("tracestate", "a=1")])),
            None
        );
        assert_eq!(from_headers(&h(&[("tracestate", "a=1")])), None);
    }

    #[test]
    fn a_root_is_sampled_by_ratio_and_a_parent_is_followed() {
        let mut n = 0u64;
        let mut draw = || {
            n = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
            n
        };
        let parent = from_headers(&[("traceparent".into(), TP.replace("-01", "-00"))]).unwrap();
        let c = continue_or_root(Some(&parent), 1.0, &mut draw);
        assert_eq!(c.trace_id, parent.trace_id);
        assert!(
            !c.sampled(),
            "an unsampled parent stays unsampled, whatever the ratio"
        );
        assert_ne!(c.span_id, parent.span_id);
        let root = continue_or_root(None, 1.0, &mut draw);
        assert!(root.sampled() && root.flags & RANDOM != 0);
        assert!(!continue_or_root(None, 0.0, &mut draw).sampled());
        // Over many roots the share follows the ratio.
        let sampled = (0..10_000)
            .filter(|_| continue_or_root(None, 0.1, &mut draw).sampled())
            .count();
        assert!((800..1200).contains(&sampled), "{sampled}");
    }
}
