//! Output of a simulation: the side-by-side table, the utilization-over-time SVG and every
//! job's outcome as CSV.

use std::fmt::Write as _;

use super::SimReport;

/// Header of `render_jobs_csv`.
pub const JOB_COLUMNS: [&str; 11] = [
    "policy",
    "job_id",
    "team",
    "gpus",
    "submit_s",
    "first_start_s",
    "end_s",
    "jct_s",
    "wait_s",
    "preemptions",
    "priority",
];

/// Every job's outcome under every policy, one CSV row each (policy order, then trace order),
/// so a user can see which of their own jobs a policy served better or worse.
pub fn render_jobs_csv(reports: &[SimReport]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut rows = || -> csv::Result<()> {
        w.write_record(JOB_COLUMNS)?;
        for r in reports {
            for j in &r.jobs {
                w.write_record([
                    r.policy.as_str(),
                    &j.job_id,
                    &j.team,
                    &j.gpus.to_string(),
                    &j.submit_s.to_string(),
                    &j.first_start_s.to_string(),
                    &j.end_s.to_string(),
                    &j.jct_s().to_string(),
                    &j.wait_s.to_string(),
                    &j.preemptions.to_string(),
                    &j.class,
                ])?;
            }
        }
        Ok(())
    };
    rows().expect("writing CSV to memory cannot fail");
    String::from_utf8(w.into_inner().expect("in-memory CSV flushes")).expect("CSV of UTF-8 fields")
}

