//! CsvIter: batches read from CSV files of numbers (one sample per row), with MXNet's
//! `round_batch` handling of the last batch.

use super::{
    batch_shape, check_batch_bytes, check_batch_size, take_rows, DataBatch, DataDesc, DataIter,
};
use crate::error::{Error, Result};
use crate::tensor::{DType, NDArray};
use std::path::Path;

/// Options of [`CsvIter`] (MXNet's CSVIter defaults).
#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// The data file: one sample per line, comma-separated numbers.
    pub data_csv: String,
    /// The per-sample shape of the data (a line holds its product of numbers).
    pub data_shape: Vec<usize>,
    /// The label file; `None` gives labels of zeros.
    pub label_csv: Option<String>,
    /// The per-sample shape of the label (default `(1,)`, batched as `(batch,)`).
    pub label_shape: Vec<usize>,
    /// Samples per batch.
    pub batch_size: usize,
    /// Fill the last batch from the start of the data and begin the next epoch after those
    /// samples (default true); false pads with the rows of the previous batch.
    pub round_batch: bool,
    /// Element type of data and label (default float32).
    pub dtype: DType,
    /// Name of the data input (default `data`).
    pub data_name: String,
    /// Name of the label input (default `softmax_label`).
    pub label_name: String,
    /// Split the rows into this many contiguous parts (default 1; data-parallel workers each
    /// read one)…
    pub num_parts: usize,
    /// …and read this one (default 0).
    pub part_index: usize,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            data_csv: String::new(),
            data_shape: Vec::new(),
            label_csv: None,
            label_shape: vec![1],
            batch_size: 1,
            round_batch: true,
            dtype: DType::Float32,
            data_name: "data".into(),
            label_name: "softmax_label".into(),
            num_parts: 1,
            part_index: 0,
        }
    }
}

/// Reads a CSV file of numbers: each non-empty line must hold `width` values.
pub fn read_csv(path: impl AsRef<Path>, width: usize) -> Result<(usize, Vec<f64>)> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let text = String::from_utf8(crate::limits::read_file(path)?)
        .map_err(|e| Error::format(&shown, format!("not UTF-8 text: {e}")))?;
    let mut values = Vec::new();
    let mut rows = 0;
    for (lineno, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let before = values.len();
        for field in line.split(',') {
            let f = field.trim();
            let v: f64 = f.parse().map_err(|_| {
                Error::format(
                    &shown,
                    format!("line {}: \"{f}\" is not a number", lineno + 1),
                )
            })?;
            values.push(v);
        }
        let got = values.len() - before;
        if got != width {
            return Err(Error::format(
                &shown,
                format!(
                    "line {}: {got} values, but the shape asks for {width} per row",
                    lineno + 1
                ),
            ));
        }
        rows += 1;
    }
    Ok((rows, values))
}

#[derive(Clone, Debug)]
struct Plan {
    idx: Vec<usize>,
    pad: usize,
}

/// Batches from CSV files, as MXNet's CSVIter (no shuffling).
///
/// With `round_batch` the last batch is completed with the first rows and reports their
/// count as `pad`; the next epoch then starts after those rows (MXNet's rule). Without it,
/// the last batch's missing rows repeat the previous batch's rows at the same positions.
pub struct CsvIter {
    data: NDArray,
    label: NDArray,
    opts: CsvOptions,
    num_data: usize,
    pos: usize,
    overflow: usize,
    done: bool,
    peeked: Option<Plan>,
}

