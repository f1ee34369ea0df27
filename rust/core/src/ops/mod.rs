//! The operator registry: one `OpDef` per MXNet operator — name, doc, typed parameters,
//! inputs / outputs / auxiliary states, shape and type inference, forward and backward.
//!
//! Families live one per file; this file lists families, not operators. The Python `sym` and
//! `nd` namespaces and the registry-wide tests are generated from `registry()`.

pub mod activation;
pub mod broadcast;
pub mod conv;
pub mod creation;
pub mod elemwise;
pub mod linalg;
pub mod loss;
pub mod nn;
pub mod norm;
pub mod params;
pub mod passive;
pub mod pool;
pub mod reduce;
pub mod rnn;
pub mod select;
pub mod shape;
pub mod softmax;
pub mod testing;

use crate::error::{Error, Result};
use crate::tensor::{DType, NDArray, Storable};
pub use elemwise::UnaryFn;
pub use params::{ParamDef, ParamKind, Params};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// A shape during inference: `None` while unknown.
pub type MaybeShape = Option<Vec<usize>>;

/// Execution context of one operator call.
pub struct OpCtx<'a> {
    /// Training mode (dropout active, batch statistics used).
    pub is_train: bool,
    /// The node's name, for error messages.
    pub node: &'a str,
    /// In backward: which arguments' gradients are wanted (empty: all). An op may skip the
    /// work for the others and return `None` there (the data gradient of a first layer).
    pub need_grad: &'a [bool],
}

impl OpCtx<'_> {
    /// Whether backward must compute the gradient of argument `i`.
    pub fn needs_grad(&self, i: usize) -> bool {
        self.need_grad.get(i).copied().unwrap_or(true)
    }
}

