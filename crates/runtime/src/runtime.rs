//! The seam between the control plane and whatever runs rank processes: the local backend
//! here, a Kubernetes backend later. The control plane holds a `dyn Runtime` and never
//! learns which one it drives.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;

use crate::{GangRecord, GangStatus, LaunchRequest, RankStatus, RuntimeError};

/// A rank's log as a stream of chunks; dropping it stops reading.
pub type LogStream = Pin<Box<dyn Stream<Item = Result<Bytes, RuntimeError>> + Send + 'static>>;

/// Starts, observes, stops and re-adopts gangs of rank processes.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync {
    /// Short backend name stored in [`GangRecord::backend`] (`"local"`, later `"kube"`).
    fn backend(&self) -> &'static str;

    /// Starts every rank of one attempt; returns once all are started (not finished).
    /// If any rank cannot be started, those already started are killed and an error returned.
    async fn launch(&self, req: LaunchRequest) -> Result<GangRecord, RuntimeError>;

    /// The state of every rank, in rank order.
    async fn observe_ranks(&self, gang: &GangRecord) -> Result<Vec<RankStatus>, RuntimeError>;

    /// The state of the gang as a whole (see [`GangStatus::from_ranks`]).
    async fn observe(&self, gang: &GangRecord) -> Result<GangStatus, RuntimeError> {
        let ranks = self.observe_ranks(gang).await?;
        Ok(GangStatus::from_ranks(gang, &ranks))
    }

    /// Sends SIGTERM to every live rank's process group, waits up to `grace` for them to
    /// end, then SIGKILLs the survivors. Returns once every rank has ended.
    async fn terminate(&self, gang: &GangRecord, grace: Duration) -> Result<(), RuntimeError>;

    /// Takes over a gang launched by an earlier control-plane process (after a crash or
    /// restart) and reports its state; afterwards `observe`/`terminate` work as usual.
    async fn adopt(&self, gang: &GangRecord) -> Result<GangStatus, RuntimeError>;

    /// Streams `rank`'s log from the start; with `follow`, keeps streaming new output until
    /// that rank ends (like `tail -f` that stops by itself).
    fn logs(&self, gang: &GangRecord, rank: u32, follow: bool) -> Result<LogStream, RuntimeError>;
}

/// Polls `observe` every `poll` until the gang is no longer running; returns that status.
pub async fn wait(
    runtime: &dyn Runtime,
    gang: &GangRecord,
    poll: Duration,
) -> Result<GangStatus, RuntimeError> {
    loop {
        let status = runtime.observe(gang).await?;
        if status.is_terminal() {
            return Ok(status);
        }
        tokio::time::sleep(poll).await;
    }
}

/// Waits for the gang to end and, when it failed or lost a rank, terminates the ranks still
/// running (SIGTERM, `grace`, SIGKILL): "a failed rank fails the gang". Returns the status
/// that ended it.
pub async fn supervise(
    runtime: &dyn Runtime,
    gang: &GangRecord,
    poll: Duration,
    grace: Duration,
) -> Result<GangStatus, RuntimeError> {
    let status = wait(runtime, gang, poll).await?;
    if !matches!(status, GangStatus::Succeeded) {
        runtime.terminate(gang, grace).await?;
    }
    Ok(status)
}
