//! GPU inventory: what `ferry up` may hand out. Real devices come from NVML (loaded at run
//! time, so machines without a driver simply have none); `--gpus N` declares virtual slots
//! so GPU accounting can be exercised on CPU-only machines.

use serde::{Deserialize, Serialize};

/// One GPU the control plane may assign to ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// NVML index (or slot number for virtual GPUs).
    pub index: u32,
    /// Marketing name, e.g. "NVIDIA H200"; "virtual" for virtual slots.
    pub name: String,
    /// Total device memory in bytes (0 for virtual slots).
    pub memory_bytes: u64,
    /// Stable id put in `CUDA_VISIBLE_DEVICES`: the NVML UUID (`GPU-…`), or the slot number
    /// for virtual slots.
    pub id: String,
}

/// Where an inventory came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuSource {
    /// NVML answered.
    Nvml {
        /// Driver version NVML reported, when it did.
        driver_version: Option<String>,
    },
    /// Declared with `Inventory::virtual_slots`.
    Virtual,
    /// No NVML library or no driver: zero GPUs.
    Absent {
        /// Why NVML could not be used, for the `ferry up` start-up log.
        reason: String,
    },
}

/// The GPUs of this machine (or the declared virtual ones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// Where the list came from.
    pub source: GpuSource,
    /// The GPUs, in index order.
    pub gpus: Vec<Gpu>,
    /// Devices NVML listed but could not describe (index and reason); they are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

impl Inventory {
    /// `n` virtual GPU slots with ids "0".."n-1", name "virtual", memory 0 (`ferry up --gpus N`).
    pub fn virtual_slots(n: u32) -> Inventory {
        let gpus = (0..n)
            .map(|index| Gpu {
                index,
                name: "virtual".to_string(),
                memory_bytes: 0,
                id: index.to_string(),
            })
            .collect();
        Inventory {
            source: GpuSource::Virtual,
            gpus,
            skipped: Vec::new(),
        }
    }

    /// Number of GPUs.
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    /// True when there is no GPU to hand out.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// The ids to put in `CUDA_VISIBLE_DEVICES`, in index order.
    pub fn ids(&self) -> Vec<String> {
        self.gpus.iter().map(|g| g.id.clone()).collect()
    }
}

/// Asks NVML for this machine's GPUs; zero GPUs (never an error) when NVML or the driver
/// is missing.
pub fn discover() -> Inventory {
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(nvml) => nvml,
        Err(e) => {
            return Inventory {
                source: GpuSource::Absent {
                    reason: format!("NVML could not be loaded ({e}); no NVIDIA driver here"),
                },
                gpus: Vec::new(),
                skipped: Vec::new(),
            };
        }
    };
    let count = match nvml.device_count() {
        Ok(count) => count,
        Err(e) => {
            return Inventory {
                source: GpuSource::Absent {
                    reason: format!("NVML loaded but could not count devices ({e})"),
                },
                gpus: Vec::new(),
                skipped: Vec::new(),
            };
        }
    };
    let mut gpus = Vec::new();
    let mut skipped = Vec::new();
    for index in 0..count {
        let described = nvml.device_by_index(index).and_then(|device| {
            Ok(Gpu {
                index,
                name: device.name()?,
                memory_bytes: device.memory_info()?.total,
                id: device.uuid()?,
            })
        });
        match described {
            Ok(gpu) => gpus.push(gpu),
            Err(e) => skipped.push(format!("GPU {index}: {e}")),
        }
    }
    Inventory {
        source: GpuSource::Nvml {
            driver_version: nvml.sys_driver_version().ok(),
        },
        gpus,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_slots_are_numbered_from_zero() {
        let inv = Inventory::virtual_slots(3);
        assert_eq!(inv.ids(), ["0", "1", "2"]);
        assert!(
            inv.gpus
                .iter()
                .all(|g| g.name == "virtual" && g.memory_bytes == 0)
        );
        assert_eq!(inv.source, GpuSource::Virtual);
        assert!(Inventory::virtual_slots(0).is_empty());
    }

    #[test]
    fn the_json_shape_served_by_the_api_is_stable() {
        let json = serde_json::to_value(Inventory::virtual_slots(1)).unwrap();
        let want = serde_json::json!({
            "source": {"kind": "virtual"},
            "gpus": [{"index": 0, "name": "virtual", "memory_bytes": 0, "id": "0"}],
        });
        assert_eq!(json, want);
        let back: Inventory = serde_json::from_value(want).unwrap();
        assert_eq!(back, Inventory::virtual_slots(1));
    }

    #[test]
    fn discovery_never_fails_and_is_consistent() {
        let inv = discover();
        match &inv.source {
            GpuSource::Absent { reason } => {
                assert!(inv.gpus.is_empty());
                assert!(!reason.is_empty());
            }
            GpuSource::Nvml { .. } => {
                for gpu in &inv.gpus {
                    assert!(
                        gpu.id.starts_with("GPU-"),
                        "NVML UUIDs start with GPU-: {gpu:?}"
                    );
                    assert!(gpu.memory_bytes > 0, "{gpu:?}");
                }
            }
            GpuSource::Virtual => panic!("discover() must not invent virtual GPUs"),
        }
    }
}
