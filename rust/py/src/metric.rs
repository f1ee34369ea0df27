//! Metric bindings: `MetricHandle` (a core `EvalMetric` behind a lock) and the calls
//! `mxfn.eval_metric` builds on.

use crate::error::core;
use crate::nd::Handle;
use mxfn_core::metric::{canonical_name, EvalMetric};
use mxfn_core::NDArray;
use pyo3::prelude::*;
use std::sync::{Mutex, MutexGuard};

/// A built-in metric accumulator; `mxfn.eval_metric` wraps it. Updates mutate it in place.
#[pyclass(frozen, module = "mxfn._native", name = "MetricHandle")]
pub struct MetricHandle {
    inner: Mutex<EvalMetric>,
}

impl MetricHandle {
    pub(crate) fn lock(&self) -> MutexGuard<'_, EvalMetric> {
        crate::error::lock(&self.inner)
    }
}

fn arrays(v: &[PyRef<'_, Handle>]) -> Vec<NDArray> {
    v.iter().map(|a| a.inner.clone()).collect()
}

#[pyfunction]
fn metric_canonical(py: Python<'_>, name: &str) -> PyResult<&'static str> {
    core(py, "eval_metric.create", || canonical_name(name))
}

#[pyfunction]
fn metric_create(py: Python<'_>, name: &str, params_json: &str) -> PyResult<MetricHandle> {
    core(py, "eval_metric.create", || {
        EvalMetric::create_json(name, params_json).map(|m| MetricHandle {
            inner: Mutex::new(m),
        })
    })
}

#[pyfunction]
fn metric_update(
    py: Python<'_>,
    m: &MetricHandle,
    labels: Vec<PyRef<'_, Handle>>,
    preds: Vec<PyRef<'_, Handle>>,
) -> PyResult<()> {
    let (l, p) = (arrays(&labels), arrays(&preds));
    core(py, "eval_metric.update", || m.lock().update(&l, &p))
}

#[pyfunction]
fn metric_reset(py: Python<'_>, m: &MetricHandle, local_only: bool) -> PyResult<()> {
    core(py, "eval_metric.reset", || {
        let mut g = m.lock();
        if local_only {
            g.reset_local();
        } else {
            g.reset();
        }
        Ok(())
    })
}

#[pyfunction]
fn metric_get(py: Python<'_>, m: &MetricHandle, global: bool) -> PyResult<Vec<(String, f64)>> {
    core(py, "eval_metric.get", || {
        let g = m.lock();
        Ok(if global { g.get_global() } else { g.get() })
    })
}

/// Registers the metric functions on `mxfn._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MetricHandle>()?;
    m.add_function(wrap_pyfunction!(metric_canonical, m)?)?;
    m.add_function(wrap_pyfunction!(metric_create, m)?)?;
    m.add_function(wrap_pyfunction!(metric_update, m)?)?;
    m.add_function(wrap_pyfunction!(metric_reset, m)?)?;
    m.add_function(wrap_pyfunction!(metric_get, m)?)?;
    Ok(())
}
