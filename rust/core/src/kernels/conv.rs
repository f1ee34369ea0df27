//! Convolution kernels over contiguous NC(D)(H)W slices: `im2col` / `col2im`, and the forward,
//! data-gradient and weight-gradient passes built on them and the GEMM door (Deconvolution
//! uses the same three passes with the roles of forward and data gradient swapped).

pub use super::conv_packed::{conv_forward_packed, packs_weight};
pub use super::conv_tiled::{conv_forward_tiled, tiles_mapped, tiles_weight, InputMap};
use super::conv_trim::Trimmed;
use super::depthwise::{depthwise_backward_data, depthwise_backward_weight, depthwise_forward};
use super::gemm::{gemm_split, MatRef};
use super::par::{on_pool_threshold, serial_below};
use super::scratch::Scratch;
use super::tuning::{CONV_BLOCK_VALUES, CONV_GEMM_PARALLEL_ABOVE};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::ops::Range;

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

    pub(super) fn channels_per_group(&self) -> usize {
        self.channels / self.groups.max(1)
    }

    pub(super) fn filters_per_group(&self) -> usize {
        self.filters / self.groups.max(1)
    }

    /// A 2-D (or 1-D) convolution without padding, with stride and dilation 1: each output
    /// row of a kernel tap reads one contiguous run of input.
    pub(super) fn is_plain_2d(&self) -> bool {
        self.input[0] == 1
            && self.kernel[0] == 1
            && self.output[0] == 1
            && self.stride == [1, 1, 1]
            && self.dilate == [1, 1, 1]
            && self.pad == [0, 0, 0]
            && self.output[2] > 0
    }

    /// A 1×1 convolution without padding, stride or dilation: one sample's column matrix is
    /// its input as it is.
    pub(super) fn is_pointwise(&self) -> bool {
        self.is_plain_2d() && self.kernel == [1, 1, 1]
    }

    /// A 2-D (or 1-D) depthwise convolution: one filter per channel, each seeing only its own
    /// channel (MobileNet's 3×3 layers). Im2col + one GEMM per group would run a product of
    /// one row per channel; [`depthwise_forward`] and its two transposes loop directly.
    pub(super) fn is_depthwise_2d(&self) -> bool {
        self.groups == self.channels
            && self.filters == self.channels
            && self.input[0] == 1
            && self.kernel[0] == 1
            && self.output[0] == 1
            && self.output[2] > 0
    }

    /// Runs `sample((n, y_n), inner)` over each sample's `(filters, out_len)` block of the
    /// output `y`: side by side on the pool when [`ConvGeom::parallel`] (`inner` false: each
    /// sample on one thread), else in turn (`inner` true: a sample may split its own work).
    pub(super) fn per_sample(
        &self,
        y: &mut [f32],
        sample: impl Fn((usize, &mut [f32]), bool) -> Result<()> + Sync + Send,
    ) -> Result<()> {
        let block = (self.filters * self.out_len()).max(1);
        if self.parallel() {
            y.par_chunks_mut(block)
                .enumerate()
                .try_for_each(|s| sample(s, false))
        } else {
            y.chunks_mut(block)
                .enumerate()
                .try_for_each(|s| sample(s, true))
        }
    }

    /// Whether batch-parallel work pays for itself (a rough multiply-add count).
    pub(super) fn parallel(&self) -> bool {
        self.batch > 1
            && self.filters
                * self.channels_per_group()
                * self.kernel_len()
                * self.out_len()
                * self.batch
                >= serial_below()
    }

    pub(super) fn validate(&self) -> Result<()> {
        let ok = self.groups >= 1
            && self.channels.is_multiple_of(self.groups)
            && self.filters.is_multiple_of(self.groups)
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

    pub(super) fn check_len(&self, what: &str, got: usize, want: usize) -> Result<()> {
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
pub(super) fn valid_range(
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

/// Which input row feeds each output row of each kernel tap: the shared table of `im2col`
/// and `col2im`, so the two stay exact transposes. It is made once per call: it depends
/// neither on the sample nor on the channel (a channel only moves the image offset by its
/// plane), so the per-row bookkeeping is not repeated for every channel and sample.
struct TapTable {
    /// `kernel_len` runs of `od · oh` rows, tap by tap.
    rows: Vec<TapRow>,
    /// Output rows per tap (`od · oh`).
    per_tap: usize,
    kernel_len: usize,
    in_len: usize,
}

/// One output row of one kernel tap: where it lives in the tap's row of the column matrix
/// and which input row (if any) feeds it.
struct TapRow {
    /// Offset of this output row within the sample's `out_len` positions.
    pos: usize,
    /// Offset of the first input value of the row in its channel's plane (valid when `src`).
    img: usize,
    /// Whether the input row exists and some output of the row sees it (false: padding).
    src: bool,
    /// Valid output range `[lo, hi)` within the row.
    lo: usize,
    hi: usize,
    /// Input offset of output position `lo`.
    first: usize,
}

impl TapTable {
    fn new(g: &ConvGeom) -> TapTable {
        let [id, ih, iw] = g.input;
        let [od, oh, ow] = g.output;
        let [_, kh, kw] = g.kernel;
        let [sd, sh, sw] = g.stride;
        let [dd, dh, dw] = g.dilate;
        let [pd, ph, pw] = g.pad;
        let mut rows = Vec::with_capacity(g.kernel_len() * od * oh);
        for tap in 0..g.kernel_len() {
            let (a, b, e) = (tap / (kh * kw), tap / kw % kh, tap % kw);
            let (lo, hi) = valid_range(ow, sw, e * dw, pw, iw);
            let first = (lo * sw + e * dw).saturating_sub(pw);
            for z in 0..od {
                let iz = (z * sd + a * dd) as isize - pd as isize;
                for y in 0..oh {
                    let iy = (y * sh + b * dh) as isize - ph as isize;
                    let src =
                        lo < hi && iz >= 0 && (iz as usize) < id && iy >= 0 && (iy as usize) < ih;
                    let img = if src {
                        ((iz as usize) * ih + iy as usize) * iw
                    } else {
                        0
                    };
                    rows.push(TapRow {
                        pos: (z * oh + y) * ow,
                        img,
                        src,
                        lo,
                        hi,
                        first,
                    });
                }
            }
        }
        TapTable {
            rows,
            per_tap: od * oh,
            kernel_len: g.kernel_len(),
            in_len: g.in_len(),
        }
    }

    /// The output rows of column-matrix row `r` (channel `r / kernel_len`, tap
    /// `r % kernel_len`) and the offset of that channel's plane in a sample's image.
    fn row(&self, r: usize) -> (&[TapRow], usize) {
        let (c, tap) = (r / self.kernel_len, r % self.kernel_len);
        (
            &self.rows[tap * self.per_tap..(tap + 1) * self.per_tap],
            c * self.in_len,
        )
    }
}

/// Partial sums of the weight gradient, each over every `WEIGHT_LANES`-th block: few enough
/// that adding them up is cheap, enough to keep the threads busy. Fixed (not the thread
/// count), so the gradient has the same bits on any machine.
const WEIGHT_LANES: usize = 4;

/// The batch cut into blocks of consecutive samples whose columns stay under
/// [`CONV_BLOCK_VALUES`] or the weight's size, whichever is larger (one sample per block at
/// least), sizes differing by at most one. The cut depends only on the geometry, so sums over
/// blocks combine the same way on any machine.
fn blocks(g: &ConvGeom) -> Vec<Range<usize>> {
    cut_batch(g, 1)
}

/// [`blocks`] with at least `min_count` blocks (as many as there are samples, at most).
fn cut_batch(g: &ConvGeom, min_count: usize) -> Vec<Range<usize>> {
    let per = (g.col_rows() * g.out_len()).max(1);
    let cap = CONV_BLOCK_VALUES.max(g.weight_len());
    let count = g
        .batch
        .div_ceil((cap / per).max(1))
        .max(min_count.min(g.batch))
        .max(1);
    (0..count)
        .map(|i| i * g.batch / count..(i + 1) * g.batch / count)
        .collect()
}

/// The least number of blocks a pass that writes each block's output alone (forward, data
/// gradient) cuts the batch into: one per thread when the weight is small enough for every
/// thread to stream all of it, so the threads meet once per layer instead of around each
/// product they would otherwise split (MobileNet at batch 16: 128 → 128 over 4×4 positions
/// took 60 µs with the product split, 39 µs with the samples split).
fn blocks_per_thread(g: &ConvGeom) -> usize {
    if g.weight_len() <= CONV_BLOCK_VALUES && g.parallel() {
        rayon::current_num_threads()
    } else {
        1
    }
}

/// Whether blocks run side by side (then each block's work stays on its thread); with a
/// single block, its im2col / col2im / layout passes split their rows instead.
fn blocks_in_parallel(g: &ConvGeom, blocks: &[Range<usize>]) -> bool {
    blocks.len() > 1 && g.parallel()
}

/// Runs `f(samples, out_block, inner)` for every block, `out_block` being the block's part of
/// `out` (`per_sample` values per sample), blocks in parallel when that pays; `inner` says
/// whether the block's own passes may split across the pool (blocks one after the other).
fn for_blocks_mut(
    g: &ConvGeom,
    blocks: Vec<Range<usize>>,
    out: &mut [f32],
    per_sample: usize,
    f: impl Fn(Range<usize>, &mut [f32], bool) -> Result<()> + Sync,
) -> Result<()> {
    let par = blocks_in_parallel(g, &blocks);
    let mut parts = Vec::with_capacity(blocks.len());
    let mut rest = out;
    for r in blocks {
        let (head, tail) = rest.split_at_mut(r.len() * per_sample);
        parts.push((r, head));
        rest = tail;
    }
    if par {
        parts.into_par_iter().try_for_each(|(r, o)| f(r, o, false))
    } else {
        parts.into_iter().try_for_each(|(r, o)| f(r, o, true))
    }
}

/// Whether a memory-bound pass over `len` values (im2col, col2im, a layout change) of a block
/// whose passes may split (`inner`) goes to the pool.
pub(super) fn split_pass(inner: bool, len: usize) -> bool {
    inner && len >= serial_below()
}

/// A convolution's GEMM: split across the pool's threads (see [`conv_gemm_split_above`])
/// when the block's passes may split (`inner`).
pub(super) fn conv_gemm(
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    c: &mut [f32],
    accumulate: bool,
    inner: bool,
) -> Result<()> {
    let above = if inner {
        conv_gemm_split_above()
    } else {
        usize::MAX
    };
    gemm_split(a, b, c, accumulate, above)
}

/// Work from which a convolution's GEMM splits: [`CONV_GEMM_PARALLEL_ABOVE`], lowered on the
/// pool as every kernel's threshold is ([`on_pool_threshold`]).
pub(super) fn conv_gemm_split_above() -> usize {
    on_pool_threshold(CONV_GEMM_PARALLEL_ABOVE)
}

/// Unfolds the samples of `x_block` (`channels × input` each) into the column matrix the
/// batched GEMMs use: `cols (col_rows, samples · out_len)` row-major — row `c·K + tap`,
/// column `sample · out_len + position` holds the input value that tap sees there (0 in the
/// padding). Rows run in parallel, each written front to back.
pub(super) fn im2col(g: &ConvGeom, x_block: &[f32], nb: usize, cols: &mut [f32], par: bool) {
    let (l, img_len) = (g.out_len(), g.channels * g.in_len());
    let (ow, iw, sw) = (g.output[2], g.input[2], g.stride[2]);
    let plain = g.is_plain_2d();
    let table = TapTable::new(g);
    let one = |(r, row): (usize, &mut [f32])| {
        if plain {
            // The common case without padding, stride or dilation: whole output rows are
            // contiguous runs of input, no per-row bookkeeping needed.
            let (oh, ih) = (g.output[1], g.input[1]);
            let (c, tap) = (r / g.kernel_len(), r % g.kernel_len());
            let (b, e) = (tap / g.kernel[2], tap % g.kernel[2]);
            for (n, dst_n) in row.chunks_mut(l).enumerate() {
                let src = &x_block[n * img_len + c * ih * iw + b * iw + e..];
                for (y, dst) in dst_n.chunks_exact_mut(ow).take(oh).enumerate() {
                    copy_short(dst, &src[y * iw..y * iw + ow]);
                }
            }
            return;
        }
        // Zero the whole row once (one long fill), then copy the runs the input covers:
        // per-row fills of a few values each cost a memset call apiece.
        row.fill(0.0);
        let (taps, plane) = table.row(r);
        for (n, dst_n) in row.chunks_mut(l).enumerate() {
            let img = &x_block[n * img_len + plane..];
            for t in taps.iter().filter(|t| t.src) {
                let dst = &mut dst_n[t.pos + t.lo..t.pos + t.hi];
                let src = &img[t.img + t.first..];
                if sw == 1 {
                    copy_short(dst, &src[..dst.len()]);
                } else {
                    dst.iter_mut()
                        .zip(src.iter().step_by(sw))
                        .for_each(|(d, s)| *d = *s);
                }
            }
        }
    };
    let row_len = (nb * l).max(1);
    if par {
        cols.par_chunks_mut(row_len).enumerate().for_each(one);
    } else {
        cols.chunks_mut(row_len).enumerate().for_each(one);
    }
}

/// `dst.copy_from_slice(src)` for the short rows of im2col (often 8–32 values): fixed-size
/// pieces compile to plain vector moves, where a variable-length copy calls memcpy once per
/// row — hundreds of thousands of calls per batch.
#[inline(always)]
pub(super) fn copy_short(dst: &mut [f32], src: &[f32]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        d.copy_from_slice(s);
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = *s;
    }
}

/// The transpose of [`im2col`]: adds every entry of `cols` into the image value it was read
/// from (padding entries are dropped). Samples run in parallel; `dx_block` is overwritten.
fn col2im(g: &ConvGeom, cols: &[f32], nb: usize, dx_block: &mut [f32], par: bool) {
    let (l, img_len) = (g.out_len(), g.channels * g.in_len());
    let (iw, sw) = (g.input[2], g.stride[2]);
    let plain = g.is_plain_2d();
    let ow = g.output[2];
    let table = TapTable::new(g);
    let one = |(n, img): (usize, &mut [f32])| {
        img.fill(0.0);
        for r in 0..g.col_rows() {
            let src_n = &cols[r * nb * l + n * l..r * nb * l + (n + 1) * l];
            if plain {
                // See `im2col`: output rows map to contiguous runs of input.
                let ih = g.input[1];
                let (c, tap) = (r / g.kernel_len(), r % g.kernel_len());
                let (b, e) = (tap / g.kernel[2], tap % g.kernel[2]);
                let base = c * ih * iw + b * iw + e;
                for (y, src) in src_n.chunks_exact(ow).enumerate() {
                    let dst = &mut img[base + y * iw..base + y * iw + ow];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += *s);
                }
                continue;
            }
            let (taps, plane) = table.row(r);
            for t in taps.iter().filter(|t| t.src) {
                let src = &src_n[t.pos + t.lo..t.pos + t.hi];
                let dst = &mut img[plane + t.img + t.first..];
                if sw == 1 {
                    dst[..src.len()]
                        .iter_mut()
                        .zip(src)
                        .for_each(|(d, s)| *d += *s);
                } else {
                    dst.iter_mut()
                        .step_by(sw)
                        .zip(src)
                        .for_each(|(d, s)| *d += *s);
                }
            }
        }
    };
    if img_len == 0 {
        return;
    }
    if par {
        dx_block.par_chunks_mut(img_len).enumerate().for_each(one);
    } else {
        dx_block.chunks_mut(img_len).enumerate().for_each(one);
    }
}

/// `(filters, samples · out)` (the GEMMs' layout: one product covers the whole block) →
/// `(samples, filters, out)` in `to`, adding `bias` (per filter) on the way.
fn to_sample_major(
    g: &ConvGeom,
    nb: usize,
    from: &[f32],
    to: &mut [f32],
    bias: Option<&[f32]>,
    par: bool,
) {
    let (f, l) = (g.filters, g.out_len());
    let one = |(n, y_n): (usize, &mut [f32])| {
        for (fi, row) in y_n.chunks_mut(l.max(1)).enumerate() {
            let src = &from[fi * nb * l + n * l..fi * nb * l + (n + 1) * l];
            match bias {
                Some(b) => row.iter_mut().zip(src).for_each(|(d, s)| *d = s + b[fi]),
                None => row.copy_from_slice(src),
            }
        }
    };
    if par {
        to.par_chunks_mut(f * l).enumerate().for_each(one);
    } else {
        to.chunks_mut(f * l).enumerate().for_each(one);
    }
}

/// A block of `dy` in the GEMMs' `(filters, samples · out)` layout: the block itself when it
/// is one sample (the layouts agree), else a rearranged copy.
enum FilterMajor<'a> {
    Same(&'a [f32]),
    Copy(Scratch),
}

impl std::ops::Deref for FilterMajor<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            FilterMajor::Same(s) => s,
            FilterMajor::Copy(s) => s,
        }
    }
}

