//! Activation functions: MXNet `Activation` (relu, sigmoid, tanh, softrelu, softsign) and
//! `LeakyReLU` (leaky, prelu, elu, selu, gelu, rrelu).

use super::elemwise::{unary_fn, Unary};
use super::{check_or_fill, known, MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::{Error, Result};
use crate::kernels::map::{axis_dims, map_n, zip_map, Operand};
use crate::kernels::norm::channel_sums2;
use crate::tensor::random::seeded_uniform;
use crate::tensor::NDArray;
use std::sync::Arc;

/// The entries of this family.
pub static OPS: &[OpDef] = &[ACTIVATION, LEAKY_RELU];

const ACTIVATION: OpDef = OpDef {
    name: "Activation",
    aliases: &[],
    py_name: None,
    doc: "Applies an activation function elementwise: relu max(x, 0), sigmoid 1/(1+e^-x), \
          tanh, softrelu log(1+e^x), softsign x/(1+|x|).",
    params: ActivationParams::DEFS,
    create: create_activation,
    variadic: None,
};

crate::op_params! {
    struct ActivationParams {
        act_type: Enum(&["relu", "sigmoid", "tanh", "softrelu", "softsign"]),
            "Activation function to apply.";
    }
}

fn create_activation(p: &Params) -> Result<Arc<dyn Operator>> {
    let t = ActivationParams::from_params(p)?.act_type;
    let f = unary_fn(&t).ok_or_else(|| Error::Msg(format!("internal: no activation {t}")))?;
    Ok(Arc::new(Unary(f)))
}

const LEAKY_RELU: OpDef = OpDef {
    name: "LeakyReLU",
    aliases: &[],
    py_name: Some("leaky_relu"),
    doc: "Leaky rectified linear units and relatives, elementwise: leaky x > 0 ? x : slope·x; \
          prelu x > 0 ? x : gamma[c]·x with a learned gamma of shape (C,) along axis 1; elu \
          x > 0 ? x : slope·(e^x − 1); selu λ·(x > 0 ? x : α·(e^x − 1)); gelu x·Φ(x) (the exact \
          erf form); rrelu x > 0 ? x : s·x with s drawn uniformly from [lower_bound, \
          upper_bound) per element in training (from the seeded stream) and \
          s = (lower_bound + upper_bound)/2 in inference.",
    params: LeakyReLUParams::DEFS,
    create: LeakyReLU::create,
    variadic: None,
};

crate::op_params! {
    struct LeakyReLUParams {
        act_type: Enum(&["leaky", "prelu", "elu", "selu", "gelu", "rrelu"]) = "leaky",
            "Activation function to apply.";
        slope: Float = "0.25", "Negative slope for leaky; alpha for elu.";
        lower_bound: Float = "0.125", "Lower bound of the random slope of rrelu.";
        upper_bound: Float = "0.334", "Upper bound of the random slope of rrelu.";
    }
}

const SELU_LAMBDA: f32 = 1.050_701;
const SELU_ALPHA: f32 = 1.673_263_2;

/// erf(x) in f64: the Chebyshev fit of erfc (fractional error below 1.2e-7 everywhere), well
/// inside float32 gelu tolerances and branch-free apart from the sign.
pub(crate) fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

fn gelu(x: f32) -> f32 {
    let x = x as f64;
    (0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// d gelu / dx = Φ(x) + x·φ(x), as MXNet's gelu_grad.
fn gelu_grad(x: f32) -> f32 {
    let x = x as f64;
    let cdf = 0.5 * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2));
    let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    (cdf + x * pdf) as f32
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Leaky,
    PReLU,
    Elu,
    Selu,
    Gelu,
    RReLU,
}

#[derive(Debug)]
struct LeakyReLU {
    act: Act,
    slope: f32,
    lower: f32,
    upper: f32,
}

impl LeakyReLU {
    fn create(p: &Params) -> Result<Arc<dyn Operator>> {
        let q = LeakyReLUParams::from_params(p)?;
        let act = match q.act_type.as_str() {
            "prelu" => Act::PReLU,
            "elu" => Act::Elu,
            "selu" => Act::Selu,
            "gelu" => Act::Gelu,
            "rrelu" => Act::RReLU,
            _ => Act::Leaky,
        };
        let (lower, upper) = (q.lower_bound, q.upper_bound);
        if act == Act::RReLU && (lower.is_nan() || upper.is_nan() || lower > upper) {
            return Err(p.error(
                "upper_bound",
                &format!("a number >= lower_bound ({lower})"),
                upper,
            ));
        }
        Ok(Arc::new(LeakyReLU {
            act,
            slope: q.slope as f32,
            lower: lower as f32,
            upper: upper as f32,
        }))
    }

    /// y = f(x) elementwise for the parameter-free kinds.
    fn value(&self, x: f32) -> f32 {
        match self.act {
            Act::Elu => {
                if x > 0.0 {
                    x
                } else {
                    self.slope * x.exp_m1()
                }
            }
            Act::Selu => SELU_LAMBDA * if x > 0.0 { x } else { SELU_ALPHA * x.exp_m1() },
            Act::Gelu => gelu(x),
            _ => {
                if x > 0.0 {
                    x
                } else {
                    self.slope * x
                }
            }
        }
    }

    /// dy/dx from x and y for the parameter-free kinds, as MXNet computes it: leaky, elu and
    /// selu test the output's sign. MXNet 1.9.1's selu gradient for x ≤ 0 is λ·(y + α), not
    /// the true derivative y + λ·α; it is reproduced here so training matches MXNet.
    fn derivative(&self, x: f32, y: f32) -> f32 {
        match self.act {
            Act::Elu => {
                if y > 0.0 {
                    1.0
                } else {
                    y + self.slope
                }
            }
            Act::Selu => {
                if y > 0.0 {
                    SELU_LAMBDA
                } else {
                    SELU_LAMBDA * (y + SELU_ALPHA)
                }
            }
            Act::Gelu => gelu_grad(x),
            _ => {
                if y > 0.0 {
                    1.0
                } else {
                    self.slope
                }
            }
        }
    }

    /// (outer, channels, inner) of the data around axis 1, PReLU's channel axis.
    fn channel_dims(shape: &[usize]) -> (usize, usize, usize) {
        if shape.len() < 2 {
            (1, 1, shape.iter().product())
        } else {
            axis_dims(shape, 1)
        }
    }

    /// PReLU's gamma per channel: `gamma` of (C,) or a single broadcast value.
    fn prelu_slopes(&self, node: &str, gamma: &NDArray, c: usize) -> Result<Vec<f32>> {
        let g = gamma.f32s("LeakyReLU: gamma")?;
        match g.len() {
            1 => Ok(vec![g[0]; c]),
            n if n == c => Ok(g.to_vec()),
            _ => Err(Error::shape(
                "LeakyReLU",
                format!("node \"{node}\": input \"gamma\""),
                [c],
                gamma.shape(),
            )),
        }
    }
}

/// An (outer, c, inner) layout as a 3-D view for [`map_n`]: the view, the strides of the
/// contiguous data and those of a per-channel operand (repeated over outer and inner).
fn channel_view((outer, c, inner): (usize, usize, usize)) -> ([usize; 3], [usize; 3], [usize; 3]) {
    ([outer, c, inner], [c * inner, inner, 1], [0, 1, 0])
}

fn operand<'a>(data: &'a [f32], strides: &'a [usize]) -> Operand<'a, f32> {
    Operand { data, strides }
}

impl Operator for LeakyReLU {
    fn arguments(&self) -> Vec<String> {
        if self.act == Act::PReLU {
            vec!["data".into(), "gamma".into()]
        } else {
            vec!["data".into()]
        }
    }

    fn num_outputs(&self) -> usize {
        // rrelu keeps its slopes as a hidden second output (MXNet's mask).
        if self.act == Act::RReLU {
            2
        } else {
            1
        }
    }

    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        let d = known("LeakyReLU", node, &["data"], inputs, 0)?.to_vec();
        if self.act == Act::PReLU && inputs[1].as_deref() != Some(&[1][..]) {
            if d.len() < 2 {
                return Err(Error::shape(
                    "LeakyReLU",
                    format!("node \"{node}\": input \"data\" (rank, prelu)"),
                    ">= 2",
                    d.len(),
                ));
            }
            check_or_fill("LeakyReLU", node, "gamma", &mut inputs[1], &[d[1]])?;
        }
        Ok(vec![d; self.num_outputs()])
    }

    fn forward(
        &self,
        ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        let shape = inputs[0].shape();
        let x = inputs[0].f32s("LeakyReLU: data")?;
        let mut extra = Vec::new();
        let out = match self.act {
            Act::PReLU => {
                let dims @ (_, c, _) = Self::channel_dims(shape);
                let gamma = self.prelu_slopes(ctx.node, &inputs[1], c)?;
                let (view, xs, gs) = channel_view(dims);
                map_n(&view, [operand(x, &xs), operand(&gamma, &gs)], |[v, s]| {
                    if v > 0.0 {
                        v
                    } else {
                        s * v
                    }
                })?
            }
            Act::RReLU => {
                let slopes = if ctx.is_train {
                    let (lo, span) = (self.lower, self.upper - self.lower);
                    seeded_uniform(x.len(), |u| lo + span * u)
                } else {
                    vec![(self.lower + self.upper) / 2.0; x.len()]
                };
                let out = zip_map([x, &slopes], |[v, s]| if v > 0.0 { v } else { s * v })?;
                extra.push(NDArray::from_f32(shape, slopes)?);
                out
            }
            _ => zip_map([x], |[v]| self.value(v))?,
        };
        let mut outs = vec![NDArray::from_f32(shape, out)?];
        outs.extend(extra);
        Ok(outs)
    }

    fn backward(
        &self,
        ctx: &OpCtx,
        out_grads: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        let shape = inputs[0].shape();
        let x = inputs[0].f32s("LeakyReLU: data")?;
        let y = outputs[0].f32s("LeakyReLU: output")?;
        let g = out_grads[0].f32s("LeakyReLU: output gradient")?;
        let dx = match self.act {
            Act::PReLU => {
                let dims @ (_, c, _) = Self::channel_dims(shape);
                let gamma = self.prelu_slopes(ctx.node, &inputs[1], c)?;
                let (view, xs, gs) = channel_view(dims);
                let dx = map_n(
                    &view,
                    [operand(x, &xs), operand(g, &xs), operand(&gamma, &gs)],
                    |[v, gv, s]| if v > 0.0 { gv } else { s * gv },
                )?;
                // d gamma[c] = Σ over x ≤ 0 of g·x (summed over everything for a (1,) gamma).
                let (per_c, _) = channel_sums2(dims, |i, _, _| {
                    if x[i] > 0.0 {
                        (0.0, 0.0)
                    } else {
                        ((g[i] * x[i]) as f64, 0.0)
                    }
                });
                let dgamma: Vec<f32> = if inputs[1].size() == 1 && c != 1 {
                    vec![per_c.iter().sum::<f64>() as f32]
                } else {
                    per_c.iter().map(|&v| v as f32).collect()
                };
                return Ok(vec![
                    Some(NDArray::from_f32(shape, dx)?),
                    Some(NDArray::from_f32(inputs[1].shape(), dgamma)?),
                ]);
            }
            Act::RReLU => {
                let slopes = outputs
                    .get(1)
                    .ok_or_else(|| Error::Msg("internal: LeakyReLU rrelu without mask".into()))?
                    .f32s("LeakyReLU: mask")?;
                zip_map(
                    [y, g, slopes],
                    |[yv, gv, s]| if yv > 0.0 { gv } else { s * gv },
                )?
            }
            _ => zip_map([x, y, g], |[xv, yv, gv]| gv * self.derivative(xv, yv))?,
        };
        Ok(vec![Some(NDArray::from_f32(shape, dx)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_tabulated_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x})");
            assert!((erf(-x) + want).abs() < 2e-7, "erf(-{x})");
        }
    }

    #[test]
    fn selu_gradient_reproduces_mxnet() {
        let op = LeakyReLU {
            act: Act::Selu,
            slope: 0.25,
            lower: 0.125,
            upper: 0.334,
        };
        let x = -0.7f32;
        let y = op.value(x);
        // MXNet 1.9.1: λ(y + α) for x ≤ 0 (the true derivative is y + λα).
        assert!((op.derivative(x, y) - SELU_LAMBDA * (y + SELU_ALPHA)).abs() < 1e-6);
        assert!((op.derivative(0.5, op.value(0.5)) - SELU_LAMBDA).abs() < 1e-7);
    }
}
