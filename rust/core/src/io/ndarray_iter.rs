//! NDArrayIter: batches over in-memory arrays, with MXNet 1.9.1's shuffling and its three
//! ways of handling the last, incomplete batch (`pad`, `discard`, `roll_over`).

use super::{
    batch_shape, check_batch_bytes, check_batch_size, take_rows, DataBatch, DataDesc, DataIter,
    Shuffler,
};
use crate::error::{Error, Result};
use crate::tensor::NDArray;
use std::fmt;
use std::str::FromStr;

/// What to do with the samples left over when the data size is not a multiple of the batch
/// size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LastBatchHandle {
    /// Fill the last batch with samples from the start of the epoch's order (wrapping as
    /// often as needed); its `pad` is the number of filler samples.
    #[default]
    Pad,
    /// Drop the incomplete last batch.
    Discard,
    /// Keep the left-over samples for the first batch of the next epoch; that batch reports
    /// their count as its `pad` (MXNet's rule), although none of its samples is filler.
    RollOver,
}

impl LastBatchHandle {
    /// MXNet's name: `"pad"`, `"discard"` or `"roll_over"`.
    pub fn name(self) -> &'static str {
        match self {
            LastBatchHandle::Pad => "pad",
            LastBatchHandle::Discard => "discard",
            LastBatchHandle::RollOver => "roll_over",
        }
    }
}

impl fmt::Display for LastBatchHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LastBatchHandle {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "pad" => Ok(LastBatchHandle::Pad),
            "discard" => Ok(LastBatchHandle::Discard),
            "roll_over" => Ok(LastBatchHandle::RollOver),
            other => Err(Error::invalid(
                "io.ndarray_iter: last_batch_handle",
                "one of \"pad\", \"discard\", \"roll_over\"",
                format!("\"{other}\""),
            )),
        }
    }
}

/// Options of [`NDArrayIter`] (MXNet's defaults).
#[derive(Clone, Debug)]
pub struct NDArrayIterOptions {
    /// Samples per batch (default 1).
    pub batch_size: usize,
    /// Reshuffle at construction and at every reset (default false).
    pub shuffle: bool,
    /// The last, incomplete batch (default pad).
    pub last_batch_handle: LastBatchHandle,
    /// Seed of the iterator's own shuffling; `None` draws from the global seed.
    pub seed: Option<u64>,
}

impl Default for NDArrayIterOptions {
    fn default() -> Self {
        NDArrayIterOptions {
            batch_size: 1,
            shuffle: false,
            last_batch_handle: LastBatchHandle::Pad,
            seed: None,
        }
    }
}

/// One planned batch: source row indices and the pad to report.
#[derive(Clone, Debug)]
struct Plan {
    idx: Vec<usize>,
    pad: usize,
}

/// Batches over named in-memory arrays (axis 0 is the sample axis), as MXNet's NDArrayIter.
///
/// With `shuffle`, the order is redrawn at construction and at every `reset`. Batches
/// keep the arrays' dtypes; consecutive rows are views of the source (no copy).
///
/// ```
/// use mxfn_core::io::{DataIter, LastBatchHandle, NDArrayIter, NDArrayIterOptions};
/// use mxfn_core::NDArray;
/// let x = NDArray::from_vec(&[5, 1], vec![0.0f32, 1.0, 2.0, 3.0, 4.0]).unwrap();
/// let opts = NDArrayIterOptions { batch_size: 2, ..Default::default() };
/// let mut it = NDArrayIter::new(vec![("data".into(), x)], vec![], opts).unwrap();
/// let pads: Vec<usize> = it.epoch().map(|b| b.unwrap().pad).collect();
/// assert_eq!(pads, vec![0, 0, 1]); // the last batch is [4, 0]
/// ```
pub struct NDArrayIter {
    data: Vec<(String, NDArray)>,
    label: Vec<(String, NDArray)>,
    opts: NDArrayIterOptions,
    num_data: usize,
    order: Vec<usize>,
    shuffler: Shuffler,
    /// Position in `order` of the next fresh sample.
    pos: usize,
    /// Samples left from the previous epoch (roll_over), first in the next batch.
    carry: Vec<usize>,
    /// The epoch has ended (sticky until reset, so extra calls lose no roll-over samples).
    done: bool,
    /// A batch planned by `has_next`, handed out by the next `next_batch`.
    peeked: Option<Plan>,
}

