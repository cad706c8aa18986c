//! A running attempt's pace — optimizer steps over wall-clock time, from the steps its
//! metrics lines report — and what it says about when the attempt will end. The scheduler
//! plans reservations and backfill with it (`Scheduler::progress`).

/// Fewest milliseconds between the first and the latest observation before a pace is
/// trusted: steps are seen when the loop reads the log (about once a second), so a short
/// base turns that jitter into a large error, and the first steps include warm-up.
const MIN_SPAN_MS: u64 = 10_000;

/// The first and the latest `(step, unix ms)` seen in one attempt's metrics, and the total
/// steps the engine itself reported (`max_steps`), if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pace {
    first: Option<(i64, u64)>,
    last: Option<(i64, u64)>,
    total: Option<i64>,
}

impl Pace {
    /// Records that the attempt had reached `step` at `at_ms`; older or equal steps are
    /// ignored.
    pub(crate) fn observe(&mut self, step: i64, at_ms: u64) {
        if self.last.is_some_and(|(s, _)| step <= s) {
            return;
        }
        self.first.get_or_insert((step, at_ms));
        self.last = Some((step, at_ms));
    }

    /// Records the engine's own step total (the HF Trainer's `max_steps`, which it also
    /// computes for jobs given in epochs).
    pub(crate) fn observe_total(&mut self, total: i64) {
        if total > 0 {
            self.total = Some(total);
        }
    }

    /// Seconds until step `total` at the pace seen so far, from `now_ms`; `None` until
    /// two observations `MIN_SPAN_MS` apart. At least 1 (a job past `total` is finishing).
    pub(crate) fn remaining_s(&self, total: i64, now_ms: u64) -> Option<u64> {
        let ((s0, t0), (s1, t1)) = (self.first?, self.last?);
        if s1 <= s0 || t1.saturating_sub(t0) < MIN_SPAN_MS {
            return None;
        }
        let ms_per_step = (t1 - t0) as f64 / (s1 - s0) as f64;
        let left_ms = (total - s1).max(0) as f64 * ms_per_step - now_ms.saturating_sub(t1) as f64;
        Some(((left_ms / 1000.0).ceil() as u64).max(1))
    }
}

/// Seconds `job`'s running attempt needs to reach `spec.train.steps` (else the total its
/// engine reported) at the pace `live` has seen, from `now_ms`; `None` without a step target,
/// for another attempt's gang, or before the pace is known.
pub(crate) fn time_left(
    job: &ferry_store::JobRecord,
    live: &crate::state::LiveGang,
    now_ms: u64,
) -> Option<u64> {
    let total = job
        .job
        .spec
        .train
        .steps
        .filter(|s| *s > 0)
        .or(live.pace.total)?;
    (live.gang.attempt == job.attempt)
        .then(|| live.pace.remaining_s(total, now_ms))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_time_follows_the_measured_step_rate() {
        let mut p = Pace::default();
        assert_eq!(p.remaining_s(100, 0), None);
        p.observe(10, 1_000);
        assert_eq!(
            p.remaining_s(100, 1_000),
            None,
            "one observation is no rate"
        );
        p.observe(20, 6_000);
        assert_eq!(p.remaining_s(100, 6_000), None, "5 s is too short a base");
        p.observe(9, 7_000);
        p.observe(60, 21_000);
        // 50 steps in 20 s: 400 ms each; 40 left at 21 s = 16 s, 1 s of which has passed.
        assert_eq!(p.remaining_s(100, 22_000), Some(15));
        assert_eq!(p.remaining_s(60, 22_000), Some(1), "past its last step");
        assert_eq!(
            p.remaining_s(100, 90_000),
            Some(1),
            "overdue: any moment now"
        );
    }

    #[test]
    fn the_engines_own_total_is_kept_when_positive() {
        let mut p = Pace::default();
        assert_eq!(p.total, None);
        p.observe_total(0);
        assert_eq!(p.total, None, "no total is not a total of zero");
        p.observe_total(1500);
        assert_eq!(p.total, Some(1500));
    }
}
