//! Convolution kernels over contiguous NC(D)(H)W slices: `im2col` / `col2im`, and the forward,
//! data-gradient and weight-gradient passes built on them and the GEMM door (Deconvolution
//! uses the same three passes with the roles of forward and data gradient swapped).

use super::gemm::{gemm, MatRef};
use super::par::SERIAL_BELOW;
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Samples whose weight-gradient contributions are summed in one partial buffer. Fixed (not
/// derived from the thread count) so the partials, combined in order, give the same bits on
/// any machine.
const WGRAD_SAMPLES: usize = 4;

/// The geometry of a (grouped, strided, dilated, padded) convolution over up to three spatial
/// axes. Fewer axes are expressed with leading sizes of 1 (kernel 1, stride 1, pad 0), so 1-D
/// and 2-D convolutions are 3-D ones with a trivial depth (and height).
///
/// The "image" side has `channels` channels of spatial size `input`; the "column" side has
/// `filters` channels of spatial size `output`. Convolution maps image → columns; its
/// transpose (the data gradient, and Deconvolution's forward) maps columns → image. The
/// weight is `(filters, channels / groups, *kernel)` in both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    /// Number of samples.
    pub batch: usize,
    /// Image-side channels (Convolution's input channels).
    pub channels: usize,
    /// Column-side channels (Convolution's `num_filter`).
    pub filters: usize,
    /// Channel groups; divides both `channels` and `filters`.
    pub groups: usize,
    /// Image spatial sizes (depth, height, width).
    pub input: [usize; 3],
    /// Column-side spatial sizes.
    pub output: [usize; 3],
    /// Kernel sizes.
    pub kernel: [usize; 3],
    /// Strides (≥ 1).
    pub stride: [usize; 3],
    /// Dilations (≥ 1).
    pub dilate: [usize; 3],
    /// Zero padding on both sides of each axis.
    pub pad: [usize; 3],
}

/// The output size of a convolution along one axis, or `None` when the dilated kernel does
/// not fit into the padded input (or stride / dilation is 0).
pub fn conv_out_size(
    input: usize,
    kernel: usize,
    stride: usize,
    dilate: usize,
    pad: usize,
) -> Option<usize> {
    if stride == 0 || dilate == 0 || kernel == 0 {
        return None;
    }
    let span = dilate * (kernel - 1) + 1;
    let padded = input + 2 * pad;
    (padded >= span).then(|| (padded - span) / stride + 1)
}

impl ConvGeom {
    /// Spatial size of one image channel.
    pub fn in_len(&self) -> usize {
        self.input.iter().product()
    }

    /// Spatial size of one column-side channel.
    pub fn out_len(&self) -> usize {
        self.output.iter().product()
    }

    /// Values in one kernel window (per channel).
    pub fn kernel_len(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Rows of the column matrix of one sample: channels × kernel window.
    pub fn col_rows(&self) -> usize {
        self.channels * self.kernel_len()
    }

    /// Values of the weight.
    pub fn weight_len(&self) -> usize {
        self.filters * self.channels_per_group() * self.kernel_len()
    }

    fn channels_per_group(&self) -> usize {
        self.channels / self.groups.max(1)
    }

    fn filters_per_group(&self) -> usize {
        self.filters / self.groups.max(1)
    }

    /// A 1×1 kernel with stride 1 and no padding: the column matrix is the image itself.
    fn is_pointwise(&self) -> bool {
        self.kernel == [1, 1, 1]
            && self.stride == [1, 1, 1]
            && self.pad == [0, 0, 0]
            && self.input == self.output
    }

    /// Whether batch-parallel work pays for itself (a rough multiply-add count).
    fn parallel(&self) -> bool {
        self.batch > 1
            && self.filters
                * self.channels_per_group()
                * self.kernel_len()
                * self.out_len()
                * self.batch
                >= SERIAL_BELOW
    }

    fn validate(&self) -> Result<()> {
        let ok = self.groups >= 1
            && self.channels % self.groups == 0
            && self.filters % self.groups == 0
            && self.stride.iter().all(|&s| s >= 1)
            && self.dilate.iter().all(|&d| d >= 1);
        if ok {
            Ok(())
        } else {
            Err(Error::invalid(
                "conv kernel: geometry",
                "groups dividing channels and filters, strides and dilations >= 1",
                format!("{self:?}"),
            ))
        }
    }

    fn check_len(&self, what: &str, got: usize, want: usize) -> Result<()> {
        if got == want {
            Ok(())
        } else {
            Err(Error::shape(
                "conv kernel",
                what,
                format!("{want} values"),
                format!("{got} values"),
            ))
        }
    }
}

/// The range `[lo, hi)` of output positions along one axis whose tap at kernel offset
/// `offset` (already dilated) lands inside the input of size `input`.
fn valid_range(
    out: usize,
    stride: usize,
    offset: usize,
    pad: usize,
    input: usize,
) -> (usize, usize) {
    // position = o·stride + offset − pad must lie in [0, input).
    let lo = if pad > offset {
        (pad - offset).div_ceil(stride)
    } else {
        0
    };
    let hi = if input + pad > offset {
        ((input + pad - offset - 1) / stride + 1).min(out)
    } else {
        0
    };
    (lo.min(hi), hi)
}

/// Walks the column matrix row by row (channel × kernel tap) and, within a row, output row by
/// output row, saying which input row feeds each one: the shared loop of `im2col` and
/// `col2im`, so the two stay exact transposes.
struct Taps<'g> {
    g: &'g ConvGeom,
}

