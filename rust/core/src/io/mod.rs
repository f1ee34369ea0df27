//! Data iterators (MXNet's `mx.io`): `DataDesc`, `DataBatch`, the `DataIter` trait, and the
//! iterators `NDArrayIter`, `MnistIter`, `CsvIter` and `BucketSentenceIter`.
//!
//! Batches are built here, in Rust: rows are gathered (or sliced without a copy when they are
//! contiguous) straight from the source arrays, so the per-batch cost does not depend on the
//! language driving the loop.

pub mod bucket;
pub mod csv;
pub mod mnist;
pub mod ndarray_iter;

pub use bucket::{BucketSentenceIter, BucketSentenceOptions};
pub use csv::{CsvIter, CsvOptions};
pub use mnist::{read_idx_images, read_idx_labels, IdxImages, MnistIter, MnistOptions};
pub use ndarray_iter::{LastBatchHandle, NDArrayIter, NDArrayIterOptions};

use crate::error::{Error, Result};
use crate::tensor::{random, DType, NDArray, Storable};
use crate::with_data;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The name, shape, dtype and layout of one input (data or label) of a batch.
///
/// The layout names the axes (`"NCHW"`: batch, channel, height, width); the batch axis is
/// where it has `N`. [`DataDesc::new`] picks MXNet's default layout for the rank.
///
/// ```
/// use mxfn_core::io::DataDesc;
/// let d = DataDesc::new("data", &[32, 3, 28, 28]);
/// assert_eq!(d.layout.as_deref(), Some("NCHW"));
/// assert_eq!(d.batch_axis(), Some(0));
/// let t = DataDesc::new("seq", &[10, 32, 8]).with_layout("TNC");
/// assert_eq!(t.batch_axis(), Some(1));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DataDesc {
    /// The input's name (`"data"`, `"softmax_label"`).
    pub name: String,
    /// The shape of a whole batch of this input.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DType,
    /// The axes' meaning (`"NCHW"`), or `None` when the rank has no default.
    pub layout: Option<String>,
}

impl DataDesc {
    /// A float32 desc with the default layout of its rank (see [`DataDesc::default_layout`]).
    pub fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        DataDesc {
            name: name.into(),
            shape: shape.to_vec(),
            dtype: DType::Float32,
            layout: Self::default_layout(shape.len()).map(str::to_string),
        }
    }

    /// The same desc with another dtype.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// The same desc with an explicit layout.
    pub fn with_layout(mut self, layout: impl Into<String>) -> Self {
        self.layout = Some(layout.into());
        self
    }

    /// The default layout of a rank: `N`, `NC`, `NTC`, `NCHW`, `NCDHW` for ranks 1 to 5;
    /// `None` for other ranks (their batch axis is 0).
    pub fn default_layout(rank: usize) -> Option<&'static str> {
        match rank {
            1 => Some("N"),
            2 => Some("NC"),
            3 => Some("NTC"),
            4 => Some("NCHW"),
            5 => Some("NCDHW"),
            _ => None,
        }
    }

    /// The batch axis: where the layout has `N`; 0 without a layout; `None` for a layout
    /// without `N` (MXNet's -1: the whole array goes to every device).
    pub fn batch_axis(&self) -> Option<usize> {
        match &self.layout {
            None => Some(0),
            Some(l) => l.find('N'),
        }
    }
}

/// One batch: the data and label arrays (in `provide_data` / `provide_label` order), the
/// number of padding samples at its end, the source indices of its samples, and for
/// bucketing iterators the bucket key and the batch's own descs.
#[derive(Clone, Debug, Default)]
pub struct DataBatch {
    /// One array per data input.
    pub data: Vec<NDArray>,
    /// One array per label input (empty without labels).
    pub label: Vec<NDArray>,
    /// How many samples at the end of the batch are padding (see each iterator's docs).
    pub pad: usize,
    /// The index in the source data of every sample of the batch.
    pub index: Option<Vec<usize>>,
    /// The bucket this batch belongs to (bucketing iterators).
    pub bucket_key: Option<usize>,
    /// Descs of this batch's data when they differ from the iterator's (bucketing).
    pub provide_data: Option<Vec<DataDesc>>,
    /// Descs of this batch's labels when they differ from the iterator's (bucketing).
    pub provide_label: Option<Vec<DataDesc>>,
}

