//! Forward max / average / sum pooling over 2-D windows (any kernel, stride and padding) and
//! global pooling, at close to memory speed. The generic per-window loop of `pool` visits
//! kernel-sized slices one window at a time; here each output row first reduces its input
//! rows vertically into a row buffer (contiguous loops the compiler vectorizes), then takes
//! the horizontal windows of that buffer. The windows are MXNet's spans, so clipping, the
//! average's divisor and "NaN / padding never win" are those of the generic loop.

use super::par;
use super::pool::{PoolGeom, PoolKind, Span};

/// Lanes of the plane reductions: independent accumulators the compiler keeps in vector
/// registers (a single running maximum or sum is a serial dependency chain).
const LANES: usize = 16;

/// Whether `pool2d_forward` computes this pooling: one depth slice of a non-empty plane, and
/// a kind without powers.
pub(super) fn serves(g: &PoolGeom, kind: PoolKind) -> bool {
    g.input[0] == 1
        && g.output[0] == 1
        && g.kernel[0] == 1
        && g.pad[0] == 0
        && g.input[1] > 0
        && g.input[2] > 0
        && !matches!(kind, PoolKind::Lp(_))
}

/// One step of a maximum (`MAX`) or a sum. `v` wins a maximum only when greater, so a NaN
/// never replaces it (MXNet's `if (v > max)`).
#[inline(always)]
fn step<const MAX: bool>(acc: f32, v: f32) -> f32 {
    if !MAX {
        acc + v
    } else if v > acc {
        v
    } else {
        acc
    }
}

/// The start of a maximum (the lowest float, which an empty window returns, as in MXNet) or
/// of a sum.
pub(super) fn start<const MAX: bool>() -> f32 {
    if MAX {
        f32::MIN
    } else {
        0.0
    }
}

/// Pooling forward of `x (planes, 1, ih, iw)` into `y (planes, 1, oh, ow)`; the caller checked
/// the lengths and `serves`.
pub(super) fn pool2d_forward(g: &PoolGeom, kind: PoolKind, x: &[f32], y: &mut [f32]) {
    match kind {
        PoolKind::Max => forward::<true>(g, kind, x, y),
        _ => forward::<false>(g, kind, x, y),
    }
}

