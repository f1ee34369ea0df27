//! mxfn._native: thin PyO3 bindings of mxfn-core. Each function converts its arguments,
//! enters the core through `error::core` (GIL released, panics caught) and converts back.

mod bucketing;
mod convert;
mod dist;
mod error;
mod init;
mod io;
mod metric;
mod module;
mod nd;
mod optim;
mod profiler;
mod run_loop;
mod sym;

use pyo3::prelude::*;

/// mimalloc keeps freed pages for reuse: the executor's per-batch buffers (hundreds of KB)
/// would otherwise go back to the kernel and come back as freshly zeroed pages each batch.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The extension module `mxfn._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    nd::register(m)?;
    optim::register(m)?;
    init::register(m)?;
    metric::register(m)?;
    io::register(m)?;
    sym::register(m)?;
    module::register(m)?;
    bucketing::register(m)?;
    run_loop::register(m)?;
    dist::register(m)?;
    profiler::register(m)?;
    Ok(())
}
