//! Recurrent layers: MXNet's fused `RNN` operator (LSTM, GRU, ReLU / tanh RNN; stacked,
//! bidirectional, with sequence lengths, LSTM cell clipping and dropout between layers).
//! The numeric loops are `kernels::rnn`.

use super::{
    check_or_fill, known, ChannelAffine, Epilogue, MaybeShape, OpCtx, OpDef, Operator, Params,
    Prepared,
};
use crate::error::{Error, Result};
use crate::kernels::rnn::{
    rnn_backward, rnn_forward_packed, CellClip, PackedWeights, RnnConfig, RnnDims, RnnFloat,
    RnnInputs, RnnMode,
};
use crate::tensor::random::seeded_uniform;
use crate::tensor::{DType, NDArray, Storable};
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[OpDef {
    name: "RNN",
    aliases: &["_npx_rnn"],
    py_name: None,
    doc: "Applies stacked recurrent layers to data of shape (seq, batch, features) (TNC). \
          mode='lstm': i, f, g, o = σ, σ, tanh, σ of W_i2h·x + b_i2h + W_h2h·h + b_h2h, \
          c = f·c' + i·g, h = o·tanh(c); mode='gru': r, z = σ(…), n = tanh(W_in·x + b_in + \
          r·(W_hn·h' + b_hn)), h = (1 − z)·n + z·h'; mode='rnn_relu' / 'rnn_tanh': h = \
          act(W_i2h·x + b_i2h + W_h2h·h' + b_h2h). `parameters` is MXNet's flat vector: all \
          weights (per layer, per direction: W_i2h (gates·state_size, in), then W_h2h), then \
          all biases in the same order; `state` (and `state_cell` for LSTM) has shape \
          (num_layers·directions, batch, state_size). The output is (seq, batch, \
          directions·state_size), the directions concatenated forward first; with \
          state_outputs the final states follow. With use_sequence_length, a sample's steps \
          past its length give zeros and leave its state alone, and the reverse direction \
          starts at its last valid step (as cuDNN). Dropout p applies to the outputs of every \
          layer but the last, in training only.",
    params: RnnParams::DEFS,
    create: Rnn::create,
    variadic: None,
}];

crate::op_params! {
    struct RnnParams {
        state_size: Positive, "Hidden units of each layer and direction.";
        num_layers: Positive, "Number of stacked layers.";
        bidirectional: Bool = "False",
            "Also run each layer backwards in time and concatenate the two outputs.";
        mode: Enum(&["rnn_relu", "rnn_tanh", "lstm", "gru"]), "The recurrent cell.";
        p: Float = "0.0",
            "Dropout rate on the outputs of each layer except the last (training only).";
        state_outputs: Bool = "False", "Also output the final states (and cell states for LSTM).";
        projection_size: OptInt = "None", "LSTM projection size (not supported: must be None).";
        lstm_state_clip_min: OptFloat = "None",
            "Lower clip of the LSTM cell state (with lstm_state_clip_max).";
        lstm_state_clip_max: OptFloat = "None",
            "Upper clip of the LSTM cell state (with lstm_state_clip_min).";
        lstm_state_clip_nan: Bool = "False",
            "Clip NaN cell states to the minimum instead of propagating them.";
        use_sequence_length: Bool = "False",
            "Take each sample's length from the sequence_length input.";
    }
}

const OP: &str = "RNN";

#[derive(Debug)]
struct Rnn {
    mode: RnnMode,
    hidden: usize,
    layers: usize,
    dirs: usize,
    state_outputs: bool,
    p: f64,
    clip: Option<CellClip>,
    use_len: bool,
}