impl NDArrayIter {
    /// An iterator over `data` and `label` (name, array) pairs; every array has the same
    /// number of samples (> 0) along axis 0.
    pub fn new(
        data: Vec<(String, NDArray)>,
        label: Vec<(String, NDArray)>,
        opts: NDArrayIterOptions,
    ) -> Result<Self> {
        Self::new_for("io.ndarray_iter", data, label, opts)
    }

    /// [`NDArrayIter::new`] for another iterator built on this one: errors name `what`.
    pub(crate) fn new_for(
        what: &str,
        data: Vec<(String, NDArray)>,
        label: Vec<(String, NDArray)>,
        opts: NDArrayIterOptions,
    ) -> Result<Self> {
        check_batch_size(what, opts.batch_size)?;
        let (first_name, first) = data.first().ok_or_else(|| {
            Error::invalid(
                format!("{what}: data"),
                "at least one array",
                "no arrays (empty data)",
            )
        })?;
        for (name, a) in data.iter().chain(&label) {
            if a.ndim() == 0 {
                return Err(Error::invalid(
                    format!("{what}: \"{name}\""),
                    "an array with a sample axis (rank >= 1)",
                    "a 0-d array",
                ));
            }
        }
        let num_data = first.shape()[0];
        if num_data == 0 {
            return Err(Error::invalid(
                format!("{what}: data \"{first_name}\""),
                "at least one sample",
                format!(
                    "an array of shape {} (empty data)",
                    crate::error::tuple_text(&format!("{:?}", first.shape()))
                ),
            ));
        }
        for (kind, arrays) in [("data", &data), ("label", &label)] {
            for (name, a) in arrays.iter() {
                if a.shape()[0] != num_data {
                    return Err(Error::invalid(
                        format!("{what}: {kind} \"{name}\""),
                        format!(
                            "{num_data} samples, as data \"{first_name}\" has (data and label must have the same length)"
                        ),
                        format!("{} samples", a.shape()[0]),
                    ));
                }
            }
        }
        let mut names: Vec<&str> = data.iter().chain(&label).map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid(
                format!("{what}: names"),
                "distinct data and label names",
                format!("\"{}\" twice", w[0]),
            ));
        }
        check_batch_bytes(
            what,
            opts.batch_size,
            data.iter()
                .chain(&label)
                .map(|(_, a)| (&a.shape()[1..], a.dtype())),
        )?;
        let shuffler = Shuffler::new(opts.seed);
        let mut it = NDArrayIter {
            data,
            label,
            opts,
            num_data,
            order: (0..num_data).collect(),
            shuffler,
            pos: 0,
            carry: Vec::new(),
            done: false,
            peeked: None,
        };
        // MXNet resets (and so shuffles) once at construction.
        it.reset_state(false);
        Ok(it)
    }

    /// The number of samples.
    pub fn num_data(&self) -> usize {
        self.num_data
    }

    /// The options the iterator was made with.
    pub fn options(&self) -> &NDArrayIterOptions {
        &self.opts
    }

    /// Starts over, dropping any roll-over samples (MXNet's `hard_reset`).
    pub fn hard_reset(&mut self) {
        self.reset_state(false);
    }

    fn reset_state(&mut self, keep_carry: bool) {
        if self.opts.shuffle {
            self.order = self.shuffler.permutation(self.num_data);
        }
        if !keep_carry {
            self.carry.clear();
        }
        self.pos = 0;
        self.done = false;
        self.peeked = None;
    }

    /// Plans the next batch, or ends the epoch (storing roll-over samples).
    fn advance(&mut self) -> Option<Plan> {
        if self.done {
            return None;
        }
        let (n, bs) = (self.num_data, self.opts.batch_size);
        if !self.carry.is_empty() {
            // First batch after a roll-over: the kept samples, then fresh ones.
            let k = self.carry.len();
            let end = (self.pos + bs - k).min(n);
            let mut idx = std::mem::take(&mut self.carry);
            idx.extend_from_slice(&self.order[self.pos..end]);
            self.pos = end;
            if idx.len() < bs {
                // Fewer samples than a batch even together: keep them all for the next epoch.
                self.carry = idx;
                self.done = true;
                return None;
            }
            return Some(Plan { idx, pad: k });
        }
        if self.pos >= n {
            self.done = true;
            return None;
        }
        if self.pos + bs <= n {
            let idx = self.order[self.pos..self.pos + bs].to_vec();
            self.pos += bs;
            return Some(Plan { idx, pad: 0 });
        }
        let rest = &self.order[self.pos..];
        match self.opts.last_batch_handle {
            LastBatchHandle::Pad => {
                // The filler wraps around the epoch's order, as often as needed.
                let idx: Vec<usize> = (self.pos..self.pos + bs)
                    .map(|j| self.order[j % n])
                    .collect();
                let pad = bs - rest.len();
                self.pos = n;
                Some(Plan { idx, pad })
            }
            LastBatchHandle::Discard => {
                self.done = true;
                None
            }
            LastBatchHandle::RollOver => {
                self.carry = rest.to_vec();
                self.done = true;
                None
            }
        }
    }

    fn build(&self, plan: Plan) -> Result<DataBatch> {
        let take = |arrays: &[(String, NDArray)]| -> Result<Vec<NDArray>> {
            arrays
                .iter()
                .map(|(_, a)| take_rows(a, &plan.idx))
                .collect()
        };
        Ok(DataBatch {
            data: take(&self.data)?,
            label: take(&self.label)?,
            pad: plan.pad,
            index: Some(plan.idx.clone()),
            ..DataBatch::default()
        })
    }

    fn descs(&self, arrays: &[(String, NDArray)]) -> Vec<DataDesc> {
        arrays
            .iter()
            .map(|(name, a)| {
                DataDesc::new(
                    name.clone(),
                    &batch_shape(self.opts.batch_size, &a.shape()[1..]),
                )
                .with_dtype(a.dtype())
            })
            .collect()
    }
}

