//! Stopped queues (Kueue's ClusterQueue `spec.stopPolicy`): a held queue's waiting work is
//! never tried (`push_next`, the holders), nor indexed as pending work (`pend_add`), so it takes
//! no reservation, preempts nothing and is owed nothing; a `HoldAndDrain` queue's running work
//! is also told to stop, once, here.

use super::{Scheduler, St};
use crate::config::{Decision, PreemptReason, StopPolicy};

impl Scheduler {
    /// Whether job `j`'s queue is held (`StopPolicy::Hold` or `HoldAndDrain`).
    pub(super) fn held(&self, j: u32) -> bool {
        self.jobs[j as usize]
            .as_ref()
            .is_some_and(|job| !self.queues[job.queue as usize].stop.is_none())
    }

    /// Tells every running workload of a `HoldAndDrain` queue to stop (`Preempt` with
    /// `QueueStopped`): it stops counting against quota now, keeps its GPUs until `evicted`,
    /// then waits in its queue. A workload told once is no longer running, so it is not told
    /// again; the check is one per queue.
    pub(super) fn drain_stopped(&mut self, out: &mut Vec<Decision>) {
        for q in 0..self.queues.len() {
            let qs = &self.queues[q];
            if qs.stop != StopPolicy::HoldAndDrain || qs.running.is_empty() {
                continue;
            }
            let queue = qs.name.clone();
            let victims: Vec<u32> = qs.running.iter().map(|&(_, j)| j).collect();
            for v in victims {
                self.stop_running(v);
                let vj = self.jobs[v as usize].as_mut().expect("running job exists");
                vj.state = St::Evicting;
                out.push(Decision::Preempt {
                    id: vj.id.clone(),
                    reason: PreemptReason::QueueStopped {
                        queue: queue.clone(),
                    },
                });
            }
            // Its quota is free for the cohort now.
            self.mark_all_dirty();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{
        Cluster, Decision, PodPlacement, PreemptReason, PriorityClass, QueueSpec, StopPolicy, Time,
        Workload,
    };
    use crate::scheduler::{FORECAST_CYCLES, Forecasted, Scheduler};

    /// Four GPUs; queues `a` and `b` of two each in one cohort, `a` under `policy`.
    fn cohort(policy: StopPolicy) -> Scheduler {
        Scheduler::new(
            Cluster::local(4, "local"),
            vec![
                QueueSpec {
                    stop_policy: policy,
                    ..QueueSpec::any_flavor("a", Some("c"), 2)
                },
                QueueSpec::any_flavor("b", Some("c"), 2),
            ],
            PriorityClass::standard(),
        )
        .unwrap()
    }

    fn job(id: &str, queue: &str, gpus: u32, at: Time, expected: u64) -> Workload {
        Workload {
            expected_duration_s: Some(expected),
            ..Workload::single(id, queue, None, gpus, at)
        }
    }

    fn on(gpus: &[u32]) -> Vec<PodPlacement> {
        vec![PodPlacement {
            node: "local".into(),
            gpus: gpus.to_vec(),
        }]
    }

    fn ids(d: &[Decision]) -> Vec<&str> {
        d.iter()
            .map(|x| match x {
                Decision::Admit { id, .. } | Decision::Preempt { id, .. } => id.as_str(),
            })
            .collect()
    }

    /// A held queue's running work keeps running; its waiting job, which fits in its nominal
    /// quota on a free GPU and is older, neither starts nor reclaims nor keeps `b`, at its
    /// quota, from borrowing one of `a`'s GPUs. The job is told why it waits, and the forecast
    /// gives it no start, saying its queue is held.
    #[test]
    fn a_held_queue_waits_while_its_cohort_borrows_its_nominal_quota() {
        let mut s = cohort(StopPolicy::Hold);
        s.restore(Workload::single("a0", "a", None, 1, 0), &on(&[0]), 0)
            .unwrap();
        s.restore(Workload::single("b0", "b", None, 2, 0), &on(&[1, 2]), 0)
            .unwrap();
        s.submit(job("a1", "a", 1, 1, 50)).unwrap();
        s.submit(job("b1", "b", 1, 2, 100)).unwrap();
        let d = s.cycle(5);
        assert_eq!(ids(&d), ["b1"], "{d:?}");
        assert!(
            s.cycle(6).is_empty(),
            "a1 reclaims nothing, a0 is not stopped"
        );
        assert_eq!(s.holders(), [None], "a held job reserves nothing");
        let usage = s.queue_usage();
        assert_eq!(
            (usage[1].usage[0].1, usage[0].stop_policy),
            (3, StopPolicy::Hold)
        );

        let said = "needs 1 GPU(s); queue a is held (spec.stopPolicy: Hold); it starts once the \
                    queue is released";
        let w = s.waiting("a1").unwrap();
        assert_eq!(w.to_string(), said);
        let f = s.forecast(6, FORECAST_CYCLES);
        assert!(
            f.held("a1") && f.start_of("a1").is_none() && !f.capped,
            "{f:?}"
        );
        // The replay does not wait for held work: nothing else waits, so one cycle tells all.
        assert_eq!(f.cycles, 1, "{f:?}");
        let w = w.with_forecast("a1", &f);
        assert_eq!(w.forecast, Some(Forecasted::Held));
        assert_eq!((w.to_string().as_str(), w.expected_start()), (said, None));
    }

    /// A held queue's long job is no critical-path candidate (nor counted in the work the
    /// cluster must clear): it does not start ahead of the rest, nor at all.
    #[test]
    fn a_held_long_job_is_not_on_the_critical_path() {
        let mut s = Scheduler::new(
            Cluster::local(4, "local"),
            vec![
                QueueSpec {
                    stop_policy: StopPolicy::Hold,
                    ..QueueSpec::any_flavor("a", None, 4)
                },
                QueueSpec::any_flavor("b", None, 4),
            ],
            PriorityClass::standard(),
        )
        .unwrap();
        s.submit(job("long", "a", 1, 0, 10_000)).unwrap();
        s.submit(job("wide", "b", 4, 1, 10)).unwrap();
        assert_eq!(ids(&s.cycle(2)), ["wide"]);
    }

    /// Work that would have taken a reservation in a queue now held (the scheduler rebuilt
    /// with it held, as a control plane does) reserves nothing: a long job of another queue
    /// takes the GPUs the gang was first in line for.
    #[test]
    fn a_job_of_a_held_queue_gives_up_its_reservation() {
        let queues = |a: StopPolicy| {
            vec![
                QueueSpec {
                    stop_policy: a,
                    ..QueueSpec::any_flavor("a", None, 4)
                },
                QueueSpec::any_flavor("b", None, 4),
            ]
        };
        let build = |a: StopPolicy| {
            let mut s = Scheduler::with_options(
                Cluster::local(4, "local"),
                queues(a),
                PriorityClass::standard(),
                crate::config::Options {
                    lend_reserved_nodes: false,
                    ..crate::config::Options::default()
                },
            )
            .unwrap();
            s.restore(job("run", "b", 3, 0, 100), &on(&[0, 1, 2]), 0)
                .unwrap();
            s.submit(job("gang", "a", 4, 1, 50)).unwrap();
            s.submit(job("slow", "b", 1, 2, 5_000)).unwrap();
            s
        };
        let mut s = build(StopPolicy::None);
        assert!(s.cycle(5).is_empty());
        assert_eq!(s.holders(), [Some("gang")]);

        let mut s = build(StopPolicy::Hold);
        assert_eq!(ids(&s.cycle(5)), ["slow"]);
        assert_eq!(s.holders(), [None]);
    }

    /// `HoldAndDrain` stops a queue's running work once, with the queue as the reason; the
    /// GPUs and quota it returns go to the cohort; it waits, told so, and starts again once
    /// the queue is released (each change a rebuild, its running work restored).
    #[test]
    fn a_drained_queue_stops_its_work_once_and_it_resumes_when_released() {
        let mut s = cohort(StopPolicy::None);
        s.submit(job("a1", "a", 2, 0, 500)).unwrap();
        assert_eq!(ids(&s.cycle(0)), ["a1"]);

        let mut s = cohort(StopPolicy::HoldAndDrain);
        s.restore(job("a1", "a", 2, 0, 500), &on(&[0, 1]), 0)
            .unwrap();
        s.submit(job("b1", "b", 4, 5, 100)).unwrap();
        let d = s.cycle(10);
        assert_eq!(
            d,
            [Decision::Preempt {
                id: "a1".into(),
                reason: PreemptReason::QueueStopped { queue: "a".into() },
            }]
        );
        assert!(s.cycle(11).is_empty(), "told once; b1 waits for its GPUs");
        s.checkpointed("a1", 11).unwrap();
        s.evicted("a1").unwrap();
        assert_eq!(ids(&s.cycle(12)), ["b1"], "b borrows all of a's quota");
        assert_eq!(
            s.waiting("a1").unwrap().to_string(),
            "needs 2 GPU(s); queue a is held (spec.stopPolicy: HoldAndDrain); it starts once \
             the queue is released"
        );
        assert!(s.cycle(13).is_empty());

        let mut s = cohort(StopPolicy::None);
        s.restore(job("b1", "b", 4, 5, 100), &on(&[0, 1, 2, 3]), 12)
            .unwrap();
        s.submit(job("a1", "a", 2, 0, 489)).unwrap();
        let d = s.cycle(20);
        assert_eq!(
            d,
            [Decision::Preempt {
                id: "b1".into(),
                reason: PreemptReason::Reclaim {
                    preemptor: "a1".into()
                },
            }],
            "released, a takes its quota back"
        );
        s.evicted("b1").unwrap();
        assert_eq!(ids(&s.cycle(21)), ["a1"]);
    }
}
