//! Pooling kernels (max, average, sum, Lp) over contiguous NC(D)(H)W slices, forward and
//! backward, with MXNet's window clipping; planes (sample × channel) run in parallel.

use super::par::for_each_row_mut;
use super::pool2d::{pool2d_forward, serves};
use crate::error::{Error, Result};

/// What a pooling window computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// The largest value; the gradient goes to the first position holding it.
    Max,
    /// The mean. The divisor is the window clipped to the padded input (`count_include_pad`)
    /// or to the real input.
    Avg {
        /// Count padding positions in the divisor.
        count_include_pad: bool,
    },
    /// The sum.
    Sum,
    /// `(Σ x^p)^(1/p)` for p in 1..=3, with MXNet's conventions: no absolute value, and the
    /// gradient `g·(x/y)^(p−1)` set to 0 where the output is 0.
    Lp(u32),
}

/// How the number of windows along an axis is rounded (MXNet's `pooling_convention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolConvention {
    /// `1 + floor((in + 2·pad − kernel) / stride)`: windows lie inside the padded input.
    Valid,
    /// `1 + ceil((in + 2·pad − kernel) / stride)`: a last, partial window is kept.
    Full,
    /// `ceil((in + 2·pad) / stride)`.
    Same,
}

/// The number of windows along one axis, or `None` when the kernel does not fit into the
/// padded input (or kernel / stride is 0).
pub fn pool_out_size(
    input: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    convention: PoolConvention,
) -> Option<usize> {
    let padded = input + 2 * pad;
    if stride == 0 || kernel == 0 || kernel > padded {
        return None;
    }
    Some(match convention {
        PoolConvention::Valid => 1 + (padded - kernel) / stride,
        PoolConvention::Full => 1 + (padded - kernel).div_ceil(stride),
        PoolConvention::Same => padded.div_ceil(stride),
    })
}

/// The geometry of a pooling over up to three spatial axes; fewer axes use leading sizes of 1
/// (kernel 1, stride 1, pad 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeom {
    /// Independent planes: batch × channels.
    pub planes: usize,
    /// Input spatial sizes (depth, height, width).
    pub input: [usize; 3],
    /// Output spatial sizes.
    pub output: [usize; 3],
    /// Window sizes.
    pub kernel: [usize; 3],
    /// Strides (≥ 1).
    pub stride: [usize; 3],
    /// Padding before (and after) each axis.
    pub pad: [usize; 3],
}

/// One window along one axis: the real input range `[lo, hi)` and the length of the window
/// clipped to the padded input (MXNet's divisor when padding counts).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) lo: usize,
    pub(super) hi: usize,
    pub(super) padded: usize,
}

impl PoolGeom {
    fn in_len(&self) -> usize {
        self.input.iter().product()
    }

    fn out_len(&self) -> usize {
        self.output.iter().product()
    }

    /// The windows of axis `a`, as MXNet clips them: the end at `in + pad` for the divisor,
    /// both ends at the real input for the values read.
    pub(super) fn spans(&self, a: usize) -> Vec<Span> {
        let (input, k, s, p) = (
            self.input[a] as isize,
            self.kernel[a] as isize,
            self.stride[a] as isize,
            self.pad[a] as isize,
        );
        (0..self.output[a] as isize)
            .map(|o| {
                let start = o * s - p;
                let end = (start + k).min(input + p);
                let lo = start.max(0);
                let hi = end.min(input).max(lo);
                Span {
                    lo: lo as usize,
                    hi: hi as usize,
                    padded: (end - start).max(0) as usize,
                }
            })
            .collect()
    }

    /// 2-D 2×2 windows at stride 2 without padding, each inside the input: LeNet-style max
    /// pooling, served by a loop without per-window bookkeeping.
    fn is_max2x2(&self) -> bool {
        self.input[0] == 1
            && self.output[0] == 1
            && self.kernel == [1, 2, 2]
            && self.stride == [1, 2, 2]
            && self.pad == [0, 0, 0]
            && 2 * self.output[1] <= self.input[1]
            && 2 * self.output[2] <= self.input[2]
    }

    fn check(&self, what: &str, pairs: &[(&str, usize, usize)]) -> Result<()> {
        if self.stride.contains(&0) {
            return Err(Error::invalid(
                format!("{what}: stride"),
                "strides >= 1",
                format!("{:?}", self.stride),
            ));
        }
        for &(name, got, want) in pairs {
            if got != want {
                return Err(Error::shape(
                    what,
                    name,
                    format!("{want} values"),
                    format!("{got} values"),
                ));
            }
        }
        Ok(())
    }
}