/// One output row of one kernel tap: where it lives in the column matrix and which input
/// row (if any) feeds it.
struct TapRow {
    /// Offset of this output row in the column matrix.
    col: usize,
    /// Offset of the first input value of the row in the image (valid when `src` is true).
    img: usize,
    /// Whether the input row exists (false: padding).
    src: bool,
    /// Valid output range `[lo, hi)` within the row.
    lo: usize,
    hi: usize,
    /// Input offset of output position `lo`.
    first: usize,
}

impl Taps<'_> {
    fn for_each(&self, mut f: impl FnMut(&TapRow)) {
        let g = self.g;
        let [id, ih, iw] = g.input;
        let [od, oh, ow] = g.output;
        let [kd, kh, kw] = g.kernel;
        let [sd, sh, sw] = g.stride;
        let [dd, dh, dw] = g.dilate;
        let [pd, ph, pw] = g.pad;
        let in_len = g.in_len();
        let l = g.out_len();
        let mut row = 0;
        for c in 0..g.channels {
            let plane = c * in_len;
            for a in 0..kd {
                for b in 0..kh {
                    for e in 0..kw {
                        let (lo, hi) = valid_range(ow, sw, e * dw, pw, iw);
                        let first = (lo * sw + e * dw).saturating_sub(pw);
                        for z in 0..od {
                            let iz = (z * sd + a * dd) as isize - pd as isize;
                            for y in 0..oh {
                                let iy = (y * sh + b * dh) as isize - ph as isize;
                                let src =
                                    iz >= 0 && (iz as usize) < id && iy >= 0 && (iy as usize) < ih;
                                let img = if src {
                                    plane + ((iz as usize) * ih + iy as usize) * iw
                                } else {
                                    0
                                };
                                f(&TapRow {
                                    col: row * l + (z * oh + y) * ow,
                                    img,
                                    src,
                                    lo,
                                    hi,
                                    first,
                                });
                            }
                        }
                        row += 1;
                    }
                }
            }
        }
    }
}

/// Unfolds one sample's image (`channels × input`) into its column matrix
/// (`channels·kernel × output`, row-major): entry (c·K + tap, position) is the input value the
/// tap sees at that output position, 0 in the padding.
pub fn im2col(g: &ConvGeom, img: &[f32], cols: &mut [f32]) -> Result<()> {
    g.validate()?;
    g.check_len("im2col: image", img.len(), g.channels * g.in_len())?;
    g.check_len("im2col: columns", cols.len(), g.col_rows() * g.out_len())?;
    let (ow, iw, sw) = (g.output[2], g.input[2], g.stride[2]);
    Taps { g }.for_each(|t| {
        let dst = &mut cols[t.col..t.col + ow];
        if !t.src || t.lo >= t.hi {
            dst.fill(0.0);
            return;
        }
        dst[..t.lo].fill(0.0);
        dst[t.hi..].fill(0.0);
        let src = &img[t.img..t.img + iw];
        let n = t.hi - t.lo;
        if sw == 1 {
            dst[t.lo..t.hi].copy_from_slice(&src[t.first..t.first + n]);
        } else {
            dst[t.lo..t.hi]
                .iter_mut()
                .zip(src[t.first..].iter().step_by(sw))
                .for_each(|(d, s)| *d = *s);
        }
    });
    Ok(())
}

