//! Unary elementwise operators (MXNet `exp`, `log`, `sqrt`, `square`, `abs`, `negative`,
//! `relu`, `sigmoid`, `tanh`, …): one table row each, the value and its derivative side by side.

use super::params::ParamDef;
use super::{MaybeShape, OpCtx, OpDef, Operator, Params};
use crate::error::Result;
use crate::kernels::par;
use crate::tensor::NDArray;
use std::sync::Arc;

/// A unary function: its value, and its derivative given the input `x` and output `y`, each
/// also as a whole-slice kernel (the element formula inlined into the loop, so it vectorises
/// instead of making one indirect call per element).
#[derive(Clone, Copy)]
pub struct UnaryFn {
    /// MXNet's op name.
    pub name: &'static str,
    /// y = f(x).
    pub f: fn(f32) -> f32,
    /// dy/dx from x and y.
    pub df: fn(f32, f32) -> f32,
    /// `out[i] = f(x[i])`.
    map: fn(&[f32], &mut [f32]),
    /// `v[i] = f(v[i])`.
    map_mut: fn(&mut [f32]),
    /// `out[i] = g[i] · df(x[i], y[i])`.
    grad: fn(&[f32], &[f32], &[f32], &mut [f32]),
}

impl std::fmt::Debug for UnaryFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// One table row from the element formulas.
macro_rules! unary {
    ($name:literal, |$x:ident| $f:expr, |$gx:pat_param, $gy:pat_param| $df:expr) => {
        UnaryFn {
            name: $name,
            f: |$x: f32| -> f32 { $f },
            df: |$gx: f32, $gy: f32| -> f32 { $df },
            map: {
                #[inline(always)]
                fn body(xs: &[f32], out: &mut [f32]) {
                    for (o, &$x) in out.iter_mut().zip(xs) {
                        *o = $f;
                    }
                }
                wide_dispatch!(body, (xs: &[f32], out: &mut [f32]))
            },
            map_mut: {
                #[inline(always)]
                fn body(v: &mut [f32]) {
                    for o in v.iter_mut() {
                        let $x = *o;
                        *o = $f;
                    }
                }
                wide_dispatch!(body, (v: &mut [f32]))
            },
            grad: {
                #[inline(always)]
                fn body(xs: &[f32], ys: &[f32], gs: &[f32], out: &mut [f32]) {
                    let n = out.len().min(xs.len()).min(ys.len()).min(gs.len());
                    let (xs, ys, gs) = (&xs[..n], &ys[..n], &gs[..n]);
                    for (i, o) in out[..n].iter_mut().enumerate() {
                        let ($gx, $gy) = (xs[i], ys[i]);
                        *o = gs[i] * $df;
                    }
                }
                wide_dispatch!(body, (xs: &[f32], ys: &[f32], gs: &[f32], out: &mut [f32]))
            },
        }
    };
}

/// A function running `body` compiled for AVX-512 when the CPU has it (checked at run time;
/// the crate itself targets baseline x86-64, whose 4-wide SSE2 leaves exp-heavy loops such
/// as tanh at a third of the speed), else the baseline build of `body`.
macro_rules! wide_dispatch {
    ($body:ident, ($($arg:ident: $ty:ty),*)) => {{
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        fn wide($($arg: $ty),*) {
            $body($($arg),*)
        }
        fn dispatch($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports avx512f, the only feature `wide` is compiled for.
                return unsafe { wide($($arg),*) };
            }
            $body($($arg),*)
        }
        dispatch
    }};
}

/// e^x for float32 without a libm call: Cody–Waite range reduction and Cephes' expf
/// polynomial (within 2 ulp over the float range), branch-free so loops over it vectorise.
/// Inputs are clamped to [-87.3, 88.7]: beyond them e^x is (nearly) 0 or infinite in float32.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    let x = x.clamp(-87.336_55, 88.722_83);
    // n = round(x / ln 2) by the 1.5·2^23 trick: after adding the magic number the integer
    // sits in the low mantissa bits, so both the float n and the integer n come without a
    // float→int conversion (which would keep the loop from vectorising).
    let t = x * std::f32::consts::LOG2_E + 12_582_912.0;
    let n = t - 12_582_912.0;
    let ni = t.to_bits() as i32 - 0x4B40_0000;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    // 2^n through the exponent bits, in two halves so each stays a normal float over the
    // whole clamped range (n in [-126, 128]; the product may be denormal or f32::MAX-ish).
    let half = ni >> 1;
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    y * pow2(half) * pow2(ni - half)
}