/// A data iterator: an epoch is the batches from one `reset` to the `None` that ends it.
pub trait DataIter: Send {
    /// Descs of the data inputs (batch shapes).
    fn provide_data(&self) -> Vec<DataDesc>;
    /// Descs of the label inputs (batch shapes); empty without labels.
    fn provide_label(&self) -> Vec<DataDesc>;
    /// The batch size.
    fn batch_size(&self) -> usize;
    /// Starts a new epoch (reshuffling when the iterator shuffles).
    fn reset(&mut self) -> Result<()>;
    /// Whether `next_batch` would return a batch. When it returns false the epoch has ended
    /// exactly as if `next_batch` had returned `None` (roll-over samples are kept).
    fn has_next(&mut self) -> Result<bool>;
    /// The next batch of this epoch, or `None` at its end (again `None` until `reset`).
    fn next_batch(&mut self) -> Result<Option<DataBatch>>;
    /// The bucket key of the default (largest) bucket, for bucketing iterators.
    fn default_bucket_key(&self) -> Option<usize> {
        None
    }
    /// The batches from the current position to the end of the epoch.
    fn epoch(&mut self) -> Epoch<'_, Self>
    where
        Self: Sized,
    {
        Epoch { it: self }
    }
}

impl<T: DataIter + ?Sized> DataIter for Box<T> {
    fn provide_data(&self) -> Vec<DataDesc> {
        (**self).provide_data()
    }
    fn provide_label(&self) -> Vec<DataDesc> {
        (**self).provide_label()
    }
    fn batch_size(&self) -> usize {
        (**self).batch_size()
    }
    fn reset(&mut self) -> Result<()> {
        (**self).reset()
    }
    fn has_next(&mut self) -> Result<bool> {
        (**self).has_next()
    }
    fn next_batch(&mut self) -> Result<Option<DataBatch>> {
        (**self).next_batch()
    }
    fn default_bucket_key(&self) -> Option<usize> {
        (**self).default_bucket_key()
    }
}

/// The rest of an epoch as a Rust iterator of `Result<DataBatch>` (see [`DataIter::epoch`]).
pub struct Epoch<'a, I: DataIter> {
    it: &'a mut I,
}

impl<I: DataIter> Iterator for Epoch<'_, I> {
    type Item = Result<DataBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.it.next_batch().transpose()
    }
}

/// Names a list of arrays by MXNet's rule: one array is `name`; k > 1 arrays are
/// `_0_name`, `_1_name`, … in list order.
pub fn name_arrays(arrays: Vec<NDArray>, name: &str) -> Vec<(String, NDArray)> {
    if arrays.len() == 1 {
        arrays.into_iter().map(|a| (name.to_string(), a)).collect()
    } else {
        arrays
            .into_iter()
            .enumerate()
            .map(|(i, a)| (format!("_{i}_{name}"), a))
            .collect()
    }
}

/// Where shuffles draw from: the global stream (`mx.random.seed`) or a generator of the
/// iterator's own seed (its epochs are then reproducible whatever else draws numbers).
#[derive(Clone, Debug)]
pub(crate) enum Shuffler {
    Global,
    Seeded(Box<ChaCha8Rng>),
}

impl Shuffler {
    pub(crate) fn new(seed: Option<u64>) -> Self {
        match seed {
            None => Shuffler::Global,
            Some(s) => Shuffler::Seeded(Box::new(ChaCha8Rng::seed_from_u64(s))),
        }
    }

    /// A random permutation of `0..n`.
    pub(crate) fn permutation(&mut self, n: usize) -> Vec<usize> {
        match self {
            Shuffler::Global => random::permutation(n),
            Shuffler::Seeded(rng) => {
                let mut p: Vec<usize> = (0..n).collect();
                for i in (1..n).rev() {
                    p.swap(i, rng.gen_range(0..=i));
                }
                p
            }
        }
    }
}

/// The rows `idx` (along axis 0) of `a`, in that order. A run of consecutive rows is a view
/// of `a`'s storage (no copy); anything else is gathered into a new array.
pub fn take_rows(a: &NDArray, idx: &[usize]) -> Result<NDArray> {
    let n = a.shape().first().copied().unwrap_or(0);
    if let Some(bad) = idx.iter().find(|&&i| i >= n) {
        return Err(Error::invalid(
            "take_rows: index",
            format!("a row below {n}"),
            bad.to_string(),
        ));
    }
    let contiguous = idx.windows(2).all(|w| w[1] == w[0] + 1);
    if contiguous && !idx.is_empty() {
        let start = idx[0] as isize;
        return a.slice_axis(0, start, Some(start + idx.len() as isize));
    }
    let row: usize = a.shape().iter().skip(1).product();
    let mut shape = a.shape().to_vec();
    if let Some(first) = shape.first_mut() {
        *first = idx.len();
    }
    let out = with_data!(a.data(), arr => gather(arr.as_slice(), row, idx, &shape))?;
    Ok(out.as_in_context(a.context()))
}

