//! OpenTelemetry's own environment variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, …), read as the lowest layer of the
//! config: what an operator or a collector setup injects into every pod takes effect,
//! and where `[otel]` (the file, or `JETRELAY_OTEL__*`) sets the same thing, `[otel]`
//! wins. `OTEL_SDK_DISABLED=true` ignores them all. A value that cannot be read is a
//! problem naming its variable.

use std::collections::BTreeMap;

use figment::value::{Dict, Map, Value};
use figment::{Error, Metadata, Profile, Provider};

use super::Problem;

/// One variable's value, at its key of the config.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct OtelVar {
    /// The variable.
    var: &'static str,
    /// The dotted key it sets (`otel.endpoint`).
    key: &'static str,
    /// Its value, as the key takes it.
    value: Value,
}

/// What a figment's metadata is named for a value of `var`.
const ORIGIN: &str = " (OpenTelemetry variable)";

impl OtelVar {
    fn new(var: &'static str, key: &'static str, value: impl Into<Value>) -> OtelVar {
        OtelVar {
            var,
            key,
            value: value.into(),
        }
    }
}

impl Provider for OtelVar {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("{}{ORIGIN}", self.var))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, Error> {
        // `otel.endpoint` → {"otel": {"endpoint": value}}.
        let dict = self.key.rsplit('.').fold(self.value.clone(), |inner, k| {
            Value::from(Dict::from([(k.to_string(), inner)]))
        });
        let Value::Dict(_, dict) = dict else {
            return Ok(Map::new());
        };
        Ok(Map::from([(Profile::Default, dict)]))
    }
}

/// The variable a figment's metadata names, when the value came from one.
pub(super) fn origin(metadata_name: &str) -> Option<&str> {
    metadata_name.strip_suffix(ORIGIN)
}

/// The config values the OpenTelemetry variables `get` gives, or what is wrong
/// with them (each problem names its key and its variable).
pub(super) fn read(get: &dyn Fn(&str) -> Option<String>) -> Result<Vec<OtelVar>, Vec<Problem>> {
    let var = |name: &str| {
        get(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut problem = |key: &str, var: &str, message: String| {
        let mut p = Problem::new(key, message);
        p.env = Some(var.to_string());
        problems.push(p);
    };
    let grpc = exporter(&var, &mut out, &mut problem);
    metrics(&var, grpc, &mut out, &mut problem);
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        if let Some(v) = var(name) {
            match pairs(&v) {
                Ok(headers) => out.push(OtelVar::new(name, "otel.headers", headers)),
                Err(why) => problem("otel.headers", name, why),
            }
        }
    }
    let attributes = match var("OTEL_RESOURCE_ATTRIBUTES").map(|v| pairs(&v)) {
        Some(Ok(mut a)) => {
            let name = a.remove("service.name");
            if !a.is_empty() {
                out.push(OtelVar::new(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "otel.resource_attributes",
                    a,
                ));
            }
            name
        }
        Some(Err(why)) => {
            problem("otel.resource_attributes", "OTEL_RESOURCE_ATTRIBUTES", why);
            None
        }
        None => None,
    };
    if let Some(v) = var("OTEL_SERVICE_NAME") {
        out.push(OtelVar::new(
            "OTEL_SERVICE_NAME",
            "otel.service_name",
            v.as_str(),
        ));
    } else if let Some(v) = attributes {
        out.push(OtelVar::new(
            "OTEL_RESOURCE_ATTRIBUTES",
            "otel.service_name",
            v.as_str(),
        ));
    }
    if let Some(sampler) = var("OTEL_TRACES_SAMPLER") {
        let arg = var("OTEL_TRACES_SAMPLER_ARG");
        match sample_ratio(&sampler, arg.as_deref()) {
            Ok(ratio) => out.push(OtelVar::new(
                "OTEL_TRACES_SAMPLER",
                "otel.sample_ratio",
                ratio,
            )),
            Err((var, why)) => problem("otel.sample_ratio", var, why),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Where and how spans go: the protocol, then the endpoint (the signal's own is the
/// whole URL, its path the traces' path; the general one is the base that
/// `/v1/traces` is added to).
fn exporter(
    var: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<OtelVar>,
    problem: &mut dyn FnMut(&str, &str, String),
) -> bool {
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .map(|v| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v))
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|v| ("OTEL_EXPORTER_OTLP_PROTOCOL", v)));
    let grpc = match &protocol {
        Some((name, v)) => match v.as_str() {
            "http/protobuf" | "grpc" => {
                out.push(OtelVar::new(name, "otel.protocol", v.as_str()));
                v == "grpc"
            }
            other => {
                problem(
                    "otel.protocol",
                    name,
                    format!("{other:?}: jetrelay exports \"http/protobuf\" or \"grpc\""),
                );
                false
            }
        },
        None => false,
    };
    if let Some(v) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        let base = if grpc {
            v.as_str()
        } else {
            v.trim_end_matches('/').trim_end_matches("/v1/traces")
        };
        out.push(OtelVar::new(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "otel.endpoint",
            base,
        ));
    } else if let Some(v) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        out.push(OtelVar::new(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "otel.endpoint",
            v.as_str(),
        ));
    }
    grpc
}

