//! Test support for operators: random inputs, the shape-inference check, and a central
//! finite-difference check of backward. Used by the registry-wide tests and family tests.

use super::{lookup, OpCtx};
use crate::error::{Error, Result};
use crate::tensor::NDArray;
use std::collections::BTreeMap;

/// Deterministic uniform values in `[lo, hi)` (a small xorshift; no global state).
pub fn random_array(shape: &[usize], lo: f32, hi: f32, seed: u64) -> NDArray {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect();
    NDArray::from_vec(shape, v).unwrap_or_else(|_| NDArray::zeros(shape, crate::DType::Float32))
}

/// A scalar objective of the op's outputs and inputs, for ops whose backward is not a plain
/// vector-Jacobian product (loss layers).
pub type Objective = Box<dyn Fn(&[NDArray], &[NDArray]) -> f64>;

/// One finite-difference gradient check.
pub struct GradCheck {
    /// MXNet op name.
    pub op: &'static str,
    /// String attributes.
    pub attrs: Vec<(&'static str, String)>,
    /// Argument values.
    pub inputs: Vec<NDArray>,
    /// Auxiliary states.
    pub aux: Vec<NDArray>,
    /// Arguments not to check (labels, indices).
    pub skip: Vec<usize>,
    /// Training mode.
    pub is_train: bool,
    /// Step of the central difference.
    pub eps: f32,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Objective for loss layers; None = Σ head_grad · output over visible outputs.
    pub objective: Option<Objective>,
}

impl GradCheck {
    /// A check of `op` with these attributes and inputs, default tolerances.
    pub fn new(op: &'static str, attrs: &[(&'static str, &str)], inputs: Vec<NDArray>) -> Self {
        GradCheck {
            op,
            attrs: attrs.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            inputs,
            aux: vec![],
            skip: vec![],
            is_train: true,
            eps: 1e-2,
            rtol: 2e-2,
            atol: 2e-3,
            objective: None,
        }
    }

    /// Runs the shape check and the gradient check; the error says what disagreed.
    pub fn run(&self) -> Result<()> {
        let def = lookup(self.op)?;
        let attrs: BTreeMap<String, String> = self
            .attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let inst = def.instantiate("check", &attrs)?;
        let mut in_shapes: Vec<_> = self
            .inputs
            .iter()
            .map(|a| Some(a.shape().to_vec()))
            .collect();
        let mut aux_shapes: Vec<_> = self.aux.iter().map(|a| Some(a.shape().to_vec())).collect();
        let shapes = inst.infer_shape("check", &mut in_shapes, &mut aux_shapes)?;
        let ctx = OpCtx {
            is_train: self.is_train,
            node: "check",
            need_grad: &[],
        };
        let run = |ins: &[NDArray]| -> Result<Vec<NDArray>> {
            let mut aux = self.aux.clone();
            inst.forward(&ctx, ins, &mut aux)
        };
        let outs = run(&self.inputs)?;
        let nvis = inst.output_names().len();
        for (k, (o, s)) in outs.iter().zip(&shapes).enumerate() {
            if o.shape() != s.as_slice() {
                return Err(Error::shape(
                    self.op,
                    format!("output {k}: inferred vs computed"),
                    s,
                    o.shape(),
                ));
            }
        }
        let heads: Vec<NDArray> = outs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                if k < nvis {
                    random_array(o.shape(), -1.0, 1.0, 1000 + k as u64)
                } else {
                    NDArray::zeros(o.shape(), o.dtype())
                }
            })
            .collect();
        let objective = |ins: &[NDArray]| -> Result<f64> {
            let outs = run(ins)?;
            if let Some(f) = &self.objective {
                return Ok(f(&outs, ins));
            }
            let mut total = 0.0;
            for (o, h) in outs.iter().zip(&heads).take(nvis) {
                total += o
                    .to_f64_vec()
                    .iter()
                    .zip(h.to_f64_vec())
                    .map(|(a, b)| a * b)
                    .sum::<f64>();
            }
            Ok(total)
        };
        let mut aux = self.aux.clone();
        let grads = inst.backward(&ctx, &heads, &self.inputs, &outs, &mut aux)?;
        for (i, input) in self.inputs.iter().enumerate() {
            if self.skip.contains(&i) {
                continue;
            }
            let Some(g) = grads.get(i).cloned().flatten() else {
                return Err(Error::Msg(format!(
                    "{}: no gradient for input {i}",
                    self.op
                )));
            };
            if g.shape() != input.shape() {
                return Err(Error::shape(
                    self.op,
                    format!("gradient of input {i}"),
                    input.shape(),
                    g.shape(),
                ));
            }
            let analytic = g.to_f64_vec();
            let base = input.f32s("input")?.to_vec();
            for (j, &a) in analytic.iter().enumerate() {
                let mut plus = base.clone();
                plus[j] += self.eps;
                let mut minus = base.clone();
                minus[j] -= self.eps;
                let mut ins_p = self.inputs.clone();
                ins_p[i] = NDArray::from_f32(input.shape(), plus)?;
                let mut ins_m = self.inputs.clone();
                ins_m[i] = NDArray::from_f32(input.shape(), minus)?;
                let numeric = (objective(&ins_p)? - objective(&ins_m)?) / (2.0 * self.eps as f64);
                if (numeric - a).abs() > self.atol + self.rtol * numeric.abs() {
                    return Err(Error::Msg(format!(
                        "{}: d/d input {i}[{j}]: backward {a}, finite difference {numeric}",
                        self.op
                    )));
                }
            }
        }
        Ok(())
    }
}
