//! numpy ⇄ NDArray conversion: copies in, zero-copy read-only views out.

use crate::error::mxfn_err;
use half::f16;
use mxfn_core::limits::MAX_NDIM;
use mxfn_core::tensor::Data;
use mxfn_core::NDArray;
use numpy::{PyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Keeps an NDArray's storage alive for as long as a numpy view of it exists. The storage is
/// copy-on-write and never written while shared, so the view can never change or dangle.
#[pyclass(frozen, module = "mxfn._native")]
pub struct Keepalive {
    array: NDArray,
}

/// Copies a numpy array of a supported dtype into an NDArray.
pub fn from_numpy(arr: &Bound<'_, PyAny>) -> PyResult<NDArray> {
    macro_rules! try_type {
        ($($t:ty),*) => {$(
            if let Ok(a) = arr.extract::<PyReadonlyArrayDyn<'_, $t>>() {
                return Ok(NDArray::from_array(a.as_array().to_owned()));
            }
        )*};
    }
    try_type!(f32, f64, f16, u8, i8, i32, i64);
    let dtype = arr
        .downcast::<PyUntypedArray>()
        .map(|a| a.dtype().to_string())
        .unwrap_or_else(|_| arr.get_type().to_string());
    Err(mxfn_err(format!(
        "array: expected a numpy array of float32, float64, float16, uint8, int8, int32 or int64, got {dtype}"
    )))
}

/// Whether numpy can describe an array of `shape` with `itemsize`-byte elements: at most
/// [`MAX_NDIM`] axes (numpy 1.x's NPY_MAXDIMS), and byte strides (the sizes of the axes, zero-length ones
/// included, as numpy counts them) that fit an isize. Beyond either, handing the array to
/// numpy would overflow its strides or panic.
fn numpy_can_view(shape: &[usize], itemsize: usize) -> Result<(), String> {
    if shape.len() > MAX_NDIM {
        return Err(format!(
            "{} dimensions; numpy takes at most {MAX_NDIM}",
            shape.len()
        ));
    }
    shape
        .iter()
        .try_fold(itemsize, |bytes, &d| bytes.checked_mul(d.max(1)))
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .map(|_| ())
        .ok_or_else(|| format!("shape {shape:?}: too big for numpy (its byte strides overflow)"))
}

/// A read-only numpy view of `a`'s values (no copy). Arrays numpy cannot describe (more than
/// 32 axes, a zero-size array with a huge axis) raise MXFNError.
pub fn to_numpy<'py>(py: Python<'py>, a: &NDArray) -> PyResult<Bound<'py, PyAny>> {
    numpy_can_view(a.shape(), a.dtype().size())
        .map_err(|why| mxfn_err(format!("asnumpy: array of {why}")))?;
    let keep = Bound::new(py, Keepalive { array: a.clone() })?;
    let held = &keep.get().array;
    macro_rules! view {
        ($x:expr) => {{
            // SAFETY: `$x` lives inside `keep`, which becomes the numpy array's base object and
            // is immutable (frozen pyclass), so the memory outlives the view and never moves.
            let v: Bound<'py, PyArrayDyn<_>> =
                unsafe { PyArray::borrow_from_array($x, keep.clone().into_any()) };
            v.into_any()
        }};
    }
    let out = match held.data() {
        Data::F32(x) => view!(x),
        Data::F64(x) => view!(x),
        Data::F16(x) => view!(x),
        Data::U8(x) => view!(x),
        Data::I8(x) => view!(x),
        Data::I32(x) => view!(x),
        Data::I64(x) => view!(x),
    };
    // Writing through the view would bypass copy-on-write, so numpy must refuse it.
    out.call_method1("setflags", (false,))?;
    Ok(out)
}