/// Side-by-side table of the policies' headline numbers, size buckets and team shares.
pub fn render_table(reports: &[SimReport]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<28}", "metric");
    for r in reports {
        let _ = write!(s, "{:>18}", r.policy);
    }
    s.push('\n');
    let row = |s: &mut String, name: &str, f: &dyn Fn(&SimReport) -> String| {
        let _ = write!(s, "{name:<28}");
        for r in reports {
            let _ = write!(s, "{:>18}", f(r));
        }
        s.push('\n');
    };
    row(&mut s, "utilization", &|r| format!("{:.3}", r.utilization));
    row(&mut s, "utilization first-last submit", &|r| {
        format!("{:.3}", r.utilization_in_window)
    });
    row(&mut s, "utilization while waiting", &|r| {
        format!("{:.3}", r.utilization_while_waiting)
    });
    row(&mut s, "mean JCT (s)", &|r| format!("{:.0}", r.mean_jct_s));
    row(&mut s, "p50 JCT (s)", &|r| format!("{:.0}", r.p50_jct_s));
    row(&mut s, "p99 JCT (s)", &|r| format!("{:.0}", r.p99_jct_s));
    row(&mut s, "mean wait (s)", &|r| {
        format!("{:.0}", r.mean_wait_s)
    });
    row(&mut s, "preemptions", &|r| r.preemptions.to_string());
    row(&mut s, "lost GPU-hours", &|r| {
        format!("{:.1}", r.lost_gpu_hours)
    });
    row(&mut s, "gangs started", &|r| {
        r.placement.gang_starts.to_string()
    });
    row(&mut s, "  on the fewest nodes", &|r| {
        r.placement.on_fewest_nodes.to_string()
    });
    if reports
        .iter()
        .any(|r| r.placement.split_across_racks.is_some())
    {
        row(&mut s, "  one rack fit / split", &|r| {
            let p = &r.placement;
            match (p.one_rack_fits, p.split_across_racks) {
                (Some(fits), Some(split)) => format!("{fits} / {split}"),
                _ => "-".into(),
            }
        });
    }
    row(&mut s, "admitted, not placeable", &|r| {
        r.placement.admitted_unplaced.to_string()
    });
    row(&mut s, "  GPU-hours admitted, idle", &|r| {
        format!("{:.1}", r.placement.admitted_idle_gpu_hours)
    });
    row(&mut s, "  pods-ready timeouts", &|r| {
        r.placement.pods_ready_timeouts.to_string()
    });
    row(&mut s, "makespan (s)", &|r| r.makespan_s.to_string());
    row(&mut s, "  of the shortest possible", &|r| {
        r.bound.as_ref().map_or("-".into(), |b| {
            format!("{:.3}x", r.makespan_s as f64 / b.makespan_s.max(1) as f64)
        })
    });
    row(&mut s, "start told, within 5 min", &|r| {
        told(r, |e| format!("{}/{}", e.within_5_min, e.told))
    });
    row(&mut s, "  p50 / p90 miss (s)", &|r| {
        told(r, |e| {
            format!("{:.0} / {:.0}", e.p50_error_s, e.p90_error_s)
        })
    });
    if reports.iter().any(|r| r.forecast.is_some()) {
        let forecast = |r: &SimReport, f: &dyn Fn(&super::ForecastAccuracy) -> String| {
            r.forecast.as_ref().map_or("-".into(), f)
        };
        row(&mut s, "forecast, within 5 min", &|r| {
            forecast(r, &|a| {
                format!(
                    "{}/{} of {}",
                    a.starts.within_5_min, a.starts.told, a.waited
                )
            })
        });
        row(&mut s, "  later than forecast", &|r| {
            forecast(r, &|a| a.starts.later.to_string())
        });
        row(&mut s, "  p50 / p90 miss (s)", &|r| {
            forecast(r, &|a| {
                format!("{:.0} / {:.0}", a.starts.p50_error_s, a.starts.p90_error_s)
            })
        });
    }
    row(&mut s, "all-saturated time (s)", &|r| {
        r.saturated_s.to_string()
    });
    if let Some(first) = reports.first() {
        for b in &first.buckets {
            let label = b.gpus.clone();
            row(&mut s, &format!("mean JCT {label} GPUs (s)"), &|r| {
                r.buckets
                    .iter()
                    .find(|x| x.gpus == label)
                    .map_or("-".into(), |x| format!("{:.0}", x.mean_jct_s))
            });
            row(&mut s, &format!("mean wait {label} GPUs (s)"), &|r| {
                r.buckets
                    .iter()
                    .find(|x| x.gpus == label)
                    .map_or("-".into(), |x| format!("{:.0}", x.mean_wait_s))
            });
        }
        // Highest class first: how urgent work got through, and what the rest paid.
        let mut classes: Vec<(&String, i32)> =
            first.classes.iter().map(|(c, x)| (c, x.value)).collect();
        classes.sort_by_key(|&(c, v)| (std::cmp::Reverse(v), c));
        for (class, _) in classes {
            let stat = |r: &SimReport, f: &dyn Fn(&super::ClassStats) -> String| {
                r.classes.get(class).map_or("-".into(), f)
            };
            row(&mut s, &format!("mean wait {class} (s)"), &|r| {
                stat(r, &|c| format!("{:.0}", c.mean_wait_s))
            });
            row(&mut s, &format!("p99 wait {class} (s)"), &|r| {
                stat(r, &|c| format!("{:.0}", c.p99_wait_s))
            });
            row(&mut s, &format!("mean JCT {class} (s)"), &|r| {
                stat(r, &|c| format!("{:.0}", c.mean_jct_s))
            });
            row(&mut s, &format!("preemptions of {class}"), &|r| {
                stat(r, &|c| c.preemptions.to_string())
            });
        }
        for team in first.team_share.keys() {
            row(&mut s, &format!("share/entitled {team}"), &|r| {
                r.team_share.get(team).map_or("-".into(), |t| {
                    share_cell(t.share, t.entitlement, t.within_tolerance)
                })
            });
        }
        for cohort in first.cohort_share.keys() {
            row(&mut s, &format!("share of cohort {cohort}"), &|r| {
                r.cohort_share.get(cohort).map_or("-".into(), |c| {
                    share_cell(c.share, c.entitlement, c.within_tolerance)
                })
            });
        }
        for team in first.team_share.keys() {
            row(&mut s, &format!("quota kept {team}"), &|r| {
                r.team_share
                    .get(team)
                    .map_or("-".into(), |t| format!("{:.3}", t.quota_kept))
            });
        }
        for team in first.team_share.keys() {
            row(&mut s, &format!("mean JCT {team} (s)"), &|r| {
                r.team_mean_jct_s
                    .get(team)
                    .map_or("-".into(), |m| format!("{m:.0}"))
            });
        }
    }
    let misses: Vec<_> = reports
        .iter()
        .flat_map(|r| {
            r.team_share
                .iter()
                .filter_map(move |(team, t)| Some((r, team, t, t.miss_cause?)))
        })
        .collect();
    if !misses.is_empty() {
        let _ = writeln!(s, "out of the band, and why:");
        let mut causes = Vec::new();
        for (r, team, t, cause) in misses {
            let _ = writeln!(
                s,
                "  {:<17} {team} at {:.2} of its entitlement: {}",
                r.policy,
                t.ratio,
                cause.name()
            );
            if !causes.contains(&cause) {
                causes.push(cause);
            }
        }
        for cause in causes {
            let _ = writeln!(s, "  {}: {}", cause.name(), cause.explain());
        }
    }
    if let Some(b) = reports.first().and_then(|r| r.bound.as_ref()) {
        let _ = writeln!(s, "utilization ceiling: {}", b.describe());
    }
    if let [first, peers @ ..] = reports
        && !peers.is_empty()
    {
        let _ = writeln!(
            s,
            "{} / peer (mean JCT and wait: lower is better; utilization: higher is better)",
            first.policy
        );
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.3}x", a / b)
            } else {
                "-".to_owned()
            }
        };
        for peer in peers {
            let _ = write!(
                s,
                "  vs {:<17} mean JCT {}  p99 JCT {}  mean wait {}  utilization {}",
                peer.policy,
                ratio(first.mean_jct_s, peer.mean_jct_s),
                ratio(first.p99_jct_s, peer.p99_jct_s),
                ratio(first.mean_wait_s, peer.mean_wait_s),
                ratio(first.utilization, peer.utilization),
            );
            if !first.jobs.is_empty() && first.jobs.len() == peer.jobs.len() {
                let (sooner, later) = sooner_later(first, peer);
                let _ = write!(s, "  jobs done sooner {sooner}, later {later}");
            }
            s.push('\n');
        }
    }
    s
}

