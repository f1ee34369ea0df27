//! The inference passes' ways to run an op: from parameters prepared once, with the BatchNorm
//! after it folded in, with the BatchNorm (and activation) before it mapping its input as it
//! reads it, with the residual add after it run over its output — each tried only when the
//! pass allows it and each op agrees (see `fusion`).

use super::fusion::MappedInput;
use super::{prepared, with_node, Executor};
use crate::error::Result;
use crate::kernels::binary::add_in_place;
use crate::ops::{self, InPlace, OpCtx};
use crate::tensor::NDArray;

/// What a step's forward runs over its output as it writes it, in this order: the residual
/// add after the step (see `residuals`), then the activation after the add, or after the step
/// (see `fusions`).
#[derive(Clone)]
pub(super) struct After {
    /// The add's step and its other operand (float32, of the output's shape).
    pub add: Option<(usize, NDArray)>,
    /// The activation's step and map.
    pub act: Option<(usize, InPlace)>,
}

impl After {
    /// Whether nothing runs after the step.
    pub(super) fn is_empty(&self) -> bool {
        self.add.is_none() && self.act.is_none()
    }

    /// `f` given the epilogue that runs these steps over runs of the producer's output (None
    /// when there are none).
    pub(super) fn run<R>(&self, f: impl FnOnce(Option<&ops::Epilogue>) -> R) -> Result<R> {
        let residual = self.add.as_ref().map(|(_, r)| r.f32s("residual add"));
        let residual = residual.transpose()?;
        let act = self.act.map(|(_, map)| map);
        let epilogue = move |start: usize, v: &mut [f32]| {
            if let Some(r) = residual {
                add_in_place(v, &r[start..start + v.len()]);
            }
            if let Some(map) = act {
                map.apply(v);
            }
        };
        Ok(f((!self.is_empty()).then_some(&epilogue as &ops::Epilogue)))
    }

    /// Records `out` (the producer's first output, which holds their values) as the output of
    /// each step computed inside.
    pub(super) fn fill(&self, out: &NDArray, precomputed: &mut [Option<Vec<NDArray>>]) {
        let steps = self
            .add
            .iter()
            .map(|(k, _)| *k)
            .chain(self.act.map(|(k, _)| k));
        for k in steps {
            precomputed[k] = Some(vec![out.clone()]);
        }
    }
}

/// What the pass runs after each step (see [`After`]).
pub(super) type Afters<'a> = &'a dyn Fn(usize) -> After;

/// One op call of an inference pass: its context and inputs, and the map its data input
/// comes through, if any.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub ctx: &'a OpCtx<'a>,
    pub ins: &'a [NDArray],
    pub map: Option<&'a ops::InputMap>,
}

impl Call<'_> {
    /// `inst`'s prepared state for this call ([`ops::Operator::prepare`], or
    /// [`ops::Operator::prepare_mapped`] for a mapped input), `affine` folded in.
    fn prepare(
        &self,
        inst: &dyn ops::Operator,
        affine: Option<&ops::ChannelAffine>,
    ) -> Option<Result<ops::Prepared>> {
        match self.map {
            Some(m) => inst.prepare_mapped(self.ctx, self.ins, affine, m),
            None => inst.prepare(self.ctx, self.ins, affine),
        }
    }

    /// `inst`'s forward pass from `prepared`, the steps of `after` run inside.
    fn forward(
        &self,
        inst: &dyn ops::Operator,
        prepared: &ops::Prepared,
        after: &After,
    ) -> Option<Result<Vec<NDArray>>> {
        let (ctx, ins) = (self.ctx, self.ins);
        let run = after.run(|epilogue| match self.map {
            Some(m) => inst.forward_prepared_mapped(ctx, ins, prepared, m, epilogue),
            None => inst.forward_prepared(ctx, ins, prepared, epilogue),
        });
        run.transpose().map(Result::flatten)
    }
}

impl Executor {
    /// Runs step `si` at inference from its prepared parameters: the BatchNorm after it folded
    /// in when it plans so ([`Executor::fold`]), else its own ([`Executor::prepared_forward`]),
    /// its data input mapped by the call's map as it reads it, and what `after` the last of
    /// them run over its output. The steps computed inside it are filled into `precomputed`.
    /// `None` when the ops decline.
    pub(super) fn run_prepared(
        &self,
        values: &[Vec<NDArray>],
        si: usize,
        after: Afters,
        call: &Call,
        precomputed: &mut [Option<Vec<NDArray>>],
    ) -> Result<Option<Vec<NDArray>>> {
        if let Some(j) = self.fold_into[si] {
            let then = after(j);
            if let Some(r) = self.fold(values, si, j, &then, call) {
                let (outs, bn_outs) = r?;
                precomputed[j] = Some(bn_outs);
                then.fill(&outs[0], precomputed);
                return Ok(Some(outs));
            }
        }
        let then = after(si);
        let Some(r) = self.prepared_forward(si, &then, call) else {
            return Ok(None);
        };
        let outs = r?;
        then.fill(&outs[0], precomputed);
        Ok(Some(outs))
    }

