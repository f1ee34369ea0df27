//! Executors: a symbol bound to arrays — forward, backward with MXNet's gradient requests,
//! auxiliary states, reshape, and a monitor callback on every op output.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ops::{self, InPlace, OpCtx};
use crate::symbol::{Node, Symbol};
use crate::tensor::{DType, NDArray};
use blocks::SampleBlocks;
use fusion::{folds, fusions, mapped_inputs, residuals, MappedInput, Residual};
use inference::{After, Call};
use prepared::PreparedCache;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

mod backward;
mod blocks;
mod fusion;
mod inference;
mod prepared;
pub mod profile;

/// What to do with an argument's gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradReq {
    /// No gradient.
    Null,
    /// Overwrite the gradient array.
    Write,
    /// Add to the gradient array (accumulate over several backward calls).
    Add,
}

impl GradReq {
    /// Parses `"null"`, `"write"`, `"add"` (also `"inplace"`, which MXNet treats as write).
    pub fn parse(s: &str) -> Result<GradReq> {
        match s {
            "null" => Ok(GradReq::Null),
            "write" | "inplace" => Ok(GradReq::Write),
            "add" => Ok(GradReq::Add),
            other => Err(Error::invalid(
                "grad_req",
                "\"write\", \"add\" or \"null\"",
                format!("\"{other}\""),
            )),
        }
    }
}

/// A monitor callback: called with every op output (`{node}_{output}`) after forward.
pub type Monitor = Box<dyn FnMut(&str, &NDArray) + Send>;

/// One step of the compiled graph.
#[derive(Debug)]
struct Step {
    node: Arc<Node>,
    /// (step index, output index) per input; variables have no inputs.
    inputs: Vec<(usize, usize)>,
    /// For variables: Some((is_aux, position in arg/aux arrays)).
    var: Option<(bool, usize)>,
    /// The op's argument count (`Node::num_arguments`, which lists the argument names):
    /// its inputs after these are auxiliary states. Counted once here, not per pass.
    args: usize,
}

/// For each step, the last step that reads its outputs (`usize::MAX` for graph outputs).
fn last_uses(steps: &[Step], heads: &[(usize, usize)]) -> Vec<usize> {
    let mut last = vec![0; steps.len()];
    for (i, st) in steps.iter().enumerate() {
        for &(s, _) in &st.inputs {
            last[s] = last[s].max(i);
        }
    }
    for &(s, _) in heads {
        last[s] = usize::MAX;
    }
    last
}