/// The block `dy (samples, filters, out)` in the GEMMs' `(filters, samples · out)` layout.
fn filter_major<'a>(g: &ConvGeom, nb: usize, dy: &'a [f32]) -> FilterMajor<'a> {
    if nb == 1 {
        return FilterMajor::Same(dy);
    }
    let (f, l) = (g.filters, g.out_len());
    let mut out = Scratch::take(f * nb * l);
    for (fi, row) in out.chunks_mut((nb * l).max(1)).enumerate().take(f) {
        for n in 0..nb {
            row[n * l..(n + 1) * l].copy_from_slice(&dy[(n * f + fi) * l..][..l]);
        }
    }
    FilterMajor::Copy(out)
}

/// The weight of group `grp` as a `(filters/groups, col_rows/groups)` matrix.
pub(super) fn group_weight<'a>(g: &ConvGeom, w: &'a [f32], grp: usize) -> MatRef<'a, f32> {
    let (fg, ckg) = (
        g.filters_per_group(),
        g.channels_per_group() * g.kernel_len(),
    );
    MatRef::row_major(&w[grp * fg * ckg..(grp + 1) * fg * ckg], fg, ckg)
}

/// Group `grp`'s rows of a column matrix, as `(col_rows/groups, positions)`.
fn group_cols<'a>(g: &ConvGeom, cols: &'a [f32], positions: usize, grp: usize) -> MatRef<'a, f32> {
    let ckg = g.channels_per_group() * g.kernel_len();
    MatRef::row_major(
        &cols[grp * ckg * positions..(grp + 1) * ckg * positions],
        ckg,
        positions,
    )
}

