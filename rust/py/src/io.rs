//! Data iterator bindings: one handle class over any core `DataIter`, and its constructors.

use crate::error::{core, to_py};
use crate::nd::Handle;
use mxfn_core::io::{
    name_arrays, BucketSentenceIter, BucketSentenceOptions, CsvIter, CsvOptions, DataBatch,
    DataDesc, DataIter, MnistIter, MnistOptions, NDArrayIter, NDArrayIterOptions,
};
use mxfn_core::{DType, NDArray};
use numpy::PyArray1;
use pyo3::prelude::*;
use std::sync::{Mutex, MutexGuard};

/// A core data iterator. `mxfn.io` wraps it; calls release the GIL, so a prefetching thread
/// runs while Python works.
#[pyclass(frozen, module = "mxfn._native", name = "DataIterHandle")]
pub struct IterHandle {
    inner: Mutex<Box<dyn DataIter>>,
}

/// A desc as plain data: (name, shape, dtype name, layout).
type Desc = (String, Vec<usize>, &'static str, Option<String>);

/// A batch as plain data: (data, label, pad, index, bucket_key, provide_data, provide_label).
type Batch<'py> = (
    Vec<Handle>,
    Vec<Handle>,
    usize,
    Option<Bound<'py, PyArray1<i64>>>,
    Option<usize>,
    Option<Vec<Desc>>,
    Option<Vec<Desc>>,
);

fn desc(d: DataDesc) -> Desc {
    (d.name, d.shape, d.dtype.name(), d.layout)
}

fn descs(ds: Vec<DataDesc>) -> Vec<Desc> {
    ds.into_iter().map(desc).collect()
}

fn handles(xs: Vec<NDArray>) -> Vec<Handle> {
    xs.into_iter().map(|inner| Handle { inner }).collect()
}

impl IterHandle {
    fn new(it: impl DataIter + 'static) -> Self {
        IterHandle {
            inner: Mutex::new(Box::new(it)),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Box<dyn DataIter>> {
        crate::error::lock(&self.inner)
    }
}

#[pymethods]
impl IterHandle {
    /// Descs of the data inputs.
    fn provide_data(&self) -> Vec<Desc> {
        descs(self.lock().provide_data())
    }
    /// Descs of the label inputs.
    fn provide_label(&self) -> Vec<Desc> {
        descs(self.lock().provide_label())
    }
    /// The batch size.
    fn batch_size(&self) -> usize {
        self.lock().batch_size()
    }
    /// The default bucket key of a bucketing iterator, else None.
    fn default_bucket_key(&self) -> Option<usize> {
        self.lock().default_bucket_key()
    }
    /// Starts a new epoch.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        core(py, "io.reset", || self.lock().reset())
    }
    /// Whether `next` would return a batch.
    fn has_next(&self, py: Python<'_>) -> PyResult<bool> {
        core(py, "io.has_next", || self.lock().has_next())
    }
    /// The next batch as plain data, or None at the end of the epoch.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Batch<'py>>> {
        let b: Option<DataBatch> = core(py, "io.next", || self.lock().next_batch())?;
        Ok(b.map(|b| {
            let index = b.index.map(|ix| {
                PyArray1::from_vec(py, ix.into_iter().map(|i| i as i64).collect::<Vec<_>>())
            });
            (
                handles(b.data),
                handles(b.label),
                b.pad,
                index,
                b.bucket_key,
                b.provide_data.map(descs),
                b.provide_label.map(descs),
            )
        }))
    }
}

