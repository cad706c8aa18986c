//! Why a waiting workload waits, and when it starts, in the words its user reads: the one
//! wording both the local control plane and the Kubernetes operator put in a queued job's
//! `status.message` and its `Waiting` event, read from the scheduler's state after a cycle and,
//! for a job not first in line, from a `Scheduler::forecast` (`Waiting::with_forecast`). The
//! words never hold the expected start itself (that is `status.estimatedStartTime`), so a
//! start that moves writes no event.

use std::fmt;

use super::{Forecast, Scheduler, St};
use crate::config::{StopPolicy, Time, Topology};

/// Why a workload waits now, as of the last cycle (`Scheduler::waiting`); `Display` is the
/// sentence a user reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// GPUs the whole gang needs.
    pub need: u64,
    /// What holds it back.
    pub cause: WaitCause,
    /// Where it stands in line for its GPUs; `None` while nobody is first in line for them.
    pub line: Option<InLine>,
    /// When it starts by a forecast, for a workload not first in line (`with_forecast`);
    /// `None` until a forecast that covers it is given.
    pub forecast: Option<Forecasted>,
}

/// What holds a waiting workload back, checked in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitCause {
    /// Its queue is held (`QueueSpec::stop_policy`): nothing of it starts until the queue is
    /// released, whatever GPUs are free.
    Held {
        /// The queue's name.
        queue: String,
        /// `Hold` or `HoldAndDrain`.
        policy: StopPolicy,
    },
    /// Fewer GPUs are free in its flavor than it needs.
    Gpus {
        /// GPUs nobody holds or has been promised.
        free: u64,
        /// GPUs of the flavor.
        total: u64,
    },
    /// Its queue would go past what it may use (nominal quota plus what it may borrow).
    Quota {
        /// The queue's name.
        queue: String,
        /// GPUs the queue holds now.
        used: u64,
        /// GPUs it may hold at most.
        limit: u64,
    },
    /// Its queue is within what it may use, but a cohort it shares GPUs through has none to
    /// spare: the GPUs its queues lend each other (and, below a root, what it may borrow from
    /// its parent) are in use.
    Cohort {
        /// The cohort's name.
        cohort: String,
        /// GPUs its queues and child cohorts use of what they share.
        used: u64,
        /// GPUs they may share at most.
        limit: u64,
    },
    /// It must stay in one rack or NVLink domain (`Workload::topology`), and no single one has
    /// room for it now, though enough GPUs are free across them.
    Topology {
        /// The domain it must stay in.
        topology: Topology,
    },
    /// Enough GPUs are free, but only across racks, where it would run longer
    /// (`Options::split_slowdown_pct`): it waits for one rack, which costs less.
    SplitSlower {
        /// How much longer (percent) it would run split.
        slowdown_pct: u32,
    },
    /// GPUs and quota would allow it: work ahead of it in the queue order goes first
    /// (a reservation for a gang, fair share, priorities).
    Order,
}

/// Where a waiting workload stands in line for its flavor's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InLine {
    /// It is first in line: it starts at `start` by the expected ends of the work in its way,
    /// `None` while some of that work has no expected end.
    First {
        /// Expected start, when known.
        start: Option<Time>,
    },
    /// Another workload is first in line for its GPUs.
    Behind {
        /// That workload's id (a caller may replace it with a name its users know).
        first: String,
    },
}

/// What a `Scheduler::forecast` says of a waiting workload that is not first in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forecasted {
    /// It starts at `at`, after workload `after` (the waiting one forecast to start just before
    /// it, so the last it waits for); `after` is `None` when it is forecast to start before
    /// every other waiting workload, when the running work in its way ends.
    Start {
        /// Forecast start.
        at: Time,
        /// That workload's id (a caller may replace it with a name its users know).
        after: Option<String>,
    },
    /// The forecast stopped at its cycle limit (`Forecast::capped`) before its turn.
    Beyond,
    /// Some work ahead of it has no expected end, so the replay never reaches it.
    Unknown,
    /// Its queue is held: it starts in no replay, only once the queue is released (the cause,
    /// `WaitCause::Held`, says so; this adds no words).
    Held,
}

