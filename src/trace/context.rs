//! W3C trace context (Level 2) as pure functions: a message's `traceparent` and
//! `tracestate` read (an invalid `traceparent` is ignored whole, and so is the
//! `tracestate` with it), the span context jetrelay continues, and the `traceparent`
//! it writes; `baggage` checked against the W3C baggage syntax and limits, never
//! decoded. Trace headers are untrusted input: [`inbound`] says what of them may
//! go on, bounded, and which were dropped as oversized or malformed. Ids come from
//! the caller's random source; nothing here reads a clock.

use std::borrow::Cow;

/// The sampled flag.
pub const SAMPLED: u8 = 0x01;
/// The random-trace-id flag (Level 2): kept while the trace id is kept, set on ids
/// jetrelay draws.
pub const RANDOM: u8 = 0x02;

/// The longest `tracestate` passed on (the spec asks for at least 512 characters;
/// longer ones are cut by whole members, longest first).
pub const MAX_TRACESTATE: usize = 512;

/// The most `tracestate` list-members (W3C: 32); more, and the header is dropped.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The longest `baggage` passed on, all its headers joined (W3C baggage: 8,192
/// bytes); longer, and it is dropped whole.
pub const MAX_BAGGAGE: usize = 8192;

/// The most `baggage` list-members (W3C baggage: 64); more, and it is dropped whole.
pub const MAX_BAGGAGE_MEMBERS: usize = 64;

/// The longest `traceparent` passed on with export off: a later version may add
/// fields after the flags, never this many.
pub const MAX_TRACEPARENT: usize = 512;

/// A trace header a message may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceHeader {
    /// `traceparent`.
    Traceparent,
    /// `tracestate`.
    Tracestate,
    /// `baggage`.
    Baggage,
}

impl TraceHeader {
    /// Every one, in the order of [`TraceHeader::name`]'s values.
    pub const ALL: [TraceHeader; 3] = [
        TraceHeader::Traceparent,
        TraceHeader::Tracestate,
        TraceHeader::Baggage,
    ];

    /// Its header name (lowercase), also the metric's `header` label.
    pub fn name(self) -> &'static str {
        match self {
            TraceHeader::Traceparent => "traceparent",
            TraceHeader::Tracestate => "tracestate",
            TraceHeader::Baggage => "baggage",
        }
    }
}

/// Why a trace header was dropped (or, for `tracestate`, cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Over the W3C limits: too long, or too many members.
    Oversized,
    /// Not in the header's syntax (or a `traceparent` given twice).
    Malformed,
}

impl Reason {
    /// Every one, in the order of [`Reason::name`]'s values.
    pub const ALL: [Reason; 2] = [Reason::Oversized, Reason::Malformed];

    /// The metric's `reason` label.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Oversized => "oversized",
            Reason::Malformed => "malformed",
        }
    }
}

/// How many trace headers were dropped, by header and reason: a closed set, small
/// enough to copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped([u32; 6]);

impl Dropped {
    fn at(header: TraceHeader, reason: Reason) -> usize {
        let h = TraceHeader::ALL
            .iter()
            .position(|x| *x == header)
            .unwrap_or(0);
        let r = Reason::ALL.iter().position(|x| *x == reason).unwrap_or(0);
        h * Reason::ALL.len() + r
    }

    /// One more dropped.
    pub fn add(&mut self, header: TraceHeader, reason: Reason) {
        let i = Dropped::at(header, reason);
        self.0[i] = self.0[i].saturating_add(1);
    }

    /// Adds another count to this one.
    pub fn merge(&mut self, other: Dropped) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    /// How many of `header` were dropped for `reason`.
    pub fn get(&self, header: TraceHeader, reason: Reason) -> u32 {
        self.0[Dropped::at(header, reason)]
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|n| *n == 0)
    }

    /// Each (header, reason) with its count, zeros left out.
    pub fn counts(&self) -> impl Iterator<Item = (TraceHeader, Reason, u32)> + '_ {
        TraceHeader::ALL
            .into_iter()
            .flat_map(|h| Reason::ALL.into_iter().map(move |r| (h, r)))
            .map(|(h, r)| (h, r, self.get(h, r)))
            .filter(|(_, _, n)| *n > 0)
    }
}

/// What of a message's trace headers may go on: each bounded, or left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inbound<'a> {
    /// The one valid `traceparent`, as it came.
    pub traceparent: Option<&'a str>,
    /// The `tracestate` (all its headers joined, members within the limits), only
    /// with a valid `traceparent`.
    pub tracestate: Option<String>,
    /// The `baggage` (its headers joined), valid and within the limits.
    pub baggage: Option<Cow<'a, str>>,
    /// What was dropped (a `tracestate` cut to its limit counts as oversized).
    pub dropped: Dropped,
}