fn inners(xs: &[PyRef<'_, Handle>]) -> Vec<NDArray> {
    xs.iter().map(|h| h.inner.clone()).collect()
}

/// Named arrays: the given names, or MXNet's rule (`name`, or `_0_name`, `_1_name`, …).
fn named(xs: Vec<NDArray>, names: Option<Vec<String>>, name: &str) -> Vec<(String, NDArray)> {
    match names {
        Some(ns) => ns.into_iter().zip(xs).collect(),
        None => name_arrays(xs, name),
    }
}

#[pyfunction]
#[pyo3(signature = (data, data_names, data_name, label, label_names, label_name, batch_size, shuffle, last_batch_handle, seed=None))]
#[allow(clippy::too_many_arguments)]
fn io_ndarray_iter(
    py: Python<'_>,
    data: Vec<PyRef<'_, Handle>>,
    data_names: Option<Vec<String>>,
    data_name: String,
    label: Vec<PyRef<'_, Handle>>,
    label_names: Option<Vec<String>>,
    label_name: String,
    batch_size: usize,
    shuffle: bool,
    last_batch_handle: &str,
    seed: Option<u64>,
) -> PyResult<IterHandle> {
    let data = named(inners(&data), data_names, &data_name);
    let label = named(inners(&label), label_names, &label_name);
    let mode = last_batch_handle.parse().map_err(to_py)?;
    core(py, "io.ndarray_iter", || {
        let opts = NDArrayIterOptions {
            batch_size,
            shuffle,
            last_batch_handle: mode,
            seed,
        };
        NDArrayIter::new(data, label, opts).map(IterHandle::new)
    })
}

#[pyfunction]
#[pyo3(signature = (image, label, batch_size, shuffle, flat, input_shape, seed, data_name, label_name, num_parts, part_index))]
#[allow(clippy::too_many_arguments)]
fn io_mnist_iter(
    py: Python<'_>,
    image: String,
    label: String,
    batch_size: usize,
    shuffle: bool,
    flat: bool,
    input_shape: Option<Vec<usize>>,
    seed: Option<u64>,
    data_name: String,
    label_name: String,
    num_parts: usize,
    part_index: usize,
) -> PyResult<IterHandle> {
    core(py, "io.mnist_iter", || {
        let opts = MnistOptions {
            image,
            label,
            batch_size,
            shuffle,
            flat,
            input_shape,
            seed,
            data_name,
            label_name,
            num_parts,
            part_index,
        };
        MnistIter::new(opts).map(IterHandle::new)
    })
}

#[pyfunction]
#[pyo3(signature = (data_csv, data_shape, label_csv, label_shape, batch_size, round_batch, dtype, data_name, label_name, num_parts, part_index))]
#[allow(clippy::too_many_arguments)]
fn io_csv_iter(
    py: Python<'_>,
    data_csv: String,
    data_shape: Vec<usize>,
    label_csv: Option<String>,
    label_shape: Vec<usize>,
    batch_size: usize,
    round_batch: bool,
    dtype: &str,
    data_name: String,
    label_name: String,
    num_parts: usize,
    part_index: usize,
) -> PyResult<IterHandle> {
    let dtype = DType::parse(dtype).map_err(to_py)?;
    core(py, "io.csv_iter", || {
        let opts = CsvOptions {
            data_csv,
            data_shape,
            label_csv,
            label_shape,
            batch_size,
            round_batch,
            dtype,
            data_name,
            label_name,
            num_parts,
            part_index,
        };
        CsvIter::new(opts).map(IterHandle::new)
    })
}

/// Returns (handle, number of discarded sentences, bucket lengths in use).
#[pyfunction]
#[pyo3(signature = (sentences, batch_size, buckets, invalid_label, data_name, label_name, dtype, layout, seed=None))]
#[allow(clippy::too_many_arguments)]
fn io_bucket_sentence_iter(
    py: Python<'_>,
    sentences: Vec<Vec<f64>>,
    batch_size: usize,
    buckets: Vec<usize>,
    invalid_label: f64,
    data_name: String,
    label_name: String,
    dtype: &str,
    layout: String,
    seed: Option<u64>,
) -> PyResult<(IterHandle, usize, Vec<usize>)> {
    let dtype = DType::parse(dtype).map_err(to_py)?;
    core(py, "io.bucket_sentence_iter", || {
        let opts = BucketSentenceOptions {
            buckets,
            invalid_label,
            data_name,
            label_name,
            dtype,
            layout,
            seed,
        };
        let it = BucketSentenceIter::new(&sentences, batch_size, opts)?;
        let (discarded, used) = (it.discarded(), it.buckets());
        Ok((IterHandle::new(it), discarded, used))
    })
}

/// Registers the iterator class and constructors on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IterHandle>()?;
    m.add_function(wrap_pyfunction!(io_ndarray_iter, m)?)?;
    m.add_function(wrap_pyfunction!(io_mnist_iter, m)?)?;
    m.add_function(wrap_pyfunction!(io_csv_iter, m)?)?;
    m.add_function(wrap_pyfunction!(io_bucket_sentence_iter, m)?)?;
    Ok(())
}
