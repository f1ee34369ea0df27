//! Optimizer and learning-rate scheduler bindings: what `mxfn.optimizer` and
//! `mxfn.lr_scheduler` build on. States cross as Python values shaped like MXNet's (None, an
//! NDArray handle, or tuples of them); a Python callable can stand in for a scheduler.

use crate::error::{core, to_py};
use crate::nd::Handle;
use mxfn_core::optimizer::{
    self, Hyper, LrScheduler, Optimizer, OptimizerOptions, Schedule, Scheduler, SchedulerOptions,
    SharedScheduler, State, WarmupMode,
};
use mxfn_core::Error;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyTuple};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A handle to a core Optimizer. It is mutable (update counts advance, multipliers can be
/// set), so it sits behind a lock; the Arc lets a Module share it.
#[pyclass(frozen, module = "mxfn._native", name = "OptimizerHandle")]
pub struct OptHandle {
    pub inner: Arc<Mutex<Optimizer>>,
}

/// A handle to a shared learning-rate scheduler.
#[pyclass(frozen, module = "mxfn._native", name = "SchedulerHandle")]
#[derive(Clone)]
pub struct SchedHandle {
    pub inner: SharedScheduler,
}

fn lock(h: &OptHandle) -> MutexGuard<'_, Optimizer> {
    crate::error::lock(&h.inner)
}

/// A Python callable used as a scheduler: `obj(num_update) -> lr`, with an optional
/// `base_lr` attribute that an optimizer's learning rate overwrites (as in MXNet).
struct PyScheduler {
    obj: Py<PyAny>,
}

impl std::fmt::Debug for PyScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PyScheduler")
    }
}

impl Scheduler for PyScheduler {
    fn call(&mut self, num_update: u64) -> mxfn_core::Result<f64> {
        Python::with_gil(|py| {
            self.obj
                .bind(py)
                .call1((num_update,))
                .and_then(|v| v.extract::<f64>())
                .map_err(|e| Error::Msg(format!("lr_scheduler({num_update}) failed: {e}")))
        })
    }
    fn base_lr(&self) -> Option<f64> {
        Python::with_gil(|py| self.obj.bind(py).getattr("base_lr").ok()?.extract().ok())
    }
    fn set_base_lr(&mut self, lr: f64) -> mxfn_core::Result<()> {
        Python::with_gil(|py| {
            self.obj
                .bind(py)
                .setattr("base_lr", lr)
                .map_err(|e| Error::Msg(format!("lr_scheduler: cannot set base_lr: {e}")))
        })
    }
}

fn hyper(key: &str, v: &Bound<'_, PyAny>) -> PyResult<Hyper> {
    if v.is_none() {
        Ok(Hyper::None)
    } else if v.is_instance_of::<PyBool>() {
        Ok(Hyper::Bool(v.extract()?))
    } else {
        v.extract::<f64>().map(Hyper::Num).map_err(|_| {
            PyTypeError::new_err(format!(
                "optimizer option \"{key}\" must be a number, a bool or None, got {}",
                v.get_type()
            ))
        })
    }
}

pub(crate) fn state_from_py(obj: &Bound<'_, PyAny>) -> PyResult<State> {
    if obj.is_none() {
        return Ok(State::None);
    }
    if let Ok(h) = obj.downcast::<Handle>() {
        return Ok(State::Array(h.get().inner.clone()));
    }
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        return obj
            .try_iter()?
            .map(|x| state_from_py(&x?))
            .collect::<PyResult<Vec<_>>>()
            .map(State::Tuple);
    }
    Err(PyTypeError::new_err(format!(
        "optimizer state must be None, an array handle or a tuple of them, got {}",
        obj.get_type()
    )))
}

pub(crate) fn state_to_py(py: Python<'_>, s: State) -> PyResult<PyObject> {
    Ok(match s {
        State::None => py.None(),
        State::Array(a) => Py::new(py, Handle { inner: a })?.into_any(),
        State::Tuple(v) => {
            let items = v
                .into_iter()
                .map(|s| state_to_py(py, s))
                .collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any().unbind()
        }
    })
}