/// The transpose of [`im2col`]: adds every column-matrix entry into the image value it was
/// read from (padding entries are dropped). `img` is accumulated into, not overwritten.
pub fn col2im(g: &ConvGeom, cols: &[f32], img: &mut [f32]) -> Result<()> {
    g.validate()?;
    g.check_len("col2im: image", img.len(), g.channels * g.in_len())?;
    g.check_len("col2im: columns", cols.len(), g.col_rows() * g.out_len())?;
    let (iw, sw) = (g.input[2], g.stride[2]);
    Taps { g }.for_each(|t| {
        if !t.src || t.lo >= t.hi {
            return;
        }
        let src = &cols[t.col + t.lo..t.col + t.hi];
        let dst = &mut img[t.img..t.img + iw];
        if sw == 1 {
            dst[t.first..t.first + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, s)| *d += *s);
        } else {
            dst[t.first..]
                .iter_mut()
                .step_by(sw)
                .zip(src)
                .for_each(|(d, s)| *d += *s);
        }
    });
    Ok(())
}

/// Runs `f(sample, out_sample)` over the samples of `out` (`row_len` values each), in
/// parallel when `parallel`; the first error wins.
fn per_sample(
    out: &mut [f32],
    row_len: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [f32]) -> Result<()> + Sync + Send,
) -> Result<()> {
    if row_len == 0 {
        return Ok(());
    }
    if parallel {
        out.par_chunks_mut(row_len)
            .enumerate()
            .try_for_each(|(n, r)| f(n, r))
    } else {
        out.chunks_mut(row_len)
            .enumerate()
            .try_for_each(|(n, r)| f(n, r))
    }
}

/// Convolution forward: `y (batch, filters, output) = W ⊛ x (batch, channels, input)`, plus
/// `bias (filters,)` when given. Each sample is unfolded with [`im2col`] into its own buffer
/// and multiplied by each group's weight block through GEMM; samples run in parallel.
pub fn conv_forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) -> Result<()> {
    g.validate()?;
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    g.check_len("conv forward: data", x.len(), g.batch * c * il)?;
    g.check_len("conv forward: weight", w.len(), g.weight_len())?;
    g.check_len("conv forward: output", y.len(), g.batch * f * l)?;
    if let Some(b) = bias {
        g.check_len("conv forward: bias", b.len(), f)?;
    }
    let (fg, ck) = (
        g.filters_per_group(),
        g.channels_per_group() * g.kernel_len(),
    );
    let pointwise = g.is_pointwise();
    per_sample(y, f * l, g.parallel(), |n, y_n| {
        let x_n = &x[n * c * il..(n + 1) * c * il];
        let buf;
        let cols: &[f32] = if pointwise {
            x_n
        } else {
            let mut b = vec![0.0f32; g.col_rows() * l];
            im2col(g, x_n, &mut b)?;
            buf = b;
            &buf
        };
        if let Some(b) = bias {
            y_n.chunks_mut(l.max(1))
                .zip(b)
                .for_each(|(row, v)| row.fill(*v));
        }
        for grp in 0..g.groups {
            gemm(
                MatRef::row_major(&w[grp * fg * ck..(grp + 1) * fg * ck], fg, ck),
                MatRef::row_major(&cols[grp * ck * l..(grp + 1) * ck * l], ck, l),
                &mut y_n[grp * fg * l..(grp + 1) * fg * l],
                bias.is_some(),
            )?;
        }
        Ok(())
    })
}

/// The transpose of [`conv_forward`] without bias: `dx (batch, channels, input)` from
/// `dy (batch, filters, output)` — the data gradient of Convolution and the forward pass of
/// Deconvolution. Per sample: columns = Wᵀ·dy through GEMM, then [`col2im`]. `dx` is
/// overwritten.
pub fn conv_backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) -> Result<()> {
    g.validate()?;
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    g.check_len(
        "conv data gradient: output gradient",
        dy.len(),
        g.batch * f * l,
    )?;
    g.check_len("conv data gradient: weight", w.len(), g.weight_len())?;
    g.check_len(
        "conv data gradient: data gradient",
        dx.len(),
        g.batch * c * il,
    )?;
    let (fg, ck) = (
        g.filters_per_group(),
        g.channels_per_group() * g.kernel_len(),
    );
    let pointwise = g.is_pointwise();
    per_sample(dx, c * il, g.parallel(), |n, dx_n| {
        let dy_n = &dy[n * f * l..(n + 1) * f * l];
        let mut buf = if pointwise {
            Vec::new()
        } else {
            vec![0.0f32; g.col_rows() * l]
        };
        let cols: &mut [f32] = if pointwise { &mut *dx_n } else { &mut buf };
        for grp in 0..g.groups {
            gemm(
                MatRef::row_major(&w[grp * fg * ck..(grp + 1) * fg * ck], fg, ck).t(),
                MatRef::row_major(&dy_n[grp * fg * l..(grp + 1) * fg * l], fg, l),
                &mut cols[grp * ck * l..(grp + 1) * ck * l],
                false,
            )?;
        }
        if !pointwise {
            dx_n.fill(0.0);
            col2im(g, &buf, dx_n)?;
        }
        Ok(())
    })
}

