//! API keys (stored as SHA-256 only) mapped to teams, and per-key token buckets for
//! requests per minute and tokens per minute.
//!
//! Tokens are charged twice: an estimate before the request is sent (prompt
//! characters / 4 + `max_tokens`), then corrected to the reply's `usage` when it
//! ends, so a burst cannot overrun the budget while its answers are still streaming.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::config::KeyConfig;
use crate::error::{Error, Result};

/// A refilling budget: `capacity` units, refilled at `capacity` per minute.
#[derive(Debug)]
pub struct Bucket {
    capacity: f64,
    per_sec: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    /// A full bucket of `per_minute` units.
    pub fn per_minute(per_minute: u64) -> Self {
        let capacity = per_minute as f64;
        Self {
            capacity,
            per_sec: capacity / 60.0,
            state: Mutex::new((capacity, Instant::now())),
        }
    }

    fn refill(&self, s: &mut (f64, Instant), now: Instant) {
        let dt = now.saturating_duration_since(s.1).as_secs_f64();
        s.0 = (s.0 + dt * self.per_sec).min(self.capacity);
        s.1 = now;
    }

    /// Takes `n` units, or says how long until they are there. A request larger
    /// than the whole bucket is admitted when the bucket is full (else it could
    /// never run), leaving it in debt.
    pub fn try_take(&self, n: f64) -> std::result::Result<(), Duration> {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s, now);
        let need = n.min(self.capacity);
        if s.0 >= need {
            s.0 -= n;
            return Ok(());
        }
        let wait = (need - s.0) / self.per_sec;
        Err(Duration::from_secs_f64(wait.max(0.001)))
    }

    /// Gives back (`delta > 0`) or charges (`delta < 0`) units after the fact; the
    /// debt is bounded by one bucket.
    pub fn adjust(&self, delta: f64) {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s, now);
        s.0 = (s.0 + delta).clamp(-self.capacity, self.capacity);
    }

    /// Units available now.
    pub fn available(&self) -> f64 {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut s, Instant::now());
        s.0
    }
}

/// A key's team and budgets.
#[derive(Debug)]
pub struct Tenant {
    /// Team name (metrics label, access logs).
    pub team: String,
    rpm: Option<(u64, Bucket)>,
    tpm: Option<(u64, Bucket)>,
}

impl Tenant {
    fn anonymous() -> Self {
        Self {
            team: "anonymous".to_owned(),
            rpm: None,
            tpm: None,
        }
    }

    /// Admits one request expected to use `estimated_tokens`, or says when to retry.
    pub fn admit(&self, estimated_tokens: u64) -> Result<()> {
        let retry = |limit_kind, limit, wait: Duration| Error::RateLimited {
            team: self.team.clone(),
            limit_kind,
            limit,
            retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
        };
        if let Some((limit, b)) = &self.tpm {
            // Check tokens first without taking, so a refused request costs nothing.
            let need = (estimated_tokens as f64).min(b.capacity);
            let have = b.available();
            if have < need {
                return Err(retry(
                    "tokens",
                    *limit,
                    Duration::from_secs_f64((need - have) / b.per_sec),
                ));
            }
        }
        if let Some((limit, b)) = &self.rpm {
            b.try_take(1.0).map_err(|w| retry("requests", *limit, w))?;
        }
        if let Some((limit, b)) = &self.tpm
            && let Err(w) = b.try_take(estimated_tokens as f64)
        {
            if let Some((_, r)) = &self.rpm {
                r.adjust(1.0);
            }
            return Err(retry("tokens", *limit, w));
        }
        Ok(())
    }

    /// Corrects the token charge once the real usage is known.
    pub fn settle(&self, estimated_tokens: u64, actual_tokens: u64) {
        if let Some((_, b)) = &self.tpm {
            b.adjust(estimated_tokens as f64 - actual_tokens as f64);
        }
    }
}

/// The key table; empty means an open gateway.
#[derive(Debug)]
pub struct Tenancy {
    keys: HashMap<[u8; 32], Arc<Tenant>>,
    anonymous: Arc<Tenant>,
}