#[pyfunction]
#[pyo3(signature = (name, params, lr_scheduler, idx2name, lr_mult, wd_mult))]
fn opt_create(
    py: Python<'_>,
    name: &str,
    params: &Bound<'_, PyDict>,
    lr_scheduler: Option<&Bound<'_, PyAny>>,
    idx2name: BTreeMap<usize, String>,
    lr_mult: BTreeMap<String, f64>,
    wd_mult: BTreeMap<String, f64>,
) -> PyResult<OptHandle> {
    let mut items = vec![];
    for (k, v) in params.iter() {
        let k: String = k.extract()?;
        let h = hyper(&k, &v)?;
        items.push((k, h));
    }
    let scheduler = match lr_scheduler {
        None => None,
        Some(s) => match s.downcast::<SchedHandle>() {
            Ok(h) => Some(h.get().inner.clone()),
            Err(_) => Some(SharedScheduler::new(PyScheduler {
                obj: s.clone().unbind(),
            })),
        },
    };
    let opts = OptimizerOptions {
        lr_scheduler: scheduler,
        param_idx2name: idx2name,
        lr_mult,
        wd_mult,
        ..Default::default()
    };
    let opt = core(py, "optimizer.create", || {
        optimizer::create(name, opts, items)
    })?;
    Ok(OptHandle {
        inner: Arc::new(Mutex::new(opt)),
    })
}

#[pyfunction]
fn opt_create_state(
    py: Python<'_>,
    h: &OptHandle,
    index: usize,
    weight: &Handle,
) -> PyResult<PyObject> {
    let st = core(py, "optimizer.create_state", || {
        lock(h).create_state(index, &weight.inner)
    })?;
    state_to_py(py, st)
}

#[pyfunction]
fn opt_update(
    py: Python<'_>,
    h: &OptHandle,
    index: usize,
    weight: &Handle,
    grad: &Handle,
    state: &Bound<'_, PyAny>,
) -> PyResult<(Handle, PyObject)> {
    let mut st = state_from_py(state)?;
    let mut w = weight.inner.clone();
    let g = grad.inner.clone();
    // Copy-on-write: the caller's weight and state arrays are shared, so the first write
    // copies them and the inputs stay as they were.
    let st = core(py, "optimizer.update", || {
        lock(h).update(index, &mut w, &g, &mut st)?;
        Ok(st)
    })?;
    Ok((Handle { inner: w }, state_to_py(py, st)?))
}

#[pyfunction]
fn opt_name(h: &OptHandle) -> &'static str {
    lock(h).name()
}

#[pyfunction]
fn opt_learning_rate(py: Python<'_>, h: &OptHandle) -> PyResult<f64> {
    core(py, "optimizer.learning_rate", || lock(h).learning_rate())
}

#[pyfunction]
fn opt_set_learning_rate(py: Python<'_>, h: &OptHandle, lr: f64) -> PyResult<()> {
    core(py, "optimizer.set_learning_rate", || {
        lock(h).set_learning_rate(lr)
    })
}

#[pyfunction]
fn opt_set_rescale_grad(py: Python<'_>, h: &OptHandle, r: f64) -> PyResult<()> {
    core(py, "optimizer.set_rescale_grad", || {
        lock(h).set_rescale_grad(r)
    })
}

#[pyfunction]
fn opt_num_update(h: &OptHandle) -> u64 {
    lock(h).num_update()
}

#[pyfunction]
fn opt_update_count(h: &OptHandle, index: usize) -> Option<u64> {
    lock(h).update_count(index)
}

/// The common settings: (fixed learning rate (None when a scheduler decides), wd,
/// rescale_grad, clip_gradient, begin_num_update, multi_precision, m_schedule).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn opt_common(h: &OptHandle) -> (Option<f64>, f64, f64, Option<f64>, u64, bool, f64) {
    let o = lock(h);
    (
        o.fixed_learning_rate(),
        o.wd(),
        o.rescale_grad(),
        o.clip_gradient(),
        o.begin_num_update(),
        o.multi_precision(),
        o.m_schedule(),
    )
}

/// The rule's hyperparameters by MXNet's names.
#[pyfunction]
fn opt_params(h: &OptHandle) -> Vec<(&'static str, f64)> {
    lock(h).rule().params()
}

