//! jetrelay's own records beside a group's config, in the group's config bucket: the
//! group-wide pause (`jetrelay pause --all-members`: members that join or restart
//! while it holds pause their consumer before their first pull) and the proof that a
//! member was added by jetrelay's auto-join (only such members may be pruned).
//!
//! The keys start with `jetrelay/`. orbit.go and natsio-pcgroups watch only the key
//! `<stream>.<group>` and list groups by splitting every key on `.` and keeping those
//! whose first token is a stream's name; a stream name never contains `/`
//! (nats-server refuses path separators in it), so the references never take these
//! keys for a group, and never read them. Whoever may write these keys may also
//! write the membership itself: they are exactly as trusted as the config beside
//! them, unlike the liveness bucket (anyone who may beat may forge a key there).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The first token of every record's key.
pub const PREFIX: &str = "jetrelay/";

/// The largest record read; a larger value is refused unread.
pub const MAX_RECORD: usize = 1024;

/// The key of the group-wide pause: `jetrelay/pause.<stream>.<group>`.
pub fn pause_key(stream: &str, group: &str) -> String {
    format!("{PREFIX}pause.{stream}.{group}")
}

/// The key that proves `member` was added by jetrelay's auto-join:
/// `jetrelay/auto.<stream>.<group>.<member>`.
pub fn auto_key(stream: &str, group: &str, member: &str) -> String {
    format!("{PREFIX}auto.{stream}.{group}.{member}")
}

#[derive(Serialize, Deserialize)]
struct PauseRecord {
    until: String,
}

/// The group-wide pause's value: `{"until":"<RFC 3339>"}`.
pub fn pause_value(until: OffsetDateTime) -> Vec<u8> {
    let until = until.format(&Rfc3339).unwrap_or_else(|_| until.to_string());
    // A struct of one string: serializing it cannot fail.
    serde_json::to_vec(&PauseRecord { until }).unwrap_or_default()
}

/// Reads the group-wide pause's value.
///
/// # Errors
/// Why it cannot be read (too large, not the record's JSON, not an RFC 3339 time).
pub fn read_pause(value: &[u8]) -> Result<OffsetDateTime, String> {
    if value.len() > MAX_RECORD {
        return Err(format!(
            "the group-wide pause record is {} bytes (at most {MAX_RECORD})",
            value.len()
        ));
    }
    let r: PauseRecord = serde_json::from_slice(value)
        .map_err(|e| format!("the group-wide pause record does not parse: {e}"))?;
    OffsetDateTime::parse(&r.until, &Rfc3339)
        .map_err(|e| format!("the group-wide pause record's time does not parse: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// How the references (and `jetrelay group ls`) find a stream's groups.
    fn listed_group<'a>(key: &'a str, stream: &str) -> Option<&'a str> {
        key.split('.')
            .collect::<Vec<_>>()
            .get(..2)
            .filter(|p| p[0] == stream)
            .map(|p| p[1])
    }

    proptest! {
        #[test]
        fn no_record_is_ever_listed_as_a_group(
            stream in "[A-Za-z0-9_=-]{1,20}",
            group in "[A-Za-z0-9_=-]{1,20}",
            member in "[A-Za-z0-9_=-]{1,20}",
        ) {
            let config_key = crate::group::key(&stream, &group);
            prop_assert_eq!(listed_group(&config_key, &stream), Some(group.as_str()));
            for key in [pause_key(&stream, &group), auto_key(&stream, &group, &member)] {
                prop_assert!(listed_group(&key, &stream).is_none(), "{}", key);
                prop_assert!(crate::group::model::member_name(key.split('.').next().unwrap_or("")).is_err());
            }
        }
    }

    #[test]
    fn the_pause_record_round_trips_and_refuses_what_is_not_one() {
        for t in [
            "2026-12-01T18:30:00Z",
            "9999-12-31T23:59:59Z",
            "2026-12-01T18:30:00.5+01:00",
        ] {
            let t = OffsetDateTime::parse(t, &Rfc3339).unwrap();
            assert_eq!(read_pause(&pause_value(t)).unwrap(), t);
        }
        let big = format!("{{\"until\":\"{}\"}}", " ".repeat(MAX_RECORD));
        for bad in [
            &b""[..],
            b"{}",
            b"{\"until\":\"tomorrow\"}",
            b"[1]",
            big.as_bytes(),
        ] {
            assert!(read_pause(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