impl Waiting {
    /// When it is expected to start: a workload first in line by its reservation (or the
    /// forecast, where the reservation cannot tell), any other by the forecast; `None` when
    /// neither knows.
    pub fn expected_start(&self) -> Option<Time> {
        match (&self.line, &self.forecast) {
            (Some(InLine::First { start }), _) => *start,
            (_, Some(Forecasted::Start { at, .. })) => Some(*at),
            _ => None,
        }
    }

    /// Adds what `forecast` (a `Scheduler::forecast`) says of workload `id`: the start of a
    /// workload first in line whose reservation cannot tell it (a preemptor whose victims are
    /// about to leave), and for any other when it starts and whom after. A forecast that does
    /// not cover `id` (made before it arrived) adds nothing.
    pub fn with_forecast(mut self, id: &str, forecast: &Forecast) -> Waiting {
        if matches!(self.cause, WaitCause::Held { .. }) {
            // Whatever a forecast made before its queue was held says.
            self.forecast = Some(Forecasted::Held);
            return self;
        }
        if !forecast.covers(id) {
            return self;
        }
        let at = forecast.start_of(id);
        if let Some(InLine::First { start }) = &mut self.line {
            *start = start.or(at);
            return self;
        }
        self.forecast = Some(match (at, forecast.before(id)) {
            (Some(at), after) => Forecasted::Start {
                at,
                after: after.map(str::to_owned),
            },
            (None, _) if forecast.held(id) => Forecasted::Held,
            (None, _) if forecast.capped => Forecasted::Beyond,
            (None, _) => Forecasted::Unknown,
        });
        self
    }

    /// The same, with every workload id it names (the one first in line, the one it starts
    /// after) replaced by `name_of(id)`: a name its users know.
    pub fn named(mut self, name_of: impl Fn(&str) -> String) -> Waiting {
        if let Some(InLine::Behind { first }) = &mut self.line {
            *first = name_of(first);
        }
        if let Some(Forecasted::Start {
            after: Some(after), ..
        }) = &mut self.forecast
        {
            *after = name_of(after);
        }
        self
    }
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let need = self.need;
        match &self.cause {
            WaitCause::Held { queue, policy } => write!(
                f,
                "needs {need} GPU(s); queue {queue} is held (spec.stopPolicy: {}); it starts \
                 once the queue is released",
                policy.as_str()
            )?,
            WaitCause::Gpus { free, total } => {
                write!(f, "needs {need} GPU(s); {free} of {total} free")?;
            }
            WaitCause::Quota { queue, used, limit } => write!(
                f,
                "needs {need} GPU(s); queue {queue} uses {used} of the {limit} it may use"
            )?,
            WaitCause::Cohort {
                cohort,
                used,
                limit,
            } => write!(
                f,
                "needs {need} GPU(s); its queue may use them, but cohort {cohort} has none to \
                 spare: {used} of the {limit} GPU(s) its queues share (lent and borrowed quota) \
                 are in use"
            )?,
            WaitCause::Topology { topology } => write!(
                f,
                "needs {need} GPU(s) in one {} (spec.resources.topology: {}); enough are free, \
                 but not in any one {}",
                topology.noun(),
                topology.name(),
                topology.noun()
            )?,
            WaitCause::SplitSlower { slowdown_pct } => write!(
                f,
                "needs {need} GPU(s); enough are free, but only across racks, where it would \
                 run {slowdown_pct}% longer (splitSlowdownPct): it waits for one rack, which \
                 frees sooner than that would cost"
            )?,
            WaitCause::Order => write!(
                f,
                "needs {need} GPU(s); held back for work ahead of it in the queue order"
            )?,
        }
        match &self.line {
            Some(InLine::First { start: Some(_) }) => f.write_str(
                "; first in line: it starts when the running work in its way ends \
                 (status.estimatedStartTime)",
            ),
            Some(InLine::First { start: None }) => f.write_str(
                "; first in line, but some running work in its way has no expected end (no \
                 time limit, no measured pace yet), so when it starts is unknown",
            ),
            Some(InLine::Behind { first }) => write!(f, "; first in line: {first}"),
            None => Ok(()),
        }?;
        match &self.forecast {
            Some(Forecasted::Start {
                after: Some(after), ..
            }) => write!(
                f,
                "; expected to start after {after} (status.estimatedStartTime)"
            ),
            Some(Forecasted::Start { after: None, .. }) => f.write_str(
                "; expected to start when the running work in its way ends \
                 (status.estimatedStartTime)",
            ),
            Some(Forecasted::Beyond) => f.write_str(
                "; when it starts is not forecast: more work is ahead of it than one forecast \
                 replays",
            ),
            Some(Forecasted::Unknown) => f.write_str(
                "; when it starts is unknown: some work ahead of it has no expected end (no \
                 time limit, no measured pace yet)",
            ),
            Some(Forecasted::Held) | None => Ok(()),
        }
    }
}

