//! The only place a core error becomes a Python exception, and the one door into the core.

use mxfn_core::Error;
use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use std::panic::{catch_unwind, AssertUnwindSafe};

static MXFN_ERROR: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// `mxfn._errors.MXFNError`, the class every library error is raised as.
fn mxfn_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    MXFN_ERROR.import(py, "mxfn._errors", "MXFNError")
}

/// Builds an MXFNError with `msg` (a plain ValueError if the class cannot be imported).
pub fn mxfn_err(msg: String) -> PyErr {
    Python::with_gil(|py| match mxfn_error(py) {
        Ok(cls) => PyErr::from_type(cls.clone(), msg),
        Err(_) => PyValueError::new_err(msg),
    })
}

/// Maps a core error to Python by variant: a missing file is FileNotFoundError, the rest
/// MXFNError (a ValueError).
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e.root() {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(msg)
        }
        _ => mxfn_err(msg),
    }
}

/// Runs a core call with the GIL released, turning its error into a Python exception and a
/// panic into `MXFNError("internal error in <call>: …")` — a panic never reaches Python.
pub fn core<T: Send>(
    py: Python<'_>,
    call: &str,
    f: impl FnOnce() -> mxfn_core::Result<T> + Send,
) -> PyResult<T> {
    let out = py.allow_threads(|| catch_unwind(AssertUnwindSafe(f)));
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(mxfn_err(format!("internal error in {call}: {what}")))
        }
    }
}
