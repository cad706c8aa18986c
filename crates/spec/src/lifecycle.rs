//! The job state machine: which phase may follow which.
//!
//! The control plane persists every transition before acting on it; this module is
//! the single place that says which transitions exist.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum JobPhase {
    /// Stored, not yet looked at by the scheduler.
    Pending,
    /// Waiting for resources in its queue.
    Queued,
    /// Resources are reserved; processes are being started.
    Admitted,
    /// Every rank has been started.
    Running,
    /// A rank failed and the failure policy allows another attempt; waiting out the backoff.
    Restarting,
    /// Stopped to make room for higher-priority work; goes back to the queue.
    Preempted,
    /// Held at a user's request (`ferry suspend`, `spec.suspend: true`): out of the queue,
    /// its ranks stopped gracefully as for a preemption; `ferry resume` queues it again.
    Suspended,
    /// Every rank exited 0.
    Succeeded,
    /// A rank failed and no restarts are left, or the job could not start.
    Failed,
    /// Stopped at a user's request.
    Cancelled,
}

/// A transition that the state machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a job cannot go from {from} to {to}")]
pub struct TransitionError {
    /// The phase the job was in.
    pub from: JobPhase,
    /// The phase that was asked for.
    pub to: JobPhase,
}

impl JobPhase {
    /// Every phase, in life order.
    pub const ALL: [JobPhase; 10] = [
        JobPhase::Pending,
        JobPhase::Queued,
        JobPhase::Admitted,
        JobPhase::Running,
        JobPhase::Restarting,
        JobPhase::Preempted,
        JobPhase::Suspended,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Cancelled,
    ];

    /// True once the job can never run again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobPhase::Succeeded | JobPhase::Failed | JobPhase::Cancelled
        )
    }

    /// True while the job holds resources (GPUs, processes).
    pub fn holds_resources(self) -> bool {
        matches!(
            self,
            JobPhase::Admitted | JobPhase::Running | JobPhase::Restarting
        )
    }

    /// Whether `self → to` is a legal transition. A phase may also "transition" to
    /// itself: that records an event (e.g. a control-plane restart) without a change.
    pub fn can_become(self, to: JobPhase) -> bool {
        use JobPhase::*;
        if self == to {
            return !self.is_terminal();
        }
        match self {
            Pending => matches!(to, Queued | Failed | Cancelled | Suspended),
            Queued => matches!(to, Admitted | Failed | Cancelled | Suspended),
            Admitted => matches!(to, Running | Failed | Cancelled | Preempted | Suspended),
            Running => matches!(
                to,
                Succeeded | Failed | Cancelled | Restarting | Preempted | Suspended
            ),
            Restarting => matches!(to, Running | Failed | Cancelled | Preempted | Suspended),
            // A job stopping for a preemption that its user suspends stays out of the queue.
            Preempted => matches!(to, Queued | Cancelled | Failed | Suspended),
            // Resumed into its queue, or cancelled; it runs only once admitted again.
            Suspended => matches!(to, Queued | Cancelled),
            Succeeded | Failed | Cancelled => false,
        }
    }

    /// `Ok(to)` when the transition is legal.
    pub fn check(self, to: JobPhase) -> Result<JobPhase, TransitionError> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(TransitionError { from: self, to })
        }
    }

    /// The name used in tables, the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Pending => "Pending",
            JobPhase::Queued => "Queued",
            JobPhase::Admitted => "Admitted",
            JobPhase::Running => "Running",
            JobPhase::Restarting => "Restarting",
            JobPhase::Preempted => "Preempted",
            JobPhase::Suspended => "Suspended",
            JobPhase::Succeeded => "Succeeded",
            JobPhase::Failed => "Failed",
            JobPhase::Cancelled => "Cancelled",
        }
    }
}

impl fmt::Display for JobPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobPhase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobPhase::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown job phase {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_phases_are_final() {
        for from in JobPhase::ALL.into_iter().filter(|p| p.is_terminal()) {
            for to in JobPhase::ALL {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn every_non_terminal_phase_can_reach_a_terminal_one() {
        for from in JobPhase::ALL.into_iter().filter(|p| !p.is_terminal()) {
            assert!(
                from.can_become(JobPhase::Cancelled),
                "{from} cannot be cancelled"
            );
        }
    }

    #[test]
    fn the_happy_path_and_preemption_are_legal() {
        use JobPhase::*;
        let path = [
            Pending, Queued, Admitted, Running, Preempted, Queued, Admitted, Running, Restarting,
            Running, Succeeded,
        ];
        for w in path.windows(2) {
            assert_eq!(w[0].check(w[1]), Ok(w[1]));
        }
        assert!(Queued.check(Succeeded).is_err());
        assert!(Pending.check(Running).is_err());
    }

    #[test]
    fn a_job_is_suspended_from_any_live_phase_and_resumed_only_into_its_queue() {
        use JobPhase::*;
        for from in [Pending, Queued, Admitted, Running, Restarting, Preempted] {
            assert_eq!(from.check(Suspended), Ok(Suspended), "{from}");
        }
        for from in [Succeeded, Failed, Cancelled] {
            assert!(from.check(Suspended).is_err(), "{from}");
        }
        // Out of a suspension only back to the queue (to be admitted like any queued job)
        // or to a cancellation; never straight to running, nor to a preemption.
        let allowed: Vec<JobPhase> = JobPhase::ALL
            .into_iter()
            .filter(|&to| to != Suspended && Suspended.can_become(to))
            .collect();
        assert_eq!(allowed, [Queued, Cancelled]);
        assert!(Suspended.can_become(Suspended), "a note while suspended");
        assert!(!Suspended.is_terminal() && !Suspended.holds_resources());
        let path = [
            Pending, Queued, Admitted, Running, Suspended, Queued, Admitted, Running, Succeeded,
        ];
        for w in path.windows(2) {
            assert_eq!(w[0].check(w[1]), Ok(w[1]));
        }
    }

    #[test]
    fn phases_round_trip_through_strings() {
        for p in JobPhase::ALL {
            assert_eq!(p.as_str().parse::<JobPhase>(), Ok(p));
        }
        assert!("Sleeping".parse::<JobPhase>().is_err());
    }
}
