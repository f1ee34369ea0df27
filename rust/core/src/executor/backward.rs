//! Executor backward: head gradients, the reverse walk with MXNet's gradient requests,
//! and which steps it has to run.

use super::{profile, with_node, Executor, GradReq};
use crate::error::{Error, Result};
use crate::ops::OpCtx;
use crate::tensor::{DType, NDArray};
use std::time::Instant;

impl Executor {
    /// The head gradient of output `k` when none is given: ones of its shape, reused while
    /// the shape and dtype stay (arrays are copy-on-write, so nothing can change it).
    fn ones_for_head(&mut self, k: usize, shape: &[usize], dtype: DType) -> NDArray {
        if self.head_ones.len() <= k {
            self.head_ones.resize(k + 1, None);
        }
        match &self.head_ones[k] {
            Some(a) if a.shape() == shape && a.dtype() == dtype => a.clone(),
            _ => {
                let a = NDArray::ones(shape, dtype);
                self.head_ones[k] = Some(a.clone());
                a
            }
        }
    }

    /// Back-propagates from the outputs. `head_grads` gives one gradient per output; loss
    /// layers ignore theirs. It may be empty when every output that leads to a requested
    /// gradient is a loss layer (or when no gradient is requested at all); otherwise, as in
    /// MXNet, an empty `head_grads` is an error asking for one gradient per output.
    /// Gradients are written or added per argument as `grad_reqs` says.
    pub fn backward(&mut self, head_grads: &[NDArray]) -> Result<()> {
        if self.last_train.is_none() {
            return Err(Error::Lifecycle {
                call: "executor.backward".into(),
                first: "forward".into(),
            });
        }
        if !head_grads.is_empty() && head_grads.len() != self.heads.len() {
            return Err(Error::invalid(
                "backward: out_grads",
                format!("{} arrays (one per output)", self.heads.len()),
                format!("{} arrays", head_grads.len()),
            ));
        }
        if head_grads.is_empty() {
            self.check_heads_are_losses()?;
        }
        if self.released_last {
            // No gradient requested and no state to fold (an inference pass): nothing to do,
            // and the pass kept no intermediates to do it with.
            return Ok(());
        }
        let n = self.steps.len();
        let mut grads: Vec<Vec<Option<NDArray>>> = self
            .steps
            .iter()
            .map(|s| vec![None; s.node.num_outputs()])
            .collect();
        for (k, (s, o)) in self.heads.clone().into_iter().enumerate() {
            let head = self.value(&self.values, s, o);
            let (shape, dtype) = (head.shape().to_vec(), head.dtype());
            let g = match head_grads.get(k) {
                Some(g) if g.shape() != shape.as_slice() => {
                    return Err(Error::shape(
                        "backward",
                        format!("out_grads[{k}]"),
                        &shape,
                        g.shape(),
                    ))
                }
                Some(g) => g.astype(dtype),
                None => self.ones_for_head(k, &shape, dtype),
            };
            accumulate(&mut grads[s][o], g)?;
        }
        let needs = self.needs_grad();
        let profiling = profile::running();
        for si in (0..n).rev() {
            let step = &self.steps[si];
            let Some(inst) = &step.node.inst else {
                continue;
            };
            if !needs[si] {
                continue;
            }
            let outs = &self.values[si];
            let visible = step.node.num_graph_outputs();
            let out_grads: Vec<NDArray> = grads[si]
                .iter()
                .zip(outs)
                .enumerate()
                .map(|(o, (g, out))| match g {
                    Some(g) => g.clone(),
                    // An output beyond the graph's (the RNN's saved activations): nothing
                    // reads it, so its gradient is zero; an empty array says so for free.
                    None if o >= visible => NDArray::zeros(&[0], out.dtype()),
                    None => NDArray::zeros(out.shape(), out.dtype()),
                })
                .collect();
            let na = step.args;
            let ins: Vec<NDArray> = step.inputs[..na]
                .iter()
                .map(|&(s, o)| self.value(&self.values, s, o).clone())
                .collect();
            let (aux_pos, mut aux) = self.gather_aux(step, na);
            let need_grad: Vec<bool> = step.inputs[..na].iter().map(|&(s, _)| needs[s]).collect();
            let ctx = OpCtx {
                is_train: self.last_train.unwrap_or(false),
                node: &step.node.name,
                need_grad: &need_grad,
            };
            let start = profiling.then(Instant::now);
            let in_grads = inst
                .backward(&ctx, &out_grads, &ins, outs, &mut aux)
                .map_err(|e| with_node(e, &step.node))?;
            if let Some(t) = start {
                let (node, d) = (&step.node, t.elapsed());
                profile::record(node.op_name(), &node.name, profile::Pass::Backward, d);
            }
            for (p, a) in aux_pos.iter().zip(aux) {
                if let Some(slot) = self.aux_arrays.get_mut(*p) {
                    *slot = a;
                }
            }
            for (&(s, o), g) in step.inputs[..na].iter().zip(in_grads) {
                if let (Some(g), true) = (g, needs[s]) {
                    accumulate(&mut grads[s][o], g)?;
                }
            }
            // This node's output gradients are consumed: free them for reuse.
            grads[si] = Vec::new();
        }
        for (si, step) in self.steps.iter().enumerate() {
            if let Some((false, i)) = step.var {
                let req = self.grad_reqs[i];
                if req == GradReq::Null {
                    continue;
                }
                let g = grads[si][0].take().unwrap_or_else(|| {
                    NDArray::zeros(self.arg_arrays[i].shape(), self.arg_arrays[i].dtype())
                });
                let g = g.astype(self.arg_arrays[i].dtype());
                self.grad_arrays[i] = Some(match (req, self.grad_arrays[i].take()) {
                    (GradReq::Add, Some(old)) => old.add(&g)?,
                    _ => g,
                });
            }
        }
        self.grads_fresh = true;
        Ok(())
    }

