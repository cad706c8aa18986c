//! Element types shared by PyTorch storages, DCP metadata and safetensors.

use serde::{Deserialize, Serialize};

/// A tensor element type; conversion copies elements bit for bit, so only sizes and names matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// 64-bit float.
    F64,
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit signed int.
    I64,
    /// 32-bit signed int.
    I32,
    /// 16-bit signed int.
    I16,
    /// 8-bit signed int.
    I8,
    /// 8-bit unsigned int.
    U8,
    /// Boolean, one byte.
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The safetensors spelling (`F32`, `BF16`, …).
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::F64 => "F64",
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I64 => "I64",
            DType::I32 => "I32",
            DType::I16 => "I16",
            DType::I8 => "I8",
            DType::U8 => "U8",
            DType::Bool => "BOOL",
        }
    }

    /// Parses a safetensors dtype name.
    pub fn from_safetensors(s: &str) -> Option<DType> {
        Some(match s {
            "F64" => DType::F64,
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "I64" => DType::I64,
            "I32" => DType::I32,
            "I16" => DType::I16,
            "I8" => DType::I8,
            "U8" => DType::U8,
            "BOOL" => DType::Bool,
            _ => return None,
        })
    }

    /// The legacy typed-storage class `torch.save` names in persistent ids.
    pub fn torch_storage(self) -> &'static str {
        match self {
            DType::F64 => "DoubleStorage",
            DType::F32 => "FloatStorage",
            DType::F16 => "HalfStorage",
            DType::BF16 => "BFloat16Storage",
            DType::I64 => "LongStorage",
            DType::I32 => "IntStorage",
            DType::I16 => "ShortStorage",
            DType::I8 => "CharStorage",
            DType::U8 => "ByteStorage",
            DType::Bool => "BoolStorage",
        }
    }

    /// Parses a typed-storage class name.
    pub fn from_torch_storage(s: &str) -> Option<DType> {
        [
            DType::F64,
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::I64,
            DType::I32,
            DType::I16,
            DType::I8,
            DType::U8,
            DType::Bool,
        ]
        .into_iter()
        .find(|d| d.torch_storage() == s)
    }

    /// The `torch.<name>` dtype attribute (`float32`, `bfloat16`, …).
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::F64 => "float64",
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Parses a `torch.<name>` dtype attribute, accepting the common aliases.
    pub fn from_torch_name(s: &str) -> Option<DType> {
        Some(match s {
            "float64" | "double" => DType::F64,
            "float32" | "float" => DType::F32,
            "float16" | "half" => DType::F16,
            "bfloat16" => DType::BF16,
            "int64" | "long" => DType::I64,
            "int32" | "int" => DType::I32,
            "int16" | "short" => DType::I16,
            "int8" => DType::I8,
            "uint8" => DType::U8,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}
