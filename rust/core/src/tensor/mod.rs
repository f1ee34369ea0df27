//! NDArray: a dense, C-contiguous, copy-on-write n-d array of one of mxfn's dtypes.
//!
//! Values are shared cheaply (`clone` bumps a reference count) and copied only when a
//! shared buffer is written, so an array handed to Python or to an executor never changes
//! behind its holder's back.

pub mod arith;
pub mod dtype;
pub mod linalg;
pub mod params_file;

pub mod random;
pub mod reduce;
pub mod states_file;

use crate::context::Context;
use crate::error::{Error, Result};
pub use dtype::{DType, Element, ALL_DTYPES};
use half::f16;
use ndarray::{ArcArray, ArrayD, Axis, IxDyn, Slice};

/// The typed storage behind an NDArray: one `ArcArray` variant per dtype.
#[derive(Clone, Debug)]
pub enum Data {
    /// float32 values.
    F32(ArcArray<f32, IxDyn>),
    /// float64 values.
    F64(ArcArray<f64, IxDyn>),
    /// float16 values.
    F16(ArcArray<f16, IxDyn>),
    /// uint8 values.
    U8(ArcArray<u8, IxDyn>),
    /// int8 values.
    I8(ArcArray<i8, IxDyn>),
    /// int32 values.
    I32(ArcArray<i32, IxDyn>),
    /// int64 values.
    I64(ArcArray<i64, IxDyn>),
}

/// Runs `$body` with `$a` bound to the typed array inside a `Data`, whatever its dtype.
/// The body is generic code; use `Element::wrap` to build a `Data` of the same type.
#[macro_export]
macro_rules! with_data {
    ($data:expr, $a:ident => $body:expr) => {
        match $data {
            $crate::tensor::Data::F32($a) => $body,
            $crate::tensor::Data::F64($a) => $body,
            $crate::tensor::Data::F16($a) => $body,
            $crate::tensor::Data::U8($a) => $body,
            $crate::tensor::Data::I8($a) => $body,
            $crate::tensor::Data::I32($a) => $body,
            $crate::tensor::Data::I64($a) => $body,
        }
    };
}

/// Moving typed arrays in and out of `Data`.
pub trait Storable: Element {
    /// Wraps a typed array.
    fn wrap(a: ArcArray<Self, IxDyn>) -> Data;
    /// The typed array inside `d`, if `d` holds this type.
    fn unwrap_ref(d: &Data) -> Option<&ArcArray<Self, IxDyn>>;
}

macro_rules! storable {
    ($t:ty, $v:ident) => {
        impl Storable for $t {
            fn wrap(a: ArcArray<Self, IxDyn>) -> Data {
                Data::$v(a)
            }
            fn unwrap_ref(d: &Data) -> Option<&ArcArray<Self, IxDyn>> {
                match d {
                    Data::$v(a) => Some(a),
                    _ => None,
                }
            }
        }
    };
}
storable!(f32, F32);
storable!(f64, F64);
storable!(f16, F16);
storable!(u8, U8);
storable!(i8, I8);
storable!(i32, I32);
storable!(i64, I64);

/// Runs `$body` with the type alias `$T` set to the Rust element type of `$dtype`. The form
/// with `float16 => $f16` runs `$f16` instead for float16 (for kernels without a float16
/// path, which compute in float32 and round back).
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::with_dtype!($dtype, $T => $body, float16 => {
            type $T = half::f16;
            $body
        })
    };
    ($dtype:expr, $T:ident => $body:expr, float16 => $f16:expr) => {
        match $dtype {
            $crate::tensor::DType::Float16 => $f16,
            $crate::tensor::DType::Float32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::Float64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::UInt8 => {
                type $T = u8;
                $body
            }
            $crate::tensor::DType::Int8 => {
                type $T = i8;
                $body
            }
            $crate::tensor::DType::Int32 => {
                type $T = i32;
                $body
            }
            $crate::tensor::DType::Int64 => {
                type $T = i64;
                $body
            }
        }
    };
}

/// A dense n-d array. Always C-contiguous (standard layout), so kernels and the numpy
/// bridge can treat it as one flat slice.
///
/// ```
/// use mxfn_core::{NDArray, DType};
/// let a = NDArray::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let b = a.mul_scalar(2.0).unwrap();
/// assert_eq!(b.to_f64_vec(), vec![2.0, 4.0, 6.0, 8.0]);
/// assert_eq!(b.dtype(), DType::Float32);
/// ```
#[derive(Clone, Debug)]
pub struct NDArray {
    data: Data,
    ctx: Context,
}

