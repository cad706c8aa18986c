//! Leader election with a `coordination.k8s.io/v1` Lease: one operator replica reconciles,
//! the others wait until the leader's lease expires. Writes use the Lease's
//! `resourceVersion`, so two candidates can never both win the same round.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::error::Result;

/// Acquires and renews one named Lease for one identity.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElector {
    /// An elector for Lease `name` in `namespace`; the lease lasts `duration` after each renewal.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: String,
        duration: Duration,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity,
            duration,
        }
    }

    /// Takes the lease when it is free or expired, renews it when held by us; `Ok(false)`
    /// when another holder's lease is still valid or another candidate won the race.
    pub async fn try_acquire_or_renew(&self) -> Result<bool> {
        let now = Timestamp::now();
        let secs = self.duration.as_secs().clamp(1, i32::MAX as u64) as i32;
        match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.write(self.api.create(&PostParams::default(), &lease).await)
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
                let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
                    (Some(MicroTime(renewed)), Some(d)) => renewed
                        .saturating_add(SignedDuration::from_secs(i64::from(d)))
                        .is_ok_and(|until| until < now),
                    _ => true,
                };
                if !ours && !expired {
                    return Ok(false);
                }
                if !ours {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.renew_time = Some(MicroTime(now));
                spec.lease_duration_seconds = Some(secs);
                self.write(
                    self.api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await,
                )
            }
        }
    }

    fn write(&self, result: kube::Result<Lease>) -> Result<bool> {
        match result {
            Ok(_) => Ok(true),
            // Someone else wrote first (create: AlreadyExists, replace: stale resourceVersion).
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