/// Convolution forward: `y (batch, filters, output) = W ⊛ x (batch, channels, input)`, plus
/// `bias (filters,)` when given, then `epilogue` (a fused activation) over each block of `y`
/// while it is in cache. Each block of samples is unfolded at once ([`im2col`]) and each
/// group is one GEMM over every position of every sample of the block.
pub fn conv_forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    g.validate()?;
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    g.check_len("conv forward: data", x.len(), g.batch * c * il)?;
    g.check_len("conv forward: weight", w.len(), g.weight_len())?;
    g.check_len("conv forward: output", y.len(), g.batch * f * l)?;
    if let Some(b) = bias {
        g.check_len("conv forward: bias", b.len(), f)?;
    }
    if g.is_depthwise_2d() {
        depthwise_forward(g, x, w, bias, y, epilogue);
        return Ok(());
    }
    if let Some(t) = Trimmed::of(g) {
        return conv_forward_gemm(&t.g, x, &t.cut(g, w), bias, y, epilogue);
    }
    conv_forward_gemm(g, x, w, bias, y, epilogue)
}

/// The geometry an inference convolution with its weight prepared ahead runs: `g` with the
/// border taps that only ever read padding cut off when that pays (see `conv_trim`), else
/// `g` itself. The packed and tiled kernels then stream only the kept taps' weight.
pub fn live_geometry(g: &ConvGeom) -> ConvGeom {
    Trimmed::of(g).map_or(*g, |t| t.g)
}

