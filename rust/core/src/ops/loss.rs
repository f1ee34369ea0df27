//! Loss layers: MXNet `SoftmaxOutput` (alias `Softmax`), `LinearRegressionOutput`,
//! `LogisticRegressionOutput`, `MAERegressionOutput`. Their backward computes the gradient of
//! the loss from the label and ignores head gradients, as MXNet's does.

use super::{known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::map::zip_map;
use crate::kernels::softmax::{softmax_ce_grad, softmax_forward};
use crate::tensor::NDArray;
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    OpDef {
        name: "SoftmaxOutput",
        aliases: &["Softmax"],
        py_name: None,
        doc: "Softmax with a cross-entropy loss gradient. Forward computes the softmax of the \
              input (over axis 1 with multi_output, the last axis with preserve_shape, else over \
              all but the first axis); backward ignores the head gradient and gives \
              grad_scale·(softmax − onehot(label)) / normaliser, where the normaliser is 1 \
              (\"null\"; the spatial size with multi_output), the number of labels (\"batch\"; \
              times the spatial size with multi_output) or the number of labels not equal to \
              ignore_label (\"valid\"). A label of the data's shape is used as probabilities.",
        params: SoftmaxOutputParams::DEFS,
        create: SoftmaxOutput::create,
        variadic: None,
    },
    OpDef {
        name: "LinearRegressionOutput",
        aliases: &[],
        py_name: None,
        doc: "Least-squares regression output: forward is the identity; backward ignores the \
              head gradient and gives grad_scale·(output − label) / m, m the number of outputs \
              per sample (label.size / label.shape[0]).",
        params: RegressionParams::DEFS,
        create: |p| Regression::create(p, RegKind::Linear),
        variadic: None,
    },
    OpDef {
        name: "LogisticRegressionOutput",
        aliases: &[],
        py_name: None,
        doc: "Logistic regression output: forward is the sigmoid 1/(1+e^-x); backward ignores \
              the head gradient and gives grad_scale·(output − label) / m, m the number of \
              outputs per sample (label.size / label.shape[0]).",
        params: RegressionParams::DEFS,
        create: |p| Regression::create(p, RegKind::Logistic),
        variadic: None,
    },
    OpDef {
        name: "MAERegressionOutput",
        aliases: &[],
        py_name: None,
        doc: "Mean-absolute-error regression output: forward is the identity; backward ignores \
              the head gradient and gives grad_scale·sign(output − label) / m, m the number of \
              outputs per sample (label.size / label.shape[0]).",
        params: RegressionParams::DEFS,
        create: |p| Regression::create(p, RegKind::Mae),
        variadic: None,
    },
];

crate::op_params! {
    struct SoftmaxOutputParams {
        grad_scale: Float = "1.0", "Scales the gradient by a float factor.";
        ignore_label: Float = "-1.0",
            "Label value whose positions get no gradient (when use_ignore is true).";
        multi_output: Bool = "False",
            "Softmax over axis 1 at every position of the remaining axes; label (N, H·W).";
        use_ignore: Bool = "False", "Whether positions labelled ignore_label get zero gradient.";
        preserve_shape: Bool = "False",
            "Softmax over the last axis, keeping the input's shape; label = shape[:-1].";
        normalization: Enum(&["null", "batch", "valid"]) = "null",
            "How the gradient is normalised: not at all, by the batch, by the valid labels.";
        out_grad: Bool = "False", "Multiplies the gradient by the head gradient elementwise.";
        smooth_alpha: Float = "0.0",
            "Label smoothing: the true class gets 1 − alpha, the others alpha/(classes − 1).";
    }
}

crate::op_params! {
    struct RegressionParams {
        grad_scale: Float = "1.0", "Scales the gradient by a float factor.";
    }
}