impl DataIter for NDArrayIter {
    fn provide_data(&self) -> Vec<DataDesc> {
        self.descs(&self.data)
    }

    fn provide_label(&self) -> Vec<DataDesc> {
        self.descs(&self.label)
    }

    fn batch_size(&self) -> usize {
        self.opts.batch_size
    }

    /// Reshuffles (with `shuffle`) and starts a new epoch; with `roll_over`, the samples
    /// left by an epoch that ran to its end open the new one.
    fn reset(&mut self) -> Result<()> {
        let roll = self.opts.last_batch_handle == LastBatchHandle::RollOver && self.done;
        self.reset_state(roll);
        Ok(())
    }

    fn has_next(&mut self) -> Result<bool> {
        if self.peeked.is_none() {
            self.peeked = self.advance();
        }
        Ok(self.peeked.is_some())
    }

    fn next_batch(&mut self) -> Result<Option<DataBatch>> {
        let plan = match self.peeked.take() {
            Some(p) => Some(p),
            None => self.advance(),
        };
        plan.map(|p| self.build(p)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn iter(n: usize, bs: usize, mode: LastBatchHandle) -> NDArrayIter {
        let x = NDArray::arange(0.0, n as f64, 1.0, DType::Float32).unwrap();
        let opts = NDArrayIterOptions {
            batch_size: bs,
            last_batch_handle: mode,
            ..Default::default()
        };
        NDArrayIter::new(vec![("data".into(), x)], vec![], opts).unwrap()
    }

    fn epoch(it: &mut NDArrayIter) -> Vec<(Vec<f64>, usize)> {
        it.epoch()
            .map(|b| {
                let b = b.unwrap();
                (b.data[0].to_f64_vec(), b.pad)
            })
            .collect()
    }

    #[test]
    fn pad_wraps_as_often_as_needed() {
        let mut it = iter(2, 5, LastBatchHandle::Pad);
        assert_eq!(epoch(&mut it), vec![(vec![0.0, 1.0, 0.0, 1.0, 0.0], 3)]);
        assert!(it.next_batch().unwrap().is_none());
    }

    #[test]
    fn roll_over_keeps_tail_even_when_has_next_ends_the_epoch() {
        let mut it = iter(5, 2, LastBatchHandle::RollOver);
        while it.has_next().unwrap() {
            it.next_batch().unwrap();
        }
        assert!(!it.has_next().unwrap());
        it.reset().unwrap();
        assert_eq!(epoch(&mut it)[0], (vec![4.0, 0.0], 1));
    }

    #[test]
    fn roll_over_smaller_than_a_batch_accumulates() {
        let mut it = iter(2, 5, LastBatchHandle::RollOver);
        assert!(epoch(&mut it).is_empty());
        it.reset().unwrap();
        assert!(epoch(&mut it).is_empty());
        it.reset().unwrap();
        assert_eq!(epoch(&mut it), vec![(vec![0.0, 1.0, 0.0, 1.0, 0.0], 4)]);
    }
}
