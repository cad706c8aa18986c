//! A running attempt's pace — optimizer steps over wall-clock time, from the steps its
//! metrics lines report — and what it says about when the attempt will end. Both the local
//! control plane and the Kubernetes operator keep one per running attempt and tell the
//! scheduler the end it predicts (`Scheduler::progress`), so reservations and backfill are
//! planned around when jobs really end.

use crate::config::Time;

/// Fewest milliseconds between the first and the latest observation before a pace is
/// trusted: steps are seen when the caller reads the log (every second locally, every
/// reconcile on a cluster), so a short base turns that jitter into a large error, and the
/// first steps include warm-up.
const MIN_SPAN_MS: u64 = 10_000;

/// The first and the latest `(step, unix ms)` seen in one attempt's metrics, and the total
/// steps the engine itself reported (`max_steps`), if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pace {
    first: Option<(i64, u64)>,
    last: Option<(i64, u64)>,
    total: Option<i64>,
}

impl Pace {
    /// Records that the attempt had reached `step` at `at_ms`; older or equal steps are
    /// ignored.
    pub fn observe(&mut self, step: i64, at_ms: u64) {
        if self.last.is_some_and(|(s, _)| step <= s) {
            return;
        }
        self.first.get_or_insert((step, at_ms));
        self.last = Some((step, at_ms));
    }

    /// Records the engine's own step total (the HF Trainer's `max_steps`, which it also
    /// computes for jobs given in epochs).
    pub fn observe_total(&mut self, total: i64) {
        if total > 0 {
            self.total = Some(total);
        }
    }

    /// The engine's own step total, the target when the job names none.
    pub fn total(&self) -> Option<i64> {
        self.total
    }

    /// Seconds until step `total` at the pace seen so far, from `now_ms`; `None` until
    /// two observations `MIN_SPAN_MS` apart. At least 1 (a job past `total` is finishing).
    pub fn remaining_s(&self, total: i64, now_ms: u64) -> Option<u64> {
        let ((s0, t0), (s1, t1)) = (self.first?, self.last?);
        if s1 <= s0 || t1.saturating_sub(t0) < MIN_SPAN_MS {
            return None;
        }
        let ms_per_step = (t1 - t0) as f64 / (s1 - s0) as f64;
        let left_ms = (total - s1).max(0) as f64 * ms_per_step - now_ms.saturating_sub(t1) as f64;
        Some(((left_ms / 1000.0).ceil() as u64).max(1))
    }

    /// Seconds until the job's own step target (`spec.train.steps`, when set and positive),
    /// else the engine's total, from `now_ms`; `None` without either or before the pace is
    /// known. One rule for every caller.
    pub fn time_left(&self, target_steps: Option<i64>, now_ms: u64) -> Option<u64> {
        let total = target_steps.filter(|s| *s > 0).or(self.total)?;
        self.remaining_s(total, now_ms)
    }
}

/// Whether a newly predicted `end` (`left_s` seconds away) is worth telling the scheduler,
/// which was last told `told`: only when it moved by more than a tenth of the time left
/// (at least 30 s), so a steady job does not re-plan every reservation on every log read.
pub fn worth_telling(told: Option<Time>, end: Time, left_s: u64) -> bool {
    told.is_none_or(|e| e.abs_diff(end) > (left_s / 10).max(30))
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
        assert_eq!(p.total(), None);
        p.observe_total(0);
        assert_eq!(p.total(), None, "no total is not a total of zero");
        p.observe_total(1500);
        assert_eq!(p.total(), Some(1500));
    }

    #[test]
    fn the_jobs_own_step_target_wins_over_the_engines_total() {
        let mut p = Pace::default();
        p.observe(0, 0);
        p.observe(100, 10_000);
        assert_eq!(p.time_left(None, 10_000), None, "no target at all");
        p.observe_total(300);
        // 100 ms a step: 200 steps to the engine's total, 900 to the job's own target.
        assert_eq!(p.time_left(None, 10_000), Some(20));
        assert_eq!(p.time_left(Some(0), 10_000), Some(20), "0 is no target");
        assert_eq!(p.time_left(Some(1_000), 10_000), Some(90));
    }

    #[test]
    fn the_scheduler_is_told_again_only_when_the_end_moved_enough() {
        assert!(worth_telling(None, 1_000, 100), "never told");
        assert!(!worth_telling(Some(1_000), 1_030, 100), "30 s is the floor");
        assert!(worth_telling(Some(1_000), 1_031, 100));
        // With 2,000 s left a tenth is 200 s.
        assert!(!worth_telling(Some(5_000), 4_800, 2_000));
        assert!(worth_telling(Some(5_000), 4_799, 2_000));
    }
}