impl CsvIter {
    /// Reads the files and makes the iterator.
    pub fn new(opts: CsvOptions) -> Result<Self> {
        let what = "io.csv_iter";
        check_batch_size(what, opts.batch_size)?;
        for (key, shape) in [
            ("data_shape", &opts.data_shape),
            ("label_shape", &opts.label_shape),
        ] {
            if shape.is_empty() || shape.contains(&0) {
                return Err(Error::invalid(
                    format!("{what}: {key}"),
                    "a non-empty per-sample shape of positive sizes",
                    crate::error::tuple_text(&format!("{shape:?}")),
                ));
            }
        }
        // Sized before reading: a data_shape whose product wraps, or a batch past the limits
        // policy, is refused up front.
        for (key, shape) in [
            ("data_shape", &opts.data_shape),
            ("label_shape", &opts.label_shape),
        ] {
            crate::limits::array_bytes(&format!("{what}: {key}"), shape, opts.dtype.size())?;
        }
        check_batch_bytes(
            what,
            opts.batch_size,
            [
                (opts.data_shape.as_slice(), opts.dtype),
                (opts.label_shape.as_slice(), opts.dtype),
            ],
        )?;
        if opts.num_parts == 0 || opts.part_index >= opts.num_parts {
            return Err(Error::invalid(
                format!("{what}: part_index/num_parts"),
                "num_parts >= 1 and 0 <= part_index < num_parts",
                format!(
                    "part_index={}, num_parts={}",
                    opts.part_index, opts.num_parts
                ),
            ));
        }
        let width: usize = opts.data_shape.iter().product();
        let (total, values) = read_csv(&opts.data_csv, width)?;
        // Contiguous parts, split as MNISTIter splits its images.
        let part = |p: usize| (total as f64 / opts.num_parts as f64 * p as f64) as usize;
        let (start, end) = (part(opts.part_index), part(opts.part_index + 1));
        let n = end - start;
        let values = values
            .get(start * width..end * width)
            .map(<[f64]>::to_vec)
            .unwrap_or_default();
        if total > 0 && n == 0 {
            return Err(Error::invalid(
                format!("{what}: num_parts"),
                format!("at most the {total} rows of {}", opts.data_csv),
                opts.num_parts.to_string(),
            ));
        }
        if n == 0 {
            return Err(Error::invalid(
                format!("{what}: data_csv {}", opts.data_csv),
                "at least one row",
                "no rows (empty data)",
            ));
        }
        let data = NDArray::from_f64_slice(&batch_shape(n, &opts.data_shape), &values, opts.dtype)?;
        // A label of one value per sample is batched as (batch,), as MXNet does.
        let label_sample: &[usize] = if opts.label_shape == [1] {
            &[]
        } else {
            &opts.label_shape
        };
        let lwidth: usize = opts.label_shape.iter().product();
        let label = match &opts.label_csv {
            None => NDArray::zeros(&batch_shape(n, label_sample), opts.dtype),
            Some(path) => {
                let (m, lv) = read_csv(path, lwidth)?;
                if m != total {
                    return Err(Error::invalid(
                        format!("{what}: label_csv {path}"),
                        format!("{total} rows, as data_csv {} has", opts.data_csv),
                        format!("{m} rows"),
                    ));
                }
                let lv = lv
                    .get(start * lwidth..end * lwidth)
                    .map(<[f64]>::to_vec)
                    .unwrap_or_default();
                NDArray::from_f64_slice(&batch_shape(n, label_sample), &lv, opts.dtype)?
            }
        };
        if opts.round_batch && n < opts.batch_size {
            return Err(Error::invalid(
                format!("{what}: batch_size"),
                format!(
                    "at most the {n} rows of {} with round_batch=true (or pass round_batch=false)",
                    opts.data_csv
                ),
                opts.batch_size.to_string(),
            ));
        }
        Ok(CsvIter {
            data,
            label,
            opts,
            num_data: n,
            pos: 0,
            overflow: 0,
            done: false,
            peeked: None,
        })
    }

    /// The number of rows.
    pub fn num_data(&self) -> usize {
        self.num_data
    }

    fn advance(&mut self) -> Option<Plan> {
        if self.done || self.overflow != 0 {
            self.done = true;
            return None;
        }
        let (n, bs) = (self.num_data, self.opts.batch_size);
        let top = bs.min(n.saturating_sub(self.pos));
        if top == 0 {
            self.done = true;
            return None;
        }
        let mut idx: Vec<usize> = (self.pos..self.pos + top).collect();
        if top == bs {
            self.pos += bs;
            return Some(Plan { idx, pad: 0 });
        }
        let pad = bs - top;
        if self.opts.round_batch {
            idx.extend(0..pad);
            self.pos = pad;
            self.overflow = pad;
        } else {
            // MXNet leaves the previous batch's rows in the unfilled slots; without a previous
            // batch in this epoch the data wraps around instead.
            let start = self.pos;
            idx.extend((top..bs).map(|j| if start >= bs { start - bs + j } else { j % n }));
            self.pos = n;
        }
        Some(Plan { idx, pad })
    }
}

impl DataIter for CsvIter {
    fn provide_data(&self) -> Vec<DataDesc> {
        vec![DataDesc::new(
            self.opts.data_name.clone(),
            &batch_shape(self.opts.batch_size, &self.data.shape()[1..]),
        )
        .with_dtype(self.opts.dtype)]
    }

    fn provide_label(&self) -> Vec<DataDesc> {
        vec![DataDesc::new(
            self.opts.label_name.clone(),
            &batch_shape(self.opts.batch_size, &self.label.shape()[1..]),
        )
        .with_dtype(self.opts.dtype)]
    }

    fn batch_size(&self) -> usize {
        self.opts.batch_size
    }

    /// Starts a new epoch: at the first row, or after the rows that completed the last
    /// batch when `round_batch` wrapped around.
    fn reset(&mut self) -> Result<()> {
        if self.opts.round_batch && self.overflow != 0 {
            self.overflow = 0;
        } else {
            self.pos = 0;
        }
        self.done = false;
        self.peeked = None;
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
        let Some(plan) = plan else {
            return Ok(None);
        };
        Ok(Some(DataBatch {
            data: vec![take_rows(&self.data, &plan.idx)?],
            label: vec![take_rows(&self.label, &plan.idx)?],
            pad: plan.pad,
            index: Some(plan.idx),
            ..DataBatch::default()
        }))
    }
}