/// A bound symbol.
///
/// ```
/// use mxfn_core::executor::{Executor, GradReq};
/// use mxfn_core::symbol::Symbol;
/// use mxfn_core::{Context, NDArray, DType};
/// use std::collections::HashMap;
/// let x = Symbol::variable("x");
/// let y = Symbol::create("square", None, &[], vec![(None, x)]).unwrap();
/// let shapes = HashMap::from([("x".to_string(), vec![3])]);
/// let mut exe = Executor::simple_bind(&y, Context::cpu(0), &shapes, &HashMap::new(), &HashMap::new(), GradReq::Write).unwrap();
/// exe.set_arg("x", NDArray::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap()).unwrap();
/// exe.forward(true).unwrap();
/// exe.backward(&[NDArray::ones(&[3], DType::Float32)]).unwrap();
/// assert_eq!(exe.grad("x").unwrap().unwrap().to_f64_vec(), vec![2.0, 4.0, 6.0]);
/// ```
pub struct Executor {
    symbol: Symbol,
    ctx: Context,
    steps: Vec<Step>,
    heads: Vec<(usize, usize)>,
    last_use: Vec<usize>,
    /// See [`fusions`].
    fuse_into: Vec<Option<(usize, InPlace)>>,
    /// See [`folds`].
    fold_into: Vec<Option<usize>>,
    /// See [`mapped_inputs`].
    map_input: Vec<Option<MappedInput>>,
    /// For each BatchNorm step in `map_input`, the step that maps its input.
    mapped_by: Vec<Option<usize>>,
    /// See [`residuals`].
    residual_into: Vec<Option<Residual>>,
    arg_names: Vec<String>,
    aux_names: Vec<String>,
    /// Argument values, in `list_arguments` order.
    pub arg_arrays: Vec<NDArray>,
    /// Gradient arrays (None where grad_req is null).
    pub grad_arrays: Vec<Option<NDArray>>,
    /// Gradient requests, per argument.
    pub grad_reqs: Vec<GradReq>,
    /// Auxiliary states, in `list_auxiliary_states` order.
    pub aux_arrays: Vec<NDArray>,
    values: Vec<Vec<NDArray>>,
    outputs: Vec<NDArray>,
    last_train: Option<bool>,
    /// Whether the gradient arrays hold what a backward computed since the last forward
    /// (a monitor reports gradients only then).
    grads_fresh: bool,
    monitor: Option<Monitor>,
    /// How many steps the last forward computed inside their producer (see [`fusions`]).
    fused_last: usize,
    /// Whether the last forward pass dropped its intermediate values as it went (no gradient
    /// requested, and nothing for a backward to do).
    released_last: bool,
    /// The all-ones head gradient of each output, kept from one backward to the next (as
    /// MXNet's executor keeps its head-gradient arrays): a language model's loss output is
    /// tens of MB, and filling a fresh one every batch cost more than its softmax.
    head_ones: Vec<Option<NDArray>>,
    /// Parameter-derived state of inference passes (see [`PreparedCache`]).
    prepared: PreparedCache,
    /// The same for convolutions with the op after them folded in (BatchNorm), kept apart:
    /// where that op declines to fold (an activation, an add, a Concat), the decline must
    /// not stand for the convolution's own prepared state.
    folded: PreparedCache,
    /// The same two for steps whose data input comes mapped (see [`mapped_inputs`]): their
    /// weight is packed for other kernels.
    mapped: PreparedCache,
    mapped_folded: PreparedCache,
    /// Inference in blocks of samples, when set (see [`Executor::set_sample_blocks`]).
    blocks: Option<SampleBlocks>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Executor(args={:?}, outputs={:?})",
            self.arg_names,
            self.symbol.list_outputs()
        )
    }
}