/// tanh for float32 (Cephes' tanhf: an odd polynomial below 0.625, 1 − 2/(e^{2|x|} + 1)
/// above; within a few ulp), branch-free for vectorised loops.
#[inline(always)]
pub fn fast_tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = ((((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 0.133_314_42)
        * z
        - 0.333_332_8)
        * z
        * x
        + x;
    let large = 1.0 - 2.0 / (fast_exp(2.0 * a) + 1.0);
    if a < 0.625 {
        small
    } else {
        large.copysign(x)
    }
}

/// The logistic function 1 / (1 + e^-x).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + fast_exp(-x))
}

// log(1 + e^x) without overflow for large x.
fn softrelu(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// e^x, also for kernels that gather their exponentials into one pass (softmax over short
/// rows).
pub(crate) const EXP: UnaryFn = unary!("exp", |x| fast_exp(x), |_, y| y);

/// The table: value formula and derivative formula side by side.
#[allow(clippy::neg_multiply)] // the macro writes `g * df`, and negative's df is -1
pub static UNARY: &[UnaryFn] = &[
    EXP,
    unary!("log", |x| x.ln(), |x, _| 1.0 / x),
    unary!("sqrt", |x| x.sqrt(), |_, y| 0.5 / y),
    unary!("square", |x| x * x, |x, _| 2.0 * x),
    unary!("abs", |x| x.abs(), |x, _| if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }),
    unary!("negative", |x| -x, |_, _| -1.0),
    unary!(
        "relu",
        |x| if x > 0.0 { x } else { 0.0 },
        |x, _| if x > 0.0 { 1.0 } else { 0.0 }
    ),
    unary!("sigmoid", |x| sigmoid(x), |_, y| y * (1.0 - y)),
    unary!("tanh", |x| fast_tanh(x), |_, y| 1.0 - y * y),
    unary!("softrelu", |x| softrelu(x), |x, _| sigmoid(x)),
    unary!("softsign", |x| x / (1.0 + x.abs()), |x, _| 1.0
        / ((1.0 + x.abs()) * (1.0 + x.abs()))),
];

impl UnaryFn {
    /// `out[i] = f(xs[i])`.
    pub fn map_into(&self, xs: &[f32], out: &mut [f32]) {
        (self.map)(xs, out)
    }

    /// `v[i] = f(v[i])`.
    pub fn map_in_place(&self, v: &mut [f32]) {
        (self.map_mut)(v)
    }
}

/// The table row named `name`.
pub fn unary_fn(name: &str) -> Option<UnaryFn> {
    UNARY.iter().copied().find(|u| u.name == name)
}

/// y = f(x) elementwise, in parallel chunks.
pub fn map_unary(x: &NDArray, u: &UnaryFn, what: &str) -> Result<NDArray> {
    let xs = x.f32s(what)?;
    let mut out = vec![0.0f32; xs.len()];
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        (u.map)(&xs[start..start + chunk.len()], chunk)
    });
    NDArray::from_f32(x.shape(), out)
}