impl Inbound<'_> {
    /// The context to continue: the `traceparent` read, with the `tracestate`.
    pub fn context(&self) -> Option<SpanContext> {
        let (trace_id, span_id, flags) = parse_traceparent(self.traceparent?)?;
        Some(SpanContext {
            trace_id,
            span_id,
            flags,
            tracestate: self.tracestate.clone(),
        })
    }
}

/// Reads a message's (or a request's) trace headers: names compared without case.
/// A `traceparent` that is invalid, given twice or over [`MAX_TRACEPARENT`] is
/// dropped; a `tracestate` with an invalid member or more than
/// [`MAX_TRACESTATE_MEMBERS`] is dropped, one over [`MAX_TRACESTATE`] cut by whole
/// members; a `baggage` with an invalid member, over [`MAX_BAGGAGE`] bytes or
/// [`MAX_BAGGAGE_MEMBERS`] members is dropped. Each drop is counted, an absent
/// header is not; a `tracestate` without a valid `traceparent` means nothing and
/// is left out (counted only when it is bad itself).
pub fn inbound<'a>(headers: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Inbound<'a> {
    let mut out = Inbound::default();
    let named = |name: &'static str| {
        headers
            .clone()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let mut parents = named("traceparent");
    if let Some(first) = parents.next() {
        let valid = parents.next().is_none() && parse_traceparent(first).is_some();
        if !valid {
            out.dropped.add(TraceHeader::Traceparent, Reason::Malformed);
        } else if first.len() > MAX_TRACEPARENT {
            out.dropped.add(TraceHeader::Traceparent, Reason::Oversized);
        } else {
            out.traceparent = Some(first);
        }
    }
    let state = tracestate(named("tracestate"));
    if let Some(reason) = state.dropped {
        out.dropped.add(TraceHeader::Tracestate, reason);
    }
    out.tracestate = state.value.filter(|_| out.traceparent.is_some());
    match baggage(named("baggage")) {
        Ok(b) => out.baggage = b,
        Err(reason) => out.dropped.add(TraceHeader::Baggage, reason),
    }
    out
}

/// A `tracestate` read: what goes on, and why some or all of it did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracestate {
    /// The members that go on, joined; `None` when none do.
    pub value: Option<String>,
    /// Dropped whole (`value` is `None`), or cut (oversized, `value` is the rest).
    pub dropped: Option<Reason>,
}

/// Combines and bounds `tracestate` values (several headers join with `,`), see
/// [`parse_tracestate`]; says why, when not all of it goes on. Reading stops at
/// the member past [`MAX_TRACESTATE_MEMBERS`]: a header of any length costs a list
/// of at most that many.
pub fn tracestate<'a>(values: impl IntoIterator<Item = &'a str>) -> Tracestate {
    let dropped = |reason| Tracestate {
        value: None,
        dropped: Some(reason),
    };
    let mut members: Vec<&str> = Vec::new();
    for v in values {
        for m in v.split(',') {
            let m = m.trim_matches([' ', '\t']);
            if m.is_empty() {
                continue;
            }
            if members.len() == MAX_TRACESTATE_MEMBERS {
                return dropped(Reason::Oversized);
            }
            if !valid_member(m) {
                return dropped(Reason::Malformed);
            }
            members.push(m);
        }
    }
    let len = |ms: &[&str]| ms.iter().map(|m| m.len()).sum::<usize>() + ms.len().saturating_sub(1);
    let mut cut = None;
    if len(&members) > MAX_TRACESTATE {
        cut = Some(Reason::Oversized);
        members.retain(|m| m.len() <= 128);
        while len(&members) > MAX_TRACESTATE {
            members.pop();
        }
    }
    Tracestate {
        value: (!members.is_empty()).then(|| members.join(",")),
        dropped: cut,
    }
}

