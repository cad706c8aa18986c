//! Picking a replica: round-robin, least-outstanding, power-of-two choices, and
//! bounded-load consistent hashing (prefix and session affinity).
//!
//! Load of a replica = requests this gateway has in flight on it + the queue it
//! reported on `/metrics` when that report is fresh. The gateway's own count is
//! always part of it, so a replica that stops reporting is never mistaken for idle.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::Policy;
use crate::registry::{Pool, Replica};

/// FNV-1a over the parts, finished with splitmix64 so nearby keys spread.
pub fn hash_parts(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let local = 0u8;
        mix(t ^ (&local as *const u8 as u64))
    });
}

fn random() -> u64 {
    RNG.with(|c| {
        let x = mix(c.get());
        c.set(x);
        x
    })
}

/// Settings of one routing decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Router {
    pub policy: Policy,
    pub load_bound: f64,
    pub signal_max_age: Duration,
}

/// What a request offers for affinity: a session id wins over the prompt prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Affinity {
    /// No affinity: the policy decides.
    None,
    /// Hash of the prompt's leading characters (prefix policy only).
    Prefix(u64),
    /// Hash of the session header (every policy).
    Session(u64),
}

impl Router {
    fn load(&self, r: &Replica) -> f64 {
        let own = f64::from(r.in_flight());
        let queued = r
            .signal(self.signal_max_age)
            .and_then(|s| s.waiting)
            .unwrap_or(0.0);
        own + queued.max(0.0)
    }

    /// Picks a replica of `pool` that is available and not in `tried`.
    pub fn choose(
        &self,
        pool: &Pool,
        affinity: Affinity,
        tried: &[Arc<Replica>],
    ) -> Option<Arc<Replica>> {
        let now = Instant::now();
        let usable =
            |r: &Arc<Replica>| r.available(now) && !tried.iter().any(|t| Arc::ptr_eq(t, r));
        let n_usable = pool.replicas.iter().filter(|r| usable(r)).count();
        match n_usable {
            // Every untried replica is ejected: fail open, as Envoy's panic routing does.
            // Ejection steers traffic to healthier peers; with none left, refusing the
            // whole model for the ejection period turns one slow probe into an outage.
            // The attempt's outcome closes or re-opens the circuit.
            0 => {
                return pool
                    .replicas
                    .iter()
                    .find(|r| !tried.iter().any(|t| Arc::ptr_eq(t, r)))
                    .cloned();
            }
            1 => return pool.replicas.iter().find(|r| usable(r)).cloned(),
            _ => {}
        }
        let key = match affinity {
            Affinity::Session(k) => Some(k),
            Affinity::Prefix(k) if self.policy == Policy::Prefix => Some(k),
            _ => None,
        };
        if let Some(key) = key {
            return self.bounded_hash(pool, key, &usable, n_usable);
        }
        match self.policy {
            Policy::RoundRobin => {
                let start = pool.cursor.fetch_add(1, Ordering::Relaxed);
                let n = pool.replicas.len();
                (0..n)
                    .map(|i| &pool.replicas[(start + i) % n])
                    .find(|r| usable(r))
                    .cloned()
            }
            Policy::LeastOutstanding | Policy::Prefix => self.least_loaded(pool, &usable),
            Policy::PowerOfTwo => {
                let cands: Vec<&Arc<Replica>> =
                    pool.replicas.iter().filter(|r| usable(r)).collect();
                let n = cands.len() as u64;
                let a = (random() % n) as usize;
                let mut b = (random() % (n - 1)) as usize;
                if b >= a {
                    b += 1;
                }
                let (ra, rb) = (cands[a], cands[b]);
                Some(
                    if self.load(rb) < self.load(ra) {
                        rb
                    } else {
                        ra
                    }
                    .clone(),
                )
            }
        }
    }

    /// Least load; ties broken by a rotating start so equal replicas share work.
    fn least_loaded(
        &self,
        pool: &Pool,
        usable: &dyn Fn(&Arc<Replica>) -> bool,
    ) -> Option<Arc<Replica>> {
        let n = pool.replicas.len();
        let start = pool.cursor.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<(&Arc<Replica>, f64)> = None;
        for i in 0..n {
            let r = &pool.replicas[(start + i) % n];
            if !usable(r) {
                continue;
            }
            let l = self.load(r);
            if best.is_none_or(|(_, b)| l < b) {
                best = Some((r, l));
            }
        }
        best.map(|(r, _)| r.clone())
    }

