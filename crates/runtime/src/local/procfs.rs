//! Reads a process's state and start time from `/proc/<pid>/stat`, so a recycled pid is
//! never taken for a rank and a zombie never counts as alive. The parser takes untrusted
//! text (the command name is chosen by the process) and never panics.

use std::io::Read;

/// The fields of `/proc/<pid>/stat` the runtime needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z`, `X`, …
    pub state: char,
    /// Field 5: process group id.
    pub pgrp: i64,
    /// Field 22: start time in clock ticks since boot.
    pub start_time: u64,
}

/// What `/proc` says about a (pid, start time) pair recorded earlier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// That very process exists and is not a zombie.
    Alive,
    /// It exists but has exited and waits to be reaped.
    Zombie,
    /// No process has that pid, or the pid now belongs to a different process.
    Gone,
}

/// Parses the contents of a `stat` file. The command name (field 2) sits in parentheses and
/// may itself hold spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let mut fields = after_comm.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Fields 6..=21 precede the start time (field 22); `pgrp` was field 5.
    let start_time = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        state,
        pgrp,
        start_time,
    })
}

/// Reads and parses `/proc/<pid>/stat`; `None` when the process does not exist.
pub fn read_stat(pid: u32) -> Option<ProcStat> {
    let file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    // A stat line is well under 1 KiB; the command name is at most 64 bytes.
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text).ok()?;
    parse_stat(&text)
}

/// Whether the process recorded as (`pid`, `start_time`) is still the one running.
pub fn liveness(pid: u32, start_time: u64) -> Liveness {
    match read_stat(pid) {
        Some(stat) if stat.start_time == start_time => match stat.state {
            'Z' | 'X' | 'x' => Liveness::Zombie,
            _ => Liveness::Alive,
        },
        _ => Liveness::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "4242 (python3) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";

    #[test]
    fn parses_state_group_and_start_time() {
        let stat = parse_stat(LINE).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                state: 'S',
                pgrp: 4242,
                start_time: 987654
            }
        );
    }

    #[test]
    fn command_names_with_spaces_and_parens_do_not_shift_fields() {
        let line = LINE.replace("(python3)", "(a) Z 9 (b c))");
        let stat = parse_stat(&line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start_time, 987654);
    }

    #[test]
    fn truncated_or_garbage_input_is_none_not_a_panic() {
        for bad in [
            "",
            ")",
            "1 (x",
            "1 (x) S 1 2",
            "1 (x) S 1 notanumber 3",
            &LINE[..60],
            "1 (x) \u{e9} 1 1",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_truncation_and_byte_flip_of_a_real_line_parses_or_is_refused() {
        for end in 0..=LINE.len() {
            if let Some(stat) = parse_stat(&LINE[..end]) {
                // Only a cut inside the start-time digits or after it can still parse.
                assert!(
                    end >= LINE.find(" 987654").unwrap() + 2,
                    "cut at {end}: {stat:?}"
                );
            }
        }
        let bytes = LINE.as_bytes();
        for at in 0..bytes.len() {
            for flip in [b')', b'(', b' ', b'-', 0xff, b'9'] {
                let mut mutated = bytes.to_vec();
                mutated[at] = flip;
                let _ = parse_stat(&String::from_utf8_lossy(&mutated));
            }
        }
    }

    #[test]
    fn reads_this_process() {
        let me = read_stat(std::process::id()).expect("/proc/self/stat is readable");
        assert_ne!(me.state, 'Z');
        assert_eq!(liveness(std::process::id(), me.start_time), Liveness::Alive);
        assert_eq!(
            liveness(std::process::id(), me.start_time + 1),
            Liveness::Gone
        );
    }
}
