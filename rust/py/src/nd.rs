//! NDArray bindings: the handle class and the functions `mxfn.nd` builds on.

use crate::convert::{from_numpy, to_numpy};
use crate::error::{core, mxfn_err, to_py};
use mxfn_core::tensor::arith::{self, BinaryOp};
use mxfn_core::tensor::params_file::{self, NdList};
use mxfn_core::tensor::{linalg, random, reduce};
use mxfn_core::{Context, DType, NDArray};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

/// A handle to a core NDArray. `mxfn.nd.NDArray` wraps it; values are immutable
/// (copy-on-write), so handles are freely shared.
#[pyclass(frozen, module = "mxfn._native", name = "NDArrayHandle")]
#[derive(Clone)]
pub struct Handle {
    pub inner: NDArray,
}

fn h(inner: NDArray) -> Handle {
    Handle { inner }
}

fn dtype(name: &str) -> PyResult<DType> {
    DType::parse(name).map_err(crate::error::to_py)
}

#[pymethods]
impl Handle {
    /// The shape as a tuple.
    fn shape(&self) -> Vec<usize> {
        self.inner.shape().to_vec()
    }
    /// The numpy dtype name.
    fn dtype(&self) -> &'static str {
        self.inner.dtype().name()
    }
    /// (device type code, device id).
    fn context(&self) -> (i32, i32) {
        let c = self.inner.context();
        (c.dev_type, c.dev_id)
    }
    /// A read-only numpy view (no copy).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_numpy(py, &self.inner)
    }
}

#[pyfunction]
fn nd_from_numpy(arr: &Bound<'_, PyAny>) -> PyResult<Handle> {
    from_numpy(arr).map(h)
}

#[pyfunction]
fn nd_full(py: Python<'_>, shape: Vec<usize>, value: f64, dt: &str) -> PyResult<Handle> {
    let d = dtype(dt)?;
    // Checked before allocating (the limits policy): too many axes or more bytes than
    // MXFN_MAX_BYTES (default: the machine's memory) is refused, not attempted.
    mxfn_core::limits::array_bytes("nd.full: shape", &shape, d.size()).map_err(to_py)?;
    core(py, "nd.full", || Ok(h(NDArray::full(&shape, value, d))))
}

#[pyfunction]
fn nd_arange(py: Python<'_>, start: f64, stop: f64, step: f64, dt: &str) -> PyResult<Handle> {
    let d = dtype(dt)?;
    core(py, "nd.arange", || {
        NDArray::arange(start, stop, step, d).map(h)
    })
}

#[pyfunction]
fn nd_astype(py: Python<'_>, a: &Handle, dt: &str) -> PyResult<Handle> {
    let d = dtype(dt)?;
    core(py, "nd.astype", || Ok(h(a.inner.astype(d))))
}

#[pyfunction]
fn nd_copy(py: Python<'_>, a: &Handle) -> PyResult<Handle> {
    core(py, "nd.copy", || Ok(h(a.inner.deep_copy())))
}

#[pyfunction]
fn nd_as_in_context(a: &Handle, dev_type: i32, dev_id: i32) -> Handle {
    h(a.inner.as_in_context(Context { dev_type, dev_id }))
}

#[pyfunction]
fn nd_reshape(py: Python<'_>, a: &Handle, shape: Vec<isize>) -> PyResult<Handle> {
    core(py, "nd.reshape", || a.inner.reshape(&shape).map(h))
}

#[pyfunction]
fn nd_slice(
    py: Python<'_>,
    a: &Handle,
    begin: Vec<Option<isize>>,
    end: Vec<Option<isize>>,
    step: Vec<Option<isize>>,
) -> PyResult<Handle> {
    core(py, "nd.slice", || a.inner.slice(&begin, &end, &step).map(h))
}

#[pyfunction]
#[pyo3(signature = (a, axis, begin, end=None))]
fn nd_slice_axis(
    py: Python<'_>,
    a: &Handle,
    axis: isize,
    begin: isize,
    end: Option<isize>,
) -> PyResult<Handle> {
    core(py, "nd.slice_axis", || {
        a.inner.slice_axis(axis, begin, end).map(h)
    })
}

#[pyfunction]
fn nd_at(py: Python<'_>, a: &Handle, i: isize) -> PyResult<Handle> {
    core(py, "nd.at", || a.inner.at(i).map(h))
}

#[pyfunction]
fn nd_assign_slice(
    py: Python<'_>,
    a: &Handle,
    begin: Vec<Option<isize>>,
    end: Vec<Option<isize>>,
    step: Vec<Option<isize>>,
    value: &Handle,
) -> PyResult<Handle> {
    core(py, "nd.__setitem__", || {
        let mut out = a.inner.clone();
        out.assign_slice(&begin, &end, &step, &value.inner)?;
        Ok(h(out))
    })
}