    /// Consistent hashing with bounded loads: walk the ring from `key` and take the
    /// first replica whose load stays within `c × (total + 1) / n`; a replica whose
    /// KV cache is reported full is passed over too. If none qualifies (all
    /// saturated), the least-loaded replica.
    fn bounded_hash(
        &self,
        pool: &Pool,
        key: u64,
        usable: &dyn Fn(&Arc<Replica>) -> bool,
        n_usable: usize,
    ) -> Option<Arc<Replica>> {
        let total: f64 = pool
            .replicas
            .iter()
            .filter(|r| usable(r))
            .map(|r| self.load(r))
            .sum();
        let bound = (self.load_bound * (total + 1.0) / n_usable as f64).ceil();
        let start = pool.ring.partition_point(|(p, _)| *p < key);
        let len = pool.ring.len();
        let mut seen = 0usize;
        let mut checked = vec![false; pool.replicas.len()];
        for i in 0..len {
            let (_, idx) = pool.ring[(start + i) % len];
            let idx = idx as usize;
            if checked[idx] {
                continue;
            }
            checked[idx] = true;
            let r = &pool.replicas[idx];
            if !usable(r) {
                continue;
            }
            seen += 1;
            let full = r
                .signal(self.signal_max_age)
                .and_then(|s| s.kv_cache_usage)
                .is_some_and(|u| u >= 0.98);
            if self.load(r) + 1.0 <= bound && !full {
                return Some(r.clone());
            }
            if seen == n_usable {
                break;
            }
        }
        self.least_loaded(pool, usable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use std::collections::HashMap;

    fn pool(n: usize) -> (Registry, Arc<Pool>) {
        let reg = Registry::default();
        for i in 0..n {
            reg.upsert(
                "m",
                &format!("r{i}"),
                &format!("http://127.0.0.1:{}", 1000 + i),
            )
            .unwrap();
        }
        let p = reg.snapshot().pool("m").unwrap().clone();
        (reg, p)
    }

    fn router(policy: Policy) -> Router {
        Router {
            policy,
            load_bound: 1.25,
            signal_max_age: Duration::from_secs(3),
        }
    }

    #[test]
    fn round_robin_cycles_and_skips_tried() {
        let (_reg, p) = pool(3);
        let r = router(Policy::RoundRobin);
        let ids: Vec<String> = (0..6)
            .map(|_| r.choose(&p, Affinity::None, &[]).unwrap().id().to_owned())
            .collect();
        assert_eq!(ids, ["r0", "r1", "r2", "r0", "r1", "r2"]);
        let tried = vec![p.replicas[0].clone(), p.replicas[1].clone()];
        for _ in 0..3 {
            assert_eq!(r.choose(&p, Affinity::None, &tried).unwrap().id(), "r2");
        }
        let all: Vec<_> = p.replicas.to_vec();
        assert!(r.choose(&p, Affinity::None, &all).is_none());
    }

    #[test]
    fn least_outstanding_and_power_of_two_avoid_the_busy_replica() {
        let (_reg, p) = pool(3);
        let _busy: Vec<_> = (0..5).map(|_| p.replicas[1].start()).collect();
        let _one = p.replicas[0].start();
        let lo = router(Policy::LeastOutstanding);
        for _ in 0..5 {
            assert_eq!(lo.choose(&p, Affinity::None, &[]).unwrap().id(), "r2");
        }
        let p2 = router(Policy::PowerOfTwo);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for _ in 0..300 {
            *counts
                .entry(p2.choose(&p, Affinity::None, &[]).unwrap().id().to_owned())
                .or_default() += 1;
        }
        // r1 only wins a pair it is not in: never.
        assert_eq!(counts.get("r1"), None, "{counts:?}");
        assert!(counts["r2"] > counts["r0"], "{counts:?}");
    }

    #[test]
    fn ejected_replicas_are_skipped() {
        let (_reg, p) = pool(2);
        for _ in 0..3 {
            p.replicas[0].record_failure("test");
        }
        let r = router(Policy::RoundRobin);
        for _ in 0..4 {
            assert_eq!(r.choose(&p, Affinity::None, &[]).unwrap().id(), "r1");
        }
    }

    #[test]
    fn with_every_replica_ejected_routing_fails_open_to_an_untried_one() {
        let (_reg, p) = pool(2);
        for r in &p.replicas {
            for _ in 0..3 {
                r.record_failure("test");
            }
            assert!(!r.is_healthy());
        }
        let r = router(Policy::LeastOutstanding);
        let first = r.choose(&p, Affinity::None, &[]).expect("fails open");
        let second = r
            .choose(&p, Affinity::None, std::slice::from_ref(&first))
            .expect("the other one");
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(r.choose(&p, Affinity::None, &[first, second]).is_none());
    }

    #[test]
    fn prefix_hash_is_sticky_until_the_load_bound() {
        let (_reg, p) = pool(4);
        let r = router(Policy::Prefix);
        let key = hash_parts(&[b"a long shared system prompt"]);
        let home = r.choose(&p, Affinity::Prefix(key), &[]).unwrap();
        for _ in 0..10 {
            assert!(Arc::ptr_eq(
                &r.choose(&p, Affinity::Prefix(key), &[]).unwrap(),
                &home
            ));
        }
        // Different keys spread over the replicas.
        let mut hit = std::collections::HashSet::new();
        for i in 0..200u32 {
            hit.insert(
                r.choose(&p, Affinity::Prefix(hash_parts(&[&i.to_le_bytes()])), &[])
                    .unwrap()
                    .id()
                    .to_owned(),
            );
        }
        assert_eq!(hit.len(), 4);
        // Load the home replica past c × mean: the key spills, to a less loaded one.
        let mut guards = Vec::new();
        let mut spilled = None;
        for _ in 0..20 {
            let pick = r.choose(&p, Affinity::Prefix(key), &[]).unwrap();
            if !Arc::ptr_eq(&pick, &home) {
                spilled = Some(pick);
                break;
            }
            guards.push(pick.start());
        }
        let spilled = spilled.expect("the bound must push the key off its home replica");
        let total: u32 = p.replicas.iter().map(|x| x.in_flight()).sum();
        let bound = (1.25 * f64::from(total + 1) / 4.0).ceil() as u32;
        assert!(
            home.in_flight() + 1 > bound,
            "home {} bound {bound}",
            home.in_flight()
        );
        assert!(spilled.in_flight() < home.in_flight());
        // Round-robin ignores the prefix, but honours a session.
        let rr = router(Policy::RoundRobin);
        let s = hash_parts(&[b"session-42"]);
        drop(guards);
        let first = rr.choose(&p, Affinity::Session(s), &[]).unwrap();
        for _ in 0..5 {
            assert!(Arc::ptr_eq(
                &rr.choose(&p, Affinity::Session(s), &[]).unwrap(),
                &first
            ));
        }
    }
}
