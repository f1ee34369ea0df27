//! The core's one fit loop and one score loop (`mxfn_core::module::run_loop`) driving steps
//! written in Python: `mxfn._fit` implements each step over Python iterators, metrics,
//! monitors and callbacks; the order of the steps lives in the core, shared with the Rust
//! `Module::fit` / `Module::score`. The GIL is held throughout (every step is Python) and no
//! Rust lock is held here; a Python exception from a step, KeyboardInterrupt included,
//! passes through unchanged.

use mxfn_core::module::run_loop::{self, FitSteps, ScoreSteps};
use pyo3::prelude::*;

/// A Python object with the step methods (see `mxfn._fit._FitSteps` / `_ScoreSteps`).
struct PySteps<'py>(Bound<'py, PyAny>);

impl<'py> PySteps<'py> {
    fn next(&self) -> PyResult<Option<Bound<'py, PyAny>>> {
        let b = self.0.call_method0("next_batch")?;
        Ok((!b.is_none()).then_some(b))
    }
}

impl<'py> FitSteps for PySteps<'py> {
    type Batch = Bound<'py, PyAny>;
    type Error = PyErr;

    fn begin_epoch(&mut self, epoch: usize) -> PyResult<()> {
        self.0.call_method1("begin_epoch", (epoch,)).map(drop)
    }
    fn next_batch(&mut self) -> PyResult<Option<Self::Batch>> {
        self.next()
    }
    fn train_batch(&mut self, epoch: usize, batch: &Self::Batch) -> PyResult<()> {
        self.0.call_method1("train_batch", (epoch, batch)).map(drop)
    }
    fn batch_end(&mut self, epoch: usize, nbatch: usize, last: bool) -> PyResult<()> {
        self.0
            .call_method1("batch_end", (epoch, nbatch, last))
            .map(drop)
    }
    fn end_epoch(&mut self, epoch: usize, seconds: f64) -> PyResult<()> {
        self.0.call_method1("end_epoch", (epoch, seconds)).map(drop)
    }
    fn validate(&mut self, epoch: usize) -> PyResult<()> {
        self.0.call_method1("validate", (epoch,)).map(drop)
    }
}

impl<'py> ScoreSteps for PySteps<'py> {
    type Batch = Bound<'py, PyAny>;
    type Error = PyErr;

    fn next_batch(&mut self) -> PyResult<Option<Self::Batch>> {
        self.next()
    }
    fn eval_batch(&mut self, batch: &Self::Batch) -> PyResult<()> {
        self.0.call_method1("eval_batch", (batch,)).map(drop)
    }
    fn batch_end(&mut self, nbatch: usize) -> PyResult<()> {
        self.0.call_method1("batch_end", (nbatch,)).map(drop)
    }
}

/// Runs epochs `begin_epoch..num_epoch` of the one fit loop over `steps`.
#[pyfunction]
fn fit_loop(steps: &Bound<'_, PyAny>, begin_epoch: usize, num_epoch: usize) -> PyResult<()> {
    run_loop::fit_loop(&mut PySteps(steps.clone()), begin_epoch..num_epoch)
}

/// Runs the one score loop over `steps` (at most `num_batch` batches); the batches run.
#[pyfunction]
fn score_loop(steps: &Bound<'_, PyAny>, num_batch: Option<usize>) -> PyResult<usize> {
    run_loop::score_loop(&mut PySteps(steps.clone()), num_batch)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fit_loop, m)?)?;
    m.add_function(wrap_pyfunction!(score_loop, m)?)?;
    Ok(())
}
