//! Unary elementwise kernels (exp, log, sqrt, square, abs, negative, relu, sigmoid, tanh,
//! softrelu, softsign): one table row each with the value and derivative formulas side by
//! side, in float32 (fast branch-free approximations, dispatched to an AVX-512 build at run
//! time) and float64 (libm), plus the rule for integers. Parallel over fixed chunks.

use super::par;
use crate::tensor::Element;
use std::mem::MaybeUninit;

/// A unary function: its value, and its derivative given the input `x` and output `y`, each
/// also as a whole-slice kernel (the element formula inlined into the loop, so it vectorises
/// instead of making one indirect call per element), in float32 and in float64.
#[derive(Clone, Copy)]
pub struct UnaryFn {
    /// MXNet's op name.
    pub name: &'static str,
    /// y = f(x).
    pub f: fn(f32) -> f32,
    /// dy/dx from x and y.
    pub df: fn(f32, f32) -> f32,
    /// y = f(x) in float64 (libm precision, as MXNet's double kernels).
    pub f64: fn(f64) -> f64,
    /// dy/dx in float64.
    pub df64: fn(f64, f64) -> f64,
    /// How integer inputs compute: `Some` where the function maps integers to integers
    /// (square, abs, negative, relu) and runs in the integer type itself; `None`: through
    /// float32 and truncated back, as MXNet's integer kernels call `expf` and friends.
    pub int: Option<IntRule>,
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

/// One table row from the element formulas: the float32 value, the float64 value (when it
/// differs textually: fast float32 approximations), the derivative (one formula for both
/// widths) and the integer rule.
macro_rules! unary {
    ($name:literal, |$x:ident| $f:expr, |$gx:pat_param, $gy:pat_param| $df:expr) => {
        unary!($name, |$x| $f, |$x| $f, |$gx, $gy| $df, None)
    };
    ($name:literal, |$x:ident| $f:expr, |$gx:pat_param, $gy:pat_param| $df:expr, $int:expr) => {
        unary!($name, |$x| $f, |$x| $f, |$gx, $gy| $df, $int)
    };
    ($name:literal, |$x:ident| $f:expr, |$x64:ident| $f64:expr, |$gx:pat_param, $gy:pat_param| $df:expr, $int:expr) => {
        UnaryFn {
            name: $name,
            f: |$x: f32| -> f32 { $f },
            df: |$gx: f32, $gy: f32| -> f32 { $df },
            f64: |$x64: f64| -> f64 { $f64 },
            df64: |$gx: f64, $gy: f64| -> f64 { $df },
            int: $int,
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

/// A function running `body` compiled for AVX-512 when the CPU has it, else for AVX2 and FMA
/// when it has those (checked at run time; the crate itself targets baseline x86-64, whose
/// 4-wide SSE2 leaves exp-heavy loops such as tanh at a third of the speed), else the
/// baseline build of `body`. Every build gives the same bits: Rust never contracts a multiply
/// and an add into an FMA, even compiled for one.
macro_rules! wide_dispatch {
    ($body:ident, ($($arg:ident: $ty:ty),* $(,)?)) => {{
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        fn wide($($arg: $ty),*) {
            $body($($arg),*)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        fn wide256($($arg: $ty),*) {
            $body($($arg),*)
        }
        fn dispatch($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports avx512f, the only feature `wide` is compiled for.
                return unsafe { wide($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::kernels::has_avx2_fma() {
                // SAFETY: the CPU supports avx2 and fma, the features `wide256` is compiled
                // for.
                return unsafe { wide256($($arg),*) };
            }
            $body($($arg),*)
        }
        dispatch
    }};
}
pub(super) use wide_dispatch;

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

/// How a unary function runs on integers that it maps to integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntRule {
    /// x·x (wrapping)
    Square,
    /// |x| (wrapping at the type's minimum)
    Abs,
    /// -x (wrapping)
    Negative,
    /// max(x, 0)
    Relu,
}

impl IntRule {
    /// The value at `x`.
    pub fn apply<T: Element>(self, x: T) -> T {
        match self {
            IntRule::Square => x.mul(x),
            IntRule::Abs if x < T::zero() => x.neg(),
            IntRule::Negative => x.neg(),
            IntRule::Relu if x < T::zero() => T::zero(),
            IntRule::Abs | IntRule::Relu => x,
        }
    }

    /// The gradient at `x` given the head gradient `g`.
    pub fn grad<T: Element>(self, x: T, g: T) -> T {
        let zero = T::zero();
        match self {
            IntRule::Square => g.mul(x.add(x)),
            IntRule::Abs if x > zero => g,
            IntRule::Abs if x < zero => g.neg(),
            IntRule::Negative => g.neg(),
            IntRule::Relu if x > zero => g,
            IntRule::Abs | IntRule::Relu => zero,
        }
    }
}

// log(1 + e^x) without overflow for large x.
fn softrelu(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn softrelu64(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// e^x, also for kernels that gather their exponentials into one pass (softmax over short
/// rows).
pub(crate) const EXP: UnaryFn = unary!("exp", |x| fast_exp(x), |x| x.exp(), |_, y| y, None);

/// The table: value formula and derivative formula side by side.
#[allow(clippy::neg_multiply)] // the macro writes `g * df`, and negative's df is -1
pub static UNARY: &[UnaryFn] = &[
    EXP,
    unary!("log", |x| x.ln(), |x, _| 1.0 / x),
    unary!("sqrt", |x| x.sqrt(), |_, y| 0.5 / y),
    unary!("square", |x| x * x, |x, _| 2.0 * x, Some(IntRule::Square)),
    unary!(
        "abs",
        |x| x.abs(),
        |x, _| if x > 0.0 {
            1.0
        } else if x < 0.0 {
            -1.0
        } else {
            0.0
        },
        Some(IntRule::Abs)
    ),
    unary!("negative", |x| -x, |_, _| -1.0, Some(IntRule::Negative)),
    // In float32 `max` plus zero, which gives what MXNet's `x > 0 ? x : 0` gives for every
    // input (NaN to +0.0, −0.0 to +0.0; see the test): `max` leaves the sign of a zero
    // unspecified (x86's MAXPS, what optimized loops use, returns its second operand unless
    // the first is greater; unoptimized builds call `fmaxf`, which kept −0.0), and adding
    // +0.0 makes it +0.0. Written as the `if`, the in-place kernel (a convolution's fused
    // relu) stored only the lanes that change, through a masked store (VMASKMOVPS),
    // microcoded on AMD: SqueezeNet's 3 → 64 first layer spent a third of its time in its
    // relu.
    unary!(
        "relu",
        |x| x.max(0.0) + 0.0,
        |x| if x > 0.0 { x } else { 0.0 },
        |x, _| if x > 0.0 { 1.0 } else { 0.0 },
        Some(IntRule::Relu)
    ),
    unary!(
        "sigmoid",
        |x| sigmoid(x),
        |x| sigmoid64(x),
        |_, y| y * (1.0 - y),
        None
    ),
    unary!(
        "tanh",
        |x| fast_tanh(x),
        |x| x.tanh(),
        |_, y| 1.0 - y * y,
        None
    ),
    // softrelu' is the logistic function, written with libm's exp so one formula serves
    // both widths.
    unary!(
        "softrelu",
        |x| softrelu(x),
        |x| softrelu64(x),
        |x, _| 1.0 / (1.0 + (-x).exp()),
        None
    ),
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

    /// `f` over float32 values, in parallel chunks.
    pub fn map_f32(&self, xs: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0f32; xs.len()];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            (self.map)(&xs[start..start + chunk.len()], chunk)
        });
        out
    }

    /// `g · df(x, y)` over float32 values, in parallel chunks.
    pub fn grad_f32(&self, xs: &[f32], ys: &[f32], gs: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0f32; xs.len()];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            let end = start + chunk.len();
            (self.grad)(&xs[start..end], &ys[start..end], &gs[start..end], chunk)
        });
        out
    }

    /// `f` over float64 values, in parallel chunks.
    pub fn map_f64(&self, xs: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0f64; xs.len()];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            for (o, &x) in chunk.iter_mut().zip(&xs[start..]) {
                *o = (self.f64)(x);
            }
        });
        out
    }

    /// `g · df(x, y)` over float64 values, in parallel chunks.
    pub fn grad_f64(&self, xs: &[f64], ys: &[f64], gs: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0f64; xs.len()];
        par::for_each_chunk_mut(&mut out, |start, chunk| {
            for (i, o) in chunk.iter_mut().enumerate() {
                let j = start + i;
                *o = gs[j] * (self.df64)(xs[j], ys[j]);
            }
        });
        out
    }
}

