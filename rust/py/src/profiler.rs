//! Profiler bindings: start / stop the core's operator profiler and read its table
//! (`mxfn.profiler` builds `set_state` / `dumps` on them).

use crate::error::core;
use mxfn_core::executor::profile;
use pyo3::prelude::*;

#[pyfunction]
fn profiler_set_running(py: Python<'_>, on: bool) -> PyResult<()> {
    core(py, "profiler.set_state", || {
        profile::set_running(on);
        Ok(())
    })
}

#[pyfunction]
fn profiler_running() -> bool {
    profile::running()
}

/// The table as text; the core's lock is taken and released with the GIL released.
#[pyfunction]
fn profiler_dumps(py: Python<'_>, reset: bool) -> PyResult<String> {
    core(py, "profiler.dumps", || Ok(profile::dumps(reset)))
}

#[pyfunction]
fn profiler_reset(py: Python<'_>) -> PyResult<()> {
    core(py, "profiler.reset", || {
        profile::reset();
        Ok(())
    })
}

/// `[(operator, pass, calls, total ms)]` and `[(layer, operator, pass, calls, total ms)]`.
type Rows = (
    Vec<(String, String, u64, f64)>,
    Vec<(String, String, String, u64, f64)>,
);

#[pyfunction]
fn profiler_rows(py: Python<'_>) -> PyResult<Rows> {
    core(py, "profiler.rows", || {
        let p = profile::snapshot();
        let pass = |k: usize| if k == 0 { "forward" } else { "backward" };
        let ops = p
            .ops
            .iter()
            .map(|((op, ps), s)| {
                let k = *ps as usize;
                (
                    op.to_string(),
                    pass(k).to_string(),
                    s.count,
                    s.total.as_secs_f64() * 1e3,
                )
            })
            .collect();
        let nodes = p
            .nodes
            .iter()
            .flat_map(|(n, row)| {
                row.iter().enumerate().filter_map(move |(k, (op, s))| {
                    op.map(|op| {
                        (
                            n.clone(),
                            op.to_string(),
                            pass(k).to_string(),
                            s.count,
                            s.total.as_secs_f64() * 1e3,
                        )
                    })
                })
            })
            .collect();
        Ok((ops, nodes))
    })
}

/// Registers the profiler functions on `mxfn._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(profiler_set_running, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_running, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_dumps, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_reset, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_rows, m)?)?;
    Ok(())
}