/// What an operator instance (an op with its parsed parameters) can do.
///
/// Inputs are the op's arguments followed by nothing else; auxiliary states are passed
/// separately. `outputs` counts every output, including ones MXNet hides from
/// `list_outputs` (BatchNorm's mean and var, Dropout's mask), which backward receives.
pub trait Operator: Send + Sync + fmt::Debug {
    /// Argument names, in order (`["data", "weight", "bias"]`).
    fn arguments(&self) -> Vec<String>;
    /// Auxiliary state names (`["moving_mean", "moving_var"]`).
    fn aux_states(&self) -> Vec<String> {
        Vec::new()
    }
    /// Names of the visible outputs (`["output"]`); the JSON / list_outputs suffixes.
    fn output_names(&self) -> Vec<String> {
        vec!["output".into()]
    }
    /// Number of outputs including hidden ones.
    fn num_outputs(&self) -> usize {
        self.output_names().len()
    }
    /// Number of outputs MXNet's graph gives the node (its JSON `node_row_ptr`): all of them,
    /// unless the op keeps an output of its own for backward that MXNet does not have (the
    /// fused RNN's saved activations).
    fn num_graph_outputs(&self) -> usize {
        self.num_outputs()
    }
    /// Infers output shapes from input shapes, filling in inputs it can deduce (weights from
    /// data, labels from data). Unknown inputs it needs are an error naming the argument.
    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>>;
    /// Backward shape inference: with every output shape known, fills in the unknown inputs
    /// the op's MXNet shape function completes from its outputs (`_rnn_param_concat`'s
    /// Gluon weights of deferred input size). Graph inference keeps the filled inputs only
    /// when `infer_shape` then gives exactly these outputs. The default fills nothing.
    fn infer_inputs_from_outputs(
        &self,
        _node: &str,
        _inputs: &mut [MaybeShape],
        _outputs: &[Vec<usize>],
    ) -> Result<()> {
        Ok(())
    }
    /// Infers output dtypes; the default: everything takes the first known input dtype
    /// (float32 when none is known).
    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        let t = inputs
            .iter()
            .chain(aux.iter())
            .flatten()
            .next()
            .copied()
            .unwrap_or(DType::Float32);
        inputs
            .iter_mut()
            .chain(aux.iter_mut())
            .for_each(|x| *x = Some(x.unwrap_or(t)));
        Ok(vec![t; self.num_outputs()])
    }
    /// Computes every output (hidden ones included). Aux states may be read (and, for ops
    /// that keep running statistics, replaced).
    fn forward(&self, ctx: &OpCtx, inputs: &[NDArray], aux: &mut [NDArray])
        -> Result<Vec<NDArray>>;
    /// Whether [`Operator::forward_consuming`] may reuse its inputs' buffers: the executor
    /// then hands over, outside training, the inputs at their last use.
    fn reuses_inputs(&self) -> bool {
        false
    }
    /// `forward` with the inputs given by value. An op holding the only reference to an
    /// input's buffer may reuse it (Concat appends to its first input). Default: `forward`.
    fn forward_consuming(
        &self,
        ctx: &OpCtx,
        inputs: Vec<NDArray>,
        aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        self.forward(ctx, &inputs, aux)
    }
    /// Gradients of the inputs, one per argument (`None`: no gradient, e.g. labels and
    /// indices). `out_grads` has one entry per output: zeros for a visible output nothing
    /// consumed, an empty array for an output beyond [`Operator::num_graph_outputs`] (no node
    /// can read those, so their gradient is always zero and never worth allocating).
    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>>;
    /// Loss layers compute their gradient from the label and ignore head gradients.
    fn is_loss(&self) -> bool {
        false
    }
    /// For an op without inputs whose shape has unknown (0) sizes (MXNet's
    /// `_zeros(shape=(0, 200))` begin states): that partial shape. Graph shape inference then
    /// takes the full shape from the nodes that use it, and binding makes the node again with
    /// it (`Symbol::with_inferred_creation_shapes`).
    fn partial_output_shape(&self) -> Option<Vec<usize>> {
        None
    }
    /// True for ops that compute in every dtype themselves (reshapes, slices, copies). The
    /// others compute in float32 and the registry wraps them in [`Float32Compute`].
    fn dtype_generic(&self) -> bool {
        false
    }
    /// For an elementwise float32 op that can overwrite its input with its output: the map,
    /// so the executor can fuse it into the op producing its input (see [`InPlace`]).
    fn in_place(&self) -> Option<InPlace> {
        None
    }
    /// Whether the op is `lhs + rhs` over two inputs that shape inference keeps to one shape
    /// (elemwise_add): at inference the executor may run it inside the op producing either
    /// input, as a residual add over that op's output while it is in cache.
    fn same_shape_add(&self) -> bool {
        false
    }
    /// `forward` with `epilogue` applied to the float32 first output while it is in cache (how
    /// the executor fuses a following [`Operator::in_place`]).
    /// `None`: the op doesn't support it (the caller runs `forward`, then the epilogue op).
    fn forward_then(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _aux: &mut [NDArray],
        _epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        None
    }
    /// For an op that is, in this pass, a per-channel affine map over axis 1 (BatchNorm with
    /// its moving statistics): the map, from the op's inputs after the data (`params`) and its
    /// aux states, so the executor can fold it into the convolution before it. `None`: not
    /// such a map.
    fn inference_affine(
        &self,
        _ctx: &OpCtx,
        _params: &[NDArray],
        _aux: &[NDArray],
    ) -> Option<Result<ChannelAffine>> {
        None
    }
    /// `forward` with `affine` applied to output channel c (axis 1) — y·scale[c] + shift[c] —
    /// folded into the op's own arithmetic, then `epilogue` as in [`Operator::forward_then`].
    /// `None`: the op doesn't support it.
    fn forward_affine(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _affine: &ChannelAffine,
        _epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        None
    }
    /// For inference passes: state computed from the op's parameters (the inputs at
    /// [`Operator::prepared_from`]) and `affine` (folded as in [`Operator::forward_affine`])
    /// that [`Operator::forward_prepared`] reuses while they stay the same — a convolution's
    /// weight with BatchNorm folded in and packed for its kernel, a recurrent layer's weights
    /// packed for its products. The executor keeps it between passes. `None`: nothing worth
    /// keeping (the executor runs `forward` / `forward_affine`).
    fn prepare(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _affine: Option<&ChannelAffine>,
    ) -> Option<Result<Prepared>> {
        None
    }
    /// Which of `n` inputs [`Operator::prepare`] derives its state from: the executor keeps
    /// that state while these very arrays come in. Default: every input after the data.
    fn prepared_from(&self, n: usize) -> std::ops::Range<usize> {
        1.min(n)..n
    }
    /// `forward` from `prepared` (made by [`Operator::prepare`] from these `inputs`' parameters;
    /// the affine map it was made with, if any, included), then `epilogue` as in
    /// [`Operator::forward_then`]. `None`: the op doesn't support it.
    fn forward_prepared(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _prepared: &Prepared,
        _epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        None
    }
    /// [`Operator::prepare`] for passes whose data input arrives still to be mapped by a map
    /// of `map`'s kind (see [`Operator::forward_prepared_mapped`]; its values may change from
    /// pass to pass). `None`: the op cannot read its input that way here (the executor then
    /// runs the map's ops first, and this op as usual).
    fn prepare_mapped(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _affine: Option<&ChannelAffine>,
        _map: &InputMap,
    ) -> Option<Result<Prepared>> {
        None
    }
    /// [`Operator::forward_prepared`] from `prepared` (made by
    /// [`Operator::prepare_mapped`]) with the data input `inputs[0]` passed through `map`
    /// as the op reads it: the inference BatchNorm (and activation) before a convolution in
    /// a pre-activation network, whose output is never written out. `None`: the op doesn't
    /// support it.
    fn forward_prepared_mapped(
        &self,
        _ctx: &OpCtx,
        _inputs: &[NDArray],
        _prepared: &Prepared,
        _map: &InputMap,
        _epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        None
    }
}