/// dx = g · df(x, y) elementwise.
pub fn unary_grad(
    x: &NDArray,
    y: &NDArray,
    g: &NDArray,
    u: &UnaryFn,
    what: &str,
) -> Result<NDArray> {
    let (xs, ys, gs) = (x.f32s(what)?, y.f32s(what)?, g.f32s(what)?);
    let mut out = vec![0.0f32; xs.len()];
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        let end = start + chunk.len();
        (u.grad)(&xs[start..end], &ys[start..end], &gs[start..end], chunk)
    });
    NDArray::from_f32(x.shape(), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_tanh_sigmoid_match_libm() {
        let mut worst = [0.0f64; 3];
        for i in -200_000..=200_000 {
            let x = i as f32 * 4.4e-4; // [-88, 88]
            let rel = |a: f32, b: f32| ((a as f64 - b as f64) / (b as f64).abs().max(1e-30)).abs();
            if x > -87.0 {
                worst[0] = worst[0].max(rel(fast_exp(x), x.exp())); // below: denormals
            }
            worst[1] = worst[1].max(rel(fast_tanh(x), x.tanh()));
            worst[2] = worst[2].max(rel(sigmoid(x), 1.0 / (1.0 + (-x).exp())));
        }
        assert!(worst.iter().all(|&w| w < 2e-6), "{worst:?}");
        for x in [1e-30f32, -3e-8, 0.6249, 0.625, -0.7, 9.0, -100.0, 100.0] {
            assert!(
                (fast_tanh(x) - x.tanh()).abs() <= 2e-7 * x.tanh().abs().max(1e-30),
                "{x}"
            );
        }
        assert!(fast_exp(-1000.0) > 0.0 && fast_exp(-1000.0) < 1.2e-38);
        assert!(fast_exp(1000.0) > 3e38);
        assert!(fast_tanh(f32::NAN).is_nan() && fast_exp(f32::NAN).is_nan());
    }
}

/// An operator applying one `UnaryFn`.
#[derive(Debug)]
pub struct Unary(pub UnaryFn);

impl Operator for Unary {
    fn arguments(&self) -> Vec<String> {
        vec!["data".into()]
    }
    fn infer_shape(
        &self,
        node: &str,
        inputs: &mut [MaybeShape],
        _aux: &mut [MaybeShape],
    ) -> Result<Vec<Vec<usize>>> {
        Ok(vec![
            super::known(self.0.name, node, &["data"], inputs, 0)?.to_vec()
        ])
    }
    fn forward(
        &self,
        _ctx: &OpCtx,
        inputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<NDArray>> {
        Ok(vec![map_unary(&inputs[0], &self.0, self.0.name)?])
    }
    fn backward(
        &self,
        _ctx: &OpCtx,
        g: &[NDArray],
        inputs: &[NDArray],
        outputs: &[NDArray],
        _aux: &mut [NDArray],
    ) -> Result<Vec<Option<NDArray>>> {
        Ok(vec![Some(unary_grad(
            &inputs[0],
            &outputs[0],
            &g[0],
            &self.0,
            self.0.name,
        )?)])
    }
    fn in_place_unary(&self) -> Option<UnaryFn> {
        // Derivatives from the output (tanh, sigmoid), or the same from either (relu: x > 0
        // exactly when relu(x) > 0), stay right when the input is overwritten by the output.
        matches!(self.0.name, "relu" | "tanh" | "sigmoid").then_some(self.0)
    }
}

macro_rules! unary_def {
    ($name:literal, $doc:literal) => {
        OpDef {
            name: $name,
            aliases: &[],
            py_name: None,
            doc: $doc,
            params: &[] as &[ParamDef],
            create: |p: &Params| {
                Ok(Arc::new(Unary(unary_fn(p.op).ok_or_else(|| {
                    crate::error::Error::Msg(format!("internal: no unary {}", p.op))
                })?)) as Arc<dyn Operator>)
            },
            variadic: None,
        }
    };
}

/// The entries of this family.
pub static OPS: &[OpDef] = &[
    unary_def!("exp", "Elementwise exponential, e^x."),
    unary_def!("log", "Elementwise natural logarithm."),
    unary_def!("sqrt", "Elementwise square root."),
    unary_def!("square", "Elementwise square, x·x."),
    unary_def!("abs", "Elementwise absolute value."),
    unary_def!("negative", "Elementwise negation, -x."),
    unary_def!("relu", "Rectified linear unit, max(x, 0)."),
    unary_def!("sigmoid", "Logistic sigmoid, 1 / (1 + e^-x)."),
    unary_def!("tanh", "Hyperbolic tangent."),
];