fn inners(arrays: &[PyRef<'_, Handle>]) -> Vec<NDArray> {
    arrays.iter().map(|a| a.inner.clone()).collect()
}

#[pyfunction]
fn nd_concat(py: Python<'_>, arrays: Vec<PyRef<'_, Handle>>, axis: isize) -> PyResult<Handle> {
    let xs = inners(&arrays);
    core(py, "nd.concat", || NDArray::concat(&xs, axis).map(h))
}

#[pyfunction]
fn nd_stack(py: Python<'_>, arrays: Vec<PyRef<'_, Handle>>, axis: isize) -> PyResult<Handle> {
    let xs = inners(&arrays);
    core(py, "nd.stack", || NDArray::stack(&xs, axis).map(h))
}

#[pyfunction]
#[pyo3(signature = (a, axes=None))]
fn nd_transpose(py: Python<'_>, a: &Handle, axes: Option<Vec<usize>>) -> PyResult<Handle> {
    core(py, "nd.transpose", || {
        a.inner.transpose(axes.as_deref()).map(h)
    })
}

fn binary_op(name: &str) -> PyResult<BinaryOp> {
    Ok(match name {
        "add" => BinaryOp::Add,
        "sub" => BinaryOp::Sub,
        "mul" => BinaryOp::Mul,
        "div" => BinaryOp::Div,
        "pow" => BinaryOp::Pow,
        "mod" => BinaryOp::Mod,
        "maximum" => BinaryOp::Maximum,
        "minimum" => BinaryOp::Minimum,
        "eq" => BinaryOp::Equal,
        "ne" => BinaryOp::NotEqual,
        "lt" => BinaryOp::Lesser,
        "le" => BinaryOp::LesserEqual,
        "gt" => BinaryOp::Greater,
        "ge" => BinaryOp::GreaterEqual,
        other => {
            return Err(mxfn_err(format!(
                "nd: unknown binary operation \"{other}\""
            )))
        }
    })
}

#[pyfunction]
fn nd_binary(py: Python<'_>, op: &str, a: &Handle, b: &Handle) -> PyResult<Handle> {
    let op = binary_op(op)?;
    core(py, "nd.binary", || {
        arith::binary(op, &a.inner, &b.inner).map(h)
    })
}

#[pyfunction]
fn nd_scalar(py: Python<'_>, op: &str, a: &Handle, s: f64, reverse: bool) -> PyResult<Handle> {
    let op = binary_op(op)?;
    core(py, "nd.scalar", || {
        arith::scalar(op, &a.inner, s, reverse).map(h)
    })
}

#[pyfunction]
fn nd_neg(a: &Handle) -> Handle {
    h(a.inner.neg())
}

#[pyfunction]
#[pyo3(signature = (op, a, axes=None, keepdims=false, exclude=false))]
fn nd_reduce(
    py: Python<'_>,
    op: &str,
    a: &Handle,
    axes: Option<Vec<isize>>,
    keepdims: bool,
    exclude: bool,
) -> PyResult<Handle> {
    let op = match op {
        "sum" => reduce::ReduceOp::Sum,
        "mean" => reduce::ReduceOp::Mean,
        "max" => reduce::ReduceOp::Max,
        "min" => reduce::ReduceOp::Min,
        "prod" => reduce::ReduceOp::Prod,
        other => return Err(mxfn_err(format!("nd: unknown reduction \"{other}\""))),
    };
    core(py, "nd.reduce", || {
        reduce::reduce(&a.inner, op, axes.as_deref(), keepdims, exclude).map(h)
    })
}

#[pyfunction]
#[pyo3(signature = (a, axis=None, keepdims=false))]
fn nd_argmax(py: Python<'_>, a: &Handle, axis: Option<isize>, keepdims: bool) -> PyResult<Handle> {
    core(py, "nd.argmax", || {
        reduce::argmax(&a.inner, axis, keepdims).map(h)
    })
}

#[pyfunction]
fn nd_dot(
    py: Python<'_>,
    a: &Handle,
    b: &Handle,
    transpose_a: bool,
    transpose_b: bool,
) -> PyResult<Handle> {
    core(py, "nd.dot", || {
        linalg::dot(&a.inner, &b.inner, transpose_a, transpose_b).map(h)
    })
}

#[pyfunction]
fn nd_batch_dot(
    py: Python<'_>,
    a: &Handle,
    b: &Handle,
    transpose_a: bool,
    transpose_b: bool,
) -> PyResult<Handle> {
    core(py, "nd.batch_dot", || {
        linalg::batch_dot(&a.inner, &b.inner, transpose_a, transpose_b).map(h)
    })
}

/// Saves a list of handles, or a list of (name, handle) pairs when `names` is given.
#[pyfunction]
#[pyo3(signature = (path, arrays, names=None))]
fn nd_save(
    py: Python<'_>,
    path: PathBuf,
    arrays: Vec<PyRef<'_, Handle>>,
    names: Option<Vec<String>>,
) -> PyResult<()> {
    let xs = inners(&arrays);
    let list = match names {
        None => NdList::List(xs),
        Some(n) if n.len() == xs.len() => NdList::Dict(n.into_iter().zip(xs).collect()),
        Some(n) => {
            return Err(mxfn_err(format!(
                "nd.save: {} names for {} arrays",
                n.len(),
                xs.len()
            )))
        }
    };
    core(py, "nd.save", || params_file::save(&path, &list))
}

/// Writes `data` to `path` through the core's one atomic writer (`atomic_file::write`), for
/// files Python serialises itself (ONNX models), so every file mxfn writes is written the same
/// way. The bytes are copied out of Python first; the write runs without the GIL.
#[pyfunction]
fn write_file_atomic(py: Python<'_>, path: PathBuf, data: &[u8]) -> PyResult<()> {
    let bytes = data.to_vec();
    core(py, "write_file_atomic", || {
        mxfn_core::atomic_file::write(&path, &bytes)
    })
}

/// Loads a file: a list of handles, or a dict name → handle (in file order).
#[pyfunction]
fn nd_load<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    let list = core(py, "nd.load", || params_file::load(&path))?;
    Ok(match list {
        NdList::List(xs) => PyList::new(py, xs.into_iter().map(h))?.into_any(),
        NdList::Dict(kv) => {
            let d = PyDict::new(py);
            for (k, v) in kv {
                d.set_item(k, h(v))?;
            }
            d.into_any()
        }
    })
}