#[pyfunction]
fn opt_lr_mult(h: &OptHandle) -> BTreeMap<String, f64> {
    lock(h).lr_mult().clone()
}

#[pyfunction]
fn opt_wd_mult(h: &OptHandle) -> BTreeMap<String, f64> {
    lock(h).wd_mult().clone()
}

#[pyfunction]
fn opt_idx2name(h: &OptHandle) -> BTreeMap<usize, String> {
    lock(h).idx2name().clone()
}

#[pyfunction]
fn opt_set_lr_mult(py: Python<'_>, h: &OptHandle, m: BTreeMap<String, f64>) -> PyResult<()> {
    core(py, "optimizer.set_lr_mult", || lock(h).set_lr_mult(m))
}

#[pyfunction]
fn opt_set_wd_mult(py: Python<'_>, h: &OptHandle, m: BTreeMap<String, f64>) -> PyResult<()> {
    core(py, "optimizer.set_wd_mult", || lock(h).set_wd_mult(m))
}

#[pyfunction]
fn opt_set_idx2name(h: &OptHandle, m: BTreeMap<usize, String>) {
    lock(h).set_idx2name(m)
}

#[pyfunction]
fn opt_warnings(h: &OptHandle) -> Vec<String> {
    lock(h).warnings().to_vec()
}

