//! Softmax family: MXNet `softmax`, `log_softmax` and `SoftmaxActivation`, over the kernels of
//! `kernels::softmax` (which `SoftmaxOutput` in ops/loss.rs uses too, so the math exists once).

use super::{check_or_fill, known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::map::axis_dims;
use crate::kernels::softmax::{softmax_backward, softmax_forward};
use crate::tensor::{norm_axis, NDArray};
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "softmax",
        aliases: &[],
        py_name: None,
        doc: "Applies the softmax function along one axis: exp(x/t) / sum(exp(x/t)), with t the \
              temperature. With use_length=True a second input `length` (the data shape without \
              the axis) says how many leading elements of each slice take part; the rest output 0.",
        params: SoftmaxParams::DEFS,
        create: |p| Softmax::create(p, false),
        variadic: None,
    },
    OpDef {
        name: "log_softmax",
        aliases: &[],
        py_name: None,
        doc: "Applies the logarithm of the softmax function along one axis: x/t - \
              log(sum(exp(x/t))), with t the temperature; numerically stable (the maximum is \
              subtracted first).",
        params: SoftmaxParams::DEFS,
        create: |p| Softmax::create(p, true),
        variadic: None,
    },
    OpDef {
        name: "SoftmaxActivation",
        aliases: &[],
        py_name: None,
        doc: "Applies softmax to the input (deprecated in MXNet in favour of softmax). \
              mode=\"instance\" computes it over all but the first axis of each sample; \
              mode=\"channel\" over axis 1 at every spatial position.",
        params: SoftmaxActivationParams::DEFS,
        create: SoftmaxActivation::create,
        variadic: None,
    },
];

crate::op_params! {
    struct SoftmaxParams {
        axis: Int = "-1", "The axis along which to compute softmax.";
        temperature: OptFloat = "None", "Temperature t: the input is divided by t (None means 1).";
        dtype: Enum(&["None", "float16", "float32", "float64"]) = "None",
            "Output dtype in MXNet; mxfn computes in float32 and accepts it for compatibility.";
        use_length: Bool = "False",
            "Whether a second input `length` gives the number of valid elements of each slice.";
    }
}

#[derive(Debug)]
struct Softmax {
    op: &'static str,
    axis: i64,
    inv_t: f32,
    log: bool,
    use_length: bool,
}

impl Softmax {
    fn create(p: &Params, log: bool) -> Result<Arc<dyn Operator>> {
        let q = SoftmaxParams::from_params(p)?;
        let t = q.temperature.unwrap_or(1.0);
        if !(t.is_finite() && t > 0.0) {
            return Err(p.error("temperature", "a positive number", t));
        }
        Ok(Arc::new(Softmax {
            op: p.op,
            axis: q.axis,
            inv_t: (1.0 / t) as f32,
            log,
            use_length: q.use_length,
        }))
    }

    fn axis(&self, node: &str, ndim: usize) -> Result<usize> {
        norm_axis(
            &format!("{} node \"{node}\": parameter \"axis\"", self.op),
            self.axis as isize,
            ndim,
        )
    }
}

impl Operator for Softmax {
    fn arguments(&self) -> Vec<String> {
        if self.use_length {
            vec!["data".into(), "length".into()]
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
        let d = known(self.op, node, &["data"], inputs, 0)?.to_vec();
        let axis = self.axis(node, d.len())?;
        if self.use_length {
            let mut l = d.clone();
            l.remove(axis);
            check_or_fill(self.op, node, "length", &mut inputs[1], &l)?;
        }
        Ok(vec![d])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = inputs[0].f32s(self.op)?;
        let dims = axis_dims(inputs[0].shape(), self.axis(ctx.node, inputs[0].ndim())?);
        let lengths = match (self.use_length, inputs.get(1)) {
            (true, Some(l)) => Some(l.f32s(self.op)?),
            _ => None,
        };
        let y = softmax_forward(x, dims, self.inv_t, self.log, lengths);
        Ok(vec![NDArray::from_f32(inputs[0].shape(), y)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let dims = axis_dims(inputs[0].shape(), self.axis(ctx.node, inputs[0].ndim())?);
        let lengths = match (self.use_length, inputs.get(1)) {
            (true, Some(l)) => Some(l.f32s(self.op)?),
            _ => None,
        };
        let dx = softmax_backward(
            outputs[0].f32s(self.op)?,
            out_grads[0].f32s(self.op)?,
            dims,
            self.inv_t,
            self.log,
            lengths,
        );
        let mut grads = vec![Some(NDArray::from_f32(inputs[0].shape(), dx)?)];
        if self.use_length {
            // The length is an index-like input: no gradient.
            grads.push(None);
        }
        Ok(grads)
    }
}

crate::op_params! {
    struct SoftmaxActivationParams {
        mode: Enum(&["instance", "channel"]) = "instance",
            "Softmax over each instance (all but axis 0) or over the channel axis (1).";
    }
}

#[derive(Debug)]
struct SoftmaxActivation {
    channel: bool,
}

impl SoftmaxActivation {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(SoftmaxActivation {
            channel: SoftmaxActivationParams::from_params(p)?.mode == "channel",
        }))
    }

    fn dims(&self, shape: &[usize]) -> (usize, usize, usize) {
        let n0 = shape.first().copied().unwrap_or(1);
        if self.channel {
            axis_dims(shape, 1)
        } else {
            (n0, shape.iter().skip(1).product(), 1)
        }
    }
}

impl Operator for SoftmaxActivation {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("SoftmaxActivation", node, &["data"], inputs, 0)?.to_vec();
        let need = if self.channel { 2 } else { 1 };
        if d.len() < need {
            return Err(Error::shape(
                "SoftmaxActivation",
                format!("node \"{node}\": input \"data\" (rank)"),
                format!(">= {need}"),
                d.len(),
            ));
        }
        Ok(vec![d])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = inputs[0].f32s("SoftmaxActivation: data")?;
        let y = softmax_forward(x, self.dims(inputs[0].shape()), 1.0, false, None);
        Ok(vec![NDArray::from_f32(inputs[0].shape(), y)?])
    }

    fn backward(
        &self,
        _ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let dx = softmax_backward(
            outputs[0].f32s("SoftmaxActivation: output")?,
            out_grads[0].f32s("SoftmaxActivation: output gradient")?,
            self.dims(inputs[0].shape()),
            1.0,
            false,
            None,
        );
        Ok(vec![Some(NDArray::from_f32(inputs[0].shape(), dx)?)])
    }
}
