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
    /// Stable id the control plane books GPUs by: the NVML UUID (`GPU-…`), or the slot
    /// number for virtual slots.
    pub id: String,
    /// The device's number for CUDA under `CUDA_DEVICE_ORDER=PCI_BUS_ID` (its place among
    /// this machine's GPUs by PCI bus id), which is what ranks get in `CUDA_VISIBLE_DEVICES`:
    /// CUDA takes UUIDs there, but tools that parse it (DeepSpeed's ZeRO-1/2) accept only
    /// numbers. `None` for virtual slots, whose id is used as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_ordinal: Option<u32>,
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
                cuda_ordinal: None,
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

    /// The GPUs' ids, in index order.
    pub fn ids(&self) -> Vec<String> {
        self.gpus.iter().map(|g| g.id.clone()).collect()
    }

    /// Id → what a rank's `CUDA_VISIBLE_DEVICES` names it by (its CUDA ordinal), for the GPUs
    /// that have one (see [`crate::LocalRuntime::with_cuda_ordinals`]).
    pub fn cuda_ordinals(&self) -> std::collections::HashMap<String, String> {
        self.gpus
            .iter()
            .filter_map(|g| Some((g.id.clone(), g.cuda_ordinal?.to_string())))
            .collect()
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
    let mut bus_ids = Vec::new();
    let mut skipped = Vec::new();
    for index in 0..count {
        let described = nvml.device_by_index(index).and_then(|device| {
            let gpu = Gpu {
                index,
                name: device.name()?,
                memory_bytes: device.memory_info()?.total,
                id: device.uuid()?,
                cuda_ordinal: None,
            };
            Ok((gpu, device.pci_info()?.bus_id))
        });
        match described {
            Ok((gpu, bus_id)) => {
                gpus.push(gpu);
                bus_ids.push(bus_id);
            }
            Err(e) => skipped.push(format!("GPU {index}: {e}")),
        }
    }
    // A device left out above still counts in CUDA's numbering, so ordinals are only given
    // when every device was described.
    if skipped.is_empty() {
        for (gpu, ordinal) in gpus.iter_mut().zip(pci_order(&bus_ids)) {
            gpu.cuda_ordinal = Some(ordinal);
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

/// Each device's place in PCI bus order (CUDA's numbering under `CUDA_DEVICE_ORDER=PCI_BUS_ID`),
/// given the devices' PCI bus ids (`domain:bus:device.function`, hexadecimal, as NVML writes
/// them; compared case-insensitively).
fn pci_order(bus_ids: &[String]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..bus_ids.len()).collect();
    order.sort_by_key(|&i| bus_ids[i].to_ascii_lowercase());
    let mut ordinals = vec![0; bus_ids.len()];
    for (ordinal, i) in order.into_iter().enumerate() {
        ordinals[i] = ordinal as u32;
    }
    ordinals
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
    fn cuda_ordinals_follow_the_pci_bus_order_not_nvmls() {
        let ids = [
            "00000000:9A:00.0",
            "00000000:1B:00.0",
            "00000000:c3:00.0",
            "00000000:3c:00.0",
        ];
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        assert_eq!(pci_order(&ids), [2, 0, 3, 1]);
        assert!(Inventory::virtual_slots(2).cuda_ordinals().is_empty());
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
                if inv.skipped.is_empty() {
                    let mut ordinals: Vec<u32> =
                        inv.gpus.iter().filter_map(|g| g.cuda_ordinal).collect();
                    ordinals.sort_unstable();
                    assert_eq!(ordinals, (0..inv.len() as u32).collect::<Vec<_>>());
                }
            }
            GpuSource::Virtual => panic!("discover() must not invent virtual GPUs"),
        }
    }
}