/// `w (filters, channels/groups, *g.kernel)` cut to [`live_geometry`]'s kernel; `None`
/// when nothing is cut.
pub fn live_weight(g: &ConvGeom, w: &[f32]) -> Option<Vec<f32>> {
    Trimmed::of(g).map(|t| t.cut(g, w).to_vec())
}

/// [`conv_forward`] through im2col and one GEMM per group (lengths already checked).
fn conv_forward_gemm(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
) -> Result<()> {
    let (c, f, l, il) = (g.channels, g.filters, g.out_len(), g.in_len());
    let fg = g.filters_per_group();
    if g.is_pointwise() && l >= POINTWISE_DIRECT_MIN_POSITIONS {
        return super::conv_pointwise::forward(g, x, w, bias, y, epilogue);
    }
    for_blocks_mut(
        g,
        cut_batch(g, blocks_per_thread(g)),
        y,
        f * l,
        |r, y_block, inner| {
            let nb = r.len();
            let mut cols = Scratch::take(nb * l * g.col_rows());
            let x_block = &x[r.start * c * il..r.end * c * il];
            let split = split_pass(inner, cols.len());
            im2col(g, x_block, nb, &mut cols, split);
            // One sample: the GEMMs' (filters, positions) layout is the output's, so they write
            // straight into it.
            let mut y_f = (nb > 1).then(|| Scratch::take(f * nb * l));
            let out: &mut [f32] = match &mut y_f {
                Some(buf) => buf,
                None => y_block,
            };
            for grp in 0..g.groups {
                conv_gemm(
                    group_weight(g, w, grp),
                    group_cols(g, &cols, nb * l, grp),
                    &mut out[grp * fg * nb * l..(grp + 1) * fg * nb * l],
                    false,
                    inner,
                )?;
            }
            match &y_f {
                Some(buf) => {
                    to_sample_major(g, nb, buf, y_block, bias, split_pass(inner, buf.len()));
                    if let Some(e) = epilogue {
                        e(y_block);
                    }
                }
                None => bias_then(y_block, l, bias, epilogue, split_pass(inner, y_block.len())),
            }
            Ok(())
        },
    )
}