/// Checks `baggage` values (several headers join with `,`) against the W3C baggage
/// syntax (`key = value *(; property)`, keys tokens, values baggage octets, no
/// empty member) and limits: `Ok(None)` when there is none, `Ok(Some(value))` to
/// pass on (borrowed when it came as one header), or why it is dropped whole. Its
/// length is checked before its members: an oversized one is not read.
///
/// # Errors
/// [`Reason::Oversized`] over [`MAX_BAGGAGE`] bytes or [`MAX_BAGGAGE_MEMBERS`]
/// members, [`Reason::Malformed`] for a member out of the syntax.
pub fn baggage<'a>(
    values: impl Iterator<Item = &'a str> + Clone,
) -> Result<Option<Cow<'a, str>>, Reason> {
    let (count, bytes) = values.clone().fold((0usize, 0usize), |(n, b), v| {
        (n + 1, b.saturating_add(v.len()))
    });
    if count == 0 {
        return Ok(None);
    }
    if bytes.saturating_add(count - 1) > MAX_BAGGAGE {
        return Err(Reason::Oversized);
    }
    let mut members = 0usize;
    for v in values.clone() {
        for m in v.split(',') {
            members += 1;
            if members > MAX_BAGGAGE_MEMBERS {
                return Err(Reason::Oversized);
            }
            if !valid_baggage_member(m) {
                return Err(Reason::Malformed);
            }
        }
    }
    let mut values = values;
    Ok(Some(if count == 1 {
        // One value: counted above.
        Cow::Borrowed(values.next().unwrap_or_default())
    } else {
        Cow::Owned(values.collect::<Vec<_>>().join(","))
    }))
}