    /// When step `si` is a BatchNorm whose map the step reading it (through an activation, if
    /// any) plans to apply to its input (see [`super::fusion::mapped_inputs`]): that step, and
    /// the BatchNorm's input with the map, deferred to it. `None` when there is no such plan,
    /// the reader's parameters are not bound (nothing to prepare from) or the BatchNorm is
    /// not an affine map in this pass.
    pub(super) fn defer(
        &self,
        values: &[Vec<NDArray>],
        si: usize,
    ) -> Option<Result<(usize, (NDArray, ops::InputMap))>> {
        let k = self.mapped_by[si]?;
        let act = self.map_input[k]?.act;
        if !self.params_bound(k) {
            return None;
        }
        let step = &self.steps[si];
        let node = &step.node;
        let (params, aux) = self.params_and_aux(values, si);
        let ctx = OpCtx {
            is_train: false,
            node: &node.name,
            need_grad: &[],
        };
        let affine = match node.inst.as_ref()?.inference_affine(&ctx, &params, &aux)? {
            Ok(a) => a,
            Err(e) => return Some(Err(with_node(e, node))),
        };
        let &(s, o) = step.inputs.first()?;
        let raw = self.value(values, s, o).clone();
        let then = act.map(|(_, map)| map);
        Some(Ok((k, (raw, ops::InputMap { affine, then }))))
    }

    /// The data input of step `si` as its deferred BatchNorm and activation compute it
    /// without the plan (the activation run inside the BatchNorm's forward, as the plain
    /// pass fuses it), from the BatchNorm's input `raw`: for when `si` declines to map it.
    pub(super) fn materialize(
        &self,
        values: &[Vec<NDArray>],
        si: usize,
        raw: &NDArray,
    ) -> Result<NDArray> {
        let internal = || crate::error::Error::Msg(format!("internal: no input map at step {si}"));
        let MappedInput { bn, act } = self.map_input[si].ok_or_else(internal)?;
        // Step `s` on data `x`, with `then` run inside when the op takes it: (its output,
        // whether `then` ran).
        let run = |s: usize, x: NDArray, then: Option<InPlace>| -> Result<(NDArray, bool)> {
            let node = &self.steps[s].node;
            let inst = node.inst.as_ref().ok_or_else(internal)?;
            let (params, mut aux) = self.params_and_aux(values, s);
            let ins: Vec<NDArray> = std::iter::once(x).chain(params).collect();
            let ctx = OpCtx {
                is_train: false,
                node: &node.name,
                need_grad: &[],
            };
            let fused = then.and_then(|map| {
                let epilogue = move |_: usize, v: &mut [f32]| map.apply(v);
                inst.forward_then(&ctx, &ins, &mut aux, &epilogue)
            });
            let ran_then = fused.is_some();
            let outs = fused.unwrap_or_else(|| inst.forward(&ctx, &ins, &mut aux));
            let y = outs.map_err(|e| with_node(e, node))?.into_iter().next();
            Ok((y.ok_or_else(internal)?, ran_then))
        };
        let (y, ran_act) = run(bn, raw.clone(), act.map(|(_, map)| map))?;
        match act {
            Some((j, _)) if !ran_act => Ok(run(j, y, None)?.0),
            _ => Ok(y),
        }
    }

    /// Step `s`'s inputs after its data (its parameters) and its auxiliary states.
    fn params_and_aux(&self, values: &[Vec<NDArray>], s: usize) -> (Vec<NDArray>, Vec<NDArray>) {
        let step = &self.steps[s];
        let na = step.args;
        let params = step.inputs[1..na]
            .iter()
            .map(|&(p, o)| self.value(values, p, o).clone())
            .collect();
        (params, self.gather_aux(step, na).1)
    }

