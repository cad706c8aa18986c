//! [`Gateway`]: build one from a config, feed its [`Registry`], and [`Gateway::serve`]
//! it on a listener until shutdown, draining in-flight requests.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

use crate::config::GatewayConfig;
use crate::error::Result;
use crate::proxy::{Lane, Shared};
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

    /// Serves on `listener` until `shutdown` resolves; then stops accepting, closes
    /// idle keep-alive connections, and lets in-flight requests (streams included)
    /// finish within `drainTimeoutMs`, closing each connection after its answer (a
    /// request that arrives meanwhile gets 503). Health checks and load polling run
    /// while it serves. Returns `Ok(true)` when everything drained in time.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<bool> {
        let sh = self.shared;
        let (stop_tx, stop_rx) = watch::channel(false);
        let background = tokio::spawn(crate::health::run(sh.clone(), stop_rx));
        let lane = Arc::new(Lane {
            sh: sh.clone(),
            id: 0,
        });
        let drained = accept_loop(lane, listener, shutdown).await;
        let _ = stop_tx.send(true);
        let _ = background.await;
        Ok(drained)
    }

    /// Like [`Gateway::serve`], but on one thread per listener (from
    /// [`bind_workers`]), each running its own single-threaded runtime, accept loop
    /// and upstream connection pool, the way nginx runs one event loop per worker
    /// process: a request never hops threads. Health checks run on the caller's
    /// runtime. Returns `Ok(true)` when every worker drained in time.
    pub async fn serve_workers(
        self,
        listeners: Vec<std::net::TcpListener>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<bool> {
        let sh = self.shared;
        let (stop_tx, stop_rx) = watch::channel(false);
        let background = tokio::spawn(crate::health::run(sh.clone(), stop_rx.clone()));
        let mut done = Vec::new();
        let mut started: std::io::Result<()> = Ok(());
        for (i, listener) in listeners.into_iter().enumerate() {
            let (tx, rx) = tokio::sync::oneshot::channel::<std::io::Result<bool>>();
            let sh = sh.clone();
            let mut stop = stop_rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ferry-gw-{i}"))
                .spawn(move || {
                    let run = || -> std::io::Result<bool> {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        rt.block_on(async move {
                            let listener = TcpListener::from_std(listener)?;
                            let lane = Arc::new(Lane { sh, id: i + 1 });
                            let stopped = async move {
                                let _ = stop.wait_for(|s| *s).await;
                            };
                            Ok(accept_loop(lane, listener, stopped).await)
                        })
                    };
                    let _ = tx.send(run());
                });
            match spawned {
                Ok(_) => done.push(rx),
                Err(e) => {
                    started = Err(e);
                    break;
                }
            }
        }
        if started.is_ok() {
            shutdown.await;
        }
        let _ = stop_tx.send(true);
        let mut drained = true;
        let mut failed = started.err();
        for rx in done {
            match rx.await {
                Ok(Ok(d)) => drained &= d,
                Ok(Err(e)) => failed = failed.or(Some(e)),
                Err(_) => {
                    failed = failed.or(Some(std::io::Error::other(
                        "a gateway worker thread panicked",
                    )))
                }
            }
        }
        let _ = background.await;
        match failed {
            Some(e) => Err(e),
            None => Ok(drained),
        }
    }
}

/// Binds `workers` listening sockets to one address with `SO_REUSEPORT`, so the
/// kernel spreads connections over [`Gateway::serve_workers`]' threads. Port 0
/// picks a free port for the first and binds the others to the same one. Must be
/// called inside a Tokio runtime.
pub fn bind_workers(
    addr: SocketAddr,
    workers: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut out = Vec::with_capacity(workers.max(1));
    let mut addr = addr;
    for _ in 0..workers.max(1) {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(1024)?;
        addr = listener.local_addr()?;
        out.push(listener.into_std()?);
    }
    Ok(out)
}

/// Accepts connections and serves them on the current runtime until `shutdown`
/// resolves, then drains. Returns whether everything drained in time.
async fn accept_loop(
    lane: Arc<Lane>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> bool {
    let sh = lane.sh.clone();
    // Every connection holds a receiver: `closed` resolves once all have ended.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(crate::conn::serve(lane.clone(), stream, stop_rx.clone()));
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    sh.draining.store(true, Ordering::Relaxed);
    tracing::info!("gateway draining: no new connections, in-flight requests finish");
    let _ = stop_tx.send(true);
    drop(stop_rx);
    tokio::select! {
        () = stop_tx.closed() => true,
        () = tokio::time::sleep(sh.cfg.drain_timeout()) => {
            tracing::warn!("drain deadline reached with requests still in flight");
            false
        }
    }
}