fn gather<T: Storable + Clone>(
    flat: Option<&[T]>,
    row: usize,
    idx: &[usize],
    shape: &[usize],
) -> Result<NDArray> {
    let flat = flat.ok_or_else(|| Error::Msg("internal: take_rows on a strided array".into()))?;
    let mut out = Vec::with_capacity(idx.len() * row);
    for &i in idx {
        let r = flat
            .get(i * row..(i + 1) * row)
            .ok_or_else(|| Error::Msg(format!("internal: row {i} out of range")))?;
        out.extend_from_slice(r);
    }
    NDArray::from_vec(shape, out)
}

/// The batch shape of one input: the batch size followed by the per-sample shape.
pub(crate) fn batch_shape(batch_size: usize, sample: &[usize]) -> Vec<usize> {
    std::iter::once(batch_size)
        .chain(sample.iter().copied())
        .collect()
}

/// Checks a batch size (`what` names the calling function).
pub(crate) fn check_batch_size(what: &str, batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(Error::invalid(
            format!("{what}: batch_size"),
            "a positive number of samples",
            "0",
        ));
    }
    Ok(())
}

/// Checks that one batch of `batch_size` samples of every array (per-sample shape and dtype)
/// fits the limits policy ([`crate::limits::max_bytes`]), before any batch is allocated.
pub(crate) fn check_batch_bytes<'a>(
    what: &str,
    batch_size: usize,
    arrays: impl IntoIterator<Item = (&'a [usize], DType)>,
) -> Result<()> {
    let key = format!("{what}: batch_size");
    let mut total: u64 = 0;
    for (sample, dtype) in arrays {
        let bytes =
            crate::limits::array_bytes(&key, &batch_shape(batch_size, sample), dtype.size())?;
        total = total.saturating_add(bytes);
    }
    crate::limits::check_bytes(&key, total, &format!("one batch of {batch_size} samples"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_batch_axis() {
        let ranks: Vec<_> = (0..7).map(DataDesc::default_layout).collect();
        assert_eq!(
            ranks,
            vec![
                None,
                Some("N"),
                Some("NC"),
                Some("NTC"),
                Some("NCHW"),
                Some("NCDHW"),
                None
            ]
        );
        assert_eq!(
            DataDesc::new("x", &[1, 2, 3, 4, 5, 6]).batch_axis(),
            Some(0)
        );
        assert_eq!(
            DataDesc::new("x", &[4, 2]).with_layout("TC").batch_axis(),
            None
        );
    }

    #[test]
    fn take_rows_views_runs_and_gathers_the_rest() {
        let a = NDArray::from_vec(&[4, 2], (0..8).collect::<Vec<i32>>()).unwrap();
        assert_eq!(
            take_rows(&a, &[1, 2]).unwrap().to_f64_vec(),
            vec![2.0, 3.0, 4.0, 5.0]
        );
        let g = take_rows(&a, &[3, 0, 3]).unwrap();
        assert_eq!(g.shape(), &[3, 2]);
        assert_eq!(g.to_f64_vec(), vec![6.0, 7.0, 0.0, 1.0, 6.0, 7.0]);
        assert!(take_rows(&a, &[4]).is_err());
    }

    #[test]
    fn naming_rule_and_seeded_permutations() {
        let one = name_arrays(vec![NDArray::zeros(&[2], DType::Float32)], "data");
        assert_eq!(one[0].0, "data");
        let two = name_arrays(
            vec![
                NDArray::zeros(&[2], DType::Float32),
                NDArray::zeros(&[2], DType::Float32),
            ],
            "data",
        );
        assert_eq!(two[1].0, "_1_data");
        let (mut a, mut b) = (Shuffler::new(Some(3)), Shuffler::new(Some(3)));
        let p = a.permutation(50);
        assert_eq!(p, b.permutation(50));
        assert_ne!(p, a.permutation(50));
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
    }
}