/// Output positions per sample from which a 1×1 convolution skips the column matrix (see
/// [`pointwise_forward`]). Below it one GEMM over the whole block's positions (a copy of the
/// input in, a reordering out) beats a product per sample of a few columns each.
const POINTWISE_DIRECT_MIN_POSITIONS: usize = 64;

/// Adds `bias[f]` to row `f` (of `l` values) of one sample's `(filters, l)` output, then runs
/// `epilogue` over the row while it is in cache; the rows split across the pool when `split`
/// (see [`split_pass`]: at batch 1, MobileNet v2's folded BatchNorm bias and relu6 over 1.2M
/// values otherwise ran on one thread).
pub(super) fn bias_then(
    y: &mut [f32],
    l: usize,
    bias: Option<&[f32]>,
    epilogue: Option<&(dyn Fn(&mut [f32]) + Sync)>,
    split: bool,
) {
    if l == 0 || (bias.is_none() && epilogue.is_none()) {
        return;
    }
    let one = |(fi, row): (usize, &mut [f32])| {
        if let Some(b) = bias {
            row.iter_mut().for_each(|v| *v += b[fi]);
        }
        if let Some(e) = epilogue {
            e(row);
        }
    };
    if split {
        y.par_chunks_mut(l).enumerate().for_each(one);
    } else {
        y.chunks_mut(l).enumerate().for_each(one);
    }
}