fn standard<T: Clone>(a: ArcArray<T, IxDyn>) -> ArcArray<T, IxDyn> {
    if a.is_standard_layout() {
        return a;
    }
    let nd = a.ndim();
    // Contiguous rows along the last axis (a swap of outer axes: the LSTM language model's
    // (batch, time) ↔ (time, batch) around its RNN): copied row by row, in half the time
    // of element by element.
    if nd >= 2 && a.strides()[nd - 1] == 1 && a.shape()[nd - 1] >= 8 {
        let mut v = Vec::with_capacity(a.len());
        for lane in a.lanes(Axis(nd - 1)) {
            match lane.as_slice() {
                Some(row) => v.extend_from_slice(row),
                None => v.extend(lane.iter().cloned()),
            }
        }
        if let Ok(out) = ArrayD::from_shape_vec(a.raw_dim(), v) {
            return out.into_shared();
        }
    }
    a.as_standard_layout().to_owned().into_shared()
}

/// Normalises a possibly negative axis for an array of rank `ndim`.
pub fn norm_axis(what: &str, axis: isize, ndim: usize) -> Result<usize> {
    let n = ndim as isize;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        return Err(Error::invalid(
            what,
            format!("an axis in [{}, {})", -n, n),
            axis.to_string(),
        ));
    }
    Ok(a as usize)
}

impl NDArray {
    /// Wraps typed storage (made standard layout if it is not).
    pub fn from_data(data: Data) -> Self {
        let data = with_data!(data, a => Storable::wrap(standard(a)));
        NDArray {
            data,
            ctx: Context::default(),
        }
    }

    /// An NDArray owning `a`.
    pub fn from_array<T: Storable>(a: ArrayD<T>) -> Self {
        Self::from_data(T::wrap(a.into_shared()))
    }

