//! Gateway settings: routing policy, timeouts, health checks, keys and limits, and
//! static backends; read from a YAML file and/or flags.
//!
//! ```yaml
//! policy: prefix            # round-robin | least-outstanding | power-of-two | prefix
//! maxBodyBytes: 4194304
//! connectTimeoutMs: 1000
//! backends:
//!   - {model: qwen, url: "http://10.0.0.5:8000"}
//! keys:
//!   - {team: research, sha256: "<hex of sha256(key)>", rpm: 600, tpm: 200000}
//! ```

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// How a replica is picked among the healthy replicas of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Each replica in turn.
    RoundRobin,
    /// The replica with the fewest requests in flight through this gateway (plus its
    /// reported queue, when fresh).
    LeastOutstanding,
    /// Two random replicas, the less loaded one wins.
    PowerOfTwo,
    /// Consistent hashing of the prompt's leading characters with a load bound, so
    /// shared prefixes hit a warm KV cache; least-load when the bound is exceeded.
    #[default]
    Prefix,
}

/// One API key: hashed, with its team and limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyConfig {
    /// Team billed and labelled in metrics.
    pub team: String,
    /// Lower-case hex SHA-256 of the key (the key itself is never stored).
    pub sha256: String,
    /// Requests per minute, unlimited when absent.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens (prompt + completion) per minute, unlimited when absent.
    #[serde(default)]
    pub tpm: Option<u64>,
}

impl KeyConfig {
    /// A key entry for the plain `key` (hashed here; the plain text is not kept).
    pub fn from_plain(team: &str, key: &str, rpm: Option<u64>, tpm: Option<u64>) -> Self {
        Self {
            team: team.to_owned(),
            sha256: hash_key(key),
            rpm,
            tpm,
        }
    }
}

/// Lower-case hex SHA-256 of an API key, as stored in [`KeyConfig::sha256`].
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A replica known before start (flag or file); the control plane adds more at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendConfig {
    /// Model name clients send.
    pub model: String,
    /// Replica base URL, `http://host:port` (an optional path prefix is kept).
    pub url: String,
    /// Replica id in metrics and logs; the URL's `host:port` when absent.
    #[serde(default)]
    pub id: Option<String>,
}

