//! BucketSentenceIter: MXNet's bucketing iterator for language models — sentences padded to
//! the smallest bucket that fits, batches drawn from one bucket at a time, and the label of
//! each step the next token.

use super::{
    check_batch_bytes, check_batch_size, take_rows, DataBatch, DataDesc, DataIter, Shuffler,
};
use crate::error::{Error, Result};
use crate::tensor::{DType, NDArray};

/// Options of [`BucketSentenceIter`] (MXNet's defaults).
#[derive(Clone, Debug)]
pub struct BucketSentenceOptions {
    /// Bucket lengths; empty = every sentence length with at least `batch_size` sentences.
    pub buckets: Vec<usize>,
    /// The value that pads sentences and ends every label row (default -1).
    pub invalid_label: f64,
    /// Name of the data input (default `data`).
    pub data_name: String,
    /// Name of the label input (default `softmax_label`).
    pub label_name: String,
    /// Element type of data and label (default float32).
    pub dtype: DType,
    /// `"NT"` (batch, time) or `"TN"` (time, batch) (default `"NT"`).
    pub layout: String,
    /// Seed of the shuffling; `None` draws from the global seed.
    pub seed: Option<u64>,
}

impl Default for BucketSentenceOptions {
    fn default() -> Self {
        BucketSentenceOptions {
            buckets: Vec::new(),
            invalid_label: -1.0,
            data_name: "data".into(),
            label_name: "softmax_label".into(),
            dtype: DType::Float32,
            layout: "NT".into(),
            seed: None,
        }
    }
}

/// One bucket: its length and its sentences as a `(count, length)` array.
struct Bucket {
    len: usize,
    rows: NDArray,
    count: usize,
}

/// Bucketed sentence batches: data `(batch, bucket)` (or `(bucket, batch)` for layout
/// `"TN"`), label the data shifted one step left and ended by `invalid_label`; every batch
/// carries its `bucket_key` and descs. Sentences longer than the largest bucket are
/// discarded, and each epoch drops the rows of a bucket that do not fill a batch. Every
/// reset (construction included) shuffles the batch order and the rows of each bucket.
pub struct BucketSentenceIter {
    buckets: Vec<Bucket>,
    opts: BucketSentenceOptions,
    batch_size: usize,
    major_axis: usize,
    default_key: usize,
    discarded: usize,
    shuffler: Shuffler,
    /// (bucket, first row) of every batch, in this epoch's order.
    batches: Vec<(usize, usize)>,
    /// Each bucket's row order this epoch.
    perms: Vec<Vec<usize>>,
    cur: usize,
}

impl BucketSentenceIter {
    /// Buckets `sentences` (token ids) and makes the iterator.
    pub fn new(
        sentences: &[Vec<f64>],
        batch_size: usize,
        opts: BucketSentenceOptions,
    ) -> Result<Self> {
        let what = "io.bucket_sentence_iter";
        check_batch_size(what, batch_size)?;
        let major_axis = match opts.layout.as_str() {
            "NT" => 0,
            "TN" => 1,
            other => {
                return Err(Error::invalid(
                    format!("{what}: layout"),
                    "\"NT\" (batch major) or \"TN\" (time major)",
                    format!("\"{other}\""),
                ))
            }
        };
        let mut lens = opts.buckets.clone();
        if lens.is_empty() {
            // MXNet: every length that at least batch_size sentences have.
            let max = sentences.iter().map(Vec::len).max().unwrap_or(0);
            let mut counts = vec![0usize; max + 1];
            sentences.iter().for_each(|s| counts[s.len()] += 1);
            lens = (0..=max).filter(|&l| counts[l] >= batch_size).collect();
        }
        lens.sort_unstable();
        lens.dedup();
        for &len in &lens {
            // One batch of this bucket: data and label, `len` steps each.
            let step: &[usize] = &[len];
            check_batch_bytes(what, batch_size, [(step, opts.dtype), (step, opts.dtype)])?;
        }
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); lens.len()];
        let mut discarded = 0;
        // Every sentence is padded to its bucket's length: bound the padded total before
        // building it.
        let mut padded: u64 = 0;
        let padded_what = format!("{what}: buckets");
        for s in sentences {
            // bisect_left: the first bucket at least as long as the sentence.
            let b = lens.partition_point(|&l| l < s.len());
            if let Some(&len) = lens.get(b) {
                padded = padded.saturating_add(len as u64 * 8);
                crate::limits::check_bytes(
                    &padded_what,
                    padded,
                    "the sentences padded to their buckets",
                )?;
            }
            match rows.get_mut(b) {
                Some(r) => {
                    r.extend_from_slice(s);
                    r.extend(std::iter::repeat_n(opts.invalid_label, lens[b] - s.len()));
                }
                None => discarded += 1,
            }
        }
        // MXNet 1.9.1 keeps only the buckets that received sentences.
        let mut buckets = Vec::new();
        for (len, r) in lens.iter().zip(rows) {
            let count = if *len == 0 {
                sentences.iter().filter(|s| s.is_empty()).count()
            } else {
                r.len() / len
            };
            if count > 0 {
                buckets.push(Bucket {
                    len: *len,
                    rows: NDArray::from_f64_slice(&[count, *len], &r, opts.dtype)?,
                    count,
                });
            }
        }
        let default_key = buckets.iter().map(|b| b.len).max().ok_or_else(|| {
            Error::invalid(
                format!("{what}: sentences"),
                "sentences that fit a bucket",
                format!(
                    "{} sentences and buckets {:?} (none holds a sentence)",
                    sentences.len(),
                    lens
                ),
            )
        })?;
        let shuffler = Shuffler::new(opts.seed);
        let mut it = BucketSentenceIter {
            buckets,
            opts,
            batch_size,
            major_axis,
            default_key,
            discarded,
            shuffler,
            batches: Vec::new(),
            perms: Vec::new(),
            cur: 0,
        };
        it.reset()?;
        Ok(it)
    }

    /// How many sentences were longer than the largest bucket.
    pub fn discarded(&self) -> usize {
        self.discarded
    }

    /// The bucket lengths in use (those that hold sentences), ascending.
    pub fn buckets(&self) -> Vec<usize> {
        self.buckets.iter().map(|b| b.len).collect()
    }

    fn shape(&self, len: usize) -> Vec<usize> {
        if self.major_axis == 0 {
            vec![self.batch_size, len]
        } else {
            vec![len, self.batch_size]
        }
    }

    fn descs(&self, len: usize) -> (Vec<DataDesc>, Vec<DataDesc>) {
        let d = |name: &str| {
            DataDesc::new(name, &self.shape(len))
                .with_dtype(self.opts.dtype)
                .with_layout(self.opts.layout.clone())
        };
        (
            vec![d(&self.opts.data_name)],
            vec![d(&self.opts.label_name)],
        )
    }
}

