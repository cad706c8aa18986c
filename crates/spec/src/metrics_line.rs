//! The metrics line, the one format every engine under Ferry prints for progress: rank 0
//! writes a JSON object with an integer `step` (and any numbers, such as `loss`) on a line of
//! its output. The local control plane and the Kubernetes operator both read it from logs.

/// Longest object considered (longer ones are skipped unparsed: logs are untrusted bytes).
pub const MAX_METRICS_LINE: usize = 16 * 1024;

/// The metrics object of one log line, if it has one: from the line's first `{`, a JSON
/// object with an integer `step`. Whatever comes before is ignored — a progress bar redrawn
/// with `\r` on the same log (the HF Trainer's tqdm) or a launcher's `[rank0]:` prefix.
pub fn parse_metrics_line(line: &[u8]) -> Option<serde_json::Value> {
    let start = line.iter().position(|&b| b == b'{')?;
    let object = line[start..].trim_ascii();
    if object.len() > MAX_METRICS_LINE {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(object).ok()?;
    value.get("step")?.as_i64()?;
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of a real TRL run under `ferry_trainer.py` on an H200 (2026-11-30): tqdm redraws
    /// its bar with `\r` on the same log, so the metrics object follows the bar, and the
    /// Trainer's own Python-dict log line is not JSON.
    #[test]
    fn a_metrics_object_after_a_progress_bar_is_read_and_a_python_dict_is_not() {
        let trainer_print = b"\r                                                 \r{'loss': '0.5027', 'grad_norm': '0.1464', 'epoch': '0.2128'}";
        assert_eq!(parse_metrics_line(trainer_print), None);
        let after_bar = "\r  1%|\u{258f}         | 20/1500 [00:01<02:29,  9.87it/s]{\"step\": 20, \"max_steps\": 1500, \"loss\": 0.5026956558227539, \"epoch\": 0.2127659574468085}";
        let v = parse_metrics_line(after_bar.as_bytes()).expect("metrics after the bar");
        assert_eq!(v["step"], 20);
        assert_eq!(v["max_steps"], 1500);
        let prefixed = parse_metrics_line(b"[rank0]: {\"step\": 3, \"loss\": 1.0}").unwrap();
        assert_eq!(prefixed["step"], 3);
    }

    #[test]
    fn objects_without_an_integer_step_or_too_long_are_not_metrics() {
        assert_eq!(parse_metrics_line(b"no object {"), None);
        assert_eq!(parse_metrics_line(b"{\"loss\": 1.0}"), None);
        assert_eq!(parse_metrics_line(b"{\"step\": 1.5}"), None);
        let long = format!(
            "{{\"step\": 1, \"pad\": \"{}\"}}",
            "x".repeat(MAX_METRICS_LINE)
        );
        assert_eq!(parse_metrics_line(long.as_bytes()), None);
    }
}
