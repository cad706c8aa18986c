//! Kubernetes quantities (`"8"`, `500m`, `1Ki`), as quotas in Kueue's and Kubernetes' objects
//! write GPU counts and weights.

use serde_json::Value;

/// A Kubernetes quantity (`8`, `"8"`, `"1.5"`, `"500m"`, `"2k"`, `"1Ki"`, `"1e3"`) as a number.
pub fn quantity(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64(),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    const SUFFIXES: [(&str, f64); 15] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (digits, scale) = SUFFIXES
        .iter()
        .find_map(|(suffix, scale)| s.strip_suffix(suffix).map(|d| (d, *scale)))
        .filter(|(d, _)| d.parse::<f64>().is_ok())
        .unwrap_or((s, 1.0));
    // Only a sign, digits, a point and an exponent: no `inf`, `NaN` or hex.
    if digits.is_empty()
        || !digits
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.eE".contains(c))
    {
        return None;
    }
    digits
        .parse::<f64>()
        .ok()
        .map(|n| n * scale)
        .filter(|n| n.is_finite())
}

/// A quantity that is a whole number of GPUs, 0 or more (a device is never split by quota).
pub(crate) fn whole_gpus(v: &Value) -> Option<i32> {
    quantity(v)
        .filter(|n| *n >= 0.0 && n.fract() == 0.0 && *n <= f64::from(i32::MAX))
        .map(|n| n as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        let q = |s: &str| quantity(&Value::String(s.into()));
        assert_eq!(q("8"), Some(8.0));
        assert_eq!(q(" 1.5 "), Some(1.5));
        assert_eq!(q("500m"), Some(0.5));
        assert_eq!(q("2k"), Some(2000.0));
        assert_eq!(q("1Ki"), Some(1024.0));
        assert_eq!(q("1e3"), Some(1000.0));
        assert_eq!(q("1E"), Some(1e18));
        assert_eq!(quantity(&serde_json::json!(16)), Some(16.0));
        for bad in ["", "inf", "NaN", "0x10", "eight", "8 GPUs", "m"] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }
}