    /// Backward without head gradients: every output that leads to a requested gradient must
    /// be a loss layer (MXNet's rule). Loss-only graphs — every training step of a usual
    /// network — return before walking the graph.
    fn check_heads_are_losses(&self) -> Result<()> {
        let is_loss = |s: usize| {
            self.steps[s]
                .node
                .inst
                .as_ref()
                .is_some_and(|i| i.is_loss())
        };
        if self.heads.iter().all(|&(s, _)| is_loss(s)) {
            return Ok(());
        }
        let reaches = self.reaches_requested_grad();
        let Some(k) = self
            .heads
            .iter()
            .position(|&(s, _)| reaches[s] && !is_loss(s))
        else {
            return Ok(());
        };
        let outputs = self.symbol.list_outputs();
        let name = outputs.get(k).map_or("an output", |n| n.as_str());
        Err(Error::invalid(
            "backward: out_grads",
            format!(
                "one head gradient per output ({} outputs): output \"{name}\" is not a loss \
                 layer, so its gradient must be given (or make it a loss with MakeLoss)",
                self.heads.len()
            ),
            "none",
        ))
    }

    /// Per step: whether a gradient flowing into its outputs reaches an argument whose
    /// gradient is requested.
    fn reaches_requested_grad(&self) -> Vec<bool> {
        self.grad_paths(false)
    }

    /// Which steps backward runs: those on a path from an argument with a gradient request to
    /// an output, and (BatchNorm-style ops update state in backward) every op node that has
    /// auxiliary states.
    fn needs_grad(&self) -> Vec<bool> {
        self.grad_paths(true)
    }

    fn grad_paths(&self, with_aux_ops: bool) -> Vec<bool> {
        let mut on_path = vec![false; self.steps.len()];
        for (si, step) in self.steps.iter().enumerate() {
            on_path[si] = match step.var {
                Some((false, i)) => self.grad_reqs[i] != GradReq::Null,
                Some((true, _)) => false,
                None => {
                    step.inputs[..step.args].iter().any(|&(s, _)| on_path[s])
                        || (with_aux_ops && step.inputs.len() > step.args)
                }
            };
        }
        on_path
    }
}

fn accumulate(slot: &mut Option<NDArray>, g: NDArray) -> Result<()> {
    *slot = Some(match slot.take() {
        Some(old) => old.add(&g)?,
        None => g,
    });
    Ok(())
}