impl Rnn {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Self::from_params(p)?))
    }

    /// Reads and checks the parameters (MXNet's checks, errors naming the parameter).
    fn from_params(p: &Params) -> Result<Rnn> {
        let q = RnnParams::from_params(p)?;
        let mode = match q.mode.as_str() {
            "lstm" => RnnMode::Lstm,
            "gru" => RnnMode::Gru,
            "rnn_relu" => RnnMode::RnnRelu,
            _ => RnnMode::RnnTanh,
        };
        if let Some(v) = q.projection_size {
            return Err(p.error(
                "projection_size",
                "None (LSTM projection is not implemented in mxfn)",
                v,
            ));
        }
        let prob = q.p;
        if !(0.0..=1.0).contains(&prob) {
            return Err(p.error("p", "a probability in [0, 1]", prob));
        }
        let clip = match (q.lstm_state_clip_min, q.lstm_state_clip_max) {
            (None, None) => None,
            (Some(lo), Some(hi)) if mode == RnnMode::Lstm => {
                if hi < lo {
                    return Err(p.error(
                        "lstm_state_clip_max",
                        &format!("a value >= lstm_state_clip_min ({lo})"),
                        hi,
                    ));
                }
                Some(CellClip {
                    lo,
                    hi,
                    nan: q.lstm_state_clip_nan,
                })
            }
            (Some(_), Some(_)) => {
                return Err(p.error(
                    "lstm_state_clip_min",
                    "None (state clipping is only for mode='lstm')",
                    format!("a value with mode='{}'", q.mode),
                ))
            }
            (None, Some(_)) => {
                return Err(p.error(
                    "lstm_state_clip_min",
                    "a value (given together with lstm_state_clip_max)",
                    "None",
                ))
            }
            (Some(_), None) => {
                return Err(p.error(
                    "lstm_state_clip_max",
                    "a value (given together with lstm_state_clip_min)",
                    "None",
                ))
            }
        };
        Ok(Rnn {
            mode,
            hidden: q.state_size,
            layers: q.num_layers,
            dirs: if q.bidirectional { 2 } else { 1 },
            state_outputs: q.state_outputs,
            p: prob,
            clip,
            use_len: q.use_sequence_length,
        })
    }

    fn lstm(&self) -> bool {
        self.mode == RnnMode::Lstm
    }

    /// Position of the `sequence_length` input.
    fn len_input(&self) -> usize {
        if self.lstm() {
            4
        } else {
            3
        }
    }

    /// Whether dropout runs between layers in this pass.
    fn dropout(&self, is_train: bool) -> bool {
        is_train && self.p > 0.0 && self.layers > 1
    }

    fn dims(&self, node: &str, data: &[usize]) -> Result<RnnDims> {
        let [seq, batch, input] = data else {
            return Err(Error::invalid(
                format!("{OP} node \"{node}\": input \"data\""),
                "3 axes (sequence length, batch, features)",
                crate::error::tuple_text(&format!("{data:?}")),
            ));
        };
        let d = RnnDims {
            mode: self.mode,
            layers: self.layers,
            dirs: self.dirs,
            seq: *seq,
            batch: *batch,
            input: *input,
            hidden: self.hidden,
        };
        d.check_sizes()?;
        Ok(d)
    }

    /// Each sample's length: the `sequence_length` input (cast to int, as MXNet) or all steps.
    fn lengths(&self, node: &str, inputs: &[NDArray], d: &RnnDims) -> Result<Vec<usize>> {
        if !self.use_len {
            return Ok(vec![d.seq; d.batch]);
        }
        inputs[self.len_input()]
            .to_f64_vec()
            .iter()
            .map(|&v| {
                let n = v as i64;
                if n < 1 || n > d.seq as i64 {
                    Err(Error::invalid(
                        format!("{OP} node \"{node}\": input \"sequence_length\""),
                        format!("lengths in [1, {}] (the sequence length of data)", d.seq),
                        v.to_string(),
                    ))
                } else {
                    Ok(n as usize)
                }
            })
            .collect()
    }

    fn config(&self, dims: RnnDims) -> RnnConfig {
        RnnConfig {
            dims,
            clip: self.clip,
        }
    }

    /// Checks every input's shape against the data's (the same errors as shape inference).
    fn check_shapes(&self, node: &str, inputs: &[NDArray]) -> Result<RnnDims> {
        let mut shapes: Vec<MaybeShape> = inputs.iter().map(|x| Some(x.shape().to_vec())).collect();
        self.infer_shape(node, &mut shapes, &mut [])?;
        self.dims(node, inputs[0].shape())
    }

    /// Forward in element type `T`; `packed`: the weights packed ahead (see
    /// [`Operator::prepare`]), else they are packed for this call.
    fn forward_as<T: RnnFloat + Storable>(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        keep: bool,
        packed: Option<&PackedWeights<T>>,
    ) -> Result<Vec<NDArray>> {
        let dims = self.check_shapes(ctx.node, inputs)?;
        let lens = self.lengths(ctx.node, inputs, &dims)?;
        let cast: Vec<NDArray> = inputs.iter().map(|x| x.astype(T::DTYPE)).collect();
        let masks: Option<Vec<T>> = self.dropout(ctx.is_train).then(|| {
            let keep_p = 1.0 - self.p;
            let scale = if keep_p > 0.0 { 1.0 / keep_p } else { 0.0 };
            let count = (dims.layers - 1) * dims.seq * dims.batch * dims.out_width();
            seeded_uniform(count, |u| {
                if f64::from(u) < keep_p {
                    scale as f32
                } else {
                    0.0
                }
            })
            .into_iter()
            .map(|m| T::from_f64(f64::from(m)))
            .collect()
        });
        let c0 = if self.lstm() {
            Some(cast[3].values::<T>("RNN: state_cell")?)
        } else {
            None
        };
        let inp = RnnInputs {
            x: cast[0].values::<T>("RNN: data")?,
            params: cast[1].values::<T>("RNN: parameters")?,
            h0: cast[2].values::<T>("RNN: state")?,
            c0,
            lens: &lens,
        };
        let o = rnn_forward_packed(&self.config(dims), &inp, masks.as_deref(), keep, packed)?;
        let dt = inputs[0].dtype();
        let state = [dims.layers * dims.dirs, dims.batch, dims.hidden];
        let mut outs =
            vec![NDArray::from_vec(&[dims.seq, dims.batch, dims.out_width()], o.y)?.astype(dt)];
        if self.state_outputs {
            outs.push(NDArray::from_vec(&state, o.hy)?.astype(dt));
            if self.lstm() {
                outs.push(NDArray::from_vec(&state, o.cy)?.astype(dt));
            }
        }
        let n = o.reserve.len();
        outs.push(NDArray::from_vec(&[n], o.reserve)?);
        Ok(outs)
    }

    /// Backward in element type `T`.
    fn backward_as<T: RnnFloat + Storable>(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let dims = self.check_shapes(ctx.node, inputs)?;
        let lens = self.lengths(ctx.node, inputs, &dims)?;
        if out_grads.len() < self.output_names().len() {
            return Err(Error::invalid(
                format!("{OP} node \"{}\": output gradients", ctx.node),
                format!("{} arrays", self.output_names().len()),
                out_grads.len().to_string(),
            ));
        }
        let mut dropout = self.dropout(ctx.is_train);
        let kept = outputs
            .last()
            .is_some_and(|r| r.shape() == [dims.reserve_len(dropout)]);
        // After an inference forward nothing was kept: run forward again, keeping what
        // backward needs (no dropout outside training, so the outputs are the same).
        let again;
        let outputs = if kept {
            outputs
        } else {
            let ctx = OpCtx {
                is_train: false,
                node: ctx.node,
                need_grad: ctx.need_grad,
            };
            dropout = false;
            again = self.forward_as::<T>(&ctx, inputs, true, None)?;
            &again[..]
        };
        let cast = |x: &NDArray| x.astype(T::DTYPE);
        let ins: Vec<NDArray> = inputs.iter().map(cast).collect();
        let c0 = if self.lstm() {
            Some(ins[3].values::<T>("RNN: state_cell")?)
        } else {
            None
        };
        let inp = RnnInputs {
            x: ins[0].values::<T>("RNN: data")?,
            params: ins[1].values::<T>("RNN: parameters")?,
            h0: ins[2].values::<T>("RNN: state")?,
            c0,
            lens: &lens,
        };
        let y = cast(&outputs[0]);
        let reserve = cast(&outputs[outputs.len() - 1]);
        let grads: Vec<NDArray> = out_grads.iter().map(cast).collect();
        let dhy = match self.state_outputs {
            true => Some(grads[1].values::<T>("RNN: gradient of state_output")?),
            false => None,
        };
        let dcy = match self.state_outputs && self.lstm() {
            true => Some(grads[2].values::<T>("RNN: gradient of statecell_output")?),
            false => None,
        };
        let g = rnn_backward(
            &self.config(dims),
            &inp,
            y.values::<T>("RNN: output")?,
            reserve.values::<T>("RNN: reserve")?,
            dropout,
            grads[0].values::<T>("RNN: output gradient")?,
            dhy,
            dcy,
            ctx.needs_grad(0),
        )?;
        let back = |i: usize, v: Vec<T>| -> Result<Option<NDArray>> {
            Ok(Some(
                NDArray::from_vec(inputs[i].shape(), v)?.astype(inputs[i].dtype()),
            ))
        };
        let mut out = vec![
            if g.dx.is_empty() {
                None
            } else {
                back(0, g.dx)?
            },
            back(1, g.dparams)?,
            back(2, g.dh0)?,
        ];
        if self.lstm() {
            out.push(back(3, g.dc0)?);
        }
        if self.use_len {
            out.push(None); // lengths get no gradient
        }
        Ok(out)
    }

    /// The element type the kernels run in: float64 for float64 data, float32 otherwise
    /// (float16 computes in float32, as MXNet's CPU kernels).
    fn compute_dtype(data: DType) -> DType {
        if data == DType::Float64 {
            DType::Float64
        } else {
            DType::Float32
        }
    }
}