fn pow_p(v: f32, p: u32) -> f32 {
    match p {
        1 => v,
        2 => v * v,
        _ => v * v * v,
    }
}

fn root_p(v: f32, p: u32) -> f32 {
    match p {
        1 => v,
        2 => v.sqrt(),
        _ => v.cbrt(),
    }
}

/// MXNet's `lp_grad`: `g · (x / y)^(p−1)`, 0 where y is 0 (p ≥ 2).
fn lp_grad(g: f32, x: f32, y: f32, p: u32) -> f32 {
    match p {
        1 => g,
        _ if y == 0.0 => 0.0,
        2 => g * (x / y),
        _ => {
            let r = x / y;
            g * r * r
        }
    }
}

/// Visits the windows of one plane: `f(out_index, z-span, y-span, x-span)`.
fn for_each_window(
    sz: &[Span],
    sy: &[Span],
    sx: &[Span],
    mut f: impl FnMut(usize, &Span, &Span, &Span),
) {
    let mut o = 0;
    for z in sz {
        for y in sy {
            for x in sx {
                f(o, z, y, x);
                o += 1;
            }
        }
    }
}

/// Pooling forward: `y (planes, output)` from `x (planes, input)`.
pub fn pool_forward(g: &PoolGeom, kind: PoolKind, x: &[f32], y: &mut [f32]) -> Result<()> {
    let (il, ol) = (g.in_len(), g.out_len());
    g.check(
        "pooling forward",
        &[
            ("data", x.len(), g.planes * il),
            ("output", y.len(), g.planes * ol),
        ],
    )?;
    if serves(g, kind) {
        pool2d_forward(g, kind, x, y);
        return Ok(());
    }
    let (sz, sy, sx) = (g.spans(0), g.spans(1), g.spans(2));
    let [_, ih, iw] = g.input;
    for_each_row_mut(y, ol, |p, y_p| {
        let x_p = &x[p * il..(p + 1) * il];
        for_each_window(&sz, &sy, &sx, |o, z, yy, xx| {
            let rows =
                (z.lo..z.hi).flat_map(|iz| (yy.lo..yy.hi).map(move |iy| (iz * ih + iy) * iw));
            y_p[o] = match kind {
                PoolKind::Max => {
                    // Padding never wins: only real values are compared (MXNet starts
                    // from the lowest float, which an empty window returns).
                    let mut m = f32::MIN;
                    for iz in z.lo..z.hi {
                        for iy in yy.lo..yy.hi {
                            let r = (iz * ih + iy) * iw;
                            for &v in &x_p[r + xx.lo..r + xx.hi] {
                                // NaN never wins, as in MXNet's `if (v > max)`.
                                m = if v > m { v } else { m };
                            }
                        }
                    }
                    m
                }
                PoolKind::Sum | PoolKind::Avg { .. } => {
                    let s: f32 = rows
                        .map(|r| x_p[r + xx.lo..r + xx.hi].iter().sum::<f32>())
                        .sum();
                    match kind {
                        PoolKind::Avg {
                            count_include_pad: true,
                        } => s / (z.padded * yy.padded * xx.padded) as f32,
                        PoolKind::Avg { .. } => {
                            s / ((z.hi - z.lo) * (yy.hi - yy.lo) * (xx.hi - xx.lo)) as f32
                        }
                        _ => s,
                    }
                }
                PoolKind::Lp(pv) => {
                    let s: f32 = rows
                        .map(|r| {
                            x_p[r + xx.lo..r + xx.hi]
                                .iter()
                                .map(|&v| pow_p(v, pv))
                                .sum::<f32>()
                        })
                        .sum();
                    root_p(s, pv)
                }
            };
        });
    });
    Ok(())
}

