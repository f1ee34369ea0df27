//! `Concat` (and `_rnn_param_concat`, Gluon's concat of RNN parameters), `stack` and
//! `SliceChannel` (`split`).

use super::{arg_names, bad_param, norm_axis, tup, Text};
use crate::error::{Error, Result};
use crate::kernels::copy::*;
use crate::kernels::map::axis_dims;
use crate::ops::params::Params;
use crate::ops::{check_or_fill, known, same_dtype, unknown_input, MaybeShape, OpCtx, Operator};
use crate::tensor::{DType, NDArray};
use crate::with_dtype;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Concat and stack
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct ConcatParams {
        num_args: Count, "Number of inputs (set automatically from the inputs given).";
        dim: Int = "1", "The axis to join along (negative counts from the end).";
    }
}

#[derive(Debug)]
pub(crate) struct Concat {
    /// `Concat`, or `_rnn_param_concat` (the same join, whose shape inference also completes
    /// one or two unknown inputs from a known output: [`Operator::infer_inputs_from_outputs`]).
    op: &'static str,
    dim: i64,
    num_args: usize,
}

impl Concat {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = ConcatParams::from_params(p)?;
        Ok(Arc::new(Concat {
            op: p.op,
            dim: q.dim,
            num_args: q.num_args,
        }))
    }

    /// The concatenation axis and the output shape.
    fn plan(&self, node: &str, shapes: &[&[usize]]) -> Result<(usize, Vec<usize>)> {
        let first = shapes.first().copied().unwrap_or(&[]);
        if first.is_empty() {
            return Err(Error::shape(
                self.op,
                format!("node \"{node}\": input \"arg0\""),
                Text("at least one axis".into()),
                first,
            ));
        }
        let ax = norm_axis(self.op, node, "dim", self.dim, first.len())?;
        let mut out = first.to_vec();
        out[ax] = 0;
        for (i, s) in shapes.iter().enumerate() {
            let fits = s.len() == first.len()
                && s.iter()
                    .zip(first)
                    .enumerate()
                    .all(|(k, (a, b))| k == ax || a == b);
            if !fits {
                let mut want: Vec<String> = first.iter().map(usize::to_string).collect();
                want[ax] = "_".into();
                return Err(Error::shape(
                    self.op,
                    format!("node \"{node}\": input \"arg{i}\" (dimensions other than dim={ax} must match input \"arg0\")"),
                    Text(format!("({})", want.join(", "))),
                    s,
                ));
            }
            out[ax] += s[ax];
        }
        Ok((ax, out))
    }
}