/// A map over axis 1 of an op's data input that the op applies as it reads it
/// ([`Operator::forward_prepared_mapped`]): the per-channel affine map (BatchNorm at
/// inference), then the elementwise op after it, if any.
#[derive(Clone, Debug)]
pub struct InputMap {
    /// The per-channel map (its other outputs are not used).
    pub affine: ChannelAffine,
    /// The elementwise map applied after it.
    pub then: Option<InPlace>,
}

/// State an op derives from its parameters for repeated inference ([`Operator::prepare`]);
/// only the op that made it reads it.
pub type Prepared = Arc<dyn std::any::Any + Send + Sync>;

/// A per-channel affine map y = x·scale[c] + shift[c] (BatchNorm at inference) and the other
/// outputs the op would have produced alongside y.
#[derive(Clone, Debug)]
pub struct ChannelAffine {
    /// Per-channel factor.
    pub scale: Vec<f32>,
    /// Per-channel offset, added after the factor.
    pub shift: Vec<f32>,
    /// The op's outputs after the first (BatchNorm's mean and var).
    pub other_outputs: Vec<NDArray>,
}

/// A pass over an op's float32 output as the op writes it, run by run: `epilogue(start, run)`
/// gets the output's values from flat index `start` on, so it can pair them with another array
/// of the output's shape (the residual add the executor fuses into a convolution) as well as
/// map them in place (a fused activation).
pub type Epilogue<'a> = dyn Fn(usize, &mut [f32]) + Sync + 'a;

/// `epilogue` as a kernel writing the whole of `y` takes it: kernels run their epilogue over
/// runs of the output they were given and nothing else (see `kernels`), so a run starts at
/// its distance from `y`'s first value.
pub(crate) fn over_output<'a>(
    epilogue: &'a Epilogue<'a>,
    y: &[f32],
) -> impl Fn(&mut [f32]) + Sync + 'a {
    let (base, len) = (y.as_ptr() as usize, y.len());
    move |run: &mut [f32]| {
        let start = (run.as_ptr() as usize).wrapping_sub(base) / std::mem::size_of::<f32>();
        assert!(
            start <= len && run.len() <= len - start,
            "internal: an epilogue run outside its output"
        );
        epilogue(start, run)
    }
}

/// An elementwise map the executor may apply inside the producing op's forward
/// ([`Operator::forward_then`]), the pair then keeping one array for both outputs.
#[derive(Clone, Copy, Debug)]
pub enum InPlace {
    /// A unary function whose derivative is right when read from the output in place of the
    /// input (relu: x > 0 exactly when relu(x) > 0; tanh and sigmoid read only the output):
    /// fused in training too.
    Unary(UnaryFn),
    /// `clip` to [lo, hi]. Its gradient passes for lo <= x <= hi, which the output cannot
    /// tell from a clipped x (both give hi): fused only when no gradient will be taken.
    Clip {
        /// The lower bound.
        lo: f32,
        /// The upper bound.
        hi: f32,
    },
}

impl InPlace {
    /// `v[i] = f(v[i])`.
    pub fn apply(&self, v: &mut [f32]) {
        match self {
            InPlace::Unary(u) => u.map_in_place(v),
            InPlace::Clip { lo, hi } => crate::kernels::unary::clip_in_place(v, *lo, *hi),
        }
    }