/// Everything the gateway needs; `Default` is a sensible standalone setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Routing policy.
    pub policy: Policy,
    /// Header whose value pins a conversation to one replica (consistent hashing).
    pub session_header: String,
    /// Leading prompt characters hashed by the prefix policy.
    pub prefix_chars: usize,
    /// Load bound factor `c` of bounded-load consistent hashing: a replica takes a
    /// hashed request only while its load is at most `c ×` the mean (+1).
    pub load_bound: f64,
    /// Largest request body accepted, in bytes (413 above).
    pub max_body_bytes: usize,
    /// TCP connect timeout to a replica, ms.
    pub connect_timeout_ms: u64,
    /// Time from sending a request to the replica's response head, ms.
    pub first_byte_timeout_ms: u64,
    /// Longest silence between two body chunks of a response, ms.
    pub idle_timeout_ms: u64,
    /// Replicas tried per request (first try included) before giving up.
    pub max_attempts: u32,
    /// Active health check period, ms (`GET /health` on every replica).
    pub health_interval_ms: u64,
    /// Health check timeout, ms.
    pub health_timeout_ms: u64,
    /// Load signal poll period, ms (`GET /metrics` and `GET /v1/models`).
    pub metrics_interval_ms: u64,
    /// Consecutive failures (connect errors, 5xx, timeouts) that eject a replica.
    pub eject_after_failures: u32,
    /// First ejection length, ms; doubles on each re-ejection, capped at 30 s.
    pub eject_base_ms: u64,
    /// Idle upstream connections are closed after this long, ms.
    pub pool_idle_timeout_ms: u64,
    /// Time in-flight requests get to finish at shutdown, ms.
    pub drain_timeout_ms: u64,
    /// Time a client gets to send a whole request head once its first byte came,
    /// and a whole body once the head came; also the longest a client may leave
    /// an answer unread. Slower clients are disconnected (408 when nothing of an
    /// answer was sent), ms.
    pub client_timeout_ms: u64,
    /// Idle keep-alive connections from clients are closed after this long, ms.
    pub client_keep_alive_ms: u64,
    /// API keys; when empty, the gateway is open (no auth, no limits).
    pub keys: Vec<KeyConfig>,
    /// Static replicas.
    pub backends: Vec<BackendConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            policy: Policy::Prefix,
            session_header: "x-session-id".to_owned(),
            prefix_chars: 256,
            load_bound: 1.25,
            max_body_bytes: 4 * 1024 * 1024,
            connect_timeout_ms: 1_000,
            first_byte_timeout_ms: 60_000,
            idle_timeout_ms: 60_000,
            max_attempts: 3,
            health_interval_ms: 500,
            health_timeout_ms: 400,
            metrics_interval_ms: 1_000,
            eject_after_failures: 3,
            eject_base_ms: 1_000,
            pool_idle_timeout_ms: 30_000,
            drain_timeout_ms: 30_000,
            client_timeout_ms: 30_000,
            client_keep_alive_ms: 75_000,
            keys: Vec::new(),
            backends: Vec::new(),
        }
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl GatewayConfig {
    /// Reads a YAML (or JSON) config file; absent fields keep their defaults.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::ConfigRead {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let cfg: GatewayConfig = serde_saphyr::from_str(&text).map_err(|e| Error::Config {
            field: path.display().to_string(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks ranges; every error names the field.
    pub fn validate(&self) -> Result<()> {
        if !(self.load_bound >= 1.0 && self.load_bound.is_finite()) {
            return Err(Error::config(
                "loadBound",
                "must be a number >= 1.0, e.g. 1.25",
            ));
        }
        if self.max_attempts == 0 {
            return Err(Error::config("maxAttempts", "must be at least 1"));
        }
        if self.max_body_bytes == 0 {
            return Err(Error::config("maxBodyBytes", "must be at least 1"));
        }
        for (field, v) in [
            ("connectTimeoutMs", self.connect_timeout_ms),
            ("firstByteTimeoutMs", self.first_byte_timeout_ms),
            ("idleTimeoutMs", self.idle_timeout_ms),
            ("healthIntervalMs", self.health_interval_ms),
            ("healthTimeoutMs", self.health_timeout_ms),
            ("metricsIntervalMs", self.metrics_interval_ms),
            ("ejectBaseMs", self.eject_base_ms),
            ("clientTimeoutMs", self.client_timeout_ms),
            ("clientKeepAliveMs", self.client_keep_alive_ms),
        ] {
            if v == 0 {
                return Err(Error::config(field, "must be at least 1 ms"));
            }
        }
        if self.eject_after_failures == 0 {
            return Err(Error::config("ejectAfterFailures", "must be at least 1"));
        }
        for (i, k) in self.keys.iter().enumerate() {
            if k.sha256.len() != 64 || !k.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::config(
                    format!("keys[{i}].sha256"),
                    "must be 64 hex digits: the SHA-256 of the key (`ferry gateway hash-key KEY` prints it)",
                ));
            }
            if k.team.is_empty() {
                return Err(Error::config(
                    format!("keys[{i}].team"),
                    "must not be empty",
                ));
            }
        }
        for (i, b) in self.backends.iter().enumerate() {
            crate::registry::Upstream::parse(&b.model, &b.url)
                .map_err(|e| Error::config(format!("backends[{i}].url"), e.to_string()))?;
            if b.model.is_empty() {
                return Err(Error::config(
                    format!("backends[{i}].model"),
                    "must not be empty",
                ));
            }
        }
        Ok(())
    }

    /// Parses a `--backend MODEL=URL` flag value.
    pub fn parse_backend_flag(value: &str) -> Result<BackendConfig> {
        let (model, url) = value.split_once('=').ok_or_else(|| {
            Error::config(
                "--backend",
                format!("{value:?} is not MODEL=URL, e.g. qwen=http://127.0.0.1:8000"),
            )
        })?;
        let b = BackendConfig {
            model: model.trim().to_owned(),
            url: url.trim().to_owned(),
            id: None,
        };
        if b.model.is_empty() {
            return Err(Error::config(
                "--backend",
                format!("{value:?} has no model name"),
            ));
        }
        crate::registry::Upstream::parse(&b.model, &b.url)
            .map_err(|e| Error::config("--backend", e.to_string()))?;
        Ok(b)
    }

    /// Connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        ms(self.connect_timeout_ms)
    }
    /// First-byte timeout.
    pub fn first_byte_timeout(&self) -> Duration {
        ms(self.first_byte_timeout_ms)
    }
    /// Idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        ms(self.idle_timeout_ms)
    }
    /// Health check period.
    pub fn health_interval(&self) -> Duration {
        ms(self.health_interval_ms)
    }
    /// Health check timeout.
    pub fn health_timeout(&self) -> Duration {
        ms(self.health_timeout_ms)
    }
    /// Load poll period.
    pub fn metrics_interval(&self) -> Duration {
        ms(self.metrics_interval_ms)
    }
    /// First ejection length.
    pub fn eject_base(&self) -> Duration {
        ms(self.eject_base_ms)
    }
    /// Pool idle timeout.
    pub fn pool_idle_timeout(&self) -> Duration {
        ms(self.pool_idle_timeout_ms)
    }
    /// Drain deadline.
    pub fn drain_timeout(&self) -> Duration {
        ms(self.drain_timeout_ms)
    }

    /// [`GatewayConfig::client_timeout_ms`] as a duration.
    pub fn client_timeout(&self) -> Duration {
        ms(self.client_timeout_ms)
    }

    /// [`GatewayConfig::client_keep_alive_ms`] as a duration.
    pub fn client_keep_alive(&self) -> Duration {
        ms(self.client_keep_alive_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_file_with_defaults_and_errors_naming_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.yaml");
        let key = hash_key("sk-a");
        std::fs::write(
            &path,
            format!(
                "policy: least-outstanding\nmaxBodyBytes: 100\nbackends:\n  - {{model: m, url: \"http://127.0.0.1:9\"}}\nkeys:\n  - {{team: a, sha256: {key}, rpm: 5}}\n"
            ),
        )
        .unwrap();
        let cfg = GatewayConfig::from_file(&path).unwrap();
        assert_eq!(cfg.policy, Policy::LeastOutstanding);
        assert_eq!(cfg.max_body_bytes, 100);
        assert_eq!(cfg.backends[0].model, "m");
        assert_eq!(cfg.keys[0].rpm, Some(5));
        assert_eq!(cfg.max_attempts, 3, "absent fields keep defaults");

        std::fs::write(&path, "backends:\n  - {model: m, url: \"ftp://x\"}\n").unwrap();
        let err = GatewayConfig::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("backends[0].url"), "{err}");

        std::fs::write(&path, "keys:\n  - {team: a, sha256: abc}\n").unwrap();
        let err = GatewayConfig::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("keys[0].sha256"), "{err}");

        std::fs::write(&path, "polcy: prefix\n").unwrap();
        let err = GatewayConfig::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("polcy"), "{err}");

        let err = GatewayConfig::from_file(&dir.path().join("none.yaml")).unwrap_err();
        assert!(matches!(err, Error::ConfigRead { .. }));
    }

    #[test]
    fn backend_flag() {
        let b = GatewayConfig::parse_backend_flag("qwen=http://127.0.0.1:8000").unwrap();
        assert_eq!(
            (b.model.as_str(), b.url.as_str()),
            ("qwen", "http://127.0.0.1:8000")
        );
        assert!(GatewayConfig::parse_backend_flag("qwen").is_err());
        assert!(GatewayConfig::parse_backend_flag("=http://x:1").is_err());
        assert!(GatewayConfig::parse_backend_flag("q=https://x:1").is_err());
    }

    #[test]
    fn key_hash_is_sha256_hex() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
