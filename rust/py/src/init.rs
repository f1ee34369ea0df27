//! Initializer bindings: apply an initializer given as MXNet's JSON spec to an array.

use crate::error::core;
use crate::nd::Handle;
use mxfn_core::initializer::Initializer;
use pyo3::prelude::*;
use std::collections::BTreeMap;

/// Validates a spec (`'["xavier", {"magnitude": 2}]'`) and returns the core's JSON for it.
#[pyfunction]
fn init_check(py: Python<'_>, spec: &str) -> PyResult<String> {
    core(py, "initializer", || {
        Initializer::from_json(spec)?.to_json()
    })
}

/// A new array like `arr`, initialised for parameter `name` by the name rules (`attrs`: the
/// variable's attributes, whose `__init__` wins).
#[pyfunction]
#[pyo3(signature = (spec, name, arr, attrs=None))]
fn init_apply(
    py: Python<'_>,
    spec: &str,
    name: &str,
    arr: &Handle,
    attrs: Option<BTreeMap<String, String>>,
) -> PyResult<Handle> {
    core(py, "initializer.apply", || {
        let init = Initializer::from_json(spec)?;
        let inner = init.apply(name, attrs.as_ref(), &arr.inner)?;
        Ok(Handle { inner })
    })
}

/// Registers the initializer functions on `mxfn._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(init_check, m)?)?;
    m.add_function(wrap_pyfunction!(init_apply, m)?)?;
    Ok(())
}