    /// Whether the fused pair still back-propagates exactly.
    pub fn keeps_gradient(&self) -> bool {
        matches!(self, InPlace::Unary(_))
    }
}

/// Runs a float32 kernel on inputs of any dtype, as MXNet's CPU kernels do for float16: inputs
/// that are not float32 are cast to float32, and outputs and gradients are cast back to the
/// dtypes type inference gives them (float64 and float16 models therefore compute at float32
/// precision). All-float32 calls go straight through.
#[derive(Debug)]
pub struct Float32Compute(pub Arc<dyn Operator>);

fn to_f32(xs: &[NDArray]) -> Vec<NDArray> {
    xs.iter().map(|x| x.astype(DType::Float32)).collect() // a shared clone when float32
}

fn all_f32(xs: &[NDArray]) -> bool {
    xs.iter().all(|x| x.dtype() == DType::Float32)
}

impl Float32Compute {
    /// The output dtypes the wrapped op infers from these inputs.
    fn out_dtypes(&self, inputs: &[NDArray], aux: &[NDArray]) -> Result<Vec<DType>> {
        let mut it: Vec<Option<DType>> = inputs.iter().map(|x| Some(x.dtype())).collect();
        let mut at: Vec<Option<DType>> = aux.iter().map(|x| Some(x.dtype())).collect();
        self.0.infer_type(&mut it, &mut at)
    }

    /// Casts the float32 aux states the kernel wrote back to their own dtypes.
    fn restore_aux(aux: &mut [NDArray], computed: Vec<NDArray>) {
        for (slot, a) in aux.iter_mut().zip(computed) {
            *slot = a.astype(slot.dtype());
        }
    }
}

impl Operator for Float32Compute {
    fn arguments(&self) -> Vec<String> {
        self.0.arguments()
    }
    fn aux_states(&self) -> Vec<String> {
        self.0.aux_states()
    }
    fn output_names(&self) -> Vec<String> {
        self.0.output_names()
    }
    fn num_outputs(&self) -> usize {
        self.0.num_outputs()
    }
    fn num_graph_outputs(&self) -> usize {
        self.0.num_graph_outputs()
    }
    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        self.0.infer_shape(node, inputs, aux)
    }
    fn infer_inputs_from_outputs(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        outputs: &[Vec<usize>],
    ) -> Result<()> {
        self.0.infer_inputs_from_outputs(node, inputs, outputs)
    }
    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        self.0.infer_type(inputs, aux)
    }
    fn is_loss(&self) -> bool {
        self.0.is_loss()
    }
    fn partial_output_shape(&self) -> Option<Vec<usize>> {
        self.0.partial_output_shape()
    }
    fn in_place(&self) -> Option<InPlace> {
        self.0.in_place()
    }
    fn same_shape_add(&self) -> bool {
        self.0.same_shape_add()
    }
    // The fused and prepared paths run only on float32 data: otherwise outputs are cast after
    // the kernel, which an epilogue or a prepared weight would not see.
    fn inference_affine(
        &self,
        ctx: &OpCtx,
        params: &[NDArray],
        aux: &[NDArray],
    ) -> Option<Result<ChannelAffine>> {
        (all_f32(params) && all_f32(aux))
            .then(|| self.0.inference_affine(ctx, params, aux))
            .flatten()
    }
    fn forward_affine(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: &ChannelAffine,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        all_f32(inputs)
            .then(|| self.0.forward_affine(ctx, inputs, affine, epilogue))
            .flatten()
    }
    fn prepare(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
    ) -> Option<Result<Prepared>> {
        all_f32(inputs)
            .then(|| self.0.prepare(ctx, inputs, affine))
            .flatten()
    }
    fn prepared_from(&self, n: usize) -> std::ops::Range<usize> {
        self.0.prepared_from(n)
    }
    fn forward_prepared(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        prepared: &Prepared,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        all_f32(inputs)
            .then(|| self.0.forward_prepared(ctx, inputs, prepared, epilogue))
            .flatten()
    }
    fn prepare_mapped(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
        map: &InputMap,
    ) -> Option<Result<Prepared>> {
        all_f32(inputs)
            .then(|| self.0.prepare_mapped(ctx, inputs, affine, map))
            .flatten()
    }
    fn forward_prepared_mapped(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        prepared: &Prepared,
        map: &InputMap,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        all_f32(inputs)
            .then(|| {
                self.0
                    .forward_prepared_mapped(ctx, inputs, prepared, map, epilogue)
            })
            .flatten()
    }
    fn forward_then(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        aux: &mut [NDArray],
        epilogue: &Epilogue,
    ) -> Option<Result<Vec<NDArray>>> {
        (all_f32(inputs) && all_f32(aux))
            .then(|| self.0.forward_then(ctx, inputs, aux, epilogue))
            .flatten()
    }
    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        if all_f32(inputs) && all_f32(aux) {
            return self.0.forward(ctx, inputs, aux);
        }
        let dtypes = self.out_dtypes(inputs, aux)?;
        let mut aux32 = to_f32(aux);
        let outs = self.0.forward(ctx, &to_f32(inputs), &mut aux32)?;
        Self::restore_aux(aux, aux32);
        Ok(outs
            .into_iter()
            .zip(dtypes)
            .map(|(o, t)| o.astype(t))
            .collect())
    }
    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        if [out_grads, inputs, outputs, aux]
            .iter()
            .all(|xs| all_f32(xs))
        {
            return self.0.backward(ctx, out_grads, inputs, outputs, aux);
        }
        let mut aux32 = to_f32(aux);
        let grads = self.0.backward(
            ctx,
            &to_f32(out_grads),
            &to_f32(inputs),
            &to_f32(outputs),
            &mut aux32,
        )?;
        Self::restore_aux(aux, aux32);
        Ok(grads
            .into_iter()
            .zip(inputs)
            .map(|(g, x)| {
                g.map(|g| {
                    if g.dtype() == x.dtype() {
                        g
                    } else {
                        g.astype(x.dtype())
                    }
                })
            })
            .collect())
    }
}