impl Operator for Concat {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        arg_names(self.num_args)
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        // MXNet cannot complete an unknown input from the others either (its size along `dim`
        // stays open), so every input must be known.
        let shapes = inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_deref()
                    .ok_or_else(|| unknown_input(self.op, node, &format!("arg{i}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![self.plan(node, &shapes)?.1])
    }

    fn infer_inputs_from_outputs(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        outputs: &[Vec<usize>],
    ) -> Result<()> {
        // Gluon's RNN layers concatenate their flattened weights for the fused RNN operator;
        // with a deferred input size the first layer's i2h weight (both directions' when
        // bidirectional) is unknown until the RNN operator gives the total. As MXNet, those one
        // or two inputs share what the known inputs leave of the output along `dim`. A plain
        // Concat leaves that size open.
        let (Some(out), "_rnn_param_concat") = (outputs.first(), self.op) else {
            return Ok(());
        };
        let unknown: Vec<usize> = (0..inputs.len()).filter(|&i| inputs[i].is_none()).collect();
        if unknown.is_empty() || out.is_empty() {
            return Ok(());
        }
        let ax = norm_axis(self.op, node, "dim", self.dim, out.len())?;
        let known: usize = inputs.iter().flatten().filter_map(|s| s.get(ax)).sum();
        if unknown.len() > 2 || known > out[ax] || !(out[ax] - known).is_multiple_of(unknown.len())
        {
            return Err(Error::invalid(
                format!("{} node \"{node}\": inputs {unknown:?}", self.op),
                format!(
                    "1 or 2 unknown inputs sharing the {} of {} (output dim={ax}) the known \
                     inputs leave",
                    out[ax].saturating_sub(known),
                    out[ax]
                ),
                format!(
                    "{} unknown inputs, the known ones summing to {known}",
                    unknown.len()
                ),
            ));
        }
        let mut each = out.clone();
        each[ax] = (out[ax] - known) / unknown.len();
        for i in unknown {
            inputs[i] = Some(each.clone());
        }
        Ok(())
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let shapes: Vec<&[usize]> = inputs.iter().map(NDArray::shape).collect();
        let (ax, out_shape) = self.plan(ctx.node, &shapes)?;
        let (outer, _, inner) = axis_dims(&out_shape, ax);
        let widths: Vec<usize> = shapes.iter().map(|s| s[ax] * inner).collect();
        let t = same_dtype(self.op, ctx.node, inputs, |i| format!("input arg{i}"))?;
        let out = with_dtype!(t, T => {
            let parts = inputs
                .iter()
                .map(|x| x.values::<T>("Concat: input"))
                .collect::<Result<Vec<_>>>()?;
            NDArray::from_vec::<T>(&out_shape, join_rows(&parts, &widths, outer))?
        });
        Ok(vec![out])
    }

    fn reuses_inputs(&self) -> bool {
        true
    }

    /// When the joined axis is outermost but for axes of size 1 (channels at batch 1), the
    /// output is the inputs one after another: a first float32 input held nowhere else (at
    /// its last use) is grown in place instead of copied. DenseNet's blocks join each layer's
    /// output to the growing concatenation of the layers before it; appending (the buffer
    /// grows geometrically) makes that linear in the block's size, not quadratic. The copies
    /// split across the pool ([`append_rows`]).
    fn forward_consuming(
        &self,
        ctx: &OpCtx,
        inputs: Vec<NDArray>,
        aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let shapes: Vec<&[usize]> = inputs.iter().map(NDArray::shape).collect();
        let (ax, out_shape) = self.plan(ctx.node, &shapes)?;
        let appends = axis_dims(&out_shape, ax).0 == 1
            && inputs.len() > 1
            && inputs.iter().all(|x| x.dtype() == DType::Float32);
        if !appends {
            return self.forward(ctx, &inputs, aux);
        }
        let mut rest = inputs.into_iter();
        let first = rest
            .next()
            .ok_or_else(|| Error::Msg("internal: Concat inputs".into()))?;
        let rest: Vec<NDArray> = rest.collect();
        let out = match first.into_f32_vec() {
            Ok(v) => v,
            Err(first) => {
                let all: Vec<NDArray> = std::iter::once(first).chain(rest).collect();
                return self.forward(ctx, &all, aux);
            }
        };
        let parts = rest
            .iter()
            .map(|x| x.f32s("Concat: input"))
            .collect::<Result<Vec<_>>>()?;
        let out = append_rows(out, &parts)
            .map_err(|e| Error::Msg(format!("node \"{}\": Concat output: {e}", ctx.node)))?;
        Ok(vec![NDArray::from_f32(&out_shape, out)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let shapes: Vec<&[usize]> = inputs.iter().map(NDArray::shape).collect();
        let (ax, out_shape) = self.plan(ctx.node, &shapes)?;
        let (outer, n, inner) = axis_dims(&out_shape, ax);
        let g = &out_grads[0];
        with_dtype!(g.dtype(), T => {
            let gs = g.values::<T>("Concat: output gradient")?;
            let mut begin = 0;
            shapes
                .iter()
                .map(|s| {
                    let part = take_range(gs, outer, n, inner, begin, s[ax]);
                    begin += s[ax];
                    NDArray::from_vec::<T>(s, part).map(Some)
                })
                .collect()
        })
    }
}

crate::op_params! {
    pub(crate) struct Stack {
        axis: Int = "0", "Position of the new axis in the output (negative counts from the end).";
        num_args: Count, "Number of inputs (set automatically from the inputs given).";
    }
}

impl Stack {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// The new axis and the output shape for inputs of shape `s`.
    fn plan(&self, node: &str, s: &[usize]) -> Result<(usize, Vec<usize>)> {
        let ax = norm_axis("stack", node, "axis", self.axis, s.len() + 1)?;
        let mut out = s.to_vec();
        out.insert(ax, self.num_args);
        Ok((ax, out))
    }
}

impl Operator for Stack {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        arg_names(self.num_args)
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        // Like MXNet, one known input fixes the shape of all the others.
        let s = inputs
            .iter()
            .flatten()
            .next()
            .cloned()
            .ok_or_else(|| unknown_input("stack", node, "arg0"))?;
        for (i, slot) in inputs.iter_mut().enumerate() {
            check_or_fill("stack", node, &format!("arg{i}"), slot, &s)?;
        }
        Ok(vec![self.plan(node, &s)?.1])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let s = inputs.first().map_or(&[][..], NDArray::shape);
        for (i, x) in inputs.iter().enumerate() {
            if x.shape() != s {
                return Err(Error::shape(
                    "stack",
                    format!("node \"{}\": input \"arg{i}\"", ctx.node),
                    s,
                    x.shape(),
                ));
            }
        }
        let (ax, out_shape) = self.plan(ctx.node, s)?;
        let (outer, _, _) = axis_dims(&out_shape, ax);
        let width: usize = s[ax..].iter().product();
        let t = same_dtype("stack", ctx.node, inputs, |i| format!("input arg{i}"))?;
        let out = with_dtype!(t, T => {
            let parts = inputs
                .iter()
                .map(|x| x.values::<T>("stack: input"))
                .collect::<Result<Vec<_>>>()?;
            NDArray::from_vec::<T>(&out_shape, join_rows(&parts, &vec![width; parts.len()], outer))?
        });
        Ok(vec![out])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let s = inputs.first().map_or(&[][..], NDArray::shape);
        let (ax, out_shape) = self.plan(ctx.node, s)?;
        let (outer, n, inner) = axis_dims(&out_shape, ax);
        let g = &out_grads[0];
        with_dtype!(g.dtype(), T => {
            let gs = g.values::<T>("stack: output gradient")?;
            (0..inputs.len())
                .map(|k| NDArray::from_vec::<T>(s, take_range(gs, outer, n, inner, k, 1)).map(Some))
                .collect()
        })
    }
}

// ---------------------------------------------------------------------------------------------
// SliceChannel (split)
// ---------------------------------------------------------------------------------------------

crate::op_params! {
    pub(crate) struct SliceChannel {
        num_outputs: Count, "Number of parts to split into.";
        axis: Int = "1", "The axis to split along (negative counts from the end).";
        squeeze_axis: Bool = "False",
            "Remove the split axis from the outputs (its size must equal num_outputs).";
    }
}

impl SliceChannel {
    pub(crate) fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// The split axis, the part size along it, and each output's shape.
    fn plan(&self, node: &str, d: &[usize]) -> Result<(usize, usize, Vec<usize>)> {
        let op = "SliceChannel";
        let ax = norm_axis(op, node, "axis", self.axis, d.len())?;
        let k = self.num_outputs;
        if !d[ax].is_multiple_of(k) {
            return Err(bad_param(
                op,
                node,
                "num_outputs",
                format!(
                    "a divisor of dimension {ax} (size {}) of input \"data\" of shape {}",
                    d[ax],
                    tup(d)
                ),
                k.to_string(),
            ));
        }
        if self.squeeze_axis && d[ax] != k {
            return Err(bad_param(
                op,
                node,
                "num_outputs",
                format!(
                    "the size {} of dimension {ax} of input \"data\" (squeeze_axis=True)",
                    d[ax]
                ),
                k.to_string(),
            ));
        }
        let part = d[ax] / k;
        let mut s = d.to_vec();
        if self.squeeze_axis {
            s.remove(ax);
        } else {
            s[ax] = part;
        }
        Ok((ax, part, s))
    }
}

impl Operator for SliceChannel {
    fn dtype_generic(&self) -> bool {
        true
    }
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn output_names(&self) -> Vec<String> {
        (0..self.num_outputs)
            .map(|i| format!("output{i}"))
            .collect()
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("SliceChannel", node, &["data"], inputs, 0)?;
        let (_, _, s) = self.plan(node, d)?;
        Ok(vec![s; self.num_outputs])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = &inputs[0];
        let (ax, part, s) = self.plan(ctx.node, x.shape())?;
        let (outer, n, inner) = axis_dims(x.shape(), ax);
        with_dtype!(x.dtype(), T => {
            let xs = x.values::<T>("SliceChannel: data")?;
            (0..self.num_outputs)
                .map(|k| NDArray::from_vec::<T>(&s, take_range(xs, outer, n, inner, k * part, part)))
                .collect()
        })
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        _outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let x = &inputs[0];
        let (ax, part, _) = self.plan(ctx.node, x.shape())?;
        let (outer, _, inner) = axis_dims(x.shape(), ax);
        let t = same_dtype("SliceChannel", ctx.node, out_grads, |i| {
            format!("gradient of output{i}")
        })?;
        let g = with_dtype!(t, T => {
            let parts = out_grads
                .iter()
                .map(|g| g.values::<T>("SliceChannel: output gradient"))
                .collect::<Result<Vec<_>>>()?;
            let widths = vec![part * inner; parts.len()];
            NDArray::from_vec::<T>(x.shape(), join_rows(&parts, &widths, outer))?
        });
        Ok(vec![Some(g)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concat(op: &'static str, n: usize) -> Concat {
        Concat {
            op,
            dim: 0,
            num_args: n,
        }
    }

    fn fill(c: &Concat, ins: &[MaybeShape], out: &[usize]) -> Result<Vec<MaybeShape>> {
        let mut ins = ins.to_vec();
        c.infer_inputs_from_outputs("c", &mut ins, &[out.to_vec()])?;
        Ok(ins)
    }

    #[test]
    fn rnn_param_concat_completes_one_or_two_inputs_from_its_output() {
        let c = concat("_rnn_param_concat", 3);
        // one unknown input takes the rest of the output
        assert_eq!(
            fill(&c, &[None, Some(vec![16]), Some(vec![4])], &[116]).unwrap(),
            vec![Some(vec![96]), Some(vec![16]), Some(vec![4])]
        );
        // two unknown inputs (both directions of a bidirectional first layer) share it
        assert_eq!(
            fill(&c, &[None, None, Some(vec![4])], &[100]).unwrap(),
            vec![Some(vec![48]), Some(vec![48]), Some(vec![4])]
        );
        // all known: nothing to do
        let all = [Some(vec![2]), Some(vec![3]), Some(vec![4])];
        assert_eq!(fill(&c, &all, &[9]).unwrap(), all.to_vec());
        // an output the known inputs already exceed, or one two inputs cannot split evenly
        assert!(fill(&c, &[None, Some(vec![16]), Some(vec![4])], &[10]).is_err());
        assert!(fill(&c, &[None, None, Some(vec![4])], &[9]).is_err());
        let three = concat("_rnn_param_concat", 4);
        assert!(fill(&three, &[None, None, None, Some(vec![1])], &[10]).is_err());
    }

    #[test]
    fn plain_concat_leaves_unknown_inputs_open() {
        let c = concat("Concat", 2);
        assert_eq!(
            fill(&c, &[None, Some(vec![3])], &[8]).unwrap(),
            vec![None, Some(vec![3])]
        );
    }
}