/// The weight gradient of [`conv_forward`]: `dw = Σ_n dy_n · im2col(x_n)ᵀ` per group, written
/// (not accumulated) into `dw (filters, channels/groups, *kernel)`. Samples are summed in
/// fixed groups of `WGRAD_SAMPLES` (in parallel) whose partial sums are then added in
/// sample order, so the result does not depend on the thread count.
pub fn conv_backward_weight(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32]) -> Result<()> {
    g.validate()?;
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    g.check_len("conv weight gradient: data", x.len(), g.batch * c * il)?;
    g.check_len(
        "conv weight gradient: output gradient",
        dy.len(),
        g.batch * f * l,
    )?;
    g.check_len(
        "conv weight gradient: weight gradient",
        dw.len(),
        g.weight_len(),
    )?;
    let (fg, ck) = (
        g.filters_per_group(),
        g.channels_per_group() * g.kernel_len(),
    );
    let pointwise = g.is_pointwise();
    let chunk = |ci: usize, acc: &mut [f32]| -> Result<()> {
        let mut buf = if pointwise {
            Vec::new()
        } else {
            vec![0.0f32; g.col_rows() * l]
        };
        let first = ci * WGRAD_SAMPLES;
        for n in first..(first + WGRAD_SAMPLES).min(g.batch) {
            let x_n = &x[n * c * il..(n + 1) * c * il];
            let dy_n = &dy[n * f * l..(n + 1) * f * l];
            let cols: &[f32] = if pointwise {
                x_n
            } else {
                im2col(g, x_n, &mut buf)?;
                &buf
            };
            for grp in 0..g.groups {
                gemm(
                    MatRef::row_major(&dy_n[grp * fg * l..(grp + 1) * fg * l], fg, l),
                    MatRef::row_major(&cols[grp * ck * l..(grp + 1) * ck * l], ck, l).t(),
                    &mut acc[grp * fg * ck..(grp + 1) * fg * ck],
                    n > first,
                )?;
            }
        }
        Ok(())
    };
    let chunks = g.batch.div_ceil(WGRAD_SAMPLES);
    if chunks == 0 {
        dw.fill(0.0);
        return Ok(());
    }
    if chunks == 1 || !g.parallel() {
        // Same grouping as the parallel path: chunk 0 straight into dw, later chunks added.
        chunk(0, dw)?;
        let mut part = vec![0.0f32; dw.len()];
        for ci in 1..chunks {
            chunk(ci, &mut part)?;
            dw.iter_mut().zip(&part).for_each(|(d, p)| *d += *p);
        }
        return Ok(());
    }
    let parts: Vec<Vec<f32>> = (0..chunks)
        .into_par_iter()
        .map(|ci| {
            let mut part = vec![0.0f32; dw.len()];
            chunk(ci, &mut part).map(|_| part)
        })
        .collect::<Result<_>>()?;
    let mut it = parts.iter();
    if let Some(p0) = it.next() {
        dw.copy_from_slice(p0);
    }
    for p in it {
        dw.iter_mut().zip(p).for_each(|(d, v)| *d += *v);
    }
    Ok(())
}

/// Adds `bias[c]` to every value of channel `c` of `y (batch, channels, spatial)`.
pub fn add_channel_bias(
    y: &mut [f32],
    channels: usize,
    spatial: usize,
    bias: &[f32],
) -> Result<()> {
    if bias.len() != channels || (channels * spatial > 0 && y.len() % (channels * spatial) != 0) {
        return Err(Error::shape(
            "conv kernel",
            "bias",
            format!(
                "{channels} values, output a multiple of {}",
                channels * spatial
            ),
            format!("{} values, output {}", bias.len(), y.len()),
        ));
    }
    if spatial == 0 {
        return Ok(());
    }
    for (i, row) in y.chunks_mut(spatial).enumerate() {
        let b = bias[i % channels];
        row.iter_mut().for_each(|v| *v += b);
    }
    Ok(())
}

