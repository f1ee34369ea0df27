//! Element types: the `DType` enum (names, sizes, MXNet type flags) and the `Element` trait
//! that lets one generic kernel serve every dtype.

use crate::error::{Error, Result};
use half::f16;

/// The element type of an NDArray. float32 is the compute type; float16 is storage and
/// conversion (its arithmetic runs in float32 and rounds back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32, the default and the compute type.
    Float32,
    /// IEEE binary64.
    Float64,
    /// IEEE binary16.
    Float16,
    /// Unsigned 8-bit integer.
    UInt8,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
}

/// Every dtype, in MXNet type-flag order.
pub const ALL_DTYPES: [DType; 7] = [
    DType::Float32,
    DType::Float64,
    DType::Float16,
    DType::UInt8,
    DType::Int32,
    DType::Int8,
    DType::Int64,
];

impl DType {
    /// The numpy name (`"float32"`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Float16 => "float16",
            DType::UInt8 => "uint8",
            DType::Int8 => "int8",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
        }
    }

    /// Parses a numpy dtype name; an unknown name is an `Invalid` error listing the valid ones.
    pub fn parse(name: &str) -> Result<DType> {
        ALL_DTYPES
            .iter()
            .copied()
            .find(|d| d.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = ALL_DTYPES.iter().map(|d| d.name()).collect();
                Error::invalid(
                    "dtype",
                    format!("one of {}", names.join(", ")),
                    format!("\"{name}\""),
                )
            })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::UInt8 | DType::Int8 => 1,
            DType::Float16 => 2,
            DType::Float32 | DType::Int32 => 4,
            DType::Float64 | DType::Int64 => 8,
        }
    }

    /// MXNet's type flag (`mshadow::kFloat32` = 0, …; note int32 = 4 and int8 = 5).
    pub fn mxnet_flag(self) -> i32 {
        match self {
            DType::Float32 => 0,
            DType::Float64 => 1,
            DType::Float16 => 2,
            DType::UInt8 => 3,
            DType::Int32 => 4,
            DType::Int8 => 5,
            DType::Int64 => 6,
        }
    }

    /// The dtype of an MXNet type flag, if mxfn supports it.
    pub fn from_mxnet_flag(flag: i32) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.mxnet_flag() == flag)
    }

    /// True for float16, float32 and float64.
    pub fn is_float(self) -> bool {
        matches!(self, DType::Float16 | DType::Float32 | DType::Float64)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be an NDArray element. The arithmetic helpers give one definition of
/// each operation per type, with the guards integers need (division by zero gives 0, as numpy
/// does, instead of a panic; overflow wraps).
pub trait Element: Copy + Send + Sync + PartialOrd + Default + std::fmt::Debug + 'static {
    /// The matching dtype.
    const DTYPE: DType;
    /// Converts to f64 (exact for every type but int64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 with `as`-cast semantics (saturating for integers, NaN to 0).
    fn from_f64(v: f64) -> Self;
    /// The value as an i64 (floats truncate toward zero, as C casts do).
    fn to_i64(self) -> i64;
    /// `v` in this type: integers wrap (two's complement), floats round.
    fn from_i64(v: i64) -> Self;
    /// Additive identity.
    fn zero() -> Self;
    /// Multiplicative identity.
    fn one() -> Self;
    /// a + b.
    fn add(self, b: Self) -> Self;
    /// a - b.
    fn sub(self, b: Self) -> Self;
    /// a * b.
    fn mul(self, b: Self) -> Self;
    /// a / b (integers: 0 when b is 0).
    fn div(self, b: Self) -> Self;
    /// a ** b.
    fn pow(self, b: Self) -> Self;
    /// a mod b with the sign of b, as numpy (integers: 0 when b is 0).
    fn rem(self, b: Self) -> Self;
    /// -a (wrapping for integers).
    fn neg(self) -> Self;
    /// The larger value (NaN propagates).
    fn maximum(self, b: Self) -> Self {
        if self.is_nan() || self >= b {
            self
        } else {
            b
        }
    }
    /// The smaller value (NaN propagates).
    fn minimum(self, b: Self) -> Self {
        if self.is_nan() || self <= b {
            self
        } else {
            b
        }
    }
    /// True for a float NaN.
    fn is_nan(self) -> bool {
        false
    }
    /// The least value of the type (-inf for floats).
    fn lowest() -> Self;
    /// The greatest value of the type (+inf for floats).
    fn highest() -> Self;
}