impl Tenancy {
    /// Builds the table from configured keys (already validated as 64 hex digits).
    pub fn new(keys: &[KeyConfig]) -> Result<Self> {
        let mut map = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            let mut digest = [0u8; 32];
            hex::decode_to_slice(&k.sha256, &mut digest)
                .map_err(|e| Error::config(format!("keys[{i}].sha256"), format!("not hex: {e}")))?;
            map.insert(
                digest,
                Arc::new(Tenant {
                    team: k.team.clone(),
                    rpm: k.rpm.map(|n| (n, Bucket::per_minute(n))),
                    tpm: k.tpm.map(|n| (n, Bucket::per_minute(n))),
                }),
            );
        }
        Ok(Self {
            keys: map,
            anonymous: Arc::new(Tenant::anonymous()),
        })
    }

    /// Whether keys are required.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The tenant for an `Authorization` header value (`Bearer KEY`).
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Arc<Tenant>> {
        if !self.enabled() {
            return Ok(self.anonymous.clone());
        }
        let value = authorization.ok_or(Error::MissingKey)?;
        let key = value
            .strip_prefix(b"Bearer ")
            .or_else(|| value.strip_prefix(b"bearer "))
            .ok_or(Error::MissingKey)?;
        let key = key.trim_ascii();
        let digest: [u8; 32] = Sha256::digest(key).into();
        self.keys.get(&digest).cloned().ok_or_else(|| {
            let tail = &key[key.len().saturating_sub(4)..];
            Error::InvalidKey {
                suffix: String::from_utf8_lossy(tail).into_owned(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_matched_by_hash_and_teams_returned() {
        let t = Tenancy::new(&[
            KeyConfig::from_plain("red", "sk-red", None, None),
            KeyConfig::from_plain("blue", "sk-blue", Some(1), None),
        ])
        .unwrap();
        assert_eq!(t.authenticate(Some(b"Bearer sk-red")).unwrap().team, "red");
        assert_eq!(
            t.authenticate(Some(b"Bearer sk-blue")).unwrap().team,
            "blue"
        );
        assert_eq!(t.authenticate(None).unwrap_err(), Error::MissingKey);
        assert_eq!(
            t.authenticate(Some(b"Basic abc")).unwrap_err(),
            Error::MissingKey
        );
        let e = t.authenticate(Some(b"Bearer sk-green")).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidKey {
                suffix: "reen".into()
            }
        );
        let open = Tenancy::new(&[]).unwrap();
        assert_eq!(open.authenticate(None).unwrap().team, "anonymous");
    }

    #[test]
    fn rpm_bucket_refuses_with_retry_after_and_keys_are_independent() {
        let t = Tenancy::new(&[
            KeyConfig::from_plain("a", "ka", Some(2), None),
            KeyConfig::from_plain("b", "kb", Some(2), None),
        ])
        .unwrap();
        let a = t.authenticate(Some(b"Bearer ka")).unwrap();
        let b = t.authenticate(Some(b"Bearer kb")).unwrap();
        a.admit(0).unwrap();
        a.admit(0).unwrap();
        match a.admit(0).unwrap_err() {
            Error::RateLimited {
                limit_kind,
                retry_after_s,
                ..
            } => {
                assert_eq!(limit_kind, "requests");
                // 2/min refills one request every 30 s.
                assert!((29..=31).contains(&retry_after_s), "{retry_after_s}");
            }
            e => panic!("{e:?}"),
        }
        b.admit(0).unwrap();
    }

    #[test]
    fn tpm_estimates_then_settles() {
        let t = Tenancy::new(&[KeyConfig::from_plain("a", "ka", None, Some(600))]).unwrap();
        let a = t.authenticate(Some(b"Bearer ka")).unwrap();
        a.admit(500).unwrap();
        let e = a.admit(200).unwrap_err();
        assert!(
            matches!(
                e,
                Error::RateLimited {
                    limit_kind: "tokens",
                    ..
                }
            ),
            "{e:?}"
        );
        // The first request used only 50 tokens: 450 come back, the next fits.
        a.settle(500, 50);
        a.admit(200).unwrap();
        // Larger than the whole bucket: admitted only from a full bucket.
        let big = Tenancy::new(&[KeyConfig::from_plain("a", "ka", None, Some(60))]).unwrap();
        let a = big.authenticate(Some(b"Bearer ka")).unwrap();
        a.admit(1000).unwrap();
        assert!(a.admit(1).is_err());
    }
}
