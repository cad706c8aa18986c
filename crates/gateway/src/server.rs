//! [`Gateway`]: build one from a config, feed its [`Registry`], and [`Gateway::serve`]
//! it on a listener until shutdown, draining in-flight requests.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::GatewayConfig;
use crate::error::Result;
use crate::proxy::{Shared, handle};
use crate::registry::{EjectPolicy, Registry};
use crate::tenancy::Tenancy;

/// An OpenAI-compatible gateway; cheap to clone (clones share everything).
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Builds a gateway and the handle through which replicas are added and
    /// removed. Static `config.backends` are registered already.
    pub fn new(config: GatewayConfig) -> Result<(Gateway, Registry)> {
        config.validate()?;
        let registry = Registry::new(EjectPolicy {
            after_failures: config.eject_after_failures,
            base: config.eject_base(),
            max: Duration::from_secs(30).max(config.eject_base()),
        });
        for b in &config.backends {
            let id = match &b.id {
                Some(id) => id.clone(),
                None => crate::registry::Upstream::parse(&b.model, &b.url)?
                    .authority()
                    .to_owned(),
            };
            registry.upsert(&b.model, &id, &b.url)?;
        }
        let tenancy = Tenancy::new(&config.keys)?;
        let shared = Arc::new(Shared::new(config, registry.clone(), tenancy)?);
        Ok((Gateway { shared }, registry))
    }

    /// The replica registry (same handle [`Gateway::new`] returned).
    pub fn registry(&self) -> Registry {
        self.shared.registry.clone()
    }

    /// The Prometheus exposition `GET /metrics` serves.
    pub fn metrics_text(&self) -> String {
        self.shared
            .metrics
            .render(&self.shared.registry, self.shared.router.signal_max_age)
    }

    /// Serves on `listener` until `shutdown` resolves; then stops accepting, answers
    /// 503 to new requests on open connections, and lets in-flight requests (streams
    /// included) finish within `drainTimeoutMs`. Health checks and load polling run
    /// while it serves. Returns `Ok(true)` when everything drained in time.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<bool> {
        let sh = self.shared;
        let (stop_tx, stop_rx) = watch::channel(false);
        let background = tokio::spawn(crate::health::run(sh.clone(), stop_rx));
        let graceful = GracefulShutdown::new();
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .keep_alive(true);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(s) => s,
                        Err(e) => {
                            // EMFILE and friends: back off instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let sh = sh.clone();
                    let svc = service_fn(move |req| handle(sh.clone(), req));
                    let conn = http.serve_connection(TokioIo::new(stream), svc);
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
                () = &mut shutdown => break,
            }
        }
        drop(listener);
        sh.draining.store(true, Ordering::Relaxed);
        tracing::info!("gateway draining: no new connections, in-flight requests finish");
        let drained = tokio::select! {
            () = graceful.shutdown() => true,
            () = tokio::time::sleep(sh.cfg.drain_timeout()) => {
                tracing::warn!("drain deadline reached with requests still in flight");
                false
            }
        };
        let _ = stop_tx.send(true);
        let _ = background.await;
        Ok(drained)
    }
}