/// The dtype every array of `inputs` shares (MXNet's ElemwiseType rule for ops whose
/// kernels read one element type), or an error naming the first that differs by
/// `name(index)`.
pub(crate) fn same_dtype(
    op: &str,
    node: &str,
    inputs: &[NDArray],
    name: impl Fn(usize) -> String,
) -> Result<DType> {
    let t = inputs.first().map_or(DType::Float32, NDArray::dtype);
    match inputs.iter().position(|x| x.dtype() != t) {
        None => Ok(t),
        Some(i) => Err(Error::invalid(
            format!("{op} node \"{node}\": {} dtype", name(i)),
            format!("{t} (the dtype of the first input)"),
            inputs[i].dtype().name(),
        )),
    }
}

/// The values of input `arg` of `op` as `T` (an error naming both when the dtype differs).
pub(crate) fn data<'a, T: Storable>(x: &'a NDArray, op: &str, arg: &str) -> Result<&'a [T]> {
    x.values(&format!("{op}: {arg}"))
}

/// Every input must have one shape: the first known one fills the unknown ones (MXNet's
/// elementwise shape rule, which runs in both directions).
pub(crate) fn same_shape(
    op: &str,
    node: &str,
    names: &[&str],
    inputs: &mut [MaybeShape],
) -> Result<Vec<usize>> {
    let Some(shape) = inputs.iter().flatten().next().cloned() else {
        return Err(unknown_input(
            op,
            node,
            names.first().copied().unwrap_or("data"),
        ));
    };
    for (i, slot) in inputs.iter_mut().enumerate() {
        let name = names.get(i).copied().unwrap_or("data");
        check_or_fill(op, node, name, slot, &shape)?;
    }
    Ok(shape)
}

/// The `got` text of the error for a needed input whose shape is still unknown.
pub const UNKNOWN_SHAPE: &str = "an unknown shape";

/// The error an op's `infer_shape` returns for a needed input whose shape is unknown; shape
/// inference retries such nodes after other nodes have filled shapes in.
pub fn unknown_input(op: &str, node: &str, arg: &str) -> Error {
    Error::invalid(
        format!("{op} node \"{node}\": input \"{arg}\""),
        "a known shape",
        UNKNOWN_SHAPE,
    )
}

/// The shape of input `i`, or the unknown-input error naming it.
pub fn known<'a>(
    op: &str,
    node: &str,
    names: &[&str],
    inputs: &'a [MaybeShape],
    i: usize,
) -> Result<&'a [usize]> {
    inputs
        .get(i)
        .and_then(|s| s.as_deref())
        .ok_or_else(|| unknown_input(op, node, names.get(i).copied().unwrap_or("input")))
}

