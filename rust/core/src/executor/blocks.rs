//! Inference over a batch in blocks of samples: the graph runs once per block, on an
//! executor bound at the block's size that shares this one's parameters, and the outputs are
//! joined. A network whose activations per sample are large (MobileNet v2 at 224²: 4.8 MB for
//! one image's widest layer) otherwise streams every layer's whole-batch input and output
//! through memory; in blocks they stay in the cache from one layer to the next. The module
//! chooses the block size (see `module::inference_block`); the executor only runs it.

use super::{Executor, GradReq};
use crate::error::{Error, Result};
use crate::tensor::NDArray;
use std::collections::HashMap;

/// Blocks of samples for the inference passes of one executor.
pub(super) struct SampleBlocks {
    /// Arguments that carry the batch on axis 0 (data and labels), by index.
    batch_args: Vec<usize>,
    /// Samples per block; divides the batch.
    size: usize,
    /// The executor bound at `size` samples (made at the first pass).
    exec: Option<Box<Executor>>,
}

impl SampleBlocks {
    /// The same blocks for another executor of the graph (its block executor made anew).
    pub(super) fn unbound(&self) -> SampleBlocks {
        SampleBlocks {
            batch_args: self.batch_args.clone(),
            size: self.size,
            exec: None,
        }
    }

    /// Drops the block executor (and with it its pass's buffers and prepared weights).
    pub(super) fn release(&mut self) {
        self.exec = None;
    }
}

impl Executor {
    /// Runs later inference passes (no gradients, `is_train` false, no monitor) in blocks of
    /// `size` samples: `batch_args` name the arguments whose axis 0 is the batch, which
    /// `size` must divide. Every op of the graph must treat samples independently (the
    /// module checks; see `module::inference_block`). The outputs are the same values as one
    /// whole-batch pass gives, up to the kernels' rounding at another batch size.
    pub fn set_sample_blocks(&mut self, batch_args: &[String], size: usize) -> Result<()> {
        let idx: Vec<usize> = batch_args
            .iter()
            .map(|n| self.arg_index(n))
            .collect::<Result<_>>()?;
        let batch = idx
            .first()
            .and_then(|&i| self.arg_arrays[i].shape().first().copied())
            .unwrap_or(0);
        for &i in &idx {
            let got = self.arg_arrays[i].shape().first().copied().unwrap_or(0);
            if got != batch {
                return Err(Error::invalid(
                    format!("executor sample blocks: argument \"{}\"", self.arg_names[i]),
                    format!("a batch of {batch} along axis 0"),
                    format!("{got}"),
                ));
            }
        }
        if idx.is_empty() || batch == 0 || size == 0 || !batch.is_multiple_of(size) {
            return Err(Error::invalid(
                "executor sample blocks: size",
                format!("a divisor of the batch ({batch}) with batch arguments named"),
                format!("{size} with {} arguments", idx.len()),
            ));
        }
        // The graph at `size` samples must take the other arguments and states as they are.
        let block_shape = |i: usize| {
            let mut s = self.arg_arrays[i].shape().to_vec();
            if idx.contains(&i) {
                s[0] = size;
            }
            s
        };
        let known: HashMap<String, Vec<usize>> = (0..self.arg_arrays.len())
            .map(|i| (self.arg_names[i].clone(), block_shape(i)))
            .chain(
                self.aux_names
                    .iter()
                    .cloned()
                    .zip(self.aux_arrays.iter().map(|a| a.shape().to_vec())),
            )
            .collect();
        let (args, _, aux) = self.symbol.infer_shape(&known)?;
        let same_aux = aux
            .iter()
            .zip(&self.aux_arrays)
            .all(|(s, a)| s == a.shape());
        if !same_aux || (0..args.len()).any(|i| args[i] != block_shape(i)) {
            return Err(Error::invalid(
                "executor sample blocks: batch_args",
                "every argument that carries the batch",
                format!("{batch_args:?}"),
            ));
        }
        self.blocks = (size < batch).then_some(SampleBlocks {
            batch_args: idx,
            size,
            exec: None,
        });
        Ok(())
    }

    /// Whether a forward pass with `is_train` runs in blocks.
    pub(super) fn runs_in_blocks(&self, is_train: bool) -> bool {
        self.blocks.is_some()
            && !is_train
            && self.monitor.is_none()
            && self.grad_reqs.iter().all(|r| *r == GradReq::Null)
    }

    /// The forward pass in blocks (see [`Executor::set_sample_blocks`]).
    pub(super) fn forward_in_blocks(&mut self) -> Result<()> {
        let Some(mut blocks) = self.blocks.take() else {
            return Ok(());
        };
        let r = self.run_blocks(&mut blocks);
        self.blocks = Some(blocks);
        r
    }

    fn run_blocks(&mut self, blocks: &mut SampleBlocks) -> Result<()> {
        let size = blocks.size;
        let exec = match &mut blocks.exec {
            Some(e) => e,
            slot => {
                let mut args = self.arg_arrays.clone();
                for &i in &blocks.batch_args {
                    let mut shape = args[i].shape().to_vec();
                    shape[0] = size;
                    args[i] = NDArray::zeros(&shape, args[i].dtype());
                }
                let n = args.len();
                let e = Executor::bind(
                    &self.symbol,
                    self.ctx,
                    args,
                    vec![None; n],
                    vec![GradReq::Null; n],
                    self.aux_arrays.clone(),
                )?;
                slot.insert(Box::new(e))
            }
        };
        // The current parameters (the block executor's prepared weights follow them: its
        // cache keeps what it made only while these are the same arrays).
        for (i, a) in self.arg_arrays.iter().enumerate() {
            if !blocks.batch_args.contains(&i) {
                exec.arg_arrays[i] = a.clone();
            }
        }
        exec.aux_arrays.clone_from(&self.aux_arrays);
        let batch = self.arg_arrays[blocks.batch_args[0]].shape()[0];
        let mut parts: Vec<Vec<NDArray>> = Vec::new();
        for b in (0..batch).step_by(size) {
            for &i in &blocks.batch_args {
                let part =
                    self.arg_arrays[i].slice_axis(0, b as isize, Some((b + size) as isize))?;
                exec.arg_arrays[i] = part;
            }
            exec.forward(false)?;
            parts.resize(exec.outputs.len(), Vec::new());
            for (p, o) in parts.iter_mut().zip(&exec.outputs) {
                p.push(o.clone());
            }
        }
        exec.outputs = Vec::new();
        self.outputs = parts
            .iter()
            .map(|p| NDArray::concat(p, 0))
            .collect::<Result<_>>()?;
        self.values = Vec::new();
        self.released_last = true;
        self.fused_last = exec.fused_last;
        self.last_train = Some(false);
        Ok(())
    }
}