fn forward<const MAX: bool>(g: &PoolGeom, kind: PoolKind, x: &[f32], y: &mut [f32]) {
    let (sy, sx) = (g.spans(1), g.spans(2));
    let [_, ih, iw] = g.input;
    let (il, ol) = (ih * iw, sy.len() * sx.len());
    let work = g.planes * (il + ol);
    let rows = Rows::new(g, kind, &sy, &sx);
    let whole = |s: &[Span], n: usize| s.len() == 1 && s[0].lo == 0 && s[0].hi == n;
    if whole(&sy, ih) && whole(&sx, iw) {
        // Global pooling (one window over the whole plane): a reduction per plane, planes in
        // groups of GLOBAL_GROUP per task. A plane counts as a vector's work at least: the
        // 4096 planes of 2×2 at the end of MobileNet-0.25 at batch 16 cost their calls, not
        // their values.
        const GLOBAL_GROUP: usize = 64;
        let n = rows.divisor(&sy[0], &sx[0]);
        let work = g.planes * (il.max(LANES) + ol);
        par::for_each_row_mut_by_work(y, GLOBAL_GROUP, work, |i, out| {
            for (j, o) in out.iter_mut().enumerate() {
                let p = i * GLOBAL_GROUP + j;
                let r = plane::<MAX>(&x[p * il..(p + 1) * il]);
                *o = n.map_or(r, |n| r / n as f32);
            }
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let vector = Vector::new(g, &rows);
    // Planes in groups, so each task makes its row buffer once (a plane of 8×8 outputs
    // takes about as long as an allocation).
    let group = (4096 / (il + ol)).clamp(1, 64);
    par::for_each_row_mut_by_work(y, ol * group, work, |i, y_g| {
        let planes = y_g.chunks_exact_mut(ol).enumerate();
        // Each vector module's two plans, over the group's planes.
        #[cfg(target_arch = "x86_64")]
        macro_rules! centred_planes {
            ($module:ident, $centred:expr) => {{
                use super::$module::centred_plane;
                let mut vert = $centred.buffer();
                for (j, y_p) in planes {
                    let p = i * group + j;
                    // SAFETY: the CPU has the module's features (checked by `Vector::new`),
                    // x's part is one plane's input and y_p its output, `vert` was made by
                    // the plan.
                    unsafe {
                        centred_plane::<MAX>($centred, &x[p * il..(p + 1) * il], y_p, &mut vert)
                    };
                }
                return;
            }};
        }
        #[cfg(target_arch = "x86_64")]
        macro_rules! row_planes {
            ($module:ident) => {{
                use super::$module::{plane_rows, PaddedRows};
                let mut bufs = PaddedRows::new::<MAX>(&rows);
                for (j, y_p) in planes {
                    let p = i * group + j;
                    // SAFETY: the CPU has the module's features (checked by `Vector::new`),
                    // the stride is 1 or 2, x's part is one plane's input and y_p its
                    // output, `bufs` was made for `rows`.
                    unsafe { plane_rows::<MAX>(&rows, &x[p * il..(p + 1) * il], y_p, &mut bufs) };
                }
                return;
            }};
        }
        #[cfg(target_arch = "x86_64")]
        match &vector {
            Vector::Centred512(centred) => centred_planes!(pool2d_vector, centred),
            Vector::Rows512 => row_planes!(pool2d_vector),
            Vector::Centred256(centred) => centred_planes!(pool2d_vector_avx2, centred),
            Vector::Rows256 => row_planes!(pool2d_vector_avx2),
            Vector::Plain => {}
        }
        let mut buf = vec![0.0f32; iw];
        let mut phases = vec![0.0f32; if rows.stride == 2 { iw + 1 } else { 0 }];
        for (j, y_p) in planes {
            let p = i * group + j;
            plane_rows::<MAX>(&rows, &x[p * il..(p + 1) * il], y_p, &mut buf, &mut phases);
        }
    });
}

/// Which rows a pooling takes: the hand-written vector kernels (horizontal strides 1 and 2)
/// in AVX-512 or, on CPUs without it, AVX2 vectors; else the compiled scalar rows, which the
/// crate's baseline x86-64 target runs 4 floats at a time.
#[cfg(target_arch = "x86_64")]
enum Vector {
    Centred512(super::pool2d_vector::Centred),
    Rows512,
    Centred256(super::pool2d_vector_avx2::Centred),
    Rows256,
    Plain,
}

#[cfg(target_arch = "x86_64")]
impl Vector {
    fn new(g: &PoolGeom, rows: &Rows) -> Self {
        use super::{pool2d_vector as v512, pool2d_vector_avx2 as v256};
        if !matches!(g.stride[2], 1 | 2) {
            Vector::Plain
        } else if super::has_avx512() {
            v512::Centred::new(g, rows).map_or(Vector::Rows512, Vector::Centred512)
        } else if super::has_avx2_fma() {
            v256::Centred::new(g, rows).map_or(Vector::Rows256, Vector::Centred256)
        } else {
            Vector::Plain
        }
    }
}

/// The windows of one plane, row by row.
pub(super) struct Rows<'a> {
    pub(super) sy: &'a [Span],
    pub(super) sx: &'a [Span],
    /// The horizontal windows inside the row (see [`windows`]).
    pub(super) inner: (usize, usize),
    pub(super) kw: usize,
    pub(super) stride: usize,
    pub(super) iw: usize,
    /// The padding before each input row.
    pub(super) pad: usize,
    kind: PoolKind,
}

impl<'a> Rows<'a> {
    /// The rows of `g`'s windows `sy` × `sx`.
    pub(super) fn new(g: &PoolGeom, kind: PoolKind, sy: &'a [Span], sx: &'a [Span]) -> Self {
        let kw = g.kernel[2];
        // The horizontal windows inside the row, a contiguous run a..b (the same for every
        // row).
        let a = sx
            .iter()
            .position(|w| w.hi - w.lo == kw)
            .unwrap_or(sx.len());
        let b = a + sx[a..].iter().take_while(|w| w.hi - w.lo == kw).count();
        Rows {
            sy,
            sx,
            inner: (a, b),
            kw,
            stride: g.stride[2],
            iw: g.input[2],
            pad: g.pad[2],
            kind,
        }
    }

    /// What an average divides a window's sum by (`None`: not an average).
    pub(super) fn divisor(&self, yy: &Span, xx: &Span) -> Option<usize> {
        Some(self.count(yy)? * self.count(xx)?)
    }

    /// An average's count along one axis of a window (`None`: not an average).
    pub(super) fn count(&self, w: &Span) -> Option<usize> {
        match self.kind {
            PoolKind::Avg {
                count_include_pad: true,
            } => Some(w.padded),
            PoolKind::Avg { .. } => Some(w.hi - w.lo),
            _ => None,
        }
    }
}

/// Every output row of one plane: its input rows reduced vertically into a row buffer `buf`
/// (`iw` values), then the horizontal windows of the buffer, then an average's division.
/// `phases` is room for the buffer's even and odd elements when the stride is 2.
pub(super) fn plane_rows<const MAX: bool>(
    rows: &Rows,
    x_p: &[f32],
    y_p: &mut [f32],
    buf: &mut [f32],
    phases: &mut [f32],
) {
    let (iw, (a, b)) = (rows.iw, rows.inner);
    for (yy, y_row) in rows.sy.iter().zip(y_p.chunks_exact_mut(rows.sx.len())) {
        buf.fill(start::<MAX>());
        for row in x_p[yy.lo * iw..yy.hi * iw].chunks_exact(iw) {
            buf.iter_mut()
                .zip(row)
                .for_each(|(b, &v)| *b = step::<MAX>(*b, v));
        }
        windows::<MAX>(buf, phases, rows, y_row);
        // An average divides each sum by its window's count: one count for the windows
        // inside the row (whole, padded or not), so that run is one vector pass.
        let (left, rest) = y_row.split_at_mut(a);
        let (inner, right) = rest.split_at_mut(b - a);
        let outer = left.iter_mut().zip(&rows.sx[..a]);
        for (o, xx) in outer.chain(right.iter_mut().zip(&rows.sx[b..])) {
            if let Some(n) = rows.divisor(yy, xx) {
                *o /= n as f32;
            }
        }
        let inner_count = rows.sx.get(a).filter(|_| a < b);
        if let Some(n) = inner_count.and_then(|xx| rows.divisor(yy, xx)) {
            let n = n as f32;
            inner.iter_mut().for_each(|o| *o /= n);
        }
    }
}

/// The maximum or the sum of a whole plane, in `LANES` independent accumulators (a plane
/// shorter than that in one: MobileNet's 2×2 planes spent their time starting and folding
/// the accumulators). The same bits either way: the accumulators start at the reduction's
/// start value, which leaves a sum started from 0 and any maximum as they are.
fn plane<const MAX: bool>(x: &[f32]) -> f32 {
    if x.len() < LANES {
        return x.iter().fold(start::<MAX>(), |a, &v| step::<MAX>(a, v));
    }
    let mut acc = [start::<MAX>(); LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(start::<MAX>(), |a, &v| step::<MAX>(a, v));
    for c in chunks {
        acc.iter_mut()
            .zip(c)
            .for_each(|(a, &v)| *a = step::<MAX>(*a, v));
    }
    acc.iter().fold(tail, |a, &v| step::<MAX>(a, v))
}

/// The horizontal windows of the vertically reduced row `buf` (`rows.sx`, width `kw`, stride
/// `s`): the maximum or the sum of each. The windows inside the row (`a..b`, a contiguous run)
/// take `kw` passes over their outputs; the clipped ones at the borders are reduced one by
/// one. `phases` is room for `buf`'s even and odd elements when `s` is 2.
fn windows<const MAX: bool>(buf: &[f32], phases: &mut [f32], rows: &Rows, out: &mut [f32]) {
    let (sx, (a, b), kw, s) = (rows.sx, rows.inner, rows.kw, rows.stride);
    let border = |o: &mut f32, w: &Span| {
        *o = buf[w.lo..w.hi]
            .iter()
            .fold(start::<MAX>(), |m, &v| step::<MAX>(m, v));
    };
    out[..a]
        .iter_mut()
        .zip(&sx[..a])
        .for_each(|(o, w)| border(o, w));
    out[b..]
        .iter_mut()
        .zip(&sx[b..])
        .for_each(|(o, w)| border(o, w));
    if a == b {
        return;
    }
    let inner = &mut out[a..b];
    inner.fill(start::<MAX>());
    if s == 2 {
        // A walk over every other element does not vectorize; split the row into its even
        // and odd elements once, and each tap is a contiguous pass over one of them. The
        // steps are the same, in the same order, so the results are the same bits.
        let (even, odd) = phases.split_at_mut(buf.len().div_ceil(2));
        let pairs = buf.chunks_exact(2);
        if let [last] = pairs.remainder() {
            even[buf.len() / 2] = *last;
        }
        for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
            *e = pair[0];
            *o = pair[1];
        }
        for k in 0..kw {
            let p = sx[a].lo + k;
            let phase = if p.is_multiple_of(2) { &*even } else { &*odd };
            tap::<MAX>(inner, &phase[p / 2..]);
        }
        return;
    }
    for k in 0..kw {
        let from = &buf[sx[a].lo + k..];
        if s == 1 {
            // A contiguous pass (a stepped iterator, even by 1, does not vectorize).
            tap::<MAX>(inner, from);
        } else {
            tap::<MAX>(inner, from.iter().step_by(s));
        }
    }
}

/// One tap of the horizontal windows: each output steps with its next value from `src`.
#[inline(always)]
fn tap<'a, const MAX: bool>(out: &mut [f32], src: impl IntoIterator<Item = &'a f32>) {
    out.iter_mut()
        .zip(src)
        .for_each(|(o, &v)| *o = step::<MAX>(*o, v));
}