/// A start-estimate cell, `-` for a policy without reservations (FIFO, StrictFIFO), which
/// tells no one a start.
fn told(r: &SimReport, f: impl Fn(&super::StartEstimates) -> String) -> String {
    if r.start_estimates.told == 0 {
        "-".into()
    } else {
        f(&r.start_estimates)
    }
}

/// How many jobs `a` completed sooner and later than `b` did (the same trace, job by job).
fn sooner_later(a: &SimReport, b: &SimReport) -> (usize, usize) {
    a.jobs
        .iter()
        .zip(&b.jobs)
        .fold((0, 0), |(sooner, later), (x, y)| {
            let (jx, jy) = (x.jct_s(), y.jct_s());
            (sooner + usize::from(jx < jy), later + usize::from(jx > jy))
        })
}

/// An SVG line plot of busy-GPU fraction over time, one line per policy.
pub fn render_svg(reports: &[SimReport], capacity: u64) -> String {
    let (w, h, pad) = (900.0, 300.0, 40.0);
    let t_end = reports
        .iter()
        .filter_map(|r| r.timeline.last().map(|x| x.0))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let t_start = reports
        .iter()
        .filter_map(|r| r.timeline.first().map(|x| x.0))
        .min()
        .unwrap_or(0) as f64;
    let span = (t_end - t_start).max(1.0);
    let colors = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#ff7f0e",
    ];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"20\">GPU utilization over time ({capacity} GPUs, {:.1} days)</text>",
        span / 86400.0
    );
    for (k, r) in reports.iter().enumerate() {
        let mut pts = String::new();
        let mut last_y = h - pad;
        for &(t, b) in &r.timeline {
            let x = pad + (t as f64 - t_start) / span * (w - 2.0 * pad);
            let y = h - pad - (b as f64 / capacity.max(1) as f64) * (h - 2.0 * pad);
            let _ = write!(pts, "{x:.1},{last_y:.1} {x:.1},{y:.1} ");
            last_y = y;
        }
        let c = colors[k % colors.len()];
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1\" opacity=\"0.7\" points=\"{pts}\"/>"
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">{} ({:.3})</text>",
            w - 220.0,
            40.0 + 16.0 * k as f64,
            r.policy,
            r.utilization
        );
    }
    s.push_str("</svg>\n");
    s
}

/// `share/entitlement verdict`, as a team's or a cohort's row shows it.
fn share_cell(share: f64, entitlement: f64, within: Option<bool>) -> String {
    let verdict = match within {
        Some(true) => "ok",
        Some(false) => "OUT",
        None => "n/a",
    };
    format!("{share:.3}/{entitlement:.3} {verdict}")
}