/// The transpose of [`conv_forward`] without bias: `dx (batch, channels, input)` from
/// `dy (batch, filters, output)` — the data gradient of Convolution and the forward pass of
/// Deconvolution. Per block: columns = Wᵀ·dy through one GEMM per group, then [`col2im`].
/// `dx` is overwritten.
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
    if g.is_depthwise_2d() {
        depthwise_backward_data(g, dy, w, dx);
        return Ok(());
    }
    if let Some(t) = Trimmed::of(g) {
        return conv_backward_data(&t.g, dy, &t.cut(g, w), dx);
    }
    let (fg, ck, ckg) = (
        g.filters_per_group(),
        g.col_rows(),
        g.channels_per_group() * g.kernel_len(),
    );
    for_blocks_mut(g, blocks(g), dx, c * il, |r, dx_block, inner| {
        let nb = r.len();
        let dy_f = filter_major(g, nb, &dy[r.start * f * l..r.end * f * l]);
        let mut cols = Scratch::take(nb * l * ck);
        for grp in 0..g.groups {
            conv_gemm(
                group_weight(g, w, grp).t(),
                MatRef::row_major(
                    &dy_f[grp * fg * nb * l..(grp + 1) * fg * nb * l],
                    fg,
                    nb * l,
                ),
                &mut cols[grp * ckg * nb * l..(grp + 1) * ckg * nb * l],
                false,
                inner,
            )?;
        }
        col2im(g, &cols, nb, dx_block, split_pass(inner, dx_block.len()));
        Ok(())
    })
}