impl Executor {
    /// Binds `symbol` to given arrays (arguments in `list_arguments` order, gradients, their
    /// requests, and auxiliary states). Shapes are checked against shape inference.
    pub fn bind(
        symbol: &Symbol,
        ctx: Context,
        args: Vec<NDArray>,
        grads: Vec<Option<NDArray>>,
        reqs: Vec<GradReq>,
        aux: Vec<NDArray>,
    ) -> Result<Executor> {
        let arg_names = symbol.list_arguments();
        let aux_names = symbol.list_auxiliary_states();
        if args.len() != arg_names.len() {
            return Err(Error::invalid(
                "bind: args",
                format!("{} arrays ({})", arg_names.len(), arg_names.join(", ")),
                format!("{} arrays", args.len()),
            ));
        }
        if aux.len() != aux_names.len() {
            return Err(Error::invalid(
                "bind: aux_states",
                format!("{} arrays ({})", aux_names.len(), aux_names.join(", ")),
                format!("{} arrays", aux.len()),
            ));
        }
        if grads.len() != args.len() || reqs.len() != args.len() {
            return Err(Error::invalid(
                "bind: args_grad / grad_req",
                format!("one per argument ({})", args.len()),
                format!("{} / {}", grads.len(), reqs.len()),
            ));
        }
        let known: HashMap<String, Vec<usize>> = arg_names
            .iter()
            .cloned()
            .zip(args.iter().map(|a| a.shape().to_vec()))
            .chain(
                aux_names
                    .iter()
                    .cloned()
                    .zip(aux.iter().map(|a| a.shape().to_vec())),
            )
            .collect();
        let (arg_shapes, _, aux_shapes) = symbol.infer_shape(&known)?;
        for (i, (name, s)) in arg_names.iter().zip(&arg_shapes).enumerate() {
            if args[i].shape() != s.as_slice() {
                return Err(Error::shape(
                    "bind",
                    format!("argument \"{name}\""),
                    s,
                    args[i].shape(),
                ));
            }
            if let Some(g) = &grads[i] {
                if g.shape() != s.as_slice() {
                    return Err(Error::shape(
                        "bind",
                        format!("gradient of \"{name}\""),
                        s,
                        g.shape(),
                    ));
                }
            }
        }
        for (i, (name, s)) in aux_names.iter().zip(&aux_shapes).enumerate() {
            if aux[i].shape() != s.as_slice() {
                return Err(Error::shape(
                    "bind",
                    format!("auxiliary state \"{name}\""),
                    s,
                    aux[i].shape(),
                ));
            }
        }
        let mut grads = grads;
        for (i, r) in reqs.iter().enumerate() {
            if *r != GradReq::Null && grads[i].is_none() {
                grads[i] = Some(NDArray::zeros(args[i].shape(), args[i].dtype()));
            }
        }
        // Creation nodes of unknown (0) sizes run with the sizes inferred for these inputs.
        let resolved = symbol.with_inferred_creation_shapes(&known)?;
        let (steps, heads) = compile(resolved.as_ref().unwrap_or(symbol), &arg_names, &aux_names);
        let last_use = last_uses(&steps, &heads);
        let fuse_into = fusions(&steps, &heads);
        let fold_into = folds(&steps, &heads);
        let map_input = mapped_inputs(&steps, &heads);
        let mut mapped_by = vec![None; steps.len()];
        for (k, m) in map_input.iter().enumerate() {
            if let Some(m) = m {
                mapped_by[m.bn] = Some(k);
            }
        }
        let residual_into = residuals(&steps, &heads);
        let steps_len = steps.len();
        Ok(Executor {
            symbol: symbol.clone(),
            ctx,
            steps,
            heads,
            last_use,
            fuse_into,
            fold_into,
            map_input,
            mapped_by,
            residual_into,
            arg_names,
            aux_names,
            arg_arrays: args.into_iter().map(|a| a.as_in_context(ctx)).collect(),
            grad_arrays: grads,
            grad_reqs: reqs,
            aux_arrays: aux,
            values: Vec::new(),
            outputs: Vec::new(),
            last_train: None,
            grads_fresh: false,
            monitor: None,
            released_last: false,
            fused_last: 0,
            head_ones: Vec::new(),
            prepared: PreparedCache::new(steps_len),
            folded: PreparedCache::new(steps_len),
            mapped: PreparedCache::new(steps_len),
            mapped_folded: PreparedCache::new(steps_len),
            blocks: None,
        })
    }

    /// Allocates zero arrays from input shapes (by name) and dtypes, then binds.
    /// `reqs` overrides `default_req` per argument name.
    pub fn simple_bind(
        symbol: &Symbol,
        ctx: Context,
        shapes: &HashMap<String, Vec<usize>>,
        dtypes: &HashMap<String, DType>,
        reqs: &HashMap<String, GradReq>,
        default_req: GradReq,
    ) -> Result<Executor> {
        let (arg_shapes, out_shapes, aux_shapes) = symbol.infer_shape(shapes)?;
        let (arg_types, out_types, aux_types) = symbol.infer_type(dtypes)?;
        let names = symbol.list_arguments();
        Self::check_bind_bytes(
            symbol,
            [
                (&names, &arg_shapes, &arg_types),
                (&symbol.list_outputs(), &out_shapes, &out_types),
                (&symbol.list_auxiliary_states(), &aux_shapes, &aux_types),
            ],
        )?;
        for k in reqs.keys() {
            if !names.contains(k) {
                return Err(Error::invalid(
                    format!("simple_bind: grad_req for \"{k}\""),
                    format!("an argument name ({})", names.join(", ")),
                    "an unknown name",
                ));
            }
        }
        let args: Vec<NDArray> = arg_shapes
            .iter()
            .zip(&arg_types)
            .map(|(s, t)| NDArray::zeros(s, *t))
            .collect();
        let aux: Vec<NDArray> = aux_shapes
            .iter()
            .zip(&aux_types)
            .map(|(s, t)| NDArray::zeros(s, *t))
            .collect();
        let req: Vec<GradReq> = names
            .iter()
            .map(|n| reqs.get(n).copied().unwrap_or(default_req))
            .collect();
        let grads = vec![None; args.len()];
        Self::bind(symbol, ctx, args, grads, req, aux)
    }