fn sched(py: Python<'_>, schedule: Schedule, base: (f64, u64, f64, &str)) -> PyResult<SchedHandle> {
    let (base_lr, warmup_steps, warmup_begin_lr, mode) = base;
    let warmup_mode = WarmupMode::parse(mode).map_err(to_py)?;
    let opts = SchedulerOptions {
        base_lr,
        warmup_steps,
        warmup_begin_lr,
        warmup_mode,
    };
    let s = core(py, "lr_scheduler", || LrScheduler::new(schedule, opts))?;
    Ok(SchedHandle {
        inner: SharedScheduler::new(s),
    })
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sched_factor(
    py: Python<'_>,
    step: u64,
    factor: f64,
    stop_factor_lr: f64,
    base_lr: f64,
    warmup_steps: u64,
    warmup_begin_lr: f64,
    warmup_mode: &str,
) -> PyResult<SchedHandle> {
    let s = Schedule::Factor {
        step,
        factor,
        stop_factor_lr,
    };
    sched(py, s, (base_lr, warmup_steps, warmup_begin_lr, warmup_mode))
}

#[pyfunction]
fn sched_multifactor(
    py: Python<'_>,
    steps: Vec<u64>,
    factor: f64,
    base_lr: f64,
    warmup_steps: u64,
    warmup_begin_lr: f64,
    warmup_mode: &str,
) -> PyResult<SchedHandle> {
    let s = Schedule::MultiFactor { steps, factor };
    sched(py, s, (base_lr, warmup_steps, warmup_begin_lr, warmup_mode))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sched_poly(
    py: Python<'_>,
    max_update: u64,
    pwr: f64,
    final_lr: f64,
    base_lr: f64,
    warmup_steps: u64,
    warmup_begin_lr: f64,
    warmup_mode: &str,
) -> PyResult<SchedHandle> {
    let s = Schedule::Poly {
        max_update,
        pwr,
        final_lr,
    };
    sched(py, s, (base_lr, warmup_steps, warmup_begin_lr, warmup_mode))
}

#[pyfunction]
fn sched_cosine(
    py: Python<'_>,
    max_update: u64,
    final_lr: f64,
    base_lr: f64,
    warmup_steps: u64,
    warmup_begin_lr: f64,
    warmup_mode: &str,
) -> PyResult<SchedHandle> {
    let s = Schedule::Cosine {
        max_update,
        final_lr,
    };
    sched(py, s, (base_lr, warmup_steps, warmup_begin_lr, warmup_mode))
}

#[pyfunction]
fn sched_call(py: Python<'_>, h: &SchedHandle, num_update: u64) -> PyResult<f64> {
    core(py, "lr_scheduler.__call__", || h.inner.call(num_update))
}

#[pyfunction]
fn sched_base_lr(h: &SchedHandle) -> Option<f64> {
    h.inner.base_lr()
}

#[pyfunction]
fn sched_set_base_lr(py: Python<'_>, h: &SchedHandle, lr: f64) -> PyResult<()> {
    core(py, "lr_scheduler.base_lr", || h.inner.set_base_lr(lr))
}

/// `(class name, constructor options)` of an mxfn scheduler, for `repr`.
#[pyfunction]
fn sched_describe<'py>(py: Python<'py>, h: &SchedHandle) -> PyResult<(String, Bound<'py, PyDict>)> {
    let d = PyDict::new(py);
    let s = crate::error::lock(h.inner.mutex());
    let Some(s) = s.as_lr_scheduler() else {
        return Ok(("LRScheduler".into(), d));
    };
    match s.schedule() {
        Schedule::Factor {
            step,
            factor,
            stop_factor_lr,
        } => {
            d.set_item("step", step)?;
            d.set_item("factor", factor)?;
            d.set_item("stop_factor_lr", stop_factor_lr)?;
        }
        Schedule::MultiFactor { steps, factor } => {
            d.set_item("step", steps.clone())?;
            d.set_item("factor", factor)?;
        }
        Schedule::Poly {
            max_update,
            pwr,
            final_lr,
        } => {
            d.set_item("max_update", max_update)?;
            d.set_item("pwr", pwr)?;
            d.set_item("final_lr", final_lr)?;
        }
        Schedule::Cosine {
            max_update,
            final_lr,
        } => {
            d.set_item("max_update", max_update)?;
            d.set_item("final_lr", final_lr)?;
        }
    }
    let o = s.options();
    d.set_item("base_lr", o.base_lr)?;
    d.set_item("warmup_steps", o.warmup_steps)?;
    d.set_item("warmup_begin_lr", o.warmup_begin_lr)?;
    d.set_item("warmup_mode", o.warmup_mode.name())?;
    Ok((s.schedule().class_name().into(), d))
}

/// Registers the optimizer and scheduler classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OptHandle>()?;
    m.add_class::<SchedHandle>()?;
    m.add_function(wrap_pyfunction!(opt_create, m)?)?;
    m.add_function(wrap_pyfunction!(opt_create_state, m)?)?;
    m.add_function(wrap_pyfunction!(opt_update, m)?)?;
    m.add_function(wrap_pyfunction!(opt_name, m)?)?;
    m.add_function(wrap_pyfunction!(opt_learning_rate, m)?)?;
    m.add_function(wrap_pyfunction!(opt_set_learning_rate, m)?)?;
    m.add_function(wrap_pyfunction!(opt_set_rescale_grad, m)?)?;
    m.add_function(wrap_pyfunction!(opt_num_update, m)?)?;
    m.add_function(wrap_pyfunction!(opt_update_count, m)?)?;
    m.add_function(wrap_pyfunction!(opt_common, m)?)?;
    m.add_function(wrap_pyfunction!(opt_params, m)?)?;
    m.add_function(wrap_pyfunction!(opt_lr_mult, m)?)?;
    m.add_function(wrap_pyfunction!(opt_wd_mult, m)?)?;
    m.add_function(wrap_pyfunction!(opt_idx2name, m)?)?;
    m.add_function(wrap_pyfunction!(opt_set_lr_mult, m)?)?;
    m.add_function(wrap_pyfunction!(opt_set_wd_mult, m)?)?;
    m.add_function(wrap_pyfunction!(opt_set_idx2name, m)?)?;
    m.add_function(wrap_pyfunction!(opt_warnings, m)?)?;
    m.add_function(wrap_pyfunction!(sched_factor, m)?)?;
    m.add_function(wrap_pyfunction!(sched_multifactor, m)?)?;
    m.add_function(wrap_pyfunction!(sched_poly, m)?)?;
    m.add_function(wrap_pyfunction!(sched_cosine, m)?)?;
    m.add_function(wrap_pyfunction!(sched_call, m)?)?;
    m.add_function(wrap_pyfunction!(sched_base_lr, m)?)?;
    m.add_function(wrap_pyfunction!(sched_set_base_lr, m)?)?;
    m.add_function(wrap_pyfunction!(sched_describe, m)?)?;
    Ok(())
}