/// `numerator / denominator`, 0 for an empty denominator (empty arrays).
fn per(numerator: usize, denominator: usize) -> usize {
    numerator.checked_div(denominator).unwrap_or(0)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Norm {
    Null,
    Batch,
    Valid,
}

#[derive(Debug)]
struct SoftmaxOutput {
    grad_scale: f32,
    ignore_label: f32,
    multi_output: bool,
    use_ignore: bool,
    preserve_shape: bool,
    norm: Norm,
    out_grad: bool,
    smooth_alpha: f32,
}

impl SoftmaxOutput {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = SoftmaxOutputParams::from_params(p)?;
        let norm = match q.normalization.as_str() {
            "batch" => Norm::Batch,
            "valid" => Norm::Valid,
            _ => Norm::Null,
        };
        let smooth_alpha = q.smooth_alpha;
        if !(0.0..=1.0).contains(&smooth_alpha) {
            return Err(p.error("smooth_alpha", "a number in [0, 1]", smooth_alpha));
        }
        Ok(Arc::new(SoftmaxOutput {
            grad_scale: q.grad_scale as f32,
            ignore_label: q.ignore_label as f32,
            multi_output: q.multi_output,
            use_ignore: q.use_ignore,
            preserve_shape: q.preserve_shape,
            norm,
            out_grad: q.out_grad,
            smooth_alpha: smooth_alpha as f32,
        }))
    }

    /// (outer, classes, inner): the softmax runs over `classes`, `inner` apart. MXNet flattens
    /// an input of rank > 2 to (N, −1) unless multi_output or preserve_shape is set.
    fn dims(&self, shape: &[usize]) -> (usize, usize, usize) {
        let size: usize = shape.iter().product();
        let n0 = shape.first().copied().unwrap_or(1);
        if self.multi_output {
            let c = shape.get(1).copied().unwrap_or(1);
            (n0, c, per(size, n0 * c))
        } else if self.preserve_shape {
            let last = shape.last().copied().unwrap_or(1);
            (per(size, last), last, 1)
        } else {
            (n0, per(size, n0), 1)
        }
    }

    /// The label shapes MXNet accepts for this data shape; the first is the one inferred.
    fn label_shapes(&self, d: &[usize]) -> Vec<Vec<usize>> {
        if self.multi_output {
            // (N, H·W), (N, H, W) or (N, 1, H, W).
            let (n, _, sp) = self.dims(d);
            let mut flat_c = d.to_vec();
            flat_c[1] = 1;
            let mut no_c = d.to_vec();
            no_c.remove(1);
            vec![vec![n, sp], no_c, flat_c]
        } else {
            let mut v = vec![d[..d.len() - 1].to_vec()];
            if d.len() > 2 && !self.preserve_shape {
                // MXNet infers shape[:-1] here but reads only the first N labels; accept (N,).
                v.push(vec![d[0]]);
            }
            v
        }
    }
}