/// Pooling backward: `dx (planes, input)` (overwritten) from the input `x`, the forward output
/// `y` and its gradient `dy`. Max pooling routes each window's gradient to the first position
/// (in row-major window order) whose value equals the output, as MXNet does.
pub fn pool_backward(
    g: &PoolGeom,
    kind: PoolKind,
    x: &[f32],
    y: &[f32],
    dy: &[f32],
    dx: &mut [f32],
) -> Result<()> {
    let (il, ol) = (g.in_len(), g.out_len());
    g.check(
        "pooling backward",
        &[
            ("data", x.len(), g.planes * il),
            ("output", y.len(), g.planes * ol),
            ("output gradient", dy.len(), g.planes * ol),
            ("data gradient", dx.len(), g.planes * il),
        ],
    )?;
    if kind == PoolKind::Max && g.is_max2x2() {
        let (iw, ow) = (g.input[2], g.output[2]);
        let covered = 2 * g.output[1] == g.input[1] && 2 * ow == iw;
        for_each_row_mut(dx, il, |p, dx_p| {
            if !covered {
                dx_p.fill(0.0); // rows / columns outside every window
            }
            let x_p = &x[p * il..(p + 1) * il];
            let (y_p, dy_p) = (&y[p * ol..(p + 1) * ol], &dy[p * ol..(p + 1) * ol]);
            // Each window's first position (row-major) holding the maximum gets it all. The
            // windows tile their positions, so each one is written once (no zeroing first).
            let rows = x_p.chunks_exact(2 * iw).zip(dx_p.chunks_exact_mut(2 * iw));
            for (oy, (xr, dr)) in rows.take(g.output[1]).enumerate() {
                let (x0, x1) = xr.split_at(iw);
                let (d0, d1) = dr.split_at_mut(iw);
                let win = x0.chunks_exact(2).zip(x1.chunks_exact(2));
                let out = d0.chunks_exact_mut(2).zip(d1.chunks_exact_mut(2));
                let ys = y_p[oy * ow..(oy + 1) * ow]
                    .iter()
                    .zip(&dy_p[oy * ow..(oy + 1) * ow]);
                for (((u, l), (du, dl)), (&m, &gv)) in win.zip(out).zip(ys) {
                    let a = u[0] == m;
                    let b = !a & (u[1] == m);
                    let c = !(a | b) & (l[0] == m);
                    let d = !(a | b | c) & (l[1] == m);
                    du[0] = if a { gv } else { 0.0 };
                    du[1] = if b { gv } else { 0.0 };
                    dl[0] = if c { gv } else { 0.0 };
                    dl[1] = if d { gv } else { 0.0 };
                }
            }
        });
        return Ok(());
    }
    let (sz, sy, sx) = (g.spans(0), g.spans(1), g.spans(2));
    let [_, ih, iw] = g.input;
    for_each_row_mut(dx, il, |p, dx_p| {
        dx_p.fill(0.0);
        let x_p = &x[p * il..(p + 1) * il];
        let y_p = &y[p * ol..(p + 1) * ol];
        let dy_p = &dy[p * ol..(p + 1) * ol];
        for_each_window(&sz, &sy, &sx, |o, z, yy, xx| {
            let rows =
                (z.lo..z.hi).flat_map(|iz| (yy.lo..yy.hi).map(move |iy| (iz * ih + iy) * iw));
            let gv = dy_p[o];
            match kind {
                PoolKind::Max => {
                    // Scanned backwards with a select instead of a break, so the first match
                    // in window order wins without a data-dependent branch.
                    let target = y_p[o];
                    let mut hit = usize::MAX;
                    for iz in (z.lo..z.hi).rev() {
                        for iy in (yy.lo..yy.hi).rev() {
                            let r = (iz * ih + iy) * iw;
                            for ix in (xx.lo..xx.hi).rev() {
                                hit = if x_p[r + ix] == target { r + ix } else { hit };
                            }
                        }
                    }
                    if let Some(d) = dx_p.get_mut(hit) {
                        *d += gv;
                    }
                }
                PoolKind::Sum | PoolKind::Avg { .. } => {
                    let share = match kind {
                        PoolKind::Avg {
                            count_include_pad: true,
                        } => gv / (z.padded * yy.padded * xx.padded) as f32,
                        PoolKind::Avg { .. } => {
                            gv / ((z.hi - z.lo) * (yy.hi - yy.lo) * (xx.hi - xx.lo)) as f32
                        }
                        _ => gv,
                    };
                    for r in rows {
                        dx_p[r + xx.lo..r + xx.hi]
                            .iter_mut()
                            .for_each(|d| *d += share);
                    }
                }
                PoolKind::Lp(pv) => {
                    let yo = y_p[o];
                    for r in rows {
                        for i in r + xx.lo..r + xx.hi {
                            dx_p[i] += lp_grad(gv, x_p[i], yo, pv);
                        }
                    }
                }
            }
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: usize) -> Vec<f32> {
        // Distinct values (no ties) so max pooling's argmax is unambiguous.
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) / 25.0)
            .collect()
    }

    fn geom(
        input: [usize; 3],
        kernel: [usize; 3],
        stride: [usize; 3],
        pad: [usize; 3],
        conv: PoolConvention,
    ) -> PoolGeom {
        let output =
            [0, 1, 2].map(|a| pool_out_size(input[a], kernel[a], stride[a], pad[a], conv).unwrap());
        PoolGeom {
            planes: 3,
            input,
            output,
            kernel,
            stride,
            pad,
        }
    }

    fn geoms() -> Vec<PoolGeom> {
        use PoolConvention::*;
        vec![
            geom([1, 4, 4], [1, 2, 2], [1, 2, 2], [0; 3], Valid),
            geom([1, 5, 7], [1, 2, 2], [1, 2, 2], [0; 3], Valid), // 2×2 fast path, odd sizes
            geom([1, 5, 5], [1, 3, 3], [1, 1, 1], [0, 1, 1], Valid),
            geom([1, 5, 6], [1, 3, 3], [1, 2, 2], [0; 3], Full),
            geom([1, 6, 5], [1, 3, 2], [1, 2, 2], [0, 1, 1], Full),
            geom([1, 1, 7], [1, 1, 3], [1, 1, 2], [0; 3], Same),
            geom([3, 4, 4], [2, 2, 2], [1, 2, 2], [1, 0, 1], Valid),
            // Row-buffer paths: ceil-mode 3×3 stride 2 (SqueezeNet), 3×3 stride 1 pad 1
            // (Inception's average), wider and uneven windows, windows past the input.
            geom([1, 9, 11], [1, 3, 3], [1, 2, 2], [0; 3], Full),
            geom([1, 20, 37], [1, 3, 3], [1, 2, 2], [0; 3], Full),
            geom([1, 8, 7], [1, 3, 3], [1, 1, 1], [0, 1, 1], Valid),
            geom([1, 5, 40], [1, 3, 3], [1, 1, 1], [0, 1, 1], Valid), // rows of vectors
            geom([1, 10, 13], [1, 3, 3], [1, 2, 2], [0, 1, 1], Full),
            geom([1, 7, 19], [1, 5, 4], [1, 3, 2], [0, 2, 1], Valid),
            geom([1, 6, 6], [1, 4, 4], [1, 4, 4], [0; 3], Full),
            geom([1, 2, 3], [1, 4, 4], [1, 1, 1], [0, 1, 1], Valid),
            geom([1, 3, 3], [1, 3, 3], [1, 1, 1], [0, 1, 1], Same),
            // Global pooling: one window over the plane, shorter and longer than the lanes.
            geom([1, 3, 5], [1, 3, 5], [1; 3], [0; 3], Valid),
            geom([1, 9, 13], [1, 9, 13], [1; 3], [0; 3], Valid),
            geom([1, 2, 2], [1, 4, 4], [1; 3], [0, 1, 1], Valid),
        ]
    }

    /// Naive reference over padded coordinates: every window position in the padded-and-
    /// clipped range, skipping those outside the input.
    fn naive(g: &PoolGeom, kind: PoolKind, x: &[f32]) -> (Vec<f32>, Vec<Vec<(usize, f32)>>) {
        let mut y = Vec::new();
        // For each output: the (input index, d output / d input) pairs.
        let mut jac = Vec::new();
        for p in 0..g.planes {
            for oz in 0..g.output[0] {
                for oy in 0..g.output[1] {
                    for ox in 0..g.output[2] {
                        let o = [oz, oy, ox];
                        let mut cells = Vec::new();
                        let mut padded = 1usize;
                        for (a, &oa) in o.iter().enumerate() {
                            let start = (oa * g.stride[a]) as isize - g.pad[a] as isize;
                            let end = (start + g.kernel[a] as isize)
                                .min((g.input[a] + g.pad[a]) as isize);
                            padded *= (end - start) as usize;
                        }
                        for dz in 0..g.kernel[0] {
                            for dyy in 0..g.kernel[1] {
                                for dxx in 0..g.kernel[2] {
                                    let pos = [
                                        (oz * g.stride[0] + dz) as isize - g.pad[0] as isize,
                                        (oy * g.stride[1] + dyy) as isize - g.pad[1] as isize,
                                        (ox * g.stride[2] + dxx) as isize - g.pad[2] as isize,
                                    ];
                                    if (0..3).all(|a| pos[a] >= 0 && (pos[a] as usize) < g.input[a])
                                    {
                                        let i = ((p * g.input[0] + pos[0] as usize) * g.input[1]
                                            + pos[1] as usize)
                                            * g.input[2]
                                            + pos[2] as usize;
                                        cells.push(i);
                                    }
                                }
                            }
                        }
                        let v: Vec<f32> = cells.iter().map(|&i| x[i]).collect();
                        let (out, grads): (f32, Vec<f32>) = match kind {
                            PoolKind::Max => {
                                let m = v.iter().cloned().fold(f32::MIN, f32::max);
                                let first = v.iter().position(|&t| t == m);
                                (
                                    m,
                                    (0..v.len())
                                        .map(|k| if Some(k) == first { 1.0 } else { 0.0 })
                                        .collect(),
                                )
                            }
                            PoolKind::Sum => (v.iter().sum(), vec![1.0; v.len()]),
                            PoolKind::Avg { count_include_pad } => {
                                let n = if count_include_pad { padded } else { v.len() } as f32;
                                (v.iter().sum::<f32>() / n, vec![1.0 / n; v.len()])
                            }
                            PoolKind::Lp(pv) => {
                                let s: f32 = v.iter().map(|t| t.powi(pv as i32)).sum();
                                let out = s.powf(1.0 / pv as f32);
                                (
                                    out,
                                    v.iter().map(|t| (t / out).powi(pv as i32 - 1)).collect(),
                                )
                            }
                        };
                        y.push(out);
                        jac.push(cells.into_iter().zip(grads).collect());
                    }
                }
            }
        }
        (y, jac)
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            // An empty window that excludes padding divides 0 by 0, in MXNet too.
            let same = (x - y).abs() <= 1e-4 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan());
            assert!(same, "[{i}] {x} vs {y}");
        }
    }

    #[test]
    fn forward_and_backward_match_naive_loops() {
        let kinds = [
            PoolKind::Max,
            PoolKind::Sum,
            PoolKind::Avg {
                count_include_pad: true,
            },
            PoolKind::Avg {
                count_include_pad: false,
            },
            PoolKind::Lp(2),
        ];
        for g in geoms() {
            for kind in kinds {
                let n_in = g.planes * g.in_len();
                let x: Vec<f32> = if kind == PoolKind::Lp(2) {
                    vals(n_in, 2).iter().map(|v| v.abs() + 0.5).collect()
                } else {
                    vals(n_in, 1)
                };
                let mut y = vec![f32::NAN; g.planes * g.out_len()];
                pool_forward(&g, kind, &x, &mut y).unwrap();
                let (want, jac) = naive(&g, kind, &x);
                close(&y, &want);
                let dy = vals(y.len(), 3);
                let mut dx = vec![f32::NAN; n_in];
                pool_backward(&g, kind, &x, &y, &dy, &mut dx).unwrap();
                let mut want_dx = vec![0.0f32; n_in];
                for (o, cells) in jac.iter().enumerate() {
                    for &(i, d) in cells {
                        want_dx[i] += d * dy[o];
                    }
                }
                close(&dx, &want_dx);
            }
        }
    }

    /// A pooling of 32K–128K values splits across the pool only when it runs there (an
    /// inference pass on the pool): the same bits either way, every plane written.
    #[test]
    fn mid_sized_pooling_splits_on_the_pool_with_the_same_bits() {
        let g = PoolGeom {
            planes: 64,
            ..geom(
                [1, 32, 32],
                [1, 3, 3],
                [1, 2, 2],
                [0, 1, 1],
                PoolConvention::Valid,
            )
        };
        let work = g.planes * (g.in_len() + g.out_len());
        assert!((1 << 15..1 << 17).contains(&work), "{work}");
        let x = vals(g.planes * g.in_len(), 4);
        for kind in [
            PoolKind::Max,
            PoolKind::Avg {
                count_include_pad: true,
            },
        ] {
            let mut caller = vec![f32::NAN; g.planes * g.out_len()];
            pool_forward(&g, kind, &x, &mut caller).unwrap();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let mut on_pool = vec![f32::NAN; caller.len()];
            pool.install(|| pool_forward(&g, kind, &x, &mut on_pool))
                .unwrap();
            assert!(caller.iter().all(|v| !v.is_nan()));
            assert_eq!(
                caller.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                on_pool.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    /// Global pooling of many tiny planes (MobileNet-0.25's 2×2 at batch 16, a number of
    /// planes off the task group's size) splits on the pool in groups of planes: every
    /// output is its plane's reduction in order, the same bits on the caller and the pool.
    #[test]
    fn global_pooling_of_tiny_planes_in_groups() {
        let g = PoolGeom {
            planes: 4096 + 37,
            ..geom(
                [1, 2, 2],
                [1, 2, 2],
                [1, 1, 1],
                [0, 0, 0],
                PoolConvention::Valid,
            )
        };
        let x = vals(g.planes * 4, 9);
        for kind in [
            PoolKind::Max,
            PoolKind::Avg {
                count_include_pad: true,
            },
        ] {
            let want: Vec<u32> = x
                .chunks(4)
                .map(|p| match kind {
                    PoolKind::Max => p.iter().fold(f32::MIN, |m, &v| if v > m { v } else { m }),
                    _ => p.iter().fold(0.0f32, |a, &v| a + v) / 4.0,
                })
                .map(f32::to_bits)
                .collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            for on_pool in [false, true] {
                let mut y = vec![f32::NAN; g.planes];
                match on_pool {
                    true => pool.install(|| pool_forward(&g, kind, &x, &mut y)),
                    false => pool_forward(&g, kind, &x, &mut y),
                }
                .unwrap();
                let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{kind:?} on the pool: {on_pool}");
            }
        }
    }

    #[test]
    fn max_ignores_nan_and_ties_agree_on_every_path() {
        use PoolConvention::*;
        let gs = [
            geom([1, 9, 11], [1, 3, 3], [1, 2, 2], [0; 3], Full),
            geom([1, 8, 7], [1, 3, 3], [1, 1, 1], [0, 1, 1], Valid),
            geom([1, 5, 40], [1, 3, 3], [1, 1, 1], [0, 1, 1], Valid), // rows of vectors
            geom([1, 9, 13], [1, 9, 13], [1; 3], [0; 3], Valid),
            geom([3, 4, 4], [2, 2, 2], [1, 2, 2], [1, 0, 1], Valid),
        ];
        for g in gs {
            let n = g.planes * g.in_len();
            // Few distinct values (ties everywhere), a NaN every 5th position (also first in
            // windows and planes), and one plane all NaN but its last value.
            let mut x: Vec<f32> = (0..n)
                .map(|i| {
                    if i % 5 == 0 {
                        f32::NAN
                    } else {
                        (i % 3) as f32 - 1.0
                    }
                })
                .collect();
            x[..g.in_len() - 1].fill(f32::NAN);
            let mut y = vec![0.0; g.planes * g.out_len()];
            pool_forward(&g, PoolKind::Max, &x, &mut y).unwrap();
            let (want, _) = naive(&g, PoolKind::Max, &x);
            assert!(y.iter().all(|v| !v.is_nan()), "{g:?}");
            assert_eq!(y, want, "{g:?}");
        }
    }

    #[test]
    fn max_ties_go_to_the_first_position_and_sizes_follow_conventions() {
        let g = geom([1, 2, 2], [1, 2, 2], [1; 3], [0; 3], PoolConvention::Valid);
        let g = PoolGeom { planes: 1, ..g };
        let x = [1.0, 3.0, 3.0, 2.0];
        let mut y = [0.0];
        pool_forward(&g, PoolKind::Max, &x, &mut y).unwrap();
        let mut dx = [0.0; 4];
        pool_backward(&g, PoolKind::Max, &x, &y, &[5.0], &mut dx).unwrap();
        assert_eq!(dx, [0.0, 5.0, 0.0, 0.0]);
        use PoolConvention::*;
        assert_eq!(pool_out_size(7, 3, 2, 0, Valid), Some(3));
        assert_eq!(pool_out_size(8, 3, 2, 0, Full), Some(4));
        assert_eq!(pool_out_size(8, 3, 2, 0, Valid), Some(3));
        assert_eq!(pool_out_size(7, 3, 2, 0, Same), Some(4));
        assert_eq!(pool_out_size(2, 3, 1, 0, Valid), None);
        assert!(pool_forward(&g, PoolKind::Max, &x[..3], &mut y).is_err());
    }
}
