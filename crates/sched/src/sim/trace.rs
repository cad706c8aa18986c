//! Trace files: the CSV columns, a parser that refuses bad rows by line with the fix, and
//! the limits that keep an absurd file from exhausting memory.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::{MAX_SPLIT_SLOWDOWN_PCT, Topology};
use crate::error::{Result, SchedError};

/// Largest time value accepted in a trace (about 31,700 years), so sums cannot overflow.
pub const MAX_SECONDS: u64 = 1_000_000_000_000;

/// Longest run a trace row may give (366 days): the longest jobs in public GPU traces run for
/// weeks, and a replay's cost grows with how long a blocked gang is retried (`kueue-pods`
/// requeues one every hour at most while it waits).
pub const MAX_DURATION_S: u64 = 366 * 86_400;

/// Largest trace the simulator accepts (rows), so an absurd file cannot exhaust memory.
pub const MAX_TRACE_ROWS: usize = 2_000_000;

/// One row of a trace: `job_id,submit_s,duration_s,gpus,nodes,team,status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceJob {
    /// Job id from the source.
    pub job_id: String,
    /// Submit time, seconds from the trace start.
    pub submit_s: u64,
    /// Run time in seconds (not counting queueing).
    pub duration_s: u64,
    /// GPUs used.
    pub gpus: u32,
    /// Nodes used in the source cluster (gives the gang's shape).
    pub nodes: u32,
    /// Team (queue) the job belongs to.
    pub team: String,
    /// Final status in the source (informational).
    pub status: String,
    /// The time limit the job was submitted with, when the source has one (what
    /// `--estimates trace` tells the policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// The topology domain all its pods must share, when the trace says (`rack` or
    /// `nvlinkDomain`; empty for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// How much longer (percent) it runs split across racks, when the trace says: its own
    /// figure, which Ferry is told (`Workload::split_slowdown_pct`), instead of the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_slowdown_pct: Option<u32>,
    /// The priority class the job ran under, when the trace says (a class of `ferry sim
    /// --priority-classes`; none is the cluster's default class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

impl TraceJob {
    /// The gang shape: one pod per source node when GPUs split evenly, else one GPU per pod.
    pub fn shape(&self) -> (u32, u32) {
        let nodes = self.nodes.max(1);
        if self.gpus.is_multiple_of(nodes) {
            (nodes, self.gpus / nodes)
        } else {
            (self.gpus, 1)
        }
    }
}