impl Operator for SoftmaxOutput {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "label".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("SoftmaxOutput", node, &["data"], inputs, 0)?.to_vec();
        if d.len() < 2 {
            return Err(Error::shape(
                "SoftmaxOutput",
                format!("node \"{node}\": input \"data\" (rank)"),
                ">= 2",
                d.len(),
            ));
        }
        let want = self.label_shapes(&d);
        match &inputs[1] {
            // A label of the data's shape holds class probabilities.
            Some(l) if *l == d || want.contains(l) => {}
            Some(l) => {
                return Err(Error::shape(
                    "SoftmaxOutput",
                    format!("node \"{node}\": input \"label\""),
                    &want[0],
                    l,
                ))
            }
            None => inputs[1] = Some(want[0].clone()),
        }
        Ok(vec![d])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let x = inputs[0].f32s("SoftmaxOutput: data")?;
        let y = softmax_forward(x, self.dims(inputs[0].shape()), 1.0, false, None);
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
        let out = outputs[0].f32s("SoftmaxOutput: output")?;
        let label = inputs[1].f32s("SoftmaxOutput: label")?;
        let shape = outputs[0].shape();
        let mut dx = if inputs[1].shape() == shape {
            // Probability labels: no normalisation (MXNet's branch for label.shape == out.shape).
            let s = self.grad_scale;
            zip_map([out, label], |[o, t]| (o - t) * s)?
        } else {
            let dims = self.dims(shape);
            let (outer, _, inner) = dims;
            if label.len() < outer * inner {
                return Err(Error::shape(
                    "SoftmaxOutput",
                    format!("node \"{}\": input \"label\" (size)", ctx.node),
                    outer * inner,
                    label.len(),
                ));
            }
            let ignore = self.ignore_label as i64;
            let valid = || {
                let c = label.iter().filter(|&&l| l as i64 != ignore).count();
                c.max(1) as f32
            };
            // MXNet's normalisers: multi_output divides by the spatial size except for "valid".
            let norm = match (self.norm, self.multi_output) {
                (Norm::Null, false) => 1.0,
                (Norm::Batch, false) => label.len().max(1) as f32,
                (Norm::Null, true) => inner.max(1) as f32,
                (Norm::Batch, true) => (inner * outer).max(1) as f32,
                (Norm::Valid, _) => valid(),
            };
            softmax_ce_grad(
                out,
                label,
                dims,
                self.grad_scale / norm,
                self.smooth_alpha,
                self.use_ignore.then_some(ignore),
            )
        };
        if self.out_grad {
            let g = out_grads[0].f32s("SoftmaxOutput: output gradient")?;
            dx.iter_mut().zip(g).for_each(|(d, g)| *d *= g);
        }
        Ok(vec![Some(NDArray::from_f32(shape, dx)?), None])
    }

    fn is_loss(&self) -> bool {
        true
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum RegKind {
    Linear,
    Logistic,
    Mae,
}

#[derive(Debug)]
struct Regression {
    op: &'static str,
    kind: RegKind,
    grad_scale: f32,
}

impl Regression {
    fn create(p: &Params, kind: RegKind) -> Result<Arc<dyn Operator>> {
        Ok(Arc::new(Regression {
            op: p.op,
            kind,
            grad_scale: RegressionParams::from_params(p)?.grad_scale as f32,
        }))
    }
}

impl Operator for Regression {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into(), "label".into()]
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known(self.op, node, &["data"], inputs, 0)?.to_vec();
        if d.is_empty() {
            return Err(Error::shape(
                self.op,
                format!("node \"{node}\": input \"data\" (rank)"),
                ">= 1",
                0,
            ));
        }
        // MXNet: a 1-D label by default for (N, 1) outputs; otherwise the data's shape. Any
        // label with the same first axis and size is accepted.
        let want = if d.len() == 2 && d[1] == 1 {
            vec![d[0]]
        } else {
            d.clone()
        };
        match &inputs[1] {
            Some(l)
                if l.first() == d.first()
                    && l.iter().product::<usize>() == d.iter().product::<usize>() => {}
            Some(l) => {
                return Err(Error::shape(
                    self.op,
                    format!("node \"{node}\": input \"label\""),
                    &want,
                    l,
                ))
            }
            None => inputs[1] = Some(want),
        }
        Ok(vec![d])
    }

    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        if self.kind != RegKind::Logistic {
            return Ok(vec![inputs[0].clone()]);
        }
        let x = inputs[0].f32s(self.op)?;
        let y = zip_map([x], |[v]| 1.0 / (1.0 + (-v).exp()))?;
        Ok(vec![NDArray::from_f32(inputs[0].shape(), y)?])
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        _out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let out = outputs[0].f32s(self.op)?;
        let label = inputs[1].f32s(self.op)?;
        if label.len() != out.len() {
            return Err(Error::shape(
                self.op,
                format!("node \"{}\": input \"label\" (size)", ctx.node),
                out.len(),
                label.len(),
            ));
        }
        // Divided by the outputs per sample, not by the batch (MXNet's num_output).
        let per_sample = per(label.len(), inputs[1].shape().first().copied().unwrap_or(1));
        let s = self.grad_scale / per_sample.max(1) as f32;
        let mae = self.kind == RegKind::Mae;
        let dx = zip_map([out, label], |[o, t]| {
            let diff = o - t;
            if mae {
                // MXNet's minus_sign: 1 if out > label, else −1 (also at 0).
                if diff > 0.0 {
                    s
                } else {
                    -s
                }
            } else {
                diff * s
            }
        })?;
        Ok(vec![Some(NDArray::from_f32(outputs[0].shape(), dx)?), None])
    }

    fn is_loss(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ce_grad_targets_ignore_and_smoothing() {
        let out = [0.2f32, 0.3, 0.5, 0.6, 0.3, 0.1];
        let g = softmax_ce_grad(&out, &[2.0, 0.0], (2, 3, 1), 1.0, 0.0, None);
        let want = [0.2, 0.3, -0.5, -0.4, 0.3, 0.1];
        assert!(g.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
        let g = softmax_ce_grad(&out, &[2.0, 0.0], (2, 3, 1), 2.0, 0.0, Some(0));
        assert!(g[3..].iter().all(|&v| v == 0.0) && (g[2] + 1.0).abs() < 1e-6);
        let g = softmax_ce_grad(&out, &[2.0, 5.0], (2, 3, 1), 1.0, 0.2, None);
        // Row 0: true class 1 − 0.2, others 0.1; row 1: label out of range, all 0.1.
        let want = [0.1, 0.2, -0.3, 0.5, 0.2, 0.0];
        assert!(g.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
        // Strided layout (multi_output): (1, 2 classes, 2 positions), labels per position.
        let out = [0.7f32, 0.4, 0.3, 0.6];
        let g = softmax_ce_grad(&out, &[1.0, 0.0], (1, 2, 2), 1.0, 0.0, None);
        let want = [0.7, -0.6, -0.7, 0.6];
        assert!(g.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
    }
}