/// The bias gradient: `db[c] = Σ over samples and positions of dy (batch, channels, spatial)`,
/// summed sample by sample in order (deterministic).
pub fn channel_sums(dy: &[f32], channels: usize, spatial: usize) -> Result<Vec<f32>> {
    let mut db = vec![0.0f32; channels];
    if channels * spatial == 0 {
        return Ok(db);
    }
    if dy.len() % (channels * spatial) != 0 {
        return Err(Error::shape(
            "conv kernel",
            "bias gradient",
            format!("a multiple of {}", channels * spatial),
            dy.len(),
        ));
    }
    for (i, row) in dy.chunks(spatial).enumerate() {
        db[i % channels] += row.iter().sum::<f32>();
    }
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 8.0)
            .collect()
    }

    /// Naive convolution: y[n, f, o] = Σ_{c in group, k} w[f, c, k] · x[n, c, o·s + k·d − p].
    fn naive_forward(g: &ConvGeom, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
        let (cg, fg) = (g.channels / g.groups, g.filters / g.groups);
        let [id, ih, iw] = g.input;
        let [od, oh, ow] = g.output;
        let [kd, kh, kw] = g.kernel;
        let mut y = vec![0.0f32; g.batch * g.filters * g.out_len()];
        for n in 0..g.batch {
            for f in 0..g.filters {
                let grp = f / fg;
                for z in 0..od {
                    for yy in 0..oh {
                        for xx in 0..ow {
                            let mut s = b.map_or(0.0, |b| b[f]);
                            for ci in 0..cg {
                                let c = grp * cg + ci;
                                for a in 0..kd {
                                    for bb in 0..kh {
                                        for e in 0..kw {
                                            let pz = (z * g.stride[0] + a * g.dilate[0]) as isize
                                                - g.pad[0] as isize;
                                            let py = (yy * g.stride[1] + bb * g.dilate[1]) as isize
                                                - g.pad[1] as isize;
                                            let px = (xx * g.stride[2] + e * g.dilate[2]) as isize
                                                - g.pad[2] as isize;
                                            if pz < 0
                                                || py < 0
                                                || px < 0
                                                || pz as usize >= id
                                                || py as usize >= ih
                                                || px as usize >= iw
                                            {
                                                continue;
                                            }
                                            let xi =
                                                ((n * g.channels + c) * id + pz as usize) * ih * iw
                                                    + py as usize * iw
                                                    + px as usize;
                                            let wi = (((f * cg + ci) * kd + a) * kh + bb) * kw + e;
                                            s += w[wi] * x[xi];
                                        }
                                    }
                                }
                            }
                            y[((n * g.filters + f) * od + z) * oh * ow + yy * ow + xx] = s;
                        }
                    }
                }
            }
        }
        y
    }

    fn geoms() -> Vec<ConvGeom> {
        let mk = |batch,
                  channels,
                  filters,
                  groups,
                  input: [usize; 3],
                  kernel: [usize; 3],
                  stride: [usize; 3],
                  dilate: [usize; 3],
                  pad: [usize; 3]| {
            let output = [0, 1, 2]
                .map(|i| conv_out_size(input[i], kernel[i], stride[i], dilate[i], pad[i]).unwrap());
            ConvGeom {
                batch,
                channels,
                filters,
                groups,
                input,
                output,
                kernel,
                stride,
                dilate,
                pad,
            }
        };
        vec![
            mk(2, 3, 4, 1, [1, 5, 6], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
            mk(
                2,
                2,
                3,
                1,
                [1, 7, 5],
                [1, 3, 2],
                [1, 2, 2],
                [1; 3],
                [0, 1, 0],
            ),
            mk(
                1,
                4,
                6,
                2,
                [1, 5, 5],
                [1, 3, 3],
                [1; 3],
                [1, 2, 2],
                [0, 2, 1],
            ),
            mk(
                3,
                2,
                2,
                1,
                [1, 1, 9],
                [1, 1, 3],
                [1, 1, 2],
                [1; 3],
                [0, 0, 1],
            ),
            mk(2, 3, 2, 1, [1, 4, 4], [1; 3], [1; 3], [1; 3], [0; 3]),
            mk(
                1,
                2,
                2,
                2,
                [3, 4, 4],
                [2, 2, 3],
                [1, 2, 1],
                [1; 3],
                [1, 0, 1],
            ),
            mk(5, 1, 2, 1, [1, 3, 3], [1, 3, 3], [1; 3], [1; 3], [0, 2, 2]),
        ]
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "[{i}] {x} vs {y}");
        }
    }

    #[test]
    fn forward_matches_naive_loops() {
        for g in geoms() {
            let x = vals(g.batch * g.channels * g.in_len(), 1);
            let w = vals(g.weight_len(), 2);
            let b = vals(g.filters, 3);
            let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
            conv_forward(&g, &x, &w, Some(&b), &mut y).unwrap();
            close(&y, &naive_forward(&g, &x, &w, Some(&b)));
            conv_forward(&g, &x, &w, None, &mut y).unwrap();
            close(&y, &naive_forward(&g, &x, &w, None));
        }
    }

    /// The backward passes are the transposes of the (linear) forward: checks
    /// <conv(x), dy> = <x, conv_backward_data(dy)> = <w, conv_backward_weight(x, dy)> against
    /// the naive forward, and the weight gradient entrywise against naive sums.
    #[test]
    fn backward_matches_naive_transposes() {
        for g in geoms() {
            let x = vals(g.batch * g.channels * g.in_len(), 4);
            let w = vals(g.weight_len(), 5);
            let dy = vals(g.batch * g.filters * g.out_len(), 6);
            let mut dx = vec![f32::NAN; x.len()];
            conv_backward_data(&g, &dy, &w, &mut dx).unwrap();
            // dx[i] = d<naive(x, w), dy>/dx[i]: probe with unit vectors.
            let mut want_dx = vec![0.0f32; x.len()];
            for (i, wd) in want_dx.iter_mut().enumerate() {
                let mut e = vec![0.0f32; x.len()];
                e[i] = 1.0;
                *wd = naive_forward(&g, &e, &w, None)
                    .iter()
                    .zip(&dy)
                    .map(|(a, b)| a * b)
                    .sum();
            }
            close(&dx, &want_dx);
            let mut dw = vec![f32::NAN; w.len()];
            conv_backward_weight(&g, &x, &dy, &mut dw).unwrap();
            let mut want_dw = vec![0.0f32; w.len()];
            for (i, wd) in want_dw.iter_mut().enumerate() {
                let mut e = vec![0.0f32; w.len()];
                e[i] = 1.0;
                *wd = naive_forward(&g, &x, &e, None)
                    .iter()
                    .zip(&dy)
                    .map(|(a, b)| a * b)
                    .sum();
            }
            close(&dw, &want_dw);
        }
    }

    #[test]
    fn col2im_is_the_transpose_of_im2col() {
        for mut g in geoms() {
            g.batch = 1;
            let img = vals(g.channels * g.in_len(), 7);
            let cols_in = vals(g.col_rows() * g.out_len(), 8);
            let mut cols = vec![f32::NAN; cols_in.len()];
            im2col(&g, &img, &mut cols).unwrap();
            let mut back = vec![0.0f32; img.len()];
            col2im(&g, &cols_in, &mut back).unwrap();
            let lhs: f64 = cols.iter().zip(&cols_in).map(|(a, b)| (a * b) as f64).sum();
            let rhs: f64 = img.iter().zip(&back).map(|(a, b)| (a * b) as f64).sum();
            assert!((lhs - rhs).abs() < 1e-3, "{lhs} vs {rhs}");
        }
    }

    #[test]
    fn bias_helpers_and_bad_lengths() {
        let mut y = vec![0.0f32; 2 * 3 * 2];
        add_channel_bias(&mut y, 3, 2, &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(y, vec![1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.]);
        assert_eq!(channel_sums(&y, 3, 2).unwrap(), vec![4.0, 8.0, 12.0]);
        let g = geoms()[0];
        let mut y = vec![0.0f32; 3];
        assert!(conv_forward(&g, &[0.0; 2], &[0.0; 2], None, &mut y).is_err());
        assert!(conv_out_size(2, 5, 1, 1, 1).is_none());
        assert_eq!(conv_out_size(28, 5, 1, 1, 0), Some(24));
        assert_eq!(conv_out_size(7, 3, 2, 2, 2), Some(4));
    }
}
