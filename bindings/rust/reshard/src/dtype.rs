//! Element types and reduce operations.
use std::ffi::{CStr, CString};
use std::fmt;
use std::str::FromStr;

use reshard_sys as sys;

use crate::error::{check, Error, ErrorCode, Result};

/// The element type of a tensor (`reshard_dtype_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DType {
    /// 64-bit IEEE float.
    F64 = sys::RESHARD_DTYPE_F64,
    /// 32-bit IEEE float.
    F32 = sys::RESHARD_DTYPE_F32,
    /// 16-bit IEEE float (store as `u16` bits in Rust).
    F16 = sys::RESHARD_DTYPE_F16,
    /// bfloat16 (store as `u16` bits in Rust).
    BF16 = sys::RESHARD_DTYPE_BF16,
    /// OCP float8 e4m3fn (store as `u8` bits).
    F8E4M3 = sys::RESHARD_DTYPE_F8E4M3,
    /// OCP float8 e5m2 (store as `u8` bits).
    F8E5M2 = sys::RESHARD_DTYPE_F8E5M2,
    /// `i64`.
    I64 = sys::RESHARD_DTYPE_I64,
    /// `i32`.
    I32 = sys::RESHARD_DTYPE_I32,
    /// `i16`.
    I16 = sys::RESHARD_DTYPE_I16,
    /// `i8`.
    I8 = sys::RESHARD_DTYPE_I8,
    /// `u64`.
    U64 = sys::RESHARD_DTYPE_U64,
    /// `u32`.
    U32 = sys::RESHARD_DTYPE_U32,
    /// `u16`.
    U16 = sys::RESHARD_DTYPE_U16,
    /// `u8`.
    U8 = sys::RESHARD_DTYPE_U8,
    /// One-byte bool (store as `u8` 0 or 1).
    Bool = sys::RESHARD_DTYPE_BOOL,
    /// `e8m0` (ABI 1.13): OCP MX's power-of-two scale, one byte; only the
    /// dtype of a scale tensor with MXFP8 block scales (its name does not
    /// parse).
    E8M0 = sys::RESHARD_DTYPE_E8M0,
}

impl DType {
    /// Every dtype, in numeric order.
    pub const ALL: [DType; 16] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::Bool,
        DType::E8M0,
    ];

    /// The dtype of a raw `reshard_dtype_t`, or `None` for an unknown value.
    pub fn from_raw(raw: i32) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| *d as i32 == raw)
    }

    /// The raw `reshard_dtype_t` value.
    pub fn raw(self) -> i32 {
        self as i32
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        // SAFETY: a pure function of its argument.
        unsafe { sys::reshard_dtype_size(self.raw()) }
    }

    /// The library's lower-case name (`"f32"`, `"bf16"`, ...).
    pub fn name(self) -> &'static str {
        // SAFETY: returns a static string for every known value (never NULL
        // for one of ours).
        unsafe { CStr::from_ptr(sys::reshard_dtype_name(self.raw())) }.to_str().unwrap_or("?")
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;

    /// Parses a name as the library does (`"f32"`, `"float32"`,
    /// `"bfloat16"`, `"int8"`, ...).
    fn from_str(name: &str) -> Result<DType> {
        let c = CString::new(name).map_err(|_| Error::invalid("name: contains a NUL byte"))?;
        let mut raw = 0;
        // SAFETY: c is NUL-terminated and raw is a valid output.
        check(unsafe { sys::reshard_dtype_from_name(c.as_ptr(), &mut raw) })?;
        DType::from_raw(raw)
            .ok_or_else(|| Error::new(ErrorCode::Unsupported, format!("name: dtype {raw} unknown to this crate")))
    }
}

/// How the summands of a partial (unreduced) layout combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(i32)]
pub enum ReduceOp {
    /// Summands add.
    #[default]
    Sum = sys::RESHARD_REDUCE_SUM,
    /// The largest summand wins.
    Max = sys::RESHARD_REDUCE_MAX,
    /// The smallest summand wins.
    Min = sys::RESHARD_REDUCE_MIN,
    /// The sum over the number of summands (C ABI 1.4): floating-point
    /// source layouts only.
    Mean = sys::RESHARD_REDUCE_MEAN,
}

impl ReduceOp {
    /// The op of a raw `reshard_reduce_op_t`, or `None`.
    pub fn from_raw(raw: i32) -> Option<ReduceOp> {
        [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean].into_iter().find(|o| *o as i32 == raw)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type whose slices can serve as shard buffers: plain old
/// data for which every bit pattern is a valid value (so the library may
/// write any bytes into it). Sealed: implemented for the primitive integers
/// and floats only.
pub trait Element: sealed::Sealed + Copy + 'static {
    /// The dtype this type stores natively.
    const DTYPE: DType;

    /// Whether buffers of this type may hold tensors of `dtype`: its own
    /// dtype, and for `u16` / `u8` also the bit patterns of the 16- and
    /// 8-bit floats (and `u8` for bool).
    fn holds(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
}

macro_rules! element {
    ($($t:ty => $d:ident $(| $extra:ident)*;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn holds(dtype: DType) -> bool {
                matches!(dtype, DType::$d $(| DType::$extra)*)
            }
        }
    )*};
}

element! {
    f64 => F64;
    f32 => F32;
    i64 => I64;
    i32 => I32;
    i16 => I16;
    i8 => I8;
    u64 => U64;
    u32 => U32;
    u16 => U16 | F16 | BF16;
    u8 => U8 | F8E4M3 | F8E5M2 | Bool | E8M0;
}
