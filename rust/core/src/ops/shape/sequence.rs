//! `SequenceMask`, `SequenceLast`, `SequenceReverse`: per-sequence operations on data laid
//! out `(time, batch, …)` (`axis=0`) or `(batch, time, …)` (`axis=1`), each sequence of the
//! batch `sequence_length[b]` steps long when `use_sequence_length` is set (all steps
//! otherwise; the lengths get no gradient). As MXNet, `SequenceReverse` takes `axis=0` only.

use super::bad_param;
use crate::error::{Error, Result};
use crate::kernels::copy::{self, SeqLayout};
use crate::ops::params::Params;
use crate::ops::{known, MaybeShape, OpCtx, Operator};
use crate::tensor::NDArray;
use std::sync::Arc;

/// What the three operators do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SeqOp {
    Mask,
    Last,
    Reverse,
}

crate::op_params! {
    pub(crate) struct SequenceMaskParams {
        use_sequence_length: Bool = "False", "Take the lengths from the sequence_length input.";
        value: Float = "0", "The value of the masked steps.";
        axis: Int = "0", "The time axis: 0 or 1.";
    }
}

crate::op_params! {
    pub(crate) struct SequenceLastParams {
        use_sequence_length: Bool = "False", "Take the lengths from the sequence_length input.";
        axis: Int = "0", "The time axis: 0 or 1.";
    }
}

crate::op_params! {
    pub(crate) struct SequenceReverseParams {
        use_sequence_length: Bool = "False", "Take the lengths from the sequence_length input.";
        axis: Int = "0", "The time axis: only 0, as MXNet.";
    }
}

#[derive(Debug)]
pub(crate) struct Sequence {
    op: SeqOp,
    use_length: bool,
    axis: i64,
    value: f32,
}

impl Sequence {
    pub(crate) fn create(p: &Params, op: SeqOp) -> Result<Arc<dyn Operator>> {
        let (use_length, axis, value) = match op {
            SeqOp::Mask => {
                let q = SequenceMaskParams::from_params(p)?;
                (q.use_sequence_length, q.axis, q.value as f32)
            }
            SeqOp::Last => {
                let q = SequenceLastParams::from_params(p)?;
                (q.use_sequence_length, q.axis, 0.0)
            }
            SeqOp::Reverse => {
                let q = SequenceReverseParams::from_params(p)?;
                (q.use_sequence_length, q.axis, 0.0)
            }
        };
        let allowed: &[i64] = if op == SeqOp::Reverse { &[0] } else { &[0, 1] };
        if !allowed.contains(&axis) {
            return Err(p.error("axis", &format!("one of {allowed:?}"), axis));
        }
        Ok(Arc::new(Sequence {
            op,
            use_length,
            axis,
            value,
        }))
    }

    fn name(&self) -> &'static str {
        match self.op {
            SeqOp::Mask => "SequenceMask",
            SeqOp::Last => "SequenceLast",
            SeqOp::Reverse => "SequenceReverse",
        }
    }

    /// The layout of data of `shape`: time and batch sizes and the values per step.
    fn layout(&self, node: &str, shape: &[usize]) -> Result<SeqLayout> {
        if shape.len() < 2 {
            return Err(Error::shape(
                self.name(),
                format!("node \"{node}\": input \"data\" (at least 2 axes: time and batch)"),
                super::Text("(time, batch, …)".into()),
                shape,
            ));
        }
        let (time, batch) = if self.axis == 0 {
            (shape[0], shape[1])
        } else {
            (shape[1], shape[0])
        };
        Ok(SeqLayout {
            time,
            batch,
            inner: shape[2..].iter().product(),
            batch_major: self.axis == 1,
        })
    }

    /// Each sequence's length: the `sequence_length` input (cast to int) or every step.
    fn lengths(&self, node: &str, inputs: &[NDArray], l: &SeqLayout) -> Result<Vec<usize>> {
        if !self.use_length {
            return Ok(vec![l.time; l.batch]);
        }
        let min = usize::from(self.op == SeqOp::Last);
        inputs[1]
            .f32s("sequence_length")?
            .iter()
            .map(|&v| {
                let n = v as i64;
                if n < min as i64 || n > l.time as i64 {
                    Err(bad_param(
                        self.name(),
                        node,
                        "sequence_length",
                        format!("lengths in [{min}, {}]", l.time),
                        v.to_string(),
                    ))
                } else {
                    Ok(n as usize)
                }
            })
            .collect()
    }

    fn out_shape(&self, shape: &[usize]) -> Vec<usize> {
        match self.op {
            SeqOp::Last => {
                let mut s = shape.to_vec();
                s.remove(self.axis as usize);
                s
            }
            _ => shape.to_vec(),
        }
    }
}

impl Operator for Sequence {
    fn arguments(&self) -> Vec<String> {
        if self.use_length {
            vec!["data".into(), "sequence_length".into()]
        } else {
            vec!["data".into()]
        }
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known(self.name(), node, &["data", "sequence_length"], inputs, 0)?.to_vec();
        let l = self.layout(node, &d)?;
        if self.use_length {
            match &inputs[1] {
                Some(s) if s.as_slice() != [l.batch] => {
                    return Err(Error::shape(
                        self.name(),
                        format!("node \"{node}\": input \"sequence_length\""),
                        [l.batch],
                        s,
                    ))
                }
                Some(_) => {}
                None => inputs[1] = Some(vec![l.batch]),
            }
        }
        Ok(vec![self.out_shape(&d)])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let d = &inputs[0];
        let l = self.layout(ctx.node, d.shape())?;
        let lens = self.lengths(ctx.node, inputs, &l)?;
        let x = d.f32s("data")?;
        let out = match self.op {
            SeqOp::Mask => copy::sequence_mask(x, &l, &lens, self.value),
            SeqOp::Last => copy::sequence_last(x, &l, &lens),
            SeqOp::Reverse => copy::sequence_reverse(x, &l, &lens),
        };
        Ok(vec![NDArray::from_vec(&self.out_shape(d.shape()), out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let d = &inputs[0];
        let l = self.layout(ctx.node, d.shape())?;
        let lens = self.lengths(ctx.node, inputs, &l)?;
        let g = out_grads[0].f32s("output gradient")?;
        let dx = match self.op {
            SeqOp::Mask => copy::sequence_mask(g, &l, &lens, 0.0),
            SeqOp::Last => copy::sequence_last_grad(g, &l, &lens),
            SeqOp::Reverse => copy::sequence_reverse(g, &l, &lens),
        };
        let mut grads = vec![Some(NDArray::from_vec(d.shape(), dx)?)];
        if self.use_length {
            grads.push(None);
        }
        Ok(grads)
    }
}
