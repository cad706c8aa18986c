//! Why a team's share missed its entitlement: the breakdown the simulator accumulates while
//! every team is saturated, and the one cause `ferry sim` names for each team out of the band.

use serde::{Deserialize, Serialize};

use super::TeamShare;

/// Where a team's deviation from its entitlement came from, over the all-saturated window:
/// GPU-seconds it used minus GPU-seconds it was owed (its entitlement times all teams' busy
/// GPUs), split by the team's situation in each interval. The parts sum to `(share −
/// entitlement)` times all teams' busy GPU-seconds in the window. Not part of the JSON output
/// (`MissCause` names its largest part). "Fits" means its smallest waiting job fits in the
/// GPUs left of its entitlement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShareBreakdown {
    /// Under its due while every job it had waiting was larger than the GPUs left of its
    /// entitlement (a lumpy team waiting for a drain).
    pub lumpy_wait: f64,
    /// Under its due, a waiting job fits and idle GPUs would hold it, but another team's job
    /// held the reservation (the idle GPUs were kept for that gang).
    pub behind_reservation: f64,
    /// Under its due, a waiting job fits and idle GPUs would hold it, no other team holding the
    /// reservation (fragmentation: no node had room).
    pub fits_not_placed: f64,
    /// Under its due, a waiting job fits but too few GPUs were idle: others held them (only
    /// reclaiming or preempting would have served it).
    pub cluster_full: f64,
    /// Over its due in share terms while using no more than its entitlement in GPUs: others
    /// left GPUs idle (drains, fragments), so the same GPUs are a larger share.
    pub over_within_entitlement: f64,
    /// Over its entitlement in GPUs while a team under its due had a waiting job that fits
    /// (borrowing that was not reclaimed).
    pub over_while_owed_fits: f64,
    /// Over its entitlement in GPUs while every team under its due waited only for jobs larger
    /// than the GPUs left of its entitlement (using GPUs no owed team could use then).
    pub over_filling: f64,
}

impl ShareBreakdown {
    /// The parts with the cause each stands for, scaled to sum to `ratio − 1` (the team's
    /// relative gap), in the order of the fields.
    pub fn contributions(&self, ratio: f64) -> [(MissCause, f64); 7] {
        let parts = [
            (MissCause::LumpyWait, self.lumpy_wait),
            (MissCause::BehindReservation, self.behind_reservation),
            (MissCause::FitsNotPlaced, self.fits_not_placed),
            (MissCause::ClusterFull, self.cluster_full),
            (
                MissCause::OverWithinEntitlement,
                self.over_within_entitlement,
            ),
            (MissCause::OverWhileOwedFits, self.over_while_owed_fits),
            (MissCause::OverFilling, self.over_filling),
        ];
        let sum: f64 = parts.iter().map(|p| p.1).sum();
        let err = ratio - 1.0;
        parts.map(|(c, p)| (c, if sum.abs() > 0.0 { err * p / sum } else { 0.0 }))
    }
}

/// The situation that explains most of a team's gap to its entitlement, named in `ferry sim`'s
/// output so an operator can tell a policy's miss from a band the workload cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissCause {
    /// Owed less than one 8-GPU node: whole-node jobs cannot hold a band under a GPU wide.
    Tiny,
    /// Under its due while every job it had waiting was larger than what was left of its
    /// entitlement: it waits for drains.
    LumpyWait,
    /// Under its due while a job of it that fit waited for idle GPUs held for another gang.
    BehindReservation,
    /// Under its due while a job of it that fit waited and GPUs were idle on no single node.
    FitsNotPlaced,
    /// Under its due while a job of it that fit waited for GPUs that other teams held.
    ClusterFull,
    /// Over its due in share while using no more than its entitlement: others left GPUs idle.
    OverWithinEntitlement,
    /// Over its entitlement while an under-served team had a job that fit.
    OverWhileOwedFits,
    /// Over its entitlement while every under-served team waited only for jobs too large for
    /// what was left of its own.
    OverFilling,
    /// No single situation explains half of the gap.
    Mixed,
    /// Every team was saturated together for under 3 hours.
    ShortWindow,
}

/// All-saturated time under which a miss is put down to the window (`MissCause::ShortWindow`).
const SHORT_WINDOW_S: u64 = 3 * 3600;

impl MissCause {
    /// Every cause: `Tiny`, the breakdown's parts in order, `Mixed`, `ShortWindow`.
    pub const ALL: [MissCause; 10] = [
        MissCause::Tiny,
        MissCause::LumpyWait,
        MissCause::BehindReservation,
        MissCause::FitsNotPlaced,
        MissCause::ClusterFull,
        MissCause::OverWithinEntitlement,
        MissCause::OverWhileOwedFits,
        MissCause::OverFilling,
        MissCause::Mixed,
        MissCause::ShortWindow,
    ];

