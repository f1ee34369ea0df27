//! BucketingModule bindings: `mod_share_params` points one bucket's module at another's
//! parameter arrays (no data copy); the bucket bookkeeping lives in `mxfn.module`.

use crate::error::core;
use crate::module::ModuleHandle;
use pyo3::prelude::*;

#[pyfunction]
fn mod_share_params(py: Python<'_>, h: &ModuleHandle, src: &ModuleHandle) -> PyResult<()> {
    if std::ptr::eq(h, src) {
        return Ok(());
    }
    core(py, "module.bucketing_module", || {
        let s = src.lock();
        h.lock().share_params_from(&s)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mod_share_params, m)?)?;
    Ok(())
}