/// One baggage list-member: `key OWS "=" OWS value *( OWS ";" OWS property )`, a
/// property `key OWS "=" OWS value` or a bare `key`; white space around each part.
fn valid_baggage_member(m: &str) -> bool {
    fn ows(s: &str) -> &str {
        s.trim_matches([' ', '\t'])
    }
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    // baggage-octet: %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E
    let octets = |s: &str| {
        s.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && !matches!(b, b'"' | b',' | b';' | b'\\'))
    };
    let mut parts = m.split(';');
    let Some((key, value)) = parts.next().and_then(|p| p.split_once('=')) else {
        return false;
    };
    token(ows(key))
        && octets(ows(value))
        && parts.all(|p| match p.split_once('=') {
            Some((k, v)) => token(ows(k)) && octets(ows(v)),
            None => token(ows(p)),
        })
}

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
    tracestate(values).value
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
    fn tracestate_says_why_it_was_dropped_or_cut() {
        let t = |vs: &[&str]| tracestate(vs.iter().copied());
        assert_eq!(
            t(&["a=1"]),
            Tracestate {
                value: Some("a=1".into()),
                dropped: None
            }
        );
        assert_eq!(t(&[]).dropped, None, "absent is not dropped");
        assert_eq!(t(&["a=1,B=2"]).dropped, Some(Reason::Malformed));
        // 61,589 bytes as the audit sent it: members past 32, or one too long.
        let many = vec!["k=v"; 15_397].join(",");
        assert_eq!(
            t(&[&many]),
            Tracestate {
                value: None,
                dropped: Some(Reason::Oversized)
            }
        );
        let one = format!("k={}", "v".repeat(61_587));
        assert_eq!(
            t(&[&one]).dropped,
            Some(Reason::Malformed),
            "a value over 256"
        );
        // Over 512 bytes: cut by whole members, counted as oversized.
        let wide: Vec<String> = (0..8).map(|i| format!("m{i}={}", "y".repeat(90))).collect();
        let cut = t(&wide.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(cut.dropped, Some(Reason::Oversized));
        assert!(cut.value.is_some_and(|v| v.len() <= MAX_TRACESTATE));
    }

    #[test]
    fn baggage_table() {
        fn b<'a>(vs: &[&'a str]) -> Result<Option<Cow<'a, str>>, Reason> {
            baggage(vs.iter().copied())
        }
        assert_eq!(b(&[]), Ok(None));
        for ok in [
            "userId=alice",
            "userId=alice,serverNode=DF%2028,isProduction=false",
            "key1 = value1 ; property1 ; propertyKey=propertyValue, key2=",
            "tenant=admin,role=root",
        ] {
            assert_eq!(b(&[ok]), Ok(Some(Cow::Borrowed(ok))), "{ok:?}");
        }
        assert_eq!(
            b(&["a=1", "b=2"]),
            Ok(Some(Cow::Owned("a=1,b=2".into()))),
            "several headers join"
        );
        for bad in [
            "",
            "a=1,,b=2",
            "novalue",
            "=v",
            "a b=1",
            "a=\"quoted\"",
            "a=back\\slash",
            "a=1;=p",
            "a=caf\u{e9}",
            "a=1\r\nInjected: x",
        ] {
            assert_eq!(b(&[bad]), Err(Reason::Malformed), "{bad:?}");
        }
        let members: Vec<String> = (0..65).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            b(&[&members.join(",")]),
            Err(Reason::Oversized),
            "65 members"
        );
        assert!(b(&[&members[..64].join(",")]).is_ok(), "64 members");
        let big = format!("k={}", "v".repeat(MAX_BAGGAGE - 2));
        assert!(b(&[&big]).is_ok(), "8,192 bytes");
        let over = format!("k={}", "v".repeat(MAX_BAGGAGE - 1));
        assert_eq!(b(&[&over]), Err(Reason::Oversized), "8,193 bytes");
        let half = format!("k={}", "v".repeat(MAX_BAGGAGE / 2));
        assert_eq!(b(&[&half, &half]), Err(Reason::Oversized), "joined");
        // 61,589 bytes of junk: oversized before it is read.
        assert_eq!(b(&[&"\u{1}".repeat(61_589)]), Err(Reason::Oversized));
    }

    #[test]
    fn inbound_keeps_what_is_bounded_and_counts_what_is_not() {
        let read = |pairs: &'static [(&'static str, &'static str)]| {
            inbound(pairs.iter().map(|(n, v)| (*n, *v)))
        };
        let all = read(&[
            ("Traceparent", TP),
            ("tracestate", "a=1"),
            ("Baggage", "user=42"),
            ("X-Other", "x"),
        ]);
        assert_eq!(all.traceparent, Some(TP));
        assert_eq!(all.tracestate.as_deref(), Some("a=1"));
        assert_eq!(all.baggage.as_deref(), Some("user=42"));
        assert!(all.dropped.is_empty());
        assert_eq!(read(&[]), Inbound::default());
        let twice = read(&[
            ("traceparent", TP),
            ("traceparent", TP),
            ("tracestate", "a=1"),
        ]);
        assert_eq!((twice.traceparent, twice.tracestate), (None, None));
        assert_eq!(
            twice
                .dropped
                .get(TraceHeader::Traceparent, Reason::Malformed),
            1
        );
        assert_eq!(
            twice
                .dropped
                .get(TraceHeader::Tracestate, Reason::Malformed),
            0
        );
        let orphan = read(&[("tracestate", "a=1")]);
        assert_eq!(
            orphan.tracestate, None,
            "no traceparent: nothing to continue"
        );
        assert!(orphan.dropped.is_empty(), "and nothing wrong with it");
        let bad = read(&[
            ("traceparent", "junk"),
            ("tracestate", "A=1"),
            ("baggage", "a=1,,"),
        ]);
        let counts: Vec<_> = bad.dropped.counts().collect();
        assert_eq!(
            counts,
            [
                (TraceHeader::Traceparent, Reason::Malformed, 1),
                (TraceHeader::Tracestate, Reason::Malformed, 1),
                (TraceHeader::Baggage, Reason::Malformed, 1),
            ]
        );
        let future: &'static str = Box::leak(
            format!(
                "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-{}",
                "f".repeat(500)
            )
            .into_boxed_str(),
        );
        let long = inbound([("traceparent", future)].into_iter());
        assert_eq!(long.traceparent, None);
        assert_eq!(
            long.dropped
                .get(TraceHeader::Traceparent, Reason::Oversized),
            1
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn what_goes_on_is_within_the_w3c_limits(
            state in proptest::collection::vec("[a-z0-9]{1,6}=[ -+\\--<>-~]{0,60}", 0..40),
            bag in proptest::collection::vec("[A-Za-z0-9]{1,8}=[!#-+\\--:<-\\[\\]-~]{0,150}", 0..100),
        ) {
            let state = state.join(",");
            let bag = bag.join(",");
            let headers = [("traceparent", TP), ("tracestate", state.as_str()), ("baggage", bag.as_str())];
            let read = inbound(headers.iter().copied());
            if let Some(s) = &read.tracestate {
                proptest::prop_assert!(s.len() <= MAX_TRACESTATE);
                proptest::prop_assert!(s.split(',').count() <= MAX_TRACESTATE_MEMBERS);
            }
            if let Some(b) = &read.baggage {
                proptest::prop_assert!(b.len() <= MAX_BAGGAGE);
                proptest::prop_assert!(b.split(',').count() <= MAX_BAGGAGE_MEMBERS);
                proptest::prop_assert_eq!(b.as_ref(), bag.as_str(), "passed unchanged");
            }
            let bag_dropped = read.dropped.get(TraceHeader::Baggage, Reason::Oversized)
                + read.dropped.get(TraceHeader::Baggage, Reason::Malformed);
            proptest::prop_assert_eq!(read.baggage.is_none(), bag_dropped == 1 || bag.is_empty());
        }
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
