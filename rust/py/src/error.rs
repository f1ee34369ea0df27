//! The only place a core error becomes a Python exception, and the one door into the core.

use mxfn_core::Error;
use pyo3::exceptions::{PyFileNotFoundError, PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

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

/// Maps a core error to Python by variant: a missing file is FileNotFoundError, an
/// interrupted call KeyboardInterrupt, the rest MXFNError (a ValueError).
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e.root() {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(msg)
        }
        Error::Interrupted { .. } => PyKeyboardInterrupt::new_err(msg),
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
    from_core(call, out)
}

/// How often an interruptible call looks for Ctrl-C: well under the second a user waits.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// [`core`] for a long call (a loop over batches) that Ctrl-C must stop: the work runs on a
/// scoped worker thread while this thread, the one Python delivers signals to, waits with
/// the GIL released and runs Python's signal handlers every [`SIGNAL_POLL`]. A handler that
/// raises (KeyboardInterrupt) sets `interrupt`, which the core's loop checks between batches;
/// the handler's exception is then raised here.
pub fn core_interruptible<T: Send>(
    py: Python<'_>,
    call: &str,
    interrupt: Arc<AtomicBool>,
    f: impl FnOnce() -> mxfn_core::Result<T> + Send,
) -> PyResult<T> {
    let (out, raised) = py.allow_threads(|| {
        std::thread::scope(|s| {
            let (done_tx, done_rx) = mpsc::channel::<()>();
            let worker = s.spawn(move || {
                let out = catch_unwind(AssertUnwindSafe(f));
                let _ = done_tx.send(());
                out
            });
            let mut raised = None;
            while let Err(RecvTimeoutError::Timeout) = done_rx.recv_timeout(SIGNAL_POLL) {
                if raised.is_none() {
                    if let Err(e) = Python::with_gil(|py| py.check_signals()) {
                        interrupt.store(true, Ordering::Relaxed);
                        raised = Some(e);
                    }
                }
            }
            // The worker catches its own panics, so joining it does not fail.
            let out = worker.join().unwrap_or_else(Err);
            (out, raised)
        })
    });
    match raised {
        Some(e) => Err(e),
        None => from_core(call, out),
    }
}

/// A core call's outcome as a Python result (a caught panic becomes MXFNError).
fn from_core<T>(call: &str, out: std::thread::Result<mxfn_core::Result<T>>) -> PyResult<T> {
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

extern "C" {
    /// CPython's "does this thread hold the GIL" (exported by every CPython 3; pyo3's abi3
    /// declarations leave it out because it joined the limited API only in 3.13).
    fn PyGILState_Check() -> std::os::raw::c_int;
}

/// Locks `m` — every handle's lock goes through here — without ever waiting for it while
/// holding the GIL. Another thread may hold the lock inside a core call and need the GIL to
/// finish (a monitor or a Python lr scheduler called from the core); waiting for the lock with
/// the GIL would deadlock. So a caller holding the GIL that finds the lock busy releases the
/// GIL until the holder lets go, takes the GIL back and tries again. Inside a core call (GIL
/// released) it simply waits. A lock left poisoned by a caught panic is recovered: the core's
/// values stay consistent.
pub fn lock<T: Send>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // SAFETY: PyGILState_Check only reads this thread's state; the interpreter is running
    // while the extension is loaded.
    let holds_gil = unsafe { PyGILState_Check() } == 1;
    loop {
        match m.try_lock() {
            Ok(g) => return g,
            Err(TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(TryLockError::WouldBlock) if holds_gil => {
                // SAFETY: this thread holds the GIL (checked above).
                let py = unsafe { Python::assume_gil_acquired() };
                py.allow_threads(|| drop(m.lock()));
            }
            Err(TryLockError::WouldBlock) => return m.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}