/// Checks input `arg`'s shape against `want`, or fills it in when unknown.
pub fn check_or_fill(
    op: &str,
    node: &str,
    arg: &str,
    slot: &mut MaybeShape,
    want: &[usize],
) -> Result<()> {
    match slot {
        Some(s) if s.as_slice() != want => Err(Error::shape(
            op,
            format!("node \"{node}\": input \"{arg}\""),
            want,
            s.as_slice(),
        )),
        Some(_) => Ok(()),
        None => {
            *slot = Some(want.to_vec());
            Ok(())
        }
    }
}

/// Builds an operator instance from parsed parameters.
pub type Create = fn(&Params) -> Result<Arc<dyn Operator>>;

/// One registry entry.
pub struct OpDef {
    /// The MXNet name (`"FullyConnected"`).
    pub name: &'static str,
    /// Other MXNet names for the same op.
    pub aliases: &'static [&'static str],
    /// The Python name when the derived snake_case is not the one users know.
    pub py_name: Option<&'static str>,
    /// Documentation paragraph (Rust doc and Python docstring).
    pub doc: &'static str,
    /// Declared parameters.
    pub params: &'static [ParamDef],
    /// Makes an instance.
    pub create: Create,
    /// For variadic ops: the parameter holding the number of inputs (`"num_args"`).
    pub variadic: Option<&'static str>,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpDef({})", self.name)
    }
}

impl OpDef {
    /// The snake_case Python name (`FullyConnected` → `fully_connected`).
    pub fn python_name(&self) -> String {
        self.py_name
            .map(str::to_string)
            .unwrap_or_else(|| snake_case(self.name))
    }

    /// Parses attributes and builds an operator instance; errors name op, node and param.
    pub fn instantiate(
        &'static self,
        node: &str,
        attrs: &BTreeMap<String, String>,
    ) -> Result<Arc<dyn Operator>> {
        let p = Params::parse(self, node, attrs)?;
        let inst = (self.create)(&p)?;
        Ok(if inst.dtype_generic() {
            inst
        } else {
            Arc::new(Float32Compute(inst))
        })
    }
}

/// `FullyConnected` → `fully_connected`, `LeakyReLU` → `leaky_relu`, `_plus_scalar` →
/// `_plus_scalar`, `SoftmaxOutput` → `softmax_output`.
pub fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The family files; each returns its entries.
fn families() -> Vec<&'static [OpDef]> {
    vec![
        activation::OPS,
        broadcast::OPS,
        conv::OPS,
        creation::OPS,
        elemwise::OPS,
        linalg::OPS,
        loss::OPS,
        nn::OPS,
        norm::OPS,
        passive::OPS,
        pool::OPS,
        reduce::OPS,
        rnn::OPS,
        select::OPS,
        shape::OPS,
        softmax::OPS,
    ]
}

/// Every registered operator, by MXNet name and alias.
pub fn registry() -> &'static BTreeMap<&'static str, &'static OpDef> {
    static REG: OnceLock<BTreeMap<&'static str, &'static OpDef>> = OnceLock::new();
    REG.get_or_init(|| {
        let mut m = BTreeMap::new();
        for fam in families() {
            for def in fam {
                m.insert(def.name, def);
                for a in def.aliases {
                    m.insert(*a, def);
                }
            }
        }
        m
    })
}

