//! mxfn-core: MXNet's Module API in pure Rust — NDArray, kernels and (as they land) the
//! operator registry, symbols, executors, optimizers and the Module itself.
//!
//! ```
//! use mxfn_core::{NDArray, DType};
//! let x = NDArray::ones(&[2, 3], DType::Float32);
//! let s = mxfn_core::tensor::reduce::reduce(&x, mxfn_core::tensor::reduce::ReduceOp::Sum, None, false, false).unwrap();
//! assert_eq!(s.to_scalar().unwrap(), 6.0);
//! ```
#![warn(missing_docs)]

pub mod atomic_file;
pub mod context;
pub mod error;
pub mod executor;
pub mod initializer;
pub mod io;
pub mod kernels;
pub mod limits;
pub mod metric;
pub mod module;
pub mod ops;
pub mod optimizer;
pub mod symbol;
pub mod tensor;

pub use context::Context;
pub use error::{Error, Result, ResultExt};
pub use executor::{Executor, GradReq};
pub use module::Collective;
pub use symbol::Symbol;
pub use tensor::{DType, NDArray};