/// The table row named `name`.
pub fn unary_fn(name: &str) -> Option<UnaryFn> {
    UNARY.iter().copied().find(|u| u.name == name)
}

/// mshadow's clip: the upper bound is tested first, NaN passes through.
#[inline]
fn clip_value<T: PartialOrd + Copy>(v: T, lo: T, hi: T) -> T {
    // MXNet's order (above hi: hi, else below lo: lo, else v, NaN kept) as two selects
    // without a branch, so loops over it vectorise.
    let low = if v < lo { lo } else { v };
    if v > hi {
        hi
    } else {
        low
    }
}

/// `clip(x, lo, hi)` elementwise (`zero` fills the buffer before it is written).
pub fn clip<T: PartialOrd + Copy + Send + Sync>(xs: &[T], lo: T, hi: T) -> Vec<T> {
    let fill = |out: &mut [MaybeUninit<T>]| {
        // `move`: the bounds as values (see `clip_grad`).
        par::for_each_chunk_mut(out, move |start, chunk| {
            for (o, &v) in chunk.iter_mut().zip(&xs[start..]) {
                o.write(clip_value(v, lo, hi));
            }
        });
    };
    // SAFETY: every chunk is written, element by element. (No zero fill first: MobileNet's
    // relu6 arrays are MBs, and a serial fill cost more than the clip.)
    unsafe { par::written(xs.len(), fill) }
}