#[pyfunction]
fn random_seed(seed: u64) {
    random::seed(seed)
}

#[pyfunction]
fn random_uniform(
    py: Python<'_>,
    low: f64,
    high: f64,
    shape: Vec<usize>,
    dt: &str,
) -> PyResult<Handle> {
    let d = dtype(dt)?;
    core(py, "nd.random_uniform", || {
        random::uniform(low, high, &shape, d).map(h)
    })
}

#[pyfunction]
fn random_normal(
    py: Python<'_>,
    loc: f64,
    scale: f64,
    shape: Vec<usize>,
    dt: &str,
) -> PyResult<Handle> {
    let d = dtype(dt)?;
    core(py, "nd.random_normal", || {
        random::normal(loc, scale, &shape, d).map(h)
    })
}

/// Registers the NDArray class and functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Handle>()?;
    m.add_class::<crate::convert::Keepalive>()?;
    m.add_function(wrap_pyfunction!(nd_from_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(nd_full, m)?)?;
    m.add_function(wrap_pyfunction!(nd_arange, m)?)?;
    m.add_function(wrap_pyfunction!(nd_astype, m)?)?;
    m.add_function(wrap_pyfunction!(nd_copy, m)?)?;
    m.add_function(wrap_pyfunction!(nd_as_in_context, m)?)?;
    m.add_function(wrap_pyfunction!(nd_reshape, m)?)?;
    m.add_function(wrap_pyfunction!(nd_slice, m)?)?;
    m.add_function(wrap_pyfunction!(nd_slice_axis, m)?)?;
    m.add_function(wrap_pyfunction!(nd_at, m)?)?;
    m.add_function(wrap_pyfunction!(nd_assign_slice, m)?)?;
    m.add_function(wrap_pyfunction!(nd_concat, m)?)?;
    m.add_function(wrap_pyfunction!(nd_stack, m)?)?;
    m.add_function(wrap_pyfunction!(nd_transpose, m)?)?;
    m.add_function(wrap_pyfunction!(nd_binary, m)?)?;
    m.add_function(wrap_pyfunction!(nd_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(nd_neg, m)?)?;
    m.add_function(wrap_pyfunction!(nd_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(nd_argmax, m)?)?;
    m.add_function(wrap_pyfunction!(nd_dot, m)?)?;
    m.add_function(wrap_pyfunction!(nd_batch_dot, m)?)?;
    m.add_function(wrap_pyfunction!(nd_save, m)?)?;
    m.add_function(wrap_pyfunction!(nd_load, m)?)?;
    m.add_function(wrap_pyfunction!(write_file_atomic, m)?)?;
    m.add_function(wrap_pyfunction!(random_seed, m)?)?;
    m.add_function(wrap_pyfunction!(random_uniform, m)?)?;
    m.add_function(wrap_pyfunction!(random_normal, m)?)?;
    Ok(())
}