    /// The cause of `share`'s gap, on a cluster of `capacity` GPUs with every team saturated
    /// together for `saturated_s` seconds: the part of its breakdown of the same sign as the
    /// gap that explains at least half of it, or `Mixed`.
    pub fn of(share: &TeamShare, capacity: f64, saturated_s: u64) -> MissCause {
        if share.entitlement * capacity < 8.0 {
            return MissCause::Tiny;
        }
        if saturated_s < SHORT_WINDOW_S {
            return MissCause::ShortWindow;
        }
        let err = share.ratio - 1.0;
        let (cause, part) = share
            .breakdown
            .contributions(share.ratio)
            .into_iter()
            .max_by(|a, b| (a.1 * err.signum()).total_cmp(&(b.1 * err.signum())))
            .expect("seven parts");
        if part.abs() >= 0.5 * err.abs() {
            cause
        } else {
            MissCause::Mixed
        }
    }

    /// Its short name (as in JSON).
    pub fn name(self) -> &'static str {
        match self {
            MissCause::Tiny => "tiny",
            MissCause::LumpyWait => "lumpy-wait",
            MissCause::BehindReservation => "behind-reservation",
            MissCause::FitsNotPlaced => "fits-not-placed",
            MissCause::ClusterFull => "cluster-full",
            MissCause::OverWithinEntitlement => "over-within-entitlement",
            MissCause::OverWhileOwedFits => "over-while-owed-fits",
            MissCause::OverFilling => "over-filling",
            MissCause::Mixed => "mixed",
            MissCause::ShortWindow => "short-window",
        }
    }

    /// What the team's situation was, in a sentence.
    pub fn explain(self) -> &'static str {
        match self {
            MissCause::Tiny => {
                "it is owed less than one 8-GPU node: whole-node jobs cannot hold a band under \
                 a GPU wide"
            }
            MissCause::ShortWindow => {
                "all teams were saturated together for under 3 h, too short for shares to even out"
            }
            MissCause::LumpyWait => {
                "its waiting jobs were all larger than what was left of its entitlement: it \
                 waited for GPUs to be drained for them"
            }
            MissCause::BehindReservation => {
                "a job of it that fit waited while idle GPUs were held for another team's gang"
            }
            MissCause::FitsNotPlaced => {
                "a job of it that fit waited while GPUs were idle but no node had room for it \
                 (fragmentation)"
            }
            MissCause::ClusterFull => {
                "a job of it that fit waited while other teams' jobs held the GPUs"
            }
            MissCause::OverWithinEntitlement => {
                "it used no more GPUs than its entitlement, but others left GPUs idle (drains, \
                 fragments), so the same GPUs were a larger share"
            }
            MissCause::OverWhileOwedFits => {
                "it ran above its entitlement while an under-served team had a job that fit \
                 (borrowing that was not taken back)"
            }
            MissCause::OverFilling => {
                "it ran above its entitlement on GPUs no under-served team could use then \
                 (their waiting jobs were all too large)"
            }
            MissCause::Mixed => "no single situation explains half of its gap",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(entitlement: f64, ratio: f64, breakdown: ShareBreakdown) -> TeamShare {
        TeamShare {
            share: entitlement * ratio,
            entitlement,
            ratio,
            within_tolerance: Some(false),
            quota_kept: 1.0,
            breakdown,
            miss_cause: None,
        }
    }

    #[test]
    fn the_part_that_explains_half_the_gap_is_the_cause() {
        let day = 86_400;
        let lumpy = ShareBreakdown {
            lumpy_wait: -30.0,
            cluster_full: -10.0,
            over_filling: 5.0,
            ..Default::default()
        };
        let s = share(0.25, 0.6, lumpy);
        // The parts are rescaled to the gap (−0.4): −0.34, −0.11, +0.06.
        let c = s.breakdown.contributions(s.ratio);
        assert!(
            (c.iter().map(|p| p.1).sum::<f64>() + 0.4).abs() < 1e-9,
            "{c:?}"
        );
        assert_eq!(MissCause::of(&s, 128.0, day), MissCause::LumpyWait);
        let spread = ShareBreakdown {
            lumpy_wait: -20.0,
            cluster_full: -20.0,
            behind_reservation: -20.0,
            ..Default::default()
        };
        assert_eq!(
            MissCause::of(&share(0.25, 0.6, spread), 128.0, day),
            MissCause::Mixed
        );
        // A team over its due is explained by the parts that raised it.
        let over = ShareBreakdown {
            over_while_owed_fits: 8.0,
            over_filling: 2.0,
            lumpy_wait: -1.0,
            ..Default::default()
        };
        assert_eq!(
            MissCause::of(&share(0.25, 1.3, over), 128.0, day),
            MissCause::OverWhileOwedFits
        );
        // Owed under one node, or a window under 3 h, says so whatever the parts.
        assert_eq!(MissCause::of(&s, 24.0, day), MissCause::Tiny);
        assert_eq!(
            MissCause::of(&s, 128.0, 3 * 3600 - 1),
            MissCause::ShortWindow
        );
    }

    #[test]
    fn names_are_the_json_names() {
        for c in MissCause::ALL {
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::Value::from(c.name())
            );
            assert!(!c.explain().is_empty());
        }
    }
}