/// The weight gradient of [`conv_forward`]: `dw = dy · im2col(x)ᵀ` per group over all
/// positions of all samples, written (not accumulated) into
/// `dw (filters, channels/groups, *kernel)`; with `db`, also the bias gradient (the sum of
/// `dy` per filter), taken from the block's `dy` while it is in cache. Each block gives a
/// partial sum and the partials are added in a fixed order (deterministic).
pub fn conv_backward_weight(
    g: &ConvGeom,
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    db: Option<&mut [f32]>,
) -> Result<()> {
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
    if let Some(db) = &db {
        g.check_len("conv weight gradient: bias gradient", db.len(), f)?;
    }
    if g.is_depthwise_2d() {
        depthwise_backward_weight(g, x, dy, dw, db);
        return Ok(());
    }
    if let Some(t) = Trimmed::of(g) {
        // (Written whole by the call below.)
        let mut dw_t = Scratch::take(t.g.weight_len());
        conv_backward_weight(&t.g, x, dy, &mut dw_t, db)?;
        t.place(g, &dw_t, dw);
        return Ok(());
    }
    let (fg, ckg) = (
        g.filters_per_group(),
        g.channels_per_group() * g.kernel_len(),
    );
    let blocks = blocks(g);
    let par = blocks_in_parallel(g, &blocks);
    // Lane i sums blocks i, i + LANES, … into `(dw, db)` of its own; one lane writes the
    // caller's arrays directly. Each block's product is `dw += dy · colsᵀ` in dw's own layout:
    // the transposed form (dwᵀ = cols · dyᵀ, with the many column rows as m) ran the GEMM
    // itself a little faster but needed a strided transpose of the whole gradient, which
    // dominated for deep layers with few positions (512 filters × 4608 column rows).
    let lanes = blocks.len().min(WEIGHT_LANES);
    let lane = |i: usize, dw: &mut [f32], sums: &mut [f32], inner: bool| -> Result<()> {
        for (k, r) in blocks.iter().skip(i).step_by(lanes).enumerate() {
            let nb = r.len();
            let mut cols = Scratch::take(nb * l * g.col_rows());
            im2col(
                g,
                &x[r.start * c * il..r.end * c * il],
                nb,
                &mut cols,
                split_pass(inner, nb * l * g.col_rows()),
            );
            let dy_f = filter_major(g, nb, &dy[r.start * f * l..r.end * f * l]);
            for grp in 0..g.groups {
                conv_gemm(
                    MatRef::row_major(
                        &dy_f[grp * fg * nb * l..(grp + 1) * fg * nb * l],
                        fg,
                        nb * l,
                    ),
                    group_cols(g, &cols, nb * l, grp).t(),
                    &mut dw[grp * fg * ckg..(grp + 1) * fg * ckg],
                    k > 0,
                    inner,
                )?;
            }
            if nb * l > 0 {
                for (s, row) in sums.iter_mut().zip(dy_f.chunks_exact(nb * l)) {
                    *s += row.iter().sum::<f32>();
                }
            }
        }
        Ok(())
    };
    let mut sums = vec![0.0f32; f];
    if lanes == 1 {
        lane(0, dw, &mut sums, true)?;
    } else {
        let run = |i: usize, inner: bool| -> Result<Vec<f32>> {
            let mut out = vec![0.0f32; g.weight_len() + f];
            let (dw_i, sums_i) = out.split_at_mut(g.weight_len());
            lane(i, dw_i, sums_i, inner)?;
            Ok(out)
        };
        let partials: Vec<Vec<f32>> = if par {
            (0..lanes)
                .into_par_iter()
                .map(|i| run(i, false))
                .collect::<Result<_>>()?
        } else {
            (0..lanes).map(|i| run(i, true)).collect::<Result<_>>()?
        };
        dw.fill(0.0);
        for p in &partials {
            let (p_dw, p_sums) = p.split_at(g.weight_len());
            dw.iter_mut().zip(p_dw).for_each(|(t, v)| *t += v);
            sums.iter_mut().zip(p_sums).for_each(|(t, v)| *t += v);
        }
    }
    if let Some(db) = db {
        db.copy_from_slice(&sums);
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
    if bias.len() != channels
        || (channels * spatial > 0 && !y.len().is_multiple_of(channels * spatial))
    {
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
    if !dy.len().is_multiple_of(channels * spatial) {
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
#[path = "conv_tests.rs"]
pub(super) mod tests;