/// clip's gradient: `g` where lo <= x <= hi (bounds included, as MXNet's clip_grad), else 0.
pub fn clip_grad<T: PartialOrd + Copy + Send + Sync>(
    gs: &[T],
    xs: &[T],
    lo: T,
    hi: T,
    zero: T,
) -> Vec<T> {
    let fill = |out: &mut [MaybeUninit<T>]| {
        // `move`: the bounds as values in registers, not read through a reference, so the
        // select below is one of values (vectorised), not of addresses.
        par::for_each_chunk_mut(out, move |start, chunk| {
            for ((o, &g), &v) in chunk.iter_mut().zip(&gs[start..]).zip(&xs[start..]) {
                // `|`, not `||`: one select without a branch (a branch mispredicts on every
                // other value of a relu6 input).
                let outside = (v > hi) | (v < lo);
                o.write(if outside { zero } else { g });
            }
        });
    };
    // SAFETY: every chunk is written, element by element (see `clip`).
    unsafe { par::written(xs.len(), fill) }
}

/// `v[i] = clip(v[i], lo, hi)` in place (the executor's fused relu6).
/// Compiled for AVX-512 where the CPU has it: MobileNet v2's relu6 runs as the epilogue of
/// every convolution, over every activation.
pub fn clip_in_place(v: &mut [f32], lo: f32, hi: f32) {
    #[inline(always)]
    fn body(v: &mut [f32], lo: f32, hi: f32) {
        for x in v {
            *x = clip_value(*x, lo, hi);
        }
    }
    wide_dispatch!(body, (v: &mut [f32], lo: f32, hi: f32))(v, lo, hi)
}

/// The activation after a per-channel affine map ([`affine_then`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AffineAct {
    /// None.
    Identity,
    /// `relu` as its unary op computes it (`x > 0 ? x : 0`).
    Relu,
    /// `clip` to `[lo, hi]` as [`clip_in_place`] computes it.
    Clip {
        /// Lower bound.
        lo: f32,
        /// Upper bound.
        hi: f32,
    },
}