    /// Step `s`'s parameters and auxiliary states as [`Executor::params_and_aux`] gives them,
    /// borrowed (an aux input that is not a bound state left out).
    fn param_and_aux_refs<'a>(
        &'a self,
        values: &'a [Vec<NDArray>],
        s: usize,
    ) -> impl Iterator<Item = &'a NDArray> + Clone {
        let step = &self.steps[s];
        let params = step.inputs[1..step.args].iter();
        let aux = step.inputs[step.args..].iter();
        params
            .map(move |&(p, o)| self.value(values, p, o))
            .chain(aux.filter_map(|&(p, _)| self.aux_arrays.get(self.steps[p].var?.1)))
    }

    /// Runs step `si` with step `j` (BatchNorm at inference) folded into it and the steps of
    /// `after` (after `j`) run inside: (si's outputs, j's outputs).
    /// The folded parameters are kept between passes (see [`PreparedCache`]) when they are
    /// all bound arrays. `None` when either op declines (see [`folds`]); errors name the node
    /// at fault.
    #[allow(clippy::type_complexity)]
    pub(super) fn fold(
        &self,
        values: &[Vec<NDArray>],
        si: usize,
        j: usize,
        after: &After,
        call: &Call,
    ) -> Option<Result<(Vec<NDArray>, Vec<NDArray>)>> {
        let (bn, conv) = (&self.steps[j].node, &self.steps[si].node);
        let (bn_inst, conv_inst) = (bn.inst.as_ref()?, conv.inst.as_ref()?);
        let bn_ctx = OpCtx {
            is_train: call.ctx.is_train,
            node: &bn.name,
            need_grad: &[],
        };
        let make = || -> Option<Result<prepared::Made>> {
            let (params, aux) = self.params_and_aux(values, j);
            let affine = match bn_inst.inference_affine(&bn_ctx, &params, &aux)? {
                Ok(a) => a,
                Err(e) => return Some(Err(with_node(e, bn))),
            };
            match call.prepare(conv_inst.as_ref(), Some(&affine))? {
                Ok(p) => Some(Ok((p, affine.other_outputs))),
                Err(e) => Some(Err(with_node(e, conv))),
            }
        };
        let ins = call.ins;
        let cacheable = self.params_bound(si) && self.params_bound(j);
        let made = if cacheable {
            let keys = ins[conv_inst.prepared_from(ins.len())]
                .iter()
                .chain(self.param_and_aux_refs(values, j));
            let cache = match call.map {
                Some(_) => &self.mapped_folded,
                None => &self.folded,
            };
            cache.get_or_make(si, keys, make)?
        } else {
            make()?
        };
        let (prepared, extra) = match made {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        let outs = call.forward(conv_inst.as_ref(), &prepared, after)?;
        Some(outs.map_err(|e| with_node(e, conv)).map(|outs| {
            let mut bn_outs = vec![outs[0].clone()];
            bn_outs.extend(extra);
            (outs, bn_outs)
        }))
    }

    /// Runs step `si` at inference from its parameters prepared once (kept between passes,
    /// see [`PreparedCache`]) with the steps of `after` run inside. `None` when the op has
    /// nothing to prepare or its parameters are not all bound arrays.
    pub(super) fn prepared_forward(
        &self,
        si: usize,
        after: &After,
        call: &Call,
    ) -> Option<Result<Vec<NDArray>>> {
        let node = &self.steps[si].node;
        let inst = node.inst.as_ref()?;
        let keys = inst.prepared_from(call.ins.len());
        if keys.is_empty() || !self.params_bound(si) {
            return None;
        }
        let make = || {
            let made = call.prepare(inst.as_ref(), None)?;
            Some(
                made.map(|p| (p, Vec::new()))
                    .map_err(|e| with_node(e, node)),
            )
        };
        let cache = match call.map {
            Some(_) => &self.mapped,
            None => &self.prepared,
        };
        let (prepared, _) = match cache.get_or_make(si, call.ins[keys].iter(), make)? {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        let outs = call.forward(inst.as_ref(), &prepared, after)?;
        Some(outs.map_err(|e| with_node(e, node)))
    }

    /// Whether the inputs step `si` prepares from (its parameters, see
    /// [`ops::Operator::prepared_from`]; aux states are always bound) are bound arrays rather
    /// than other ops' outputs.
    pub(super) fn params_bound(&self, si: usize) -> bool {
        let step = &self.steps[si];
        let na = step.args.min(step.inputs.len());
        let Some(inst) = step.node.inst.as_ref() else {
            return false;
        };
        step.inputs[inst.prepared_from(na)]
            .iter()
            .all(|&(s, _)| self.steps[s].var.is_some())
    }
}
