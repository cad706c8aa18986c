//! Ferry's control plane: the REST API, the reconcile loop that drives every job
//! through its lifecycle, and the engine adapters that turn a `TrainJob` into rank
//! processes.
//!
//! The store is the source of truth: every phase change is written (with its event)
//! before the runtime is asked to act on it, so a crash at any point leaves a state
//! the next start can finish. See `ARCHITECTURE.md` at the repository root.
#![forbid(unsafe_code)]

mod admission;
mod api;
mod checkpoint;
mod config;
mod engines;
mod error;
mod export;
mod inputs;
mod limits;
mod metrics;
mod models;
mod pace;
mod queue_view;
mod reconcile;
mod scope;
mod serving;
mod state;
mod suspend;
mod sweep;

pub use api::router;
pub use checkpoint::latest_checkpoint;
pub use config::{GpuSetting, ServerConfig};
pub use engines::{EngineAdapter, LaunchContext, adapter_for, resolve_engine};
pub use error::ApiError;
pub use state::ControlPlane;

/// Runs the control plane until `shutdown` resolves: opens the store, re-adopts the
/// jobs a previous process left running, serves the API and reconciles.
pub async fn run(
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| {
            ApiError::internal(format!(
                "cannot listen on {}: {e}; pick another address with --listen",
                config.listen
            ))
        })?;
    let gateway_listener = match config.gateway {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            ApiError::internal(format!(
                "cannot listen on {addr} for the gateway: {e}; pick another address with --gateway"
            ))
        })?),
        None => None,
    };
    let plane = ControlPlane::start(config).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut gateway_task = None;
    if let Some(listener) = gateway_listener {
        let (gateway, registry) = ferry_gateway::Gateway::new(Default::default())
            .map_err(|e| ApiError::internal(format!("cannot start the gateway: {e}")))?;
        let url = format!(
            "http://{}",
            listener
                .local_addr()
                .map_err(|e| ApiError::internal(e.to_string()))?
        );
        tracing::info!(%url, "OpenAI gateway up in front of the deployments");
        plane.set_gateway(state::GatewayLink { url, registry });
        gateway_task = Some(tokio::spawn(
            gateway.serve(listener, stop.clone().cancelled_owned()),
        ));
    }
    tracing::info!(
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        store = plane.store().location(),
        gpus = plane.inventory().len(),
        "ferry control plane up"
    );
    let reconciler = tokio::spawn(reconcile::run(plane.clone()));
    let server = tokio::spawn(serving::run(plane.clone()));
    let app = router(plane.clone());
    let stopper = stop.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stopper.cancel();
        })
        .await;
    stop.cancel();
    reconciler.abort();
    server.abort();
    if let Some(task) = gateway_task {
        let _ = task.await;
    }
    if plane.config().stop_replicas_on_exit {
        serving::stop_everything(&plane).await;
    }
    plane.store().close().await;
    served.map_err(|e| ApiError::internal(format!("HTTP server stopped: {e}")))
}