impl DataIter for BucketSentenceIter {
    fn provide_data(&self) -> Vec<DataDesc> {
        self.descs(self.default_key).0
    }

    fn provide_label(&self) -> Vec<DataDesc> {
        self.descs(self.default_key).1
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn default_bucket_key(&self) -> Option<usize> {
        Some(self.default_key)
    }

    fn reset(&mut self) -> Result<()> {
        let bs = self.batch_size;
        let all: Vec<(usize, usize)> = self
            .buckets
            .iter()
            .enumerate()
            .flat_map(|(i, b)| {
                (0..(b.count + 1).saturating_sub(bs))
                    .step_by(bs)
                    .map(move |j| (i, j))
            })
            .collect();
        let order = self.shuffler.permutation(all.len());
        self.batches = order.iter().map(|&k| all[k]).collect();
        let counts: Vec<usize> = self.buckets.iter().map(|b| b.count).collect();
        self.perms = counts
            .iter()
            .map(|&c| self.shuffler.permutation(c))
            .collect();
        self.cur = 0;
        Ok(())
    }

    fn has_next(&mut self) -> Result<bool> {
        Ok(self.cur < self.batches.len())
    }

    fn next_batch(&mut self) -> Result<Option<DataBatch>> {
        let Some(&(b, j)) = self.batches.get(self.cur) else {
            return Ok(None);
        };
        self.cur += 1;
        let bucket = &self.buckets[b];
        let idx = &self.perms[b][j..j + self.batch_size];
        let data = take_rows(&bucket.rows, idx)?;
        // The label of step t is the token of step t + 1; the last step has none.
        let label = if bucket.len == 0 {
            data.clone()
        } else {
            let fill = NDArray::full(
                &[self.batch_size, 1],
                self.opts.invalid_label,
                self.opts.dtype,
            );
            NDArray::concat(&[data.slice_axis(1, 1, None)?, fill], 1)?
        };
        let (data, label) = if self.major_axis == 1 {
            (data.transpose(None)?, label.transpose(None)?)
        } else {
            (data, label)
        };
        let (pd, pl) = self.descs(bucket.len);
        Ok(Some(DataBatch {
            data: vec![data],
            label: vec![label],
            pad: 0,
            index: Some(idx.to_vec()),
            bucket_key: Some(bucket.len),
            provide_data: Some(pd),
            provide_label: Some(pl),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_pad_and_shift() {
        let s: Vec<Vec<f64>> = vec![vec![1.0, 2.0], vec![3.0], vec![4.0, 5.0, 6.0], vec![7.0; 9]];
        let opts = BucketSentenceOptions {
            buckets: vec![3, 2],
            seed: Some(1),
            ..Default::default()
        };
        let mut it = BucketSentenceIter::new(&s, 1, opts).unwrap();
        assert_eq!(it.discarded(), 1);
        assert_eq!(it.default_bucket_key(), Some(3));
        let mut seen: Vec<(usize, Vec<f64>, Vec<f64>)> = it
            .epoch()
            .map(|b| {
                let b = b.unwrap();
                (
                    b.bucket_key.unwrap(),
                    b.data[0].to_f64_vec(),
                    b.label[0].to_f64_vec(),
                )
            })
            .collect();
        seen.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap());
        assert_eq!(
            seen,
            vec![
                (2, vec![1.0, 2.0], vec![2.0, -1.0]),
                (2, vec![3.0, -1.0], vec![-1.0, -1.0]),
                (3, vec![4.0, 5.0, 6.0], vec![5.0, 6.0, -1.0]),
            ]
        );
    }
}