pub(super) fn trace_err(
    file: &str,
    line: usize,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> SchedError {
    SchedError::Trace {
        file: file.to_string(),
        line,
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// The trace columns, in the documented order; `ferry sim` reads them by name.
pub const TRACE_COLUMNS: [&str; 11] = [
    "job_id",
    "submit_s",
    "duration_s",
    "gpus",
    "nodes",
    "team",
    "status",
    "time_limit_s",
    "topology",
    "split_slowdown_pct",
    "priority",
];

/// Where each trace column is in a file's header; `None` for an optional one left out.
struct Columns {
    at: [Option<usize>; TRACE_COLUMNS.len()],
}

impl Columns {
    /// Columns are matched by name (any order, any case, surrounding spaces ignored);
    /// other columns are ignored. `submit_s`, `duration_s`, `gpus` and `team` are
    /// required; `job_id` defaults to the row's line, `nodes` to the fewest 8-GPU
    /// nodes, `status` to empty, `time_limit_s`, `topology`, `split_slowdown_pct` and
    /// `priority` to none.
    fn from_header(header: &csv::StringRecord, file: &str) -> Result<Self> {
        let mut at = [None; TRACE_COLUMNS.len()];
        for (i, name) in header.iter().enumerate() {
            let name = name
                .trim_start_matches('\u{feff}')
                .trim()
                .to_ascii_lowercase();
            if let Some(k) = TRACE_COLUMNS.iter().position(|c| *c == name) {
                if at[k].is_some() {
                    return Err(trace_err(
                        file,
                        1,
                        format!("column `{name}` appears twice in the header"),
                        "keep one column of each name",
                    ));
                }
                at[k] = Some(i);
            }
        }
        let missing: Vec<&str> = [1, 2, 3, 5]
            .into_iter()
            .filter(|k| at[*k].is_none())
            .map(|k| TRACE_COLUMNS[k])
            .collect();
        if !missing.is_empty() {
            return Err(trace_err(
                file,
                1,
                format!(
                    "the header `{}` has no column {}",
                    header.iter().collect::<Vec<_>>().join(","),
                    missing
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                format!(
                    "start the file with a header naming its columns, e.g. `{}`",
                    TRACE_COLUMNS[..7].join(",")
                ),
            ));
        }
        Ok(Self { at })
    }
}

/// Parses trace CSV text: a header naming the columns ([`TRACE_COLUMNS`], in any order;
/// others ignored; `time_limit_s` optional, empty or `UNLIMITED` for none; `topology`
/// optional, `rack` or `nvlinkDomain` for a gang that must stay in one, empty for none;
/// `split_slowdown_pct` optional, the percent longer a job runs split across racks;
/// `priority` optional, a priority class name, empty for the default class), then one job
/// per row. Quoted fields and CRLF line ends are accepted;
/// times may have a fraction (rounded to whole seconds).
pub fn parse_trace(text: &str, file: &str) -> Result<Vec<TraceJob>> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let csv_err = |e: csv::Error| {
        let line = e.position().map_or(0, |p| p.line() as usize);
        trace_err(
            file,
            line,
            format!("not readable as CSV: {e}"),
            "write the trace as comma-separated UTF-8 text",
        )
    };
    let header = reader.headers().map_err(csv_err)?.clone();
    if header.iter().all(str::is_empty) {
        return Err(trace_err(
            file,
            0,
            "the file is empty",
            format!(
                "start it with the header `{}`",
                TRACE_COLUMNS[..7].join(",")
            ),
        ));
    }
    let cols = Columns::from_header(&header, file)?;
    let mut jobs = Vec::new();
    for record in reader.records() {
        let record = record.map_err(csv_err)?;
        let ln = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(str::is_empty) {
            continue;
        }
        if jobs.len() >= MAX_TRACE_ROWS {
            return Err(trace_err(
                file,
                ln,
                format!("more than {MAX_TRACE_ROWS} rows"),
                "split the trace",
            ));
        }
        let field = |k: usize| -> Result<Option<&str>> {
            let Some(i) = cols.at[k] else {
                return Ok(None);
            };
            match record.get(i) {
                Some(v) => Ok(Some(v)),
                None => Err(trace_err(
                    file,
                    ln,
                    format!("{} columns, the header has {}", record.len(), header.len()),
                    "give every row a value for each column of the header",
                )),
            }
        };
        let seconds = |k: usize, max: u64| -> Result<u64> {
            let v = field(k)?.unwrap_or_default();
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && x.round() <= max as f64)
                .map(|x| x.round() as u64)
                .ok_or_else(|| {
                    trace_err(
                        file,
                        ln,
                        format!(
                            "column `{}` is `{v}`, not a number of seconds from 0 to {max}",
                            TRACE_COLUMNS[k]
                        ),
                        format!(
                            "write `{}` as non-negative seconds, e.g. 3600{}",
                            TRACE_COLUMNS[k],
                            if max == MAX_DURATION_S {
                                " (a run longer than a year is most likely a logging error: \
                                 leave the row out)"
                            } else {
                                ""
                            }
                        ),
                    )
                })
        };
        let count = |k: usize, v: &str| -> Result<u32> {
            v.parse::<u32>()
                .ok()
                .filter(|v| *v > 0 && *v <= 1_000_000)
                .ok_or_else(|| {
                    trace_err(
                        file,
                        ln,
                        format!("column `{}` is `{v}`", TRACE_COLUMNS[k]),
                        format!(
                            "`{}` must be a whole number between 1 and 1000000 (drop CPU-only jobs)",
                            TRACE_COLUMNS[k]
                        ),
                    )
                })
        };
        let gpus = count(3, field(3)?.unwrap_or_default())?;
        let nodes = match field(4)? {
            Some(v) => count(4, v)?,
            None => gpus.div_ceil(8),
        };
        // Slurm writes `UNLIMITED` for a job without a limit; an empty cell is the same.
        let time_limit_s = match field(7)? {
            Some(v) if !v.is_empty() && !v.eq_ignore_ascii_case("unlimited") => {
                Some(seconds(7, MAX_SECONDS)?.max(1))
            }
            _ => None,
        };
        let topology = match field(8)?.unwrap_or_default() {
            "" => None,
            v => Some(v.parse::<Topology>().map_err(|problem| {
                trace_err(
                    file,
                    ln,
                    format!("column `topology`: {problem}"),
                    "write `rack` or `nvlinkDomain` for a gang that must stay in one, or leave \
                     it empty",
                )
            })?),
        };
        let split_slowdown_pct = match field(9)?.unwrap_or_default() {
            "" => None,
            v => Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|&p| p <= MAX_SPLIT_SLOWDOWN_PCT)
                    .ok_or_else(|| {
                        trace_err(
                            file,
                            ln,
                            format!("column `split_slowdown_pct`: `{v}` is not a percentage"),
                            format!(
                                "write how much longer the job runs split across racks, a whole \
                                 number from 0 to {MAX_SPLIT_SLOWDOWN_PCT}, or leave it empty"
                            ),
                        )
                    })?,
            ),
        };
        let priority = match field(10)?.unwrap_or_default() {
            "" => None,
            v => Some(valid_class_name(v).map_err(|problem| {
                trace_err(
                    file,
                    ln,
                    format!("column `priority`: {problem}"),
                    "write the name of a priority class (lowercase letters, digits, `-` and \
                     `.`, starting and ending with a letter or digit, e.g. `high`), or leave it \
                     empty for the default class",
                )
            })?),
        };
        let team = field(5)?.unwrap_or_default();
        if team.is_empty() {
            return Err(trace_err(
                file,
                ln,
                "column `team` is empty",
                "name the team (queue) of every job",
            ));
        }
        jobs.push(TraceJob {
            job_id: match field(0)? {
                Some(id) => id.to_string(),
                None => format!("line-{ln}"),
            },
            submit_s: seconds(1, MAX_SECONDS)?,
            duration_s: seconds(2, MAX_DURATION_S)?,
            gpus,
            nodes,
            team: team.to_string(),
            status: field(6)?.unwrap_or_default().to_string(),
            time_limit_s,
            topology,
            split_slowdown_pct,
            priority,
        });
    }
    if jobs.is_empty() {
        return Err(trace_err(
            file,
            0,
            "the trace has no jobs",
            "add at least one row",
        ));
    }
    Ok(jobs)
}

/// `v` as a priority class name: what Kubernetes accepts as an object name (lowercase
/// letters, digits, `-` and `.`, starting and ending with a letter or digit, at most 253).
fn valid_class_name(v: &str) -> std::result::Result<String, String> {
    let ok = v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!("`{v}` is not a priority class name"))
    }
}

/// Reads and parses a trace file.
pub fn read_trace(path: &Path) -> Result<Vec<TraceJob>> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path)
        .map_err(|e| trace_err(&name, 0, format!("cannot read: {e}"), "check the path"))?;
    if meta.len() > 256 << 20 {
        return Err(trace_err(
            &name,
            0,
            format!("file is {} bytes", meta.len()),
            "use a trace under 256 MiB",
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        trace_err(
            &name,
            0,
            format!("cannot read: {e}"),
            "check the path and that it is UTF-8 text",
        )
    })?;
    parse_trace(&text, &name)
}