/// Metrics over OTLP: whether (`OTEL_METRICS_EXPORTER`), how often
/// (`OTEL_METRIC_EXPORT_INTERVAL`, ms) and where, when not to the traces' endpoint
/// (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, the whole URL).
fn metrics(
    var: &dyn Fn(&str) -> Option<String>,
    grpc: bool,
    out: &mut Vec<OtelVar>,
    problem: &mut dyn FnMut(&str, &str, String),
) {
    const EXPORTER: &str = "OTEL_METRICS_EXPORTER";
    match var(EXPORTER).as_deref() {
        Some("otlp") => out.push(OtelVar::new(EXPORTER, "otel.metrics", true)),
        Some("none") => out.push(OtelVar::new(EXPORTER, "otel.metrics", false)),
        // Prometheus is what /metrics is, always.
        Some("prometheus") | None => {}
        Some(other) => problem(
            "otel.metrics",
            EXPORTER,
            format!(
                "{other:?}: jetrelay exports \"otlp\" (or \"none\"; /metrics is always served)"
            ),
        ),
    }
    const INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";
    if let Some(v) = var(INTERVAL) {
        match v.parse::<u64>() {
            Ok(ms) => out.push(OtelVar::new(INTERVAL, "otel.metrics_interval_ms", ms)),
            Err(_) => problem(
                "otel.metrics_interval_ms",
                INTERVAL,
                format!("{v:?} is not a whole number of milliseconds"),
            ),
        }
    }
    const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
    if let Some(v) = var(ENDPOINT) {
        let base = if grpc {
            v.as_str()
        } else {
            v.trim_end_matches('/').trim_end_matches("/v1/metrics")
        };
        out.push(OtelVar::new(ENDPOINT, "otel.metrics_endpoint", base));
    }
}

/// The share of roots sampled for `OTEL_TRACES_SAMPLER` (and its `_ARG`). jetrelay
/// always follows a sampled parent, so the parent-based samplers are the same as
/// their root's.
fn sample_ratio(sampler: &str, arg: Option<&str>) -> Result<f64, (&'static str, String)> {
    let ratio = || match arg {
        None => Ok(1.0),
        Some(a) => match a.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err((
                "OTEL_TRACES_SAMPLER_ARG",
                format!("{a:?} is not a ratio from 0 to 1"),
            )),
        },
    };
    match sampler {
        "always_on" | "parentbased_always_on" => Ok(1.0),
        "always_off" | "parentbased_always_off" => Ok(0.0),
        "traceidratio" | "parentbased_traceidratio" => ratio(),
        other => Err((
            "OTEL_TRACES_SAMPLER",
            format!(
                "{other:?}: jetrelay samples always_on, always_off, traceidratio or their parentbased_ forms"
            ),
        )),
    }
}