impl Scheduler {
    /// Why workload `id` waits, as of the last cycle; `None` unless it waits (unknown, running
    /// or being evicted). Of the flavors it may use, the one it is first in line for speaks
    /// first, else its preferred one; a flavor where GPUs and quota both allow it makes the
    /// cause the queue order.
    pub fn waiting(&self, id: &str) -> Option<Waiting> {
        let j = *self.ids.get(id)?;
        let job = self.jobs[j as usize].as_ref()?;
        if !matches!(job.state, St::Pending | St::Nominated) {
            return None;
        }
        let need = job.gpus();
        let queue = &self.queues[job.queue as usize];
        if !queue.stop.is_none() {
            return Some(Waiting {
                need,
                cause: WaitCause::Held {
                    queue: queue.name.clone(),
                    policy: queue.stop,
                },
                line: None,
                forecast: None,
            });
        }
        let first = self.holder_starts().find(|(h, ..)| *h == id);
        let mut flavors = self.flavors_of(j);
        if let Some((_, f, _)) = first
            && let Some(i) = flavors.iter().position(|&g| g == f)
        {
            flavors[..=i].rotate_right(1);
        }
        let causes: Vec<WaitCause> = flavors
            .iter()
            .map(|&f| {
                let pool = &self.pools[f];
                let free = pool.free_total;
                let total: u64 = pool.cap_hist.iter().map(|&(g, n)| u64::from(g) * n).sum();
                let queue = &self.queues[job.queue as usize];
                let (used, limit) = (queue.usage[f], self.max_quota(job.queue, f));
                if free < need {
                    WaitCause::Gpus { free, total }
                } else if used + need > limit {
                    WaitCause::Quota {
                        queue: queue.name.clone(),
                        used,
                        limit,
                    }
                } else if let Some((c, used, limit)) =
                    queue.pool.zip(queue.quota[f]).and_then(|(c, qq)| {
                        self.binding_cohort(f, c, qq.pooled(used), qq.pooled(used + need))
                    })
                {
                    WaitCause::Cohort {
                        cohort: self.cohorts[c as usize].name.clone(),
                        used,
                        limit,
                    }
                } else if job.waits_for_rack && job.topology.is_none() {
                    WaitCause::SplitSlower {
                        slowdown_pct: job.split_pct,
                    }
                } else if let Some(topology) = job.topology
                    && pool.find(job.pods, job.g, job.within()).is_none()
                {
                    WaitCause::Topology { topology }
                } else {
                    WaitCause::Order
                }
            })
            .collect();
        let cause = if causes.contains(&WaitCause::Order) {
            WaitCause::Order
        } else {
            causes.into_iter().next().unwrap_or(WaitCause::Order)
        };
        let line = match first {
            Some((_, _, start)) => Some(InLine::First { start }),
            None => flavors.iter().find_map(|&f| {
                self.holder_starts()
                    .find(|(_, g, _)| *g == f)
                    .map(|(h, ..)| InLine::Behind {
                        first: h.to_owned(),
                    })
            }),
        };
        Some(Waiting {
            need,
            cause,
            line,
            forecast: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Cluster, Node, Options, PriorityClass, QueueSpec, Time, Workload};
    use crate::scheduler::{FORECAST_CYCLES, Forecast, Scheduler};

    fn sched(gpus: u32, quota: u32, options: Options) -> Scheduler {
        Scheduler::with_options(
            Cluster::local(gpus, "local"),
            vec![QueueSpec::any_flavor("default", None, quota)],
            PriorityClass::standard(),
            options,
        )
        .unwrap()
    }

    fn submit(s: &mut Scheduler, id: &str, gpus: u32, at: Time, expected: Option<u64>) {
        let w = Workload {
            expected_duration_s: expected,
            ..Workload::single(id, "default", None, gpus, at)
        };
        s.submit(w).unwrap();
    }

    fn said(s: &Scheduler, id: &str) -> Option<String> {
        s.waiting(id).map(|w| w.to_string())
    }

    /// What `id`'s user is told with `forecast`: the words (ids named `default/…`) and the
    /// expected start.
    fn told(s: &Scheduler, id: &str, forecast: &Forecast) -> (String, Option<Time>) {
        let w = s
            .waiting(id)
            .unwrap()
            .with_forecast(id, forecast)
            .named(|id| format!("default/{id}"));
        (w.to_string(), w.expected_start())
    }

    /// Three whole-cluster jobs behind a running one: the first in line keeps its reservation's
    /// words and start; each job behind is told its forecast start and whom it starts after,
    /// never the time itself in the words.
    #[test]
    fn a_forecast_tells_each_job_behind_the_first_when_and_after_whom_it_starts() {
        let mut s = sched(4, 4, Options::default());
        submit(&mut s, "run", 4, 0, Some(100));
        s.cycle(0);
        for (id, at, expected) in [("a", 1, 50), ("b", 2, 60), ("c", 3, 70)] {
            submit(&mut s, id, 4, at, Some(expected));
        }
        s.cycle(5);
        let f = s.forecast(5, FORECAST_CYCLES);
        assert_eq!(
            told(&s, "a", &f),
            (
                "needs 4 GPU(s); 0 of 4 free; first in line: it starts when the running work in \
                 its way ends (status.estimatedStartTime)"
                    .into(),
                Some(100)
            )
        );
        assert_eq!(
            told(&s, "b", &f),
            (
                "needs 4 GPU(s); 0 of 4 free; first in line: default/a; expected to start after \
                 default/a (status.estimatedStartTime)"
                    .into(),
                Some(150)
            )
        );
        assert_eq!(
            told(&s, "c", &f),
            (
                "needs 4 GPU(s); 0 of 4 free; first in line: default/a; expected to start after \
                 default/b (status.estimatedStartTime)"
                    .into(),
                Some(210)
            )
        );
        // A forecast that stopped before `c`'s turn says so, and tells no start.
        let short = s.forecast(5, 3);
        assert_eq!(
            told(&s, "c", &short),
            (
                "needs 4 GPU(s); 0 of 4 free; first in line: default/a; when it starts is not \
                 forecast: more work is ahead of it than one forecast replays"
                    .into(),
                None
            )
        );
        // A job that arrived after the forecast is told only why it waits.
        submit(&mut s, "d", 4, 6, Some(10));
        s.cycle(6);
        assert_eq!(
            told(&s, "d", &f),
            (
                "needs 4 GPU(s); 0 of 4 free; first in line: default/a".into(),
                None
            )
        );
    }

    /// Behind work without an expected end nobody is told a start, and the words say why; a
    /// job that backfills before the first in line starts when the work in its way ends.
    #[test]
    fn a_forecast_says_why_it_has_no_start_and_when_backfill_starts() {
        let mut s = sched(4, 4, Options::default());
        submit(&mut s, "endless", 4, 0, None);
        s.cycle(0);
        submit(&mut s, "a", 4, 1, Some(10));
        submit(&mut s, "b", 1, 2, Some(10));
        s.cycle(5);
        let f = s.forecast(5, FORECAST_CYCLES);
        assert_eq!(
            told(&s, "b", &f),
            (
                "needs 1 GPU(s); 0 of 4 free; first in line: default/a; when it starts is \
                 unknown: some work ahead of it has no expected end (no time limit, no measured \
                 pace yet)"
                    .into(),
                None
            )
        );

        let mut s = sched(4, 4, Options::default());
        submit(&mut s, "run3", 3, 0, Some(100));
        submit(&mut s, "run1", 1, 0, Some(20));
        s.cycle(0);
        submit(&mut s, "gang", 4, 2, Some(10));
        submit(&mut s, "short", 1, 3, Some(50));
        s.cycle(5);
        let f = s.forecast(5, FORECAST_CYCLES);
        assert_eq!(
            told(&s, "short", &f),
            (
                "needs 1 GPU(s); 0 of 4 free; first in line: default/gang; expected to start \
                 when the running work in its way ends (status.estimatedStartTime)"
                    .into(),
                Some(20)
            )
        );
        assert_eq!(told(&s, "gang", &f).1, Some(100));
    }

    /// Too few GPUs: the job first in line is told when it starts (or that nobody knows), the
    /// job behind it whom it waits for; running work waits for nothing.
    #[test]
    fn too_few_gpus_first_in_line_and_behind() {
        let mut s = sched(4, 4, Options::default());
        submit(&mut s, "long", 3, 0, Some(600));
        s.cycle(0);
        submit(&mut s, "gang", 2, 10, Some(100));
        submit(&mut s, "later", 2, 20, Some(100));
        s.cycle(20);
        assert_eq!(
            said(&s, "gang").as_deref(),
            Some(
                "needs 2 GPU(s); 1 of 4 free; first in line: it starts when the running work \
                 in its way ends (status.estimatedStartTime)"
            )
        );
        assert_eq!(s.waiting("gang").unwrap().expected_start(), Some(600));
        assert_eq!(
            said(&s, "later").as_deref(),
            Some("needs 2 GPU(s); 1 of 4 free; first in line: gang")
        );
        assert_eq!(s.waiting("later").unwrap().expected_start(), None);
        assert_eq!(said(&s, "long"), None);
        assert_eq!(said(&s, "nobody"), None);
        s.set_expected_duration("long", None).unwrap();
        s.cycle(30);
        assert_eq!(
            said(&s, "gang").as_deref(),
            Some(
                "needs 2 GPU(s); 1 of 4 free; first in line, but some running work in its way \
                 has no expected end (no time limit, no measured pace yet), so when it starts \
                 is unknown"
            )
        );
    }

    /// Free GPUs but a full quota: the queue's use and limit are named.
    #[test]
    fn a_full_quota_is_named() {
        let mut s = sched(4, 2, Options::default());
        submit(&mut s, "a", 2, 0, Some(500));
        s.cycle(0);
        submit(&mut s, "b", 1, 5, Some(50));
        s.cycle(5);
        assert_eq!(
            said(&s, "b").as_deref(),
            Some(
                "needs 1 GPU(s); queue default uses 2 of the 2 it may use; first in line: it \
                 starts when the running work in its way ends (status.estimatedStartTime)"
            )
        );
    }

    /// GPUs and quota would allow it, but the GPUs are kept for the gang first in line (a job
    /// that would outlast the gang's start does not backfill, and reserved GPUs are not lent).
    #[test]
    fn work_held_back_by_a_reservation_waits_for_the_queue_order() {
        let mut s = sched(
            4,
            4,
            Options {
                lend_reserved_nodes: false,
                ..Options::default()
            },
        );
        submit(&mut s, "long", 3, 0, Some(600));
        s.cycle(0);
        submit(&mut s, "gang", 2, 10, Some(100));
        submit(&mut s, "slow", 1, 20, Some(5_000));
        assert!(s.cycle(20).is_empty());
        assert_eq!(
            said(&s, "slow").as_deref(),
            Some(
                "needs 1 GPU(s); held back for work ahead of it in the queue order; first in \
                 line: gang"
            )
        );
    }

    /// A job that may use either flavor is told about the one it is first in line for, not
    /// merely its preferred one.
    #[test]
    fn a_job_of_either_flavor_is_told_about_the_flavor_it_waits_for() {
        let node = |name: &str, gpus: u32| Node {
            name: name.into(),
            gpus,
            flavor: name.into(),
            rack: None,
            nvlink_domain: None,
        };
        let mut s = Scheduler::new(
            Cluster {
                nodes: vec![node("a", 2), node("b", 4)],
            },
            vec![QueueSpec::any_flavor("default", None, 6)],
            PriorityClass::standard(),
        )
        .unwrap();
        let on = |id: &str, flavor: &str, gpus: u32, expected: u64| Workload {
            flavor: Some(flavor.into()),
            expected_duration_s: Some(expected),
            ..Workload::single(id, "default", None, gpus, 0)
        };
        s.submit(on("on-a", "a", 2, 900)).unwrap();
        s.submit(on("on-b", "b", 3, 100)).unwrap();
        s.cycle(0);
        // `a-next` is first in line for `a`; `either` prefers `a` but is first in line for `b`.
        s.submit(on("a-next", "a", 2, 50)).unwrap();
        submit(&mut s, "either", 2, 10, Some(50));
        assert!(s.cycle(10).is_empty());
        let w = s.waiting("either").unwrap();
        assert_eq!(
            w.to_string(),
            "needs 2 GPU(s); 1 of 4 free; first in line: it starts when the running work in \
             its way ends (status.estimatedStartTime)"
        );
        assert_eq!(w.expected_start(), Some(100));
    }
}
