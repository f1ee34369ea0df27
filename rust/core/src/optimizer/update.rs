//! The one fused pass of an update: per-step values, MXNet's clip and sign, and the aligned
//! chunked walk over weight, gradient and state arrays.

use super::*;

/// What one update of one index sees: the effective learning rate and weight decay (after
/// the scheduler and the multipliers), the gradient scale, the clip bound (None: no clipping)
/// and `t`, the index's update count after this update.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    pub lr: f64,
    pub wd: f64,
    pub rescale: f64,
    pub clip: Option<f64>,
    pub t: u64,
}

impl Step {
    /// The clip bound as f32 for the kernels.
    pub(crate) fn clip32(&self) -> Option<f32> {
        self.clip.map(|c| c as f32)
    }
}

/// MXNet's `clip`: NaN passes through (unlike `f32::clamp`/`max`, which would hide it).
#[inline(always)]
pub(crate) fn clip(x: f32, bound: Option<f32>) -> f32 {
    match bound {
        Some(c) if x > c => c,
        Some(c) if x < -c => -c,
        _ => x,
    }
}

/// MXNet's `sign`: 1, −1, or 0 for zero (and NaN).
#[inline(always)]
pub(crate) fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

pub(super) type Part<'a, const N: usize> = (&'a mut [f32], &'a [f32], [&'a mut [f32]; N]);

/// Calls `f(chunk_index, weight_chunk, grad_chunk, state_chunks)` on aligned fixed-size
/// chunks (`par::CHUNK`) of the weight, the gradient and `N` state arrays of the same length;
/// in parallel when the arrays are large. Chunk `c` always covers elements
/// `c·CHUNK .. (c+1)·CHUNK`, so per-chunk random streams do not depend on the thread count.
pub(crate) fn chunked<const N: usize, F>(w: &mut [f32], g: &[f32], s: [&mut [f32]; N], f: F)
where
    F: Fn(usize, &mut [f32], &[f32], [&mut [f32]; N]) + Sync + Send,
{
    let n = w.len();
    let mut parts: Vec<Part<'_, N>> = Vec::with_capacity(n.div_ceil(CHUNK));
    let (mut w, mut g, mut s) = (w, g, s);
    while !w.is_empty() {
        let k = CHUNK.min(w.len());
        let (wh, wt) = std::mem::take(&mut w).split_at_mut(k);
        let (gh, gt) = g.split_at(k.min(g.len()));
        let mut heads: [&mut [f32]; N] = std::array::from_fn(|_| <&mut [f32]>::default());
        let mut tails: [&mut [f32]; N] = std::array::from_fn(|_| <&mut [f32]>::default());
        for (i, sl) in s.into_iter().enumerate() {
            let (h, t) = sl.split_at_mut(k.min(sl.len()));
            heads[i] = h;
            tails[i] = t;
        }
        parts.push((wh, gh, heads));
        w = wt;
        g = gt;
        s = tails;
    }
    if n < UPDATE_SERIAL_BELOW {
        let _flush = FlushDenormals::new();
        for (c, (wc, gc, sc)) in parts.into_iter().enumerate() {
            f(c, wc, gc, sc);
        }
    } else {
        parts
            .into_par_iter()
            .enumerate()
            .for_each(|(c, (wc, gc, sc))| {
                let _flush = FlushDenormals::new();
                f(c, wc, gc, sc)
            });
    }
}

/// Calls `f(weight, grad, states)` for every element: the one fused pass of an update.
pub(crate) fn each<const N: usize, F>(w: &mut [f32], g: &[f32], s: [&mut [f32]; N], f: F)
where
    F: Fn(&mut f32, f32, [&mut f32; N]) + Sync + Send,
{
    chunked(w, g, s, |_, wc, gc, mut sc| {
        // Equal lengths up front let the compiler drop the bounds checks and vectorise; the
        // callers' closures capture their constants by value (`move`) for the same reason.
        let len = wc.len().min(gc.len());
        let (wc, gc) = (&mut wc[..len], &gc[..len]);
        let mut sc = sc.each_mut().map(|a| &mut a[..len]);
        for i in 0..len {
            f(&mut wc[i], gc[i], sc.each_mut().map(|a| &mut a[i]));
        }
    });
}

/// The float32 slices of the state arrays, in tuple order (`None` entries skipped). The
/// state was checked against the rule's spec before, so this only fails on a dtype mismatch.
pub(crate) fn state_slices(state: &mut State) -> Result<Vec<&mut [f32]>> {
    match state {
        State::None => Ok(vec![]),
        State::Array(a) => Ok(vec![a.f32s_mut("optimizer state")?]),
        State::Tuple(v) => {
            let mut out = vec![];
            for s in v.iter_mut() {
                out.extend(state_slices(s)?);
            }
            Ok(out)
        }
    }
}

/// Exactly `N` state slices.
pub(crate) fn state_n<const N: usize>(state: &mut State) -> Result<[&mut [f32]; N]> {
    let v = state_slices(state)?;
    let got = v.len();
    v.try_into().map_err(|_| {
        Error::Msg(format!(
            "internal: optimizer state has {got} arrays, the rule needs {N}"
        ))
    })
}
