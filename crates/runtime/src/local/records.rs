//! The on-disk records that let a rank's fate outlive the control plane: the `/bin/sh`
//! wrapper that writes `rank-<r>.exit` when the rank's command ends, and the
//! `rank-<r>.pid` file. Exit records are parsed as untrusted text and never panic.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::{RankState, RuntimeError};

/// The wrapper every rank runs under: `sh -c WRAPPER ferry-rank EXIT_FILE ARGV...`.
///
/// `trap : TERM INT` makes the shell survive the SIGTERM sent to the process group (the
/// command, which gets the same signal, decides for itself), while `:` — unlike `""` — is
/// not inherited by the command. When the command ends, its status is written to a temp
/// file and renamed into place, so a reader sees either no record or a whole one.
pub const WRAPPER: &str = r#"trap : TERM INT
ferry_exit_file=$1
shift
"$@"
ferry_status=$?
printf '%s\n' "$ferry_status" > "$ferry_exit_file.tmp" && mv -f "$ferry_exit_file.tmp" "$ferry_exit_file"
exit "$ferry_status"
"#;

/// Longest exit record accepted; real ones are a few bytes.
const MAX_RECORD: u64 = 64;

/// Parses an exit record: `<status>` as the wrapper writes it, or `signal <n>` as the
/// runtime writes it for a wrapper that was itself killed.
pub fn parse_exit_record(text: &str) -> Option<RankState> {
    let text = text.trim();
    if let Some(signal) = text.strip_prefix("signal ") {
        let signal: i32 = signal.trim().parse().ok()?;
        return (1..=64)
            .contains(&signal)
            .then_some(RankState::Signaled { signal });
    }
    let code: i32 = text.parse().ok()?;
    (0..=255)
        .contains(&code)
        .then_some(RankState::Exited { code })
}

/// What reading an exit record found.
#[derive(Debug)]
pub enum ExitRecord {
    /// No record: the rank has not ended, or ended without writing one.
    Missing,
    /// The rank's final state and the record's modification time (ms since the epoch).
    Found(RankState, Option<u64>),
}

/// Reads `path`; malformed or oversized content becomes [`RankState::Unreadable`].
pub fn read_exit_record(path: &Path) -> ExitRecord {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ExitRecord::Missing,
        Err(e) => {
            let message = format!("exit record {} cannot be read: {e}", path.display());
            return ExitRecord::Found(RankState::Unreadable { message }, None);
        }
    };
    let modified = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64);
    let mut text = String::new();
    let read = file.take(MAX_RECORD + 1).read_to_string(&mut text);
    let state = match read {
        Ok(n) if (n as u64) <= MAX_RECORD => parse_exit_record(&text),
        _ => None,
    }
    .unwrap_or_else(|| RankState::Unreadable {
        message: format!(
            "exit record {} holds {:?}, not an exit status; the file was altered outside Ferry",
            path.display(),
            text.chars().take(MAX_RECORD as usize).collect::<String>()
        ),
    });
    ExitRecord::Found(state, modified)
}

/// Writes `contents` to `path` through a temp file and a rename, so readers never see half.
/// No fsync: these records must survive the control plane dying, not the machine (which
/// takes the ranks down with it), and the page cache outlives any process.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), RuntimeError> {
    let mut tmp: PathBuf = path.to_path_buf();
    tmp.as_mut_os_string().push(".tmp-ferry");
    let mut file = std::fs::File::create(&tmp).map_err(RuntimeError::io("create", &tmp))?;
    file.write_all(contents.as_bytes())
        .map_err(RuntimeError::io("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(RuntimeError::io("rename into place", path))
}

/// Records, for a rank whose wrapper could not write it (killed by a signal), how it ended;
/// an existing record is never overwritten.
pub fn ensure_exit_record(path: &Path, state: &RankState) -> Result<(), RuntimeError> {
    if path.exists() {
        return Ok(());
    }
    let contents = match state {
        RankState::Exited { code } => format!("{code}\n"),
        RankState::Signaled { signal } => format!("signal {signal}\n"),
        RankState::Running | RankState::Lost | RankState::Unreadable { .. } => return Ok(()),
    };
    write_atomic(path, &contents)
}

/// Parses a pid file: `<pid> <start_time>`.
pub fn parse_pid_record(text: &str) -> Option<(u32, u64)> {
    let mut parts = text.split_ascii_whitespace();
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((pid, start))
}

/// Reads and parses a pid file, refusing anything longer than a pid record can be.
pub fn read_pid_record(path: &Path) -> Option<(u32, u64)> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_RECORD).read_to_string(&mut text).ok()?;
    parse_pid_record(&text)
}

/// Name of the file in an attempt directory that says when its ranks were first sent SIGTERM
/// (Unix milliseconds): a control plane restarted while they checkpoint neither signals them
/// again (a second SIGTERM can abort a checkpoint under way) nor gives them a fresh grace
/// period.
pub const STOP_RECORD: &str = "stop-requested";

/// When the ranks of the attempt whose stop record is `path` were first sent SIGTERM, if they
/// were; anything unreadable counts as never.
pub fn read_stop_record(path: &Path) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_RECORD).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_record_is_read_back_and_anything_else_is_never() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STOP_RECORD);
        assert_eq!(read_stop_record(&path), None, "absent");
        write_atomic(&path, "1764664000123\n").unwrap();
        assert_eq!(read_stop_record(&path), Some(1_764_664_000_123));
        for junk in ["", "soon", "-5", "12 13", &"9".repeat(80)] {
            write_atomic(&path, junk).unwrap();
            assert_eq!(read_stop_record(&path), None, "{junk:?}");
        }
    }

    #[test]
    fn exit_records_round_trip() {
        assert_eq!(
            parse_exit_record("0\n"),
            Some(RankState::Exited { code: 0 })
        );
        assert_eq!(
            parse_exit_record("143\n"),
            Some(RankState::Exited { code: 143 })
        );
        assert_eq!(
            parse_exit_record("signal 9\n"),
            Some(RankState::Signaled { signal: 9 })
        );
    }

    #[test]
    fn malformed_exit_records_are_rejected() {
        for bad in [
            "",
            "\n",
            "-1",
            "256",
            "abc",
            "signal",
            "signal 0",
            "signal 99",
            "1 2",
            "9999999999999999999",
        ] {
            assert_eq!(parse_exit_record(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn oversized_or_garbage_files_are_unreadable_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0.exit");
        assert!(matches!(read_exit_record(&path), ExitRecord::Missing));
        std::fs::write(&path, "0".repeat(10_000)).unwrap();
        assert!(matches!(
            read_exit_record(&path),
            ExitRecord::Found(RankState::Unreadable { .. }, _)
        ));
        std::fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
        assert!(matches!(
            read_exit_record(&path),
            ExitRecord::Found(RankState::Unreadable { .. }, _)
        ));
        write_atomic(&path, "7\n").unwrap();
        assert!(matches!(
            read_exit_record(&path),
            ExitRecord::Found(RankState::Exited { code: 7 }, Some(_))
        ));
    }

    #[test]
    fn ensure_exit_record_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0.exit");
        ensure_exit_record(&path, &RankState::Signaled { signal: 9 }).unwrap();
        ensure_exit_record(&path, &RankState::Exited { code: 0 }).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "signal 9\n");
    }

    #[test]
    fn pid_records() {
        assert_eq!(parse_pid_record("12 345\n"), Some((12, 345)));
        for bad in ["", "12", "12 x", "12 3 4", "-1 3"] {
            assert_eq!(parse_pid_record(bad), None, "{bad:?}");
        }
    }
}