/// `key=value` pairs separated by commas, values percent-encoded (W3C Baggage, as
/// OpenTelemetry writes its headers and attributes).
fn pairs(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let items = text.split(',').map(str::trim).filter(|i| !i.is_empty());
    for (i, item) in items.enumerate() {
        // Never the item itself: a header's value may be a token.
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("item {} is not key=value", i + 1));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err("a pair without a key".into());
        }
        out.insert(k.to_string(), percent_decoded(v.trim())?);
    }
    Ok(out)
}

/// `text` with its `%XX` escapes decoded (UTF-8).
fn percent_decoded(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).unwrap_or("");
            let Some([byte]) = crate::digest::unhex::<1>(hex) else {
                return Err("a % not followed by two hex digits".into());
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a percent-encoded value that is not UTF-8".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Vec<(String, String, Value)>, Vec<String>> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(&|name| vars.get(name).cloned())
            .map(|out| {
                out.into_iter()
                    .map(|o| (o.var.to_string(), o.key.to_string(), o.value))
                    .collect()
            })
            .map_err(|p| p.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn the_samplers_table() {
        for (sampler, arg, ratio) in [
            ("always_on", None, Some(1.0)),
            ("parentbased_always_on", None, Some(1.0)),
            ("always_off", None, Some(0.0)),
            ("parentbased_always_off", Some("0.5"), Some(0.0)),
            ("traceidratio", Some("0.25"), Some(0.25)),
            ("parentbased_traceidratio", Some("0.1"), Some(0.1)),
            ("traceidratio", None, Some(1.0)),
            ("traceidratio", Some("1.5"), None),
            ("traceidratio", Some("half"), None),
            ("jaeger_remote", None, None),
        ] {
            assert_eq!(sample_ratio(sampler, arg).ok(), ratio, "{sampler} {arg:?}");
        }
    }

    #[test]
    fn pairs_are_percent_decoded_and_a_bad_one_is_refused() {
        let p = pairs("api-key=a%2Bb%3D%3D, x-team = blue ,empty=").unwrap();
        assert_eq!(p["api-key"], "a+b==", "a + stays a +");
        assert_eq!(p["x-team"], "blue");
        assert_eq!(p["empty"], "");
        for bad in ["novalue", "=v", "k=%zz", "k=%4", "k=%ff%fe"] {
            assert!(pairs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_variable_sets_its_key_and_a_bad_one_names_itself() {
        let got = read_from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=billing,deployment.environment=prod",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.2"),
        ])
        .unwrap();
        let keys: Vec<(&str, &str)> = got
            .iter()
            .map(|(v, k, _)| (v.as_str(), k.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "otel.protocol"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel.endpoint"),
                ("OTEL_RESOURCE_ATTRIBUTES", "otel.resource_attributes"),
                ("OTEL_RESOURCE_ATTRIBUTES", "otel.service_name"),
                ("OTEL_TRACES_SAMPLER", "otel.sample_ratio"),
            ]
        );
        assert_eq!(
            got[1].2,
            Value::from("http://traces:4318"),
            "the signal's path is ours to add"
        );
        assert_eq!(got[3].2, Value::from("billing"));
        let err = read_from(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ])
        .unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(
            err[0].starts_with("OTEL_EXPORTER_OTLP_PROTOCOL (otel.protocol): \"http/json\""),
            "{err:?}"
        );
        assert!(
            err[1].starts_with("OTEL_TRACES_SAMPLER_ARG (otel.sample_ratio)"),
            "{err:?}"
        );
        // Disabled: nothing is read, not even what is wrong.
        assert_eq!(
            read_from(&[("OTEL_SDK_DISABLED", "true"), ("OTEL_TRACES_SAMPLER", "x")]),
            Ok(Vec::new())
        );
    }
}