    /// The limits policy for a bind: every array it allocates (arguments, outputs, auxiliary
    /// states) within [`crate::limits::max_bytes`], and their sum too — checked before any is
    /// allocated, so a checkpoint whose layer asks for 10¹² units is an error, not an abort.
    fn check_bind_bytes<'a>(
        symbol: &Symbol,
        groups: [(&'a [String], &'a [Vec<usize>], &'a [DType]); 3],
    ) -> Result<()> {
        let mut total: u64 = 0;
        for (names, shapes, types) in groups {
            for ((name, shape), dtype) in names.iter().zip(shapes).zip(types) {
                let what = format!("simple_bind: the shape of \"{name}\"");
                total =
                    total.saturating_add(crate::limits::array_bytes(&what, shape, dtype.size())?);
            }
        }
        let desc = format!(
            "the arrays of a bind of {} ({} inputs)",
            symbol.list_outputs().join(", "),
            groups[0].0.len()
        );
        crate::limits::check_bytes("simple_bind: shapes", total, &desc)
    }

    /// A new executor for new input shapes, sharing this one's parameters (arrays whose
    /// shapes are unchanged are shared; others are freshly zeroed).
    pub fn reshape(&self, shapes: &HashMap<String, Vec<usize>>) -> Result<Executor> {
        let mut known: HashMap<String, Vec<usize>> = HashMap::new();
        for (n, a) in self.arg_names.iter().zip(&self.arg_arrays) {
            known.insert(n.clone(), a.shape().to_vec());
        }
        for (k, v) in shapes {
            if !self.arg_names.contains(k) {
                return Err(Error::invalid(
                    format!("reshape: \"{k}\""),
                    format!("an argument name ({})", self.arg_names.join(", ")),
                    "an unknown name",
                ));
            }
            known.insert(k.clone(), v.clone());
        }
        // Let everything not given (e.g. labels) be re-inferred from the new inputs.
        let given: HashMap<String, Vec<usize>> = known
            .iter()
            .filter(|(k, _)| shapes.contains_key(*k) || !self.is_data_like(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let (arg_shapes, _, aux_shapes) = self.symbol.infer_shape(&given)?;
        let args = self
            .arg_arrays
            .iter()
            .zip(&arg_shapes)
            .map(|(a, s)| {
                if a.shape() == s.as_slice() {
                    a.clone()
                } else {
                    NDArray::zeros(s, a.dtype())
                }
            })
            .collect();
        let grads = self
            .grad_arrays
            .iter()
            .zip(&arg_shapes)
            .map(|(g, s)| {
                g.as_ref().map(|g| {
                    if g.shape() == s.as_slice() {
                        g.clone()
                    } else {
                        NDArray::zeros(s, g.dtype())
                    }
                })
            })
            .collect();
        let aux = self
            .aux_arrays
            .iter()
            .zip(&aux_shapes)
            .map(|(a, s)| {
                if a.shape() == s.as_slice() {
                    a.clone()
                } else {
                    NDArray::zeros(s, a.dtype())
                }
            })
            .collect();
        Self::bind(
            &self.symbol,
            self.ctx,
            args,
            grads,
            self.grad_reqs.clone(),
            aux,
        )
    }

    /// An inference-only executor of the same graph and shapes sharing this one's arguments
    /// and auxiliary states (no gradients, no monitor): a second pass can run beside this
    /// one's. It runs in the same sample blocks as this one.
    pub(crate) fn inference_twin(&self) -> Result<Executor> {
        let mut twin = Self::bind(
            &self.symbol,
            self.ctx,
            self.arg_arrays.clone(),
            vec![None; self.arg_arrays.len()],
            vec![GradReq::Null; self.arg_arrays.len()],
            self.aux_arrays.clone(),
        )?;
        twin.blocks = self.blocks.as_ref().map(SampleBlocks::unbound);
        Ok(twin)
    }

    /// Drops what the last forward pass kept for backward and the outputs, so their buffers
    /// return to the allocator for another executor to use (a BucketingModule releases the
    /// bucket it switches away from: buckets share working memory, as MXNet's shared
    /// executors do). A backward or output read afterwards asks for a forward first.
    pub fn release_pass(&mut self) {
        self.prepared.clear();
        self.folded.clear();
        self.mapped.clear();
        self.mapped_folded.clear();
        if let Some(b) = &mut self.blocks {
            b.release();
        }
        self.values = Vec::new();
        self.outputs = Vec::new();
        self.last_train = None;
    }

    /// Whether a monitor is installed.
    pub(crate) fn has_monitor(&self) -> bool {
        self.monitor.is_some()
    }

    // Inputs that are not parameters: leave their shapes to inference on reshape.
    fn is_data_like(&self, name: &str) -> bool {
        name.ends_with("label") || name == "data"
    }

    /// The bound symbol.
    pub fn symbol(&self) -> &Symbol {
        &self.symbol
    }

    /// The device.
    pub fn context(&self) -> Context {
        self.ctx
    }

    /// Argument names.
    pub fn arg_names(&self) -> &[String] {
        &self.arg_names
    }

    /// Auxiliary state names.
    pub fn aux_names(&self) -> &[String] {
        &self.aux_names
    }

    fn arg_index(&self, name: &str) -> Result<usize> {
        self.arg_names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| {
                Error::invalid(
                    format!("executor: argument \"{name}\""),
                    format!("one of {}", self.arg_names.join(", ")),
                    "an unknown name",
                )
            })
    }

    /// Replaces argument `name`'s value (its shape must match; the dtype is converted).
    pub fn set_arg(&mut self, name: &str, value: NDArray) -> Result<()> {
        let i = self.arg_index(name)?;
        if value.shape() != self.arg_arrays[i].shape() {
            return Err(Error::shape(
                "executor.forward",
                format!("argument \"{name}\""),
                self.arg_arrays[i].shape(),
                value.shape(),
            ));
        }
        self.arg_arrays[i] = value
            .astype(self.arg_arrays[i].dtype())
            .as_in_context(self.ctx);
        Ok(())
    }

    /// Argument `name` for an in-place change (same shape and dtype: the module's optimizer
    /// updates weights through it). A pass's values never hold variables, so with no other
    /// holder the change needs no copy.
    pub(crate) fn arg_mut(&mut self, name: &str) -> Result<&mut NDArray> {
        let i = self.arg_index(name)?;
        Ok(&mut self.arg_arrays[i])
    }

    /// Replaces auxiliary state `name`.
    pub fn set_aux(&mut self, name: &str, value: NDArray) -> Result<()> {
        let i = self
            .aux_names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| {
                Error::invalid(
                    format!("executor: auxiliary state \"{name}\""),
                    format!("one of {}", self.aux_names.join(", ")),
                    "an unknown name",
                )
            })?;
        if value.shape() != self.aux_arrays[i].shape() {
            return Err(Error::shape(
                "executor",
                format!("auxiliary state \"{name}\""),
                self.aux_arrays[i].shape(),
                value.shape(),
            ));
        }
        self.aux_arrays[i] = value.astype(self.aux_arrays[i].dtype());
        Ok(())
    }

    /// Argument `name`'s value.
    pub fn arg(&self, name: &str) -> Result<&NDArray> {
        Ok(&self.arg_arrays[self.arg_index(name)?])
    }

    /// Argument `name`'s gradient.
    pub fn grad(&self, name: &str) -> Result<Option<&NDArray>> {
        Ok(self.grad_arrays[self.arg_index(name)?].as_ref())
    }

    /// Whether the gradient arrays hold what a backward computed since the last forward.
    pub fn grads_fresh(&self) -> bool {
        self.grads_fresh
    }

    /// Installs (or removes) the monitor callback.
    pub fn set_monitor(&mut self, monitor: Option<Monitor>) {
        self.monitor = monitor;
    }

    /// The outputs of the last forward pass.
    pub fn outputs(&self) -> &[NDArray] {
        &self.outputs
    }

    /// Output `o` of step `s` in a pass's `values`; variables are their bound arrays.
    fn value<'a>(&'a self, values: &'a [Vec<NDArray>], s: usize, o: usize) -> &'a NDArray {
        match self.steps[s].var {
            Some((false, i)) => &self.arg_arrays[i],
            Some((true, i)) => &self.aux_arrays[i],
            None => &values[s][o],
        }
    }

    /// Runs the graph forward.
    pub fn forward(&mut self, is_train: bool) -> Result<()> {
        self.grads_fresh = false;
        if self.runs_in_blocks(is_train) {
            return self.forward_in_blocks();
        }
        // Drop the previous pass's values first so their buffers can be reused.
        self.values = Vec::new();
        // (Ops with auxiliary states run in backward even without gradients, so they keep
        // everything.)
        let no_grad = self.grad_reqs.iter().all(|r| *r == GradReq::Null);
        let release = no_grad && self.steps.iter().all(|st| st.inputs.len() == st.args);
        // Outside training such a backward changes nothing (BatchNorm folds its batch
        // statistics only in training), so an op that reuses its inputs' buffers may be handed
        // them at their last use (see `Operator::reuses_inputs`).
        let hand_over = release || (no_grad && !is_train);
        let mut handed_over = false;
        let mut values: Vec<Vec<NDArray>> = Vec::with_capacity(self.steps.len());
        // Outputs of steps already computed inside their producer's forward (see `fusion`); a
        // monitor sees every op's own output, so it turns fusion off.
        let mut precomputed: Vec<Option<Vec<NDArray>>> = vec![None; self.steps.len()];
        let mut fused_steps = 0;
        let profiling = profile::running();
        let inference = no_grad && !is_train && self.monitor.is_none();
        // Inputs deferred to the step that maps them as it reads them (see `mapped_inputs`).
        let mut deferred: Vec<Option<(NDArray, ops::InputMap)>> = vec![None; self.steps.len()];
        for (si, step) in self.steps.iter().enumerate() {
            let node = &step.node;
            if inference && precomputed[si].is_none() {
                if let Some((k, d)) = self.defer(&values, si).transpose()? {
                    if let Some((j, _)) = self.map_input[k].and_then(|m| m.act) {
                        precomputed[j] = Some(Vec::new());
                    }
                    precomputed[si] = Some(Vec::new());
                    deferred[k] = Some(d);
                }
            }
            let outs = match (&node.inst, step.var) {
                // Variables are read from the argument / aux arrays (see `value`): holding a
                // second reference here would make the optimizer's in-place update copy.
                (_, Some(_)) => Vec::new(),
                (Some(_), None) if precomputed[si].is_some() => {
                    // Computed by its producer (or, a mapped input, by its reader): a call
                    // of no time of its own.
                    if profiling {
                        let d = std::time::Duration::ZERO;
                        profile::record(node.op_name(), &node.name, profile::Pass::Forward, d);
                    }
                    fused_steps += 1;
                    precomputed[si].take().unwrap_or_default()
                }
                (Some(inst), None) => {
                    let start = profiling.then(Instant::now);
                    let na = step.args;
                    // A data input deferred by its BatchNorm (see `mapped_inputs`): the
                    // BatchNorm's own input and map.
                    let mapped = deferred[si].take();
                    let mut ins: Vec<NDArray> = step.inputs[..na]
                        .iter()
                        .enumerate()
                        .map(|(p, &(s, o))| match (&mapped, p) {
                            (Some((raw, _)), 0) => raw.clone(),
                            _ => self.value(&values, s, o).clone(),
                        })
                        .collect();
                    let (aux_pos, mut aux) = self.gather_aux(step, na);
                    let ctx = OpCtx {
                        is_train,
                        node: &node.name,
                        need_grad: &[],
                    };
                    let act = |s: usize| {
                        self.fuse_into[s].filter(|(_, map)| {
                            self.monitor.is_none() && (map.keeps_gradient() || no_grad)
                        })
                    };
                    // What a step's forward also runs over its output: at inference the
                    // residual add after it when its other operand is ready, then the
                    // activation after the add (or after the step).
                    let after = |s: usize| -> After {
                        let ready = |&(p, o): &(usize, usize)| {
                            p < si
                                && (self.steps[p].var.is_some()
                                    || values.get(p).is_some_and(|v| v.len() > o))
                        };
                        let add = self.residual_into[s]
                            .filter(|r| inference && ready(&r.other))
                            .map(|r| (r.add, self.value(&values, r.other.0, r.other.1).clone()))
                            .filter(|(_, v)| v.dtype() == DType::Float32);
                        match add {
                            Some((k, v)) => After {
                                act: act(k),
                                add: Some((k, v)),
                            },
                            None => After {
                                add: None,
                                act: act(s),
                            },
                        }
                    };
                    // At inference: parameters prepared once (kept between passes), BatchNorm
                    // folded in, the input mapped on the way in.
                    let mut prepared_run = None;
                    if inference {
                        let map = mapped.as_ref().map(|(_, m)| m);
                        let call = Call {
                            ctx: &ctx,
                            ins: &ins,
                            map,
                        };
                        prepared_run =
                            self.run_prepared(&values, si, &after, &call, &mut precomputed)?;
                        if prepared_run.is_none() && mapped.is_some() {
                            // Declined: the BatchNorm (and activation) run first after all.
                            ins[0] = self.materialize(&values, si, &ins[0])?;
                            let call = Call {
                                ctx: &ctx,
                                ins: &ins,
                                map: None,
                            };
                            prepared_run =
                                self.run_prepared(&values, si, &after, &call, &mut precomputed)?;
                        }
                    }
                    let outs = match prepared_run {
                        Some(outs) => outs,
                        None => {
                            let then = after(si);
                            let fused_run = match then.is_empty() {
                                true => None,
                                false => then
                                    .run(|e| inst.forward_then(&ctx, &ins, &mut aux, e?))
                                    .transpose()
                                    .map(Result::flatten),
                            };
                            match fused_run {
                                Some(r) => r.map(|outs| {
                                    then.fill(&outs[0], &mut precomputed);
                                    outs
                                }),
                                None => {
                                    // Inputs at their last use are dropped from `values`
                                    // first, so `ins` holds the only reference to them and
                                    // the op may reuse their buffers.
                                    if hand_over && inst.reuses_inputs() {
                                        for &(s, _) in &step.inputs {
                                            if self.last_use[s] == si && self.steps[s].var.is_none()
                                            {
                                                values[s] = Vec::new();
                                                handed_over = true;
                                            }
                                        }
                                    }
                                    inst.forward_consuming(&ctx, ins, &mut aux)
                                }
                            }
                            .map_err(|e| with_node(e, node))?
                        }
                    };
                    if let Some(t) = start {
                        let d = t.elapsed();
                        profile::record(node.op_name(), &node.name, profile::Pass::Forward, d);
                    }
                    for (p, a) in aux_pos.iter().zip(aux) {
                        if let Some(slot) = self.aux_arrays.get_mut(*p) {
                            *slot = a;
                        }
                    }
                    if let Some(m) = self.monitor.as_mut() {
                        for (k, o) in outs.iter().enumerate().take(node.num_visible_outputs()) {
                            m(&node.output_name(k), o);
                        }
                    }
                    outs
                }
                (None, None) => {
                    return Err(Error::Msg(format!(
                        "internal: variable {} is not bound",
                        node.name
                    )))
                }
            };
            values.push(outs);
            // Memory plan: with no gradient to compute, an intermediate result is dropped as
            // soon as its last consumer has run, so its buffer returns to the allocator and
            // the next op reuses it (peak memory ~ the widest layer, not the whole graph).
            if release {
                let si = values.len() - 1;
                for &(s, _) in &self.steps[si].inputs {
                    if self.last_use[s] == si && self.steps[s].var.is_none() {
                        values[s] = Vec::new();
                    }
                }
            }
        }
        self.outputs = self
            .heads
            .iter()
            .map(|&(s, o)| self.value(&values, s, o).clone())
            .collect();
        self.released_last = release || handed_over;
        self.fused_last = fused_steps;
        self.values = values;
        self.last_train = Some(is_train);
        Ok(())
    }

    /// The auxiliary-state inputs of `step` (after its `na` arguments): their positions in
    /// `aux_arrays` and their current values.
    fn gather_aux(&self, step: &Step, na: usize) -> (Vec<usize>, Vec<NDArray>) {
        let pos: Vec<usize> = step.inputs[na..]
            .iter()
            .map(|&(s, _)| self.steps[s].var.map_or(usize::MAX, |v| v.1))
            .collect();
        let vals = pos
            .iter()
            .map(|&p| {
                self.aux_arrays
                    .get(p)
                    .cloned()
                    .unwrap_or_else(|| NDArray::zeros(&[0], DType::Float32))
            })
            .collect();
        (pos, vals)
    }
}

fn with_node(e: Error, node: &Node) -> Error {
    match &e {
        Error::Invalid { what, .. } | Error::Shape { op: what, .. }
            if what.contains(&node.name) =>
        {
            e
        }
        _ => Error::Context {
            context: format!("{} node \"{}\"", node.op_name(), node.name),
            source: Box::new(e),
        },
    }
}

fn compile(
    symbol: &Symbol,
    arg_names: &[String],
    aux_names: &[String],
) -> (Vec<Step>, Vec<(usize, usize)>) {
    let nodes = symbol.topo_nodes();
    let index: HashMap<usize, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (Arc::as_ptr(n) as usize, i))
        .collect();
    let aux_ptrs: std::collections::HashSet<usize> = nodes
        .iter()
        .flat_map(|n| {
            n.inputs
                .iter()
                .skip(n.num_arguments())
                .map(|e| Arc::as_ptr(&e.node) as usize)
        })
        .collect();
    let steps = nodes
        .iter()
        .map(|n| {
            let var = if n.is_variable() {
                let is_aux = aux_ptrs.contains(&(Arc::as_ptr(n) as usize));
                let list = if is_aux { aux_names } else { arg_names };
                list.iter().position(|x| *x == n.name).map(|p| (is_aux, p))
            } else {
                None
            };
            Step {
                node: n.clone(),
                inputs: n
                    .inputs
                    .iter()
                    .map(|e| (index[&(Arc::as_ptr(&e.node) as usize)], e.index))
                    .collect(),
                var,
                args: n.num_arguments(),
            }
        })
        .collect();
    let heads = symbol
        .heads
        .iter()
        .map(|h| (index[&(Arc::as_ptr(&h.node) as usize)], h.index))
        .collect();
    (steps, heads)
}

#[cfg(test)]
mod tests;
