//! Data parallelism bindings: `CollectiveHandle`, the core's `Collective` trait implemented by
//! a Python object (`mxfn._dist.MPICollective`, over mpi4py), and the module and metric calls
//! that use it.
//!
//! The core calls the collective inside `Module::update` / `init_optimizer`, with the GIL
//! released and the module's lock held; each call takes the GIL, hands the buffer to Python as
//! a writable memoryview (no copy) and releases the view before returning. No Rust lock of
//! this file is held while the GIL is taken, and no binding waits for a module lock while
//! holding the GIL (`error::lock`), so another Python thread cannot deadlock against it.

use crate::error::core;
use crate::metric::MetricHandle;
use crate::module::ModuleHandle;
use mxfn_core::error::Error;
use mxfn_core::module::Collective;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::raw::c_char;
use std::sync::Arc;

/// CPython's `PyBUF_WRITE` (part of the stable ABI; pyo3's abi3 declarations leave it out):
/// a memoryview that Python may write through.
const PYBUF_WRITE: std::os::raw::c_int = 0x200;

/// A Python object with `allreduce_sum(buf)`, `broadcast(buf, root)`, `allgather_bytes(b)`
/// and `barrier()`, seen by the core as a [`Collective`].
struct PyCollective {
    obj: Py<PyAny>,
    rank: usize,
    size: usize,
}

impl PyCollective {
    /// Calls `method(view, *extra)` with a writable memoryview of `buf`, released afterwards.
    fn with_view(
        &self,
        method: &str,
        buf: &mut [f32],
        root: Option<usize>,
    ) -> mxfn_core::Result<()> {
        Python::with_gil(|py| {
            let bytes = std::mem::size_of_val(buf);
            // SAFETY: `buf` is borrowed mutably for the whole call; the view is released below
            // before the borrow ends, and a view still exported by Python at that point is an
            // error (release fails) reported instead of returning.
            let view = unsafe {
                let p = pyo3::ffi::PyMemoryView_FromMemory(
                    buf.as_mut_ptr() as *mut c_char,
                    bytes as pyo3::ffi::Py_ssize_t,
                    PYBUF_WRITE,
                );
                Bound::from_owned_ptr_or_err(py, p)
            }
            .map_err(|e| self.err(py, method, e))?;
            let out = match root {
                None => self.obj.call_method1(py, method, (&view,)),
                Some(r) => self.obj.call_method1(py, method, (&view, r)),
            };
            let released = view.call_method0("release");
            out.map_err(|e| self.err(py, method, e))?;
            released.map_err(|e| self.err(py, method, e)).map(drop)
        })
    }

    fn err(&self, py: Python<'_>, method: &str, e: PyErr) -> Error {
        let ty = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Error::Msg(format!(
            "kvstore dist_sync: {method} on rank {} of {} failed: {ty}: {}",
            self.rank,
            self.size,
            e.value(py)
        ))
    }
}

impl Collective for PyCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn allreduce_sum(&self, buf: &mut [f32]) -> mxfn_core::Result<()> {
        self.with_view("allreduce_sum", buf, None)
    }
    fn broadcast(&self, buf: &mut [f32], root: usize) -> mxfn_core::Result<()> {
        self.with_view("broadcast", buf, Some(root))
    }
    fn allgather_bytes(&self, mine: &[u8]) -> mxfn_core::Result<Vec<Vec<u8>>> {
        Python::with_gil(|py| {
            let b = PyBytes::new(py, mine);
            self.obj
                .call_method1(py, "allgather_bytes", (b,))
                .and_then(|r| r.extract::<Vec<Vec<u8>>>(py))
                .map_err(|e| self.err(py, "allgather_bytes", e))
        })
    }
    fn barrier(&self) -> mxfn_core::Result<()> {
        Python::with_gil(|py| {
            self.obj
                .call_method0(py, "barrier")
                .map(drop)
                .map_err(|e| self.err(py, "barrier", e))
        })
    }
}

/// A Python collective as the core sees it; `mxfn._dist` makes one per process.
#[pyclass(frozen, module = "mxfn._native", name = "CollectiveHandle")]
pub struct CollectiveHandle {
    inner: Arc<PyCollective>,
}

#[pymethods]
impl CollectiveHandle {
    /// Wraps `obj` (its `rank` and `size` read once).
    #[new]
    fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let rank: usize = obj.getattr("rank")?.extract()?;
        let size: usize = obj.getattr("size")?.extract()?;
        Ok(CollectiveHandle {
            inner: Arc::new(PyCollective {
                obj: obj.clone().unbind(),
                rank,
                size,
            }),
        })
    }
}

/// Makes the module a worker of `c` (None: a single worker), with gradient buckets of
/// `bucket_bytes`.
#[pyfunction]
#[pyo3(signature = (h, c, bucket_bytes))]
fn mod_set_collective(h: &ModuleHandle, c: Option<&CollectiveHandle>, bucket_bytes: usize) {
    let mut m = h.lock();
    m.set_collective(c.map(|c| c.inner.clone() as Arc<dyn Collective>));
    m.set_bucket_bytes(bucket_bytes);
}

/// (updates summed over workers, seconds spent summing, collective calls).
#[pyfunction]
fn mod_comm_stats(h: &ModuleHandle) -> (usize, f64, usize) {
    let s = h.lock().comm_stats();
    (s.steps, s.seconds, s.calls)
}

/// The metric's state as numbers (see `EvalMetric::state`).
#[pyfunction]
fn metric_state(m: &MetricHandle) -> Vec<f64> {
    m.lock().state()
}

/// The values of the metric pooled from `states` (every worker's `metric_state`, in rank
/// order): local values, or global ones when `global`.
#[pyfunction]
fn metric_pooled(
    py: Python<'_>,
    m: &MetricHandle,
    states: Vec<Vec<f64>>,
    global: bool,
) -> PyResult<Vec<(String, f64)>> {
    let mut pooled = m.lock().clone();
    core(py, "eval_metric.get", move || {
        pooled.reset();
        for s in &states {
            pooled.merge_state(s)?;
        }
        Ok(if global {
            pooled.get_global()
        } else {
            pooled.get()
        })
    })
}

/// Registers the data-parallel functions on `mxfn._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CollectiveHandle>()?;
    m.add_function(wrap_pyfunction!(mod_set_collective, m)?)?;
    m.add_function(wrap_pyfunction!(mod_comm_stats, m)?)?;
    m.add_function(wrap_pyfunction!(metric_state, m)?)?;
    m.add_function(wrap_pyfunction!(metric_pooled, m)?)?;
    Ok(())
}