macro_rules! float_element {
    ($t:ty, $dt:expr) => {
        impl Element for $t {
            const DTYPE: DType = $dt;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn zero() -> Self {
                0.0
            }
            fn one() -> Self {
                1.0
            }
            fn add(self, b: Self) -> Self {
                self + b
            }
            fn sub(self, b: Self) -> Self {
                self - b
            }
            fn mul(self, b: Self) -> Self {
                self * b
            }
            fn div(self, b: Self) -> Self {
                self / b
            }
            fn pow(self, b: Self) -> Self {
                self.powf(b)
            }
            fn rem(self, b: Self) -> Self {
                let r = self % b;
                if r != 0.0 && (r < 0.0) != (b < 0.0) {
                    r + b
                } else {
                    r
                }
            }
            fn neg(self) -> Self {
                -self
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            fn highest() -> Self {
                <$t>::INFINITY
            }
        }
    };
}
float_element!(f32, DType::Float32);
float_element!(f64, DType::Float64);

macro_rules! int_element {
    ($t:ty, $dt:expr) => {
        impl Element for $t {
            const DTYPE: DType = $dt;
            fn to_f64(self) -> f64 {
                self as f64
            }
            // Through i64, as C and numpy do on x86: -2.7 → -2 → 254 for uint8.
            fn from_f64(v: f64) -> Self {
                v as i64 as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn zero() -> Self {
                0
            }
            fn one() -> Self {
                1
            }
            fn add(self, b: Self) -> Self {
                self.wrapping_add(b)
            }
            fn sub(self, b: Self) -> Self {
                self.wrapping_sub(b)
            }
            fn mul(self, b: Self) -> Self {
                self.wrapping_mul(b)
            }
            fn div(self, b: Self) -> Self {
                self.checked_div(b).unwrap_or(0)
            }
            // Exact (wrapping) for non-negative exponents, as numpy computes integer powers;
            // a negative exponent gives 1/a^|b| truncated: 0 unless |a| is 1.
            #[allow(unused_comparisons)] // unsigned types: the sign test is always false
            fn pow(self, b: Self) -> Self {
                if b < 0 {
                    return match self as i64 {
                        1 => 1,
                        -1 if (b as i64) % 2 == 0 => 1,
                        -1 => self,
                        _ => 0,
                    };
                }
                let (mut base, mut e, mut acc) = (self, b as u64, 1 as $t);
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[allow(unused_comparisons)] // unsigned types: the sign test is always false
            fn rem(self, b: Self) -> Self {
                match self.checked_rem(b) {
                    Some(r) if r != 0 && ((r < 0) != (b < 0)) => r.wrapping_add(b),
                    Some(r) => r,
                    None => 0,
                }
            }
            fn neg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
        }
    };
}
int_element!(u8, DType::UInt8);
int_element!(i8, DType::Int8);
int_element!(i32, DType::Int32);
int_element!(i64, DType::Int64);

// float16 computes in float32 and rounds back once per operation.
impl Element for f16 {
    const DTYPE: DType = DType::Float16;
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_i64(self) -> i64 {
        f32::from(self) as i64
    }
    fn from_i64(v: i64) -> Self {
        f16::from_f64(v as f64)
    }
    fn zero() -> Self {
        f16::ZERO
    }
    fn one() -> Self {
        f16::ONE
    }
    fn add(self, b: Self) -> Self {
        f16::from_f32(f32::from(self) + f32::from(b))
    }
    fn sub(self, b: Self) -> Self {
        f16::from_f32(f32::from(self) - f32::from(b))
    }
    fn mul(self, b: Self) -> Self {
        f16::from_f32(f32::from(self) * f32::from(b))
    }
    fn div(self, b: Self) -> Self {
        f16::from_f32(f32::from(self) / f32::from(b))
    }
    fn pow(self, b: Self) -> Self {
        f16::from_f32(f32::from(self).powf(f32::from(b)))
    }
    fn rem(self, b: Self) -> Self {
        f16::from_f32(Element::rem(f32::from(self), f32::from(b)))
    }
    fn neg(self) -> Self {
        -self
    }
    fn is_nan(self) -> bool {
        f16::is_nan(self)
    }
    fn lowest() -> Self {
        f16::NEG_INFINITY
    }
    fn highest() -> Self {
        f16::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flags_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(DType::parse(d.name()).unwrap(), d);
            assert_eq!(DType::from_mxnet_flag(d.mxnet_flag()), Some(d));
        }
        assert_eq!(DType::Int32.mxnet_flag(), 4);
        assert_eq!(DType::Int8.mxnet_flag(), 5);
        let e = DType::parse("float33").unwrap_err().to_string();
        assert!(e.contains("float33") && e.contains("float32"), "{e}");
    }

    #[test]
    fn integer_guards() {
        assert_eq!(Element::div(7i32, 0), 0);
        assert_eq!(Element::rem(-7i32, 3), 2);
        assert_eq!(Element::add(250u8, 10), 4);
        assert_eq!(Element::rem(-7.0f32, 3.0), 2.0);
        assert_eq!(Element::pow(3i64, 39), 4_052_555_153_018_976_267);
        assert_eq!(Element::pow(-2i32, 3), -8);
        assert_eq!(Element::pow(5i32, -1), 0);
        assert_eq!(Element::pow(-1i8, -3), -1);
    }
}