/// Runs operator `op` imperatively (inference mode) on arrays: inputs by position or by
/// argument name (auxiliary states after the arguments), all required. Returns the visible
/// outputs. This is what `mx.nd.<op>(...)` calls.
pub fn invoke(
    op: &str,
    mut attrs: BTreeMap<String, String>,
    inputs: Vec<(Option<String>, NDArray)>,
) -> Result<Vec<NDArray>> {
    let def = lookup(op)?;
    if let Some(count) = def.variadic {
        attrs.insert(count.to_string(), inputs.len().to_string());
    }
    let node = def.name.to_lowercase();
    let inst = def.instantiate(&node, &attrs)?;
    let names: Vec<String> = inst
        .arguments()
        .into_iter()
        .chain(inst.aux_states())
        .collect();
    let mut slots: Vec<Option<NDArray>> = vec![None; names.len()];
    let mut next = 0;
    for (key, arr) in inputs {
        let i = match key {
            Some(k) => names.iter().position(|n| *n == k).ok_or_else(|| {
                Error::invalid(
                    format!("{op}: input \"{k}\""),
                    format!("one of {}", names.join(", ")),
                    "an unknown input name",
                )
            })?,
            None => {
                while next < slots.len() && slots[next].is_some() {
                    next += 1;
                }
                next
            }
        };
        let slot = slots.get_mut(i).ok_or_else(|| {
            Error::invalid(
                format!("{op}: inputs"),
                format!("at most {} arrays ({})", names.len(), names.join(", ")),
                "more",
            )
        })?;
        *slot = Some(arr);
    }
    let mut given = Vec::with_capacity(slots.len());
    for (n, s) in names.iter().zip(slots) {
        given.push(s.ok_or_else(|| {
            Error::invalid(format!("{op}: input \"{n}\""), "an array", "nothing")
        })?);
    }
    let na = inst.arguments().len();
    let aux_arrays = given.split_off(na);
    let mut shapes: Vec<MaybeShape> = given.iter().map(|a| Some(a.shape().to_vec())).collect();
    let mut aux_shapes: Vec<MaybeShape> = aux_arrays
        .iter()
        .map(|a| Some(a.shape().to_vec()))
        .collect();
    let out_shapes = inst.infer_shape(&node, &mut shapes, &mut aux_shapes)?;
    // The limits policy, before the forward allocates: an output past the byte limit (a
    // broadcast_to, tile or one_hot of a huge size) is an error, not an abort.
    let elem_size = given.first().map_or(4, |a| a.dtype().size());
    for (o, s) in inst.output_names().iter().zip(&out_shapes) {
        crate::limits::array_bytes(&format!("{op}: output \"{o}\""), s, elem_size)?;
    }
    for ((n, a), s) in names
        .iter()
        .zip(given.iter().chain(aux_arrays.iter()))
        .zip(shapes.iter().chain(aux_shapes.iter()))
    {
        if let Some(s) = s {
            if a.shape() != s.as_slice() {
                return Err(Error::shape(op, format!("input \"{n}\""), s, a.shape()));
            }
        }
    }
    let mut aux = aux_arrays;
    let ctx = OpCtx {
        is_train: false,
        node: &node,
        need_grad: &[],
    };
    let mut outs = inst.forward(&ctx, &given, &mut aux)?;
    outs.truncate(inst.output_names().len());
    Ok(outs)
}

/// The entry for `name`, or a `NotFound` error.
pub fn lookup(name: &str) -> Result<&'static OpDef> {
    registry()
        .get(name)
        .copied()
        .ok_or_else(|| Error::NotFound {
            kind: "operator".into(),
            name: name.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_like_mxnet_python_names() {
        for (a, b) in [
            ("FullyConnected", "fully_connected"),
            ("LeakyReLU", "leaky_re_lu"), // irregular: its OpDef sets py_name "leaky_relu"
            ("SoftmaxOutput", "softmax_output"),
            ("BatchNorm", "batch_norm"),
            ("MAERegressionOutput", "mae_regression_output"),
            ("_plus_scalar", "_plus_scalar"),
            ("SliceChannel", "slice_channel"),
            ("log_softmax", "log_softmax"),
        ] {
            assert_eq!(snake_case(a), b);
        }
    }

    #[test]
    fn float32_kernels_serve_float16_and_float64_inputs_in_their_dtype() {
        for dt in [DType::Float16, DType::Float64] {
            let x = NDArray::from_f64_slice(&[2, 2], &[1.0, -2.0, 0.5, 3.0], dt).unwrap();
            let w = NDArray::from_f64_slice(&[1, 2], &[2.0, 1.0], dt).unwrap();
            let b = NDArray::from_f64_slice(&[1], &[0.25], dt).unwrap();
            let attrs = BTreeMap::from([("num_hidden".to_string(), "1".to_string())]);
            let out = invoke(
                "FullyConnected",
                attrs,
                vec![(None, x), (None, w), (None, b)],
            );
            let out = out.unwrap().remove(0);
            assert_eq!(out.dtype(), dt);
            assert_eq!(out.to_f64_vec(), vec![0.25, 4.25]);
        }
    }

    #[test]
    fn reshapes_and_slices_keep_float64_precision() {
        let v = 0.1f64 + 1e-12;
        let x = NDArray::from_f64_slice(&[2], &[v, v], DType::Float64).unwrap();
        let attrs = BTreeMap::from([("shape".to_string(), "(1, 2)".to_string())]);
        let out = invoke("Reshape", attrs, vec![(None, x)]).unwrap().remove(0);
        assert_eq!(out.to_f64_vec(), vec![v, v]);
    }
}