/// `dst[i] = act(src[i] · s + t)` for each of `dst`'s values (`src` holds at least as many):
/// multiply, then add (no fused multiply-add, the same bits as the two passes it replaces),
/// in AVX-512 vectors where the CPU has them.
pub fn affine_then(src: &[f32], dst: &mut [f32], (s, t): (f32, f32), act: AffineAct) {
    assert!(
        src.len() >= dst.len(),
        "affine_then: source shorter than destination"
    );
    #[inline(always)]
    fn each(src: &[f32], dst: &mut [f32], s: f32, t: f32, f: impl Fn(f32) -> f32) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = f(x * s + t);
        }
    }
    #[inline(always)]
    fn body(src: &[f32], dst: &mut [f32], s: f32, t: f32, act: AffineAct) {
        match act {
            AffineAct::Identity => each(src, dst, s, t, |y| y),
            AffineAct::Relu => each(src, dst, s, t, |y| if y > 0.0 { y } else { 0.0 }),
            AffineAct::Clip { lo, hi } => each(src, dst, s, t, |y| clip_value(y, lo, hi)),
        }
    }
    wide_dispatch!(body, (src: &[f32], dst: &mut [f32], s: f32, t: f32, act: AffineAct))(
        src, dst, s, t, act,
    )
}

/// [`affine_then`] in place.
pub fn affine_then_in_place(v: &mut [f32], (s, t): (f32, f32), act: AffineAct) {
    #[inline(always)]
    fn each(v: &mut [f32], s: f32, t: f32, f: impl Fn(f32) -> f32) {
        for x in v.iter_mut() {
            *x = f(*x * s + t);
        }
    }
    #[inline(always)]
    fn body(v: &mut [f32], s: f32, t: f32, act: AffineAct) {
        match act {
            AffineAct::Identity => each(v, s, t, |y| y),
            AffineAct::Relu => each(v, s, t, |y| if y > 0.0 { y } else { 0.0 }),
            AffineAct::Clip { lo, hi } => each(v, s, t, |y| clip_value(y, lo, hi)),
        }
    }
    wide_dispatch!(body, (v: &mut [f32], s: f32, t: f32, act: AffineAct))(v, s, t, act)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float64_rows_agree_with_float32_rows() {
        for u in UNARY {
            for x in [-2.5f64, -0.3, 0.7, 1.9] {
                let x = if matches!(u.name, "log" | "sqrt") {
                    x.abs()
                } else {
                    x
                };
                let (a, b) = ((u.f)(x as f32) as f64, (u.f64)(x));
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{} at {x}: {a} vs {b}",
                    u.name
                );
                let y = (u.f64)(x);
                let (da, db) = ((u.df)(x as f32, y as f32) as f64, (u.df64)(x, y));
                assert!(
                    (da - db).abs() <= 1e-5 * db.abs().max(1.0),
                    "{}' at {x}",
                    u.name
                );
            }
        }
        assert_eq!(IntRule::Abs.apply(-5i64), 5);
        assert_eq!(
            IntRule::Square.apply((1i64 << 31) + 1),
            (1i64 << 62) + (1i64 << 32) + 1
        );
        assert_eq!(IntRule::Relu.grad(-3i32, 7), 0);
    }

    /// relu gives MXNet's `x > 0 ? x : 0` bit for bit (NaN and −0.0 to +0.0), in place and
    /// not, through the vector loops and their scalar tails.
    #[test]
    fn relu_is_mxnets_select_bit_for_bit() {
        let relu = UNARY.iter().find(|u| u.name == "relu").expect("relu");
        let special = [-0.0f32, 0.0, f32::NAN, -f32::NAN, -1.5, 2.5, f32::INFINITY];
        let xs: Vec<f32> = (0..67)
            .map(|i| special.get(i % 9).copied().unwrap_or(i as f32 - 30.0))
            .collect();
        let want: Vec<u32> = xs
            .iter()
            .map(|&x| if x > 0.0 { x } else { 0.0 }.to_bits())
            .collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut v = xs.clone();
        relu.map_in_place(&mut v);
        assert_eq!(bits(&v), want);
        let mut out = vec![1.0f32; xs.len()];
        relu.map_into(&xs, &mut out);
        assert_eq!(bits(&out), want);
        assert_eq!(
            bits(&xs.iter().map(|&x| (relu.f)(x)).collect::<Vec<_>>()),
            want
        );
    }

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