impl Operator for Rnn {
    fn dtype_generic(&self) -> bool {
        true
    }

    fn arguments(&self) -> Vec<String> {
        let mut a: Vec<String> = vec!["data".into(), "parameters".into(), "state".into()];
        if self.lstm() {
            a.push("state_cell".into());
        }
        if self.use_len {
            a.push("sequence_length".into());
        }
        a
    }

    fn output_names(&self) -> Vec<String> {
        let mut o = vec!["output".to_string()];
        if self.state_outputs {
            o.push("state_output".into());
            if self.lstm() {
                o.push("statecell_output".into());
            }
        }
        o
    }

    /// The visible outputs, then what a training forward keeps for backward.
    fn num_outputs(&self) -> usize {
        self.output_names().len() + 1
    }

    /// MXNet's RNN has only the visible outputs; the saved activations are mxfn's.
    fn num_graph_outputs(&self) -> usize {
        self.output_names().len()
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let names = self.arguments();
        if inputs.len() != names.len() {
            return Err(Error::invalid(
                format!("{OP} node \"{node}\": inputs"),
                format!("{} ({})", names.len(), names.join(", ")),
                inputs.len().to_string(),
            ));
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let d = self.dims(node, known(OP, node, &names, inputs, 0)?)?;
        let state = [d.layers * d.dirs, d.batch, d.hidden];
        if let Some(got) = &inputs[1] {
            if got.as_slice() != [d.param_len()] {
                return Err(Error::shape(
                    OP,
                    format!(
                        "node \"{node}\": input \"parameters\" (the flat weights and biases of \
                         {} layer(s) × {} direction(s) of {} units over {} input features)",
                        d.layers, d.dirs, d.hidden, d.input
                    ),
                    [d.param_len()],
                    got,
                ));
            }
        }
        inputs[1] = Some(vec![d.param_len()]);
        check_or_fill(OP, node, "state", &mut inputs[2], &state)?;
        if self.lstm() {
            check_or_fill(OP, node, "state_cell", &mut inputs[3], &state)?;
        }
        if self.use_len {
            let i = self.len_input();
            check_or_fill(OP, node, "sequence_length", &mut inputs[i], &[d.batch])?;
        }
        let mut outs = vec![vec![d.seq, d.batch, d.out_width()]];
        if self.state_outputs {
            outs.push(state.to_vec());
            if self.lstm() {
                outs.push(state.to_vec());
            }
        }
        // A training forward's reserve (an inference forward keeps nothing).
        outs.push(vec![d.reserve_len(self.dropout(true))]);
        Ok(outs)
    }

    fn infer_type(
        &self,
        inputs: &mut [Option<DType>],
        _aux: &mut [Option<DType>],
    ) -> Result<Vec<DType>> {
        // As MXNet: data, parameters and states share one dtype; the lengths keep theirs.
        let shared = if self.lstm() { 4 } else { 3 };
        let t = inputs[..shared]
            .iter()
            .flatten()
            .next()
            .copied()
            .unwrap_or(DType::Float32);
        for slot in inputs.iter_mut() {
            slot.get_or_insert(t);
        }
        let mut out = vec![t; self.output_names().len()];
        out.push(Self::compute_dtype(t));
        Ok(out)
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        match Self::compute_dtype(inputs[0].dtype()) {
            DType::Float64 => self.forward_as::<f64>(ctx, inputs, ctx.is_train, None),
            _ => self.forward_as::<f32>(ctx, inputs, ctx.is_train, None),
        }
    }

    /// Only the parameter vector: the states and lengths change from call to call.
    fn prepared_from(&self, n: usize) -> std::ops::Range<usize> {
        1.min(n)..2.min(n)
    }

    /// Every layer's weights packed for the forward products (a transpose of each weight
    /// matrix: over a quarter of a one-sequence call when redone every time).
    fn prepare(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        affine: Option<&ChannelAffine>,
    ) -> Option<Result<Prepared>> {
        if affine.is_some() || inputs.len() < 2 {
            return None;
        }
        fn pack<T: RnnFloat + Storable>(dims: &RnnDims, params: &NDArray) -> Result<Prepared> {
            let params = params.astype(T::DTYPE);
            let values = params.values::<T>("RNN: parameters")?;
            Ok(Arc::new(PackedWeights::new(dims, values)?))
        }
        let dims = match self.check_shapes(ctx.node, inputs) {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        Some(match Self::compute_dtype(inputs[0].dtype()) {
            DType::Float64 => pack::<f64>(&dims, &inputs[1]),
            _ => pack::<f32>(&dims, &inputs[1]),
        })
    }

    fn forward_prepared(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        prepared: &Prepared,
        epilogue: Option<&Epilogue>,
    ) -> Option<Result<Vec<NDArray>>> {
        if epilogue.is_some() || ctx.is_train {
            return None;
        }
        Some(match Self::compute_dtype(inputs[0].dtype()) {
            DType::Float64 => {
                let packed = prepared.downcast_ref::<PackedWeights<f64>>();
                self.forward_as::<f64>(ctx, inputs, false, packed)
            }
            _ => {
                let packed = prepared.downcast_ref::<PackedWeights<f32>>();
                self.forward_as::<f32>(ctx, inputs, false, packed)
            }
        })
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        match Self::compute_dtype(inputs[0].dtype()) {
            DType::Float64 => self.backward_as::<f64>(ctx, out_grads, inputs, outputs),
            _ => self.backward_as::<f32>(ctx, out_grads, inputs, outputs),
        }
    }
}
