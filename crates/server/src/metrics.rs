//! Ingestion of the engines' metrics lines (one JSON object with a `step` per line of
//! rank 0's output) into the store.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Largest slice of log read per pass, so a chatty job cannot stall the loop.
const MAX_READ: u64 = 4 << 20;

/// Reads complete lines of `path` after `offset`; returns the metrics objects among
/// them and the offset just past the last complete line.
pub(crate) fn scan(path: &Path, offset: u64) -> std::io::Result<(Vec<serde_json::Value>, u64)> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len <= offset {
        return Ok((Vec::new(), offset));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    file.take(MAX_READ).read_to_end(&mut buf)?;
    let Some(last_newline) = buf.iter().rposition(|&b| b == b'\n') else {
        return Ok((Vec::new(), offset));
    };
    let complete = &buf[..=last_newline];
    let lines = complete
        .split(|&b| b == b'\n')
        .filter_map(ferry_spec::parse_metrics_line)
        .collect();
    Ok((lines, offset + complete.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn only_complete_metrics_lines_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0.log");
        let mut f = std::fs::File::create(&path).unwrap();
        write!(
            f,
            "hello\n{{\"step\":1,\"loss\":2.5}}\n{{\"no_step\":1}}\n{{\"step\":2,"
        )
        .unwrap();
        f.flush().unwrap();
        let (lines, off) = scan(&path, 0).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["loss"], 2.5);
        writeln!(f, "\"loss\":2.0}}").unwrap();
        f.flush().unwrap();
        let (lines, off2) = scan(&path, off).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["step"], 2);
        assert!(off2 > off);
        let (lines, _) = scan(&path, off2).unwrap();
        assert!(lines.is_empty());
    }
}
