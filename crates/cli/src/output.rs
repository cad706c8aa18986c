//! Printing values as JSON or YAML for scripts, and small formatting helpers.

use serde::Serialize;

use crate::args::Output;

/// Prints `value` as JSON or YAML; returns false for table formats (the caller prints).
pub fn structured<T: Serialize>(value: &T, output: Option<Output>) -> anyhow::Result<bool> {
    match output {
        Some(Output::Json) => {
            println!("{}", serde_json::to_string_pretty(value)?);
            Ok(true)
        }
        Some(Output::Yaml) => {
            let json = serde_json::to_value(value)?;
            print!("{}", serde_saphyr::to_string(&json)?);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `3m12s`-style age of an RFC 3339 timestamp.
pub fn age(rfc3339: Option<&str>) -> String {
    since(rfc3339).map_or_else(|| "-".into(), |s| span(s.max(0)))
}

/// Time from now until an RFC 3339 instant (an expected completion), as `age` writes it;
/// `-` when unknown.
pub fn time_left(rfc3339: Option<&str>) -> String {
    since(rfc3339).map_or_else(|| "-".into(), |s| span((-s).max(0)))
}

/// Seconds from an RFC 3339 instant to now (negative for one in the future).
fn since(rfc3339: Option<&str>) -> Option<i64> {
    let t = rfc3339.and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())?;
    Some((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
}

/// A duration in the largest unit that keeps it short: `45s`, `3m12s`, `5h2m`, `3d`.
fn span(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m{}s", s / 60, s % 60),
        s if s < 172_800 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d", s / 86_400),
    }
}

/// A JSON value as a short cell: strings unquoted, `-` for null.
pub fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".into(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.4}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}