    /// An NDArray of `shape` holding `values` in row-major order.
    pub fn from_vec<T: Storable>(shape: &[usize], values: Vec<T>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Err(Error::shape("nd.array", "values", n, values.len()));
        }
        let a = ArrayD::from_shape_vec(IxDyn(shape), values)
            .map_err(|e| Error::invalid("shape", "a valid shape", e.to_string()))?;
        Ok(Self::from_array(a))
    }

    /// An array of `shape` and `dtype` with every element `value` (cast like numpy's `astype`).
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Self {
        with_dtype!(dtype, T => Self::from_array(ArrayD::<T>::from_elem(IxDyn(shape), T::from_f64(value))))
    }

    /// Zeros.
    pub fn zeros(shape: &[usize], dtype: DType) -> Self {
        Self::full(shape, 0.0, dtype)
    }

    /// Ones.
    pub fn ones(shape: &[usize], dtype: DType) -> Self {
        Self::full(shape, 1.0, dtype)
    }

    /// `[start, start + step, …)` below `stop` (above it for a negative step), like numpy.
    pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Self> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(Error::invalid(
                "nd.arange",
                "finite start/stop and a finite non-zero step",
                format!("start={start}, stop={stop}, step={step}"),
            ));
        }
        let n = ((stop - start) / step).ceil().max(0.0) as usize;
        let values: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
        Self::from_f64_slice(&[n], &values, dtype)
    }

    /// An array of `dtype` from f64 values (cast like numpy's `astype`).
    pub fn from_f64_slice(shape: &[usize], values: &[f64], dtype: DType) -> Result<Self> {
        with_dtype!(dtype, T => Self::from_vec::<T>(shape, values.iter().map(|&v| T::from_f64(v)).collect()))
    }

    /// The typed storage.
    pub fn data(&self) -> &Data {
        &self.data
    }

    /// Whether `self` and `other` view one stored buffer with the same dtype and shape. While
    /// both are held they keep the same values: a write to either copies the storage first
    /// (copy-on-write), so a cache holding an array can tell it is still current.
    pub fn same_storage(&self, other: &NDArray) -> bool {
        let ptr = |d: &Data| with_data!(d, a => a.as_ptr().cast::<u8>());
        self.dtype() == other.dtype()
            && self.shape() == other.shape()
            && ptr(&self.data) == ptr(&other.data)
    }

    /// The typed array, if this array has element type `T`.
    pub fn typed<T: Storable>(&self) -> Option<&ArcArray<T, IxDyn>> {
        T::unwrap_ref(&self.data)
    }

    /// The f32 storage, or an `Invalid` error naming `what` when the dtype differs.
    pub fn as_f32(&self, what: &str) -> Result<&ArcArray<f32, IxDyn>> {
        self.typed::<f32>()
            .ok_or_else(|| Error::invalid(what, "a float32 array", self.dtype().name()))
    }

    /// The values as one row-major slice when the dtype is `T`, or an `Invalid` error naming
    /// `what`.
    pub fn values<T: Storable>(&self, what: &str) -> Result<&[T]> {
        self.typed::<T>()
            .ok_or_else(|| {
                Error::invalid(what, format!("a {} array", T::DTYPE), self.dtype().name())
            })?
            .as_slice()
            .ok_or_else(|| Error::Msg(format!("internal: {what} is not contiguous")))
    }

    /// The float32 values as one row-major slice, or an `Invalid` error naming `what`.
    pub fn f32s(&self, what: &str) -> Result<&[f32]> {
        self.as_f32(what)?
            .as_slice()
            .ok_or_else(|| Error::Msg(format!("internal: {what} is not contiguous")))
    }

    /// [`NDArray::f32s`] with the name built only for an error: for per-call paths whose
    /// name is formatted (an op's `"{op}: data"`).
    pub fn f32s_named(&self, what: impl FnOnce() -> String) -> Result<&[f32]> {
        match &self.data {
            Data::F32(a) => a.as_slice().map_or_else(|| self.f32s(&what()), Ok),
            _ => self.f32s(&what()),
        }
    }

    /// The float32 values for writing, copying the storage first if it is shared
    /// (copy-on-write: other holders of the old value never see the change).
    pub fn f32s_mut(&mut self, what: &str) -> Result<&mut [f32]> {
        let dtype = self.dtype();
        match &mut self.data {
            Data::F32(a) => a
                .as_slice_mut()
                .ok_or_else(|| Error::Msg(format!("internal: {what} is not contiguous"))),
            _ => Err(Error::invalid(what, "a float32 array", dtype.name())),
        }
    }

    /// The float32 values as an owned vector, without copying them when this array is the
    /// only holder of its storage (so a caller may grow it in place). `Err(self)`: another
    /// array shares the storage, or the dtype is not float32.
    pub fn into_f32_vec(self) -> std::result::Result<Vec<f32>, Self> {
        let ctx = self.ctx;
        let a = match self.data {
            Data::F32(a) => a,
            data => return Err(NDArray { data, ctx }),
        };
        let a = a.try_into_owned_nocopy().map_err(|a| NDArray {
            data: Data::F32(a),
            ctx,
        })?;
        let n = a.len();
        // Standard layout: the values are one run from the offset.
        let (mut v, offset) = a.into_raw_vec_and_offset();
        v.drain(..offset.unwrap_or(0).min(v.len()));
        v.truncate(n);
        Ok(v)
    }

    /// A float32 array of `shape` from row-major values (the length must match).
    pub fn from_f32(shape: &[usize], values: Vec<f32>) -> Result<Self> {
        Self::from_vec(shape, values)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        with_data!(&self.data, a => a.shape())
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape().iter().product()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match &self.data {
            Data::F32(_) => DType::Float32,
            Data::F64(_) => DType::Float64,
            Data::F16(_) => DType::Float16,
            Data::U8(_) => DType::UInt8,
            Data::I8(_) => DType::Int8,
            Data::I32(_) => DType::Int32,
            Data::I64(_) => DType::Int64,
        }
    }

    /// The device this array belongs to.
    pub fn context(&self) -> Context {
        self.ctx
    }

    /// The same values on `ctx` (all contexts share host memory, so no copy is made).
    pub fn as_in_context(&self, ctx: Context) -> Self {
        NDArray {
            data: self.data.clone(),
            ctx,
        }
    }

    /// A copy that shares no storage with `self`.
    pub fn deep_copy(&self) -> Self {
        let data = with_data!(&self.data, a => Storable::wrap(a.to_owned().into_shared()));
        NDArray {
            data,
            ctx: self.ctx,
        }
    }

    /// The values converted to `dtype` (numpy `astype` rules: floats to ints truncate).
    pub fn astype(&self, dtype: DType) -> Self {
        if dtype == self.dtype() {
            return self.clone();
        }
        let out = with_data!(&self.data, a => {
            with_dtype!(dtype, T => {
                let b: ArrayD<T> = a.mapv(|v| T::from_f64(v.to_f64()));
                Storable::wrap(b.into_shared())
            })
        });
        NDArray {
            data: out,
            ctx: self.ctx,
        }
    }

    /// Every value as f64, row-major.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_data!(&self.data, a => a.iter().map(|v| v.to_f64()).collect())
    }

    /// The single value of a one-element array.
    pub fn to_scalar(&self) -> Result<f64> {
        if self.size() != 1 {
            return Err(Error::invalid(
                "to_scalar",
                "an array with one element",
                format!("shape {:?}", self.shape()),
            ));
        }
        Ok(self.to_f64_vec()[0])
    }

    /// The raw little-endian bytes of the values, row-major (the NDArray file's data field).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size() * self.dtype().size());
        match &self.data {
            Data::F32(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Data::F64(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Data::F16(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Data::U8(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Data::I8(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Data::I32(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Data::I64(a) => a
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        }
        out
    }

    /// An array of `dtype` and `shape` from raw little-endian row-major bytes; the byte count
    /// must be exactly `size × itemsize`.
    pub fn from_le_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let want = n.and_then(|n| n.checked_mul(dtype.size()));
        if want != Some(bytes.len()) {
            return Err(Error::invalid(
                "NDArray bytes",
                format!(
                    "{} bytes for {dtype} of shape {shape:?}",
                    want.map_or("too many".into(), |w| w.to_string())
                ),
                format!("{} bytes", bytes.len()),
            ));
        }
        macro_rules! decode {
            ($t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let v: Vec<$t> = bytes
                    .chunks_exact(W)
                    .map(|c| {
                        let mut b = [0u8; W];
                        b.copy_from_slice(c);
                        <$t>::from_le_bytes(b)
                    })
                    .collect();
                Self::from_vec(shape, v)
            }};
        }
        match dtype {
            DType::Float32 => decode!(f32),
            DType::Float64 => decode!(f64),
            DType::Float16 => decode!(f16),
            DType::UInt8 => decode!(u8),
            DType::Int8 => decode!(i8),
            DType::Int32 => decode!(i32),
            DType::Int64 => decode!(i64),
        }
    }

    /// The same values in a new shape. One dimension may be -1 (inferred); the element count
    /// must match. (MXNet's special codes 0, -2, -3, -4 belong to the `Reshape` operator.)
    pub fn reshape(&self, shape: &[isize]) -> Result<Self> {
        let size = self.size();
        let mut out = Vec::with_capacity(shape.len());
        let mut infer = None;
        for (i, &d) in shape.iter().enumerate() {
            match d {
                -1 if infer.is_none() => {
                    infer = Some(i);
                    out.push(1);
                }
                d if d >= 0 => out.push(d as usize),
                _ => {
                    return Err(Error::invalid(
                        "reshape: shape",
                        "non-negative dimensions and at most one -1",
                        format!("{shape:?}"),
                    ))
                }
            }
        }
        let known: usize = out.iter().product();
        if let Some(i) = infer {
            if known == 0 || !size.is_multiple_of(known) {
                return Err(Error::shape(
                    "reshape",
                    "shape",
                    format!("a shape with {size} elements"),
                    shape,
                ));
            }
            out[i] = size / known;
        }
        if out.iter().product::<usize>() != size {
            return Err(Error::shape(
                "reshape",
                "shape",
                format!("a shape with {size} elements (from {:?})", self.shape()),
                shape,
            ));
        }
        let data = with_data!(&self.data, a => {
            let r = a.clone().into_shape_with_order(IxDyn(&out))
                .map_err(|e| Error::invalid("reshape: shape", "a compatible shape", e.to_string()))?;
            Storable::wrap(r)
        });
        Ok(NDArray {
            data,
            ctx: self.ctx,
        })
    }

    /// Elements `begin..end` along `axis` (negative values count from the end; `end` None =
    /// to the end), like MXNet's `slice_axis`.
    pub fn slice_axis(&self, axis: isize, begin: isize, end: Option<isize>) -> Result<Self> {
        let ax = norm_axis("slice_axis: axis", axis, self.ndim())?;
        let n = self.shape()[ax] as isize;
        let b = if begin < 0 { begin + n } else { begin };
        let e = match end {
            None => n,
            Some(e) if e < 0 => e + n,
            Some(e) => e,
        };
        if b < 0 || b > n || e < b || e > n {
            return Err(Error::invalid(
                "slice_axis: begin/end",
                format!("0 <= begin <= end <= {n} on axis {ax}"),
                format!("begin={begin}, end={end:?}"),
            ));
        }
        let data = with_data!(&self.data, a => {
            let mut v = a.clone();
            v.slice_axis_inplace(Axis(ax), Slice::from(b..e));
            Storable::wrap(standard(v))
        });
        Ok(NDArray {
            data,
            ctx: self.ctx,
        })
    }

    /// MXNet's `slice(begin, end, step)`: one entry per leading axis, `None` meaning the
    /// default (whole axis; reversed for a negative step); negative indices count from the end.
    pub fn slice(
        &self,
        begin: &[Option<isize>],
        end: &[Option<isize>],
        step: &[Option<isize>],
    ) -> Result<Self> {
        let shape = self.shape().to_vec();
        if begin.len() != end.len()
            || begin.len() > shape.len()
            || step.len() > begin.len() && !step.is_empty()
        {
            return Err(Error::invalid(
                "slice: begin/end/step",
                format!(
                    "begin and end of equal length <= ndim {} (step no longer)",
                    shape.len()
                ),
                format!("begin {begin:?}, end {end:?}, step {step:?}"),
            ));
        }
        let mut specs = Vec::with_capacity(begin.len());
        for ax in 0..begin.len() {
            let n = shape[ax] as isize;
            let st = step.get(ax).copied().flatten().unwrap_or(1);
            if st == 0 {
                return Err(Error::invalid(
                    "slice: step",
                    "a non-zero step",
                    format!("0 on axis {ax}"),
                ));
            }
            let clamp = |v: isize, lo: isize, hi: isize| v.max(lo).min(hi);
            let fix = |v: isize| if v < 0 { v + n } else { v };
            let (start, count) = if st > 0 {
                let s = clamp(begin[ax].map_or(0, fix), 0, n);
                let e = clamp(end[ax].map_or(n, fix), 0, n);
                (s, if e > s { (e - s + st - 1) / st } else { 0 })
            } else {
                let s = clamp(begin[ax].map_or(n - 1, fix), -1, n - 1);
                let e = clamp(end[ax].map_or(-1, fix), -1, n - 1);
                (
                    s,
                    if s > e {
                        (s - e + (-st) - 1) / (-st)
                    } else {
                        0
                    },
                )
            };
            specs.push((start, count, st));
        }
        let data = with_data!(&self.data, a => {
            let mut v = a.clone();
            for (ax, &(start, count, st)) in specs.iter().enumerate() {
                if count == 0 {
                    v.slice_axis_inplace(Axis(ax), Slice::from(0..0));
                } else if st > 0 {
                    v.slice_axis_inplace(Axis(ax), Slice::new(start, Some(start + (count - 1) * st + 1), st));
                } else {
                    let lo = start + (count - 1) * st;
                    v.slice_axis_inplace(Axis(ax), Slice::new(lo, Some(start + 1), -st));
                    v.invert_axis(Axis(ax));
                }
            }
            Storable::wrap(standard(v))
        });
        Ok(NDArray {
            data,
            ctx: self.ctx,
        })
    }

    /// The sub-array at index `i` of axis 0 (that axis removed); negative `i` counts from the end.
    pub fn at(&self, i: isize) -> Result<Self> {
        if self.ndim() == 0 {
            return Err(Error::invalid(
                "index",
                "an array with at least one axis",
                "a 0-d array",
            ));
        }
        let n = self.shape()[0] as isize;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(Error::invalid(
                "index",
                format!("an index in [{}, {n})", -n),
                i.to_string(),
            ));
        }
        let data = with_data!(&self.data, a => Storable::wrap(standard(a.clone().index_axis_move(Axis(0), j as usize))));
        Ok(NDArray {
            data,
            ctx: self.ctx,
        })
    }

    /// Joins arrays of one dtype along `axis`; all other dimensions must agree.
    pub fn concat(arrays: &[NDArray], axis: isize) -> Result<Self> {
        let first = arrays
            .first()
            .ok_or_else(|| Error::invalid("concat: arrays", "at least one array", "none"))?;
        let ax = norm_axis("concat: dim", axis, first.ndim())?;
        for (i, x) in arrays.iter().enumerate() {
            if x.dtype() != first.dtype() {
                return Err(Error::invalid(
                    format!("concat: arrays[{i}] dtype"),
                    first.dtype().name(),
                    x.dtype().name(),
                ));
            }
            let ok = x.ndim() == first.ndim()
                && x.shape()
                    .iter()
                    .zip(first.shape())
                    .enumerate()
                    .all(|(d, (a, b))| d == ax || a == b);
            if !ok {
                return Err(Error::shape(
                    "concat",
                    format!("arrays[{i}] (all dimensions but {ax} must match arrays[0])"),
                    first.shape(),
                    x.shape(),
                ));
            }
        }
        let data = with_data!(&first.data, a0 => {
            let views: Vec<_> = arrays.iter().map(|x| match Storable::unwrap_ref(&x.data) {
                Some(a) => a.view(),
                None => a0.view(), // unreachable: dtypes were checked above
            }).collect();
            let out = ndarray::concatenate(Axis(ax), &views)
                .map_err(|e| Error::invalid("concat", "compatible shapes", e.to_string()))?;
            Storable::wrap(standard(out.into_shared()))
        });
        Ok(NDArray {
            data,
            ctx: first.ctx,
        })
    }

    /// Joins arrays along a new axis `axis`.
    pub fn stack(arrays: &[NDArray], axis: isize) -> Result<Self> {
        let first = arrays
            .first()
            .ok_or_else(|| Error::invalid("stack: arrays", "at least one array", "none"))?;
        let ax = norm_axis("stack: axis", axis, first.ndim() + 1)?;
        let expanded = arrays
            .iter()
            .map(|x| {
                let mut s: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
                s.insert(ax.min(s.len()), 1);
                x.reshape(&s)
            })
            .collect::<Result<Vec<_>>>()?;
        Self::concat(&expanded, ax as isize)
    }

    /// Permutes the axes (`None` reverses them).
    pub fn transpose(&self, axes: Option<&[usize]>) -> Result<Self> {
        let nd = self.ndim();
        let perm: Vec<usize> = match axes {
            None => (0..nd).rev().collect(),
            Some(p) => p.to_vec(),
        };
        let mut seen = vec![false; nd];
        if perm.len() != nd
            || perm
                .iter()
                .any(|&p| p >= nd || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::invalid(
                "transpose: axes",
                format!("a permutation of 0..{nd}"),
                format!("{perm:?}"),
            ));
        }
        let data = with_data!(&self.data, a => Storable::wrap(standard(a.clone().permuted_axes(IxDyn(&perm)))));
        Ok(NDArray {
            data,
            ctx: self.ctx,
        })
    }

    /// Writes `value` (broadcast to the region) into `self[begin..end:step]` along the
    /// leading axes, copying the storage first if it is shared (copy-on-write).
    pub fn assign_slice(
        &mut self,
        begin: &[Option<isize>],
        end: &[Option<isize>],
        step: &[Option<isize>],
        value: &NDArray,
    ) -> Result<()> {
        // Find the region by slicing an index array, then write through the indices: simple,
        // and correct for any steps.
        let size = self.size();
        let idx = NDArray::from_vec(self.shape(), (0..size as i64).collect::<Vec<i64>>())?;
        let region = idx.slice(begin, end, step)?;
        let value = value.astype(self.dtype());
        let vals = arith::broadcast_to(&value, region.shape())?;
        let positions: Vec<i64> = region
            .typed::<i64>()
            .map(|a| a.iter().copied().collect())
            .unwrap_or_default();
        with_data!(&mut self.data, a => {
            let src = Storable::unwrap_ref(&vals.data).map(|v| v.iter().copied().collect::<Vec<_>>()).unwrap_or_default();
            if let Some(flat) = a.as_slice_mut() {
                for (&p, v) in positions.iter().zip(src) {
                    flat[p as usize] = v;
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &NDArray) -> Vec<f64> {
        a.to_f64_vec()
    }

    #[test]
    fn into_f32_vec_takes_only_unshared_float32_storage() {
        let a = NDArray::from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let held = a.clone();
        // Shared: handed back whole, the other holder untouched.
        let a = a.into_f32_vec().unwrap_err();
        drop(held);
        assert_eq!(
            a.into_f32_vec().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        // A view from an offset into its storage (the second row): only its own values.
        let row = NDArray::from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
            .unwrap()
            .at(1)
            .unwrap();
        assert_eq!(row.into_f32_vec().unwrap(), vec![4.0, 5.0, 6.0]);
        let ints = NDArray::zeros(&[2], DType::Int32);
        assert_eq!(ints.into_f32_vec().unwrap_err().dtype(), DType::Int32);
    }

    #[test]
    fn reshape_infers_and_rejects() {
        let a = NDArray::arange(0.0, 6.0, 1.0, DType::Float32).unwrap();
        assert_eq!(a.reshape(&[2, -1]).unwrap().shape(), &[2, 3]);
        assert!(a.reshape(&[4, -1]).is_err());
        assert!(a.reshape(&[-1, -1]).is_err());
    }

    #[test]
    fn slicing_like_python() {
        let a = NDArray::arange(0.0, 10.0, 1.0, DType::Int32).unwrap();
        assert_eq!(
            v(&a.slice(&[Some(1)], &[Some(8)], &[Some(3)]).unwrap()),
            vec![1.0, 4.0, 7.0]
        );
        assert_eq!(
            v(&a.slice(&[None], &[None], &[Some(-3)]).unwrap()),
            vec![9.0, 6.0, 3.0, 0.0]
        );
        assert_eq!(
            v(&a.slice(&[Some(-2)], &[None], &[]).unwrap()),
            vec![8.0, 9.0]
        );
        assert_eq!(a.slice(&[Some(5)], &[Some(2)], &[]).unwrap().shape(), &[0]);
        let m = a
            .slice(&[Some(0)], &[Some(6)], &[])
            .unwrap()
            .reshape(&[2, 3])
            .unwrap();
        assert_eq!(
            v(&m.slice_axis(1, 1, None).unwrap()),
            vec![1.0, 2.0, 4.0, 5.0]
        );
        assert_eq!(v(&m.at(-1).unwrap()), vec![3.0, 4.0, 5.0]);
        assert!(m.at(2).is_err());
    }

    #[test]
    fn concat_along_inner_axes_is_row_major() {
        let a = NDArray::from_vec(&[3, 1], vec![1i64, 2, 3]).unwrap();
        let b = NDArray::from_vec(&[3, 1], vec![4i64, 5, 6]).unwrap();
        let c = NDArray::concat(&[a, b], 1).unwrap();
        assert!(c.typed::<i64>().unwrap().is_standard_layout());
        assert_eq!(c.to_f64_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn concat_transpose_stack() {
        let a = NDArray::from_vec(&[1, 2], vec![1.0f32, 2.0]).unwrap();
        let b = NDArray::from_vec(&[1, 2], vec![3.0f32, 4.0]).unwrap();
        assert_eq!(
            v(&NDArray::concat(&[a.clone(), b.clone()], 1).unwrap()),
            vec![1.0, 2.0, 3.0, 4.0]
        );
        let s = NDArray::stack(&[a.clone(), b.clone()], 0).unwrap();
        assert_eq!(s.shape(), &[2, 1, 2]);
        let c = NDArray::concat(&[a.clone(), b], 0)
            .unwrap()
            .transpose(None)
            .unwrap();
        assert_eq!(v(&c), vec![1.0, 3.0, 2.0, 4.0]);
        assert!(NDArray::concat(&[a.clone(), a.astype(DType::Float64)], 0).is_err());
    }

    #[test]
    fn bytes_round_trip_and_assign_is_copy_on_write() {
        let a = NDArray::from_vec(&[3], vec![1.5f32, -0.0, f32::NAN]).unwrap();
        let b = NDArray::from_le_bytes(DType::Float32, &[3], &a.to_le_bytes()).unwrap();
        assert_eq!(a.to_le_bytes(), b.to_le_bytes());
        assert!(NDArray::from_le_bytes(DType::Float32, &[4], &a.to_le_bytes()).is_err());
        let mut c = b.clone();
        c.assign_slice(
            &[Some(0)],
            &[Some(2)],
            &[],
            &NDArray::full(&[1], 7.0, DType::Float32),
        )
        .unwrap();
        assert_eq!(v(&c)[..2], [7.0, 7.0]);
        assert_eq!(v(&b)[0], 1.5);
    }
}
