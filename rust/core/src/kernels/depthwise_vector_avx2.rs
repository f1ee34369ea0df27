//! `depthwise_vector`'s kernels with AVX2 vectors of 8 lanes, for CPUs without AVX-512 (any
//! x86-64-v3 one: AVX2 and FMA). The tables are the same, built for 8 lanes; the lane masks
//! of AVX-512 become integer lanes (`_mm256_maskload_ps`, whose masked-off lanes do not
//! fault either), and its two-source permutations a permutation and a mask (planes), a
//! shuffle of two loads (stride-2 rows of at most 8 values) or one load from input rows
//! split by column parity (longer stride-2 rows, see `SplitRows`). Each value sees the same
//! multiplies and adds in the same order as there (never fused: FMA is enabled only as part
//! of the CPU level), so all paths give the same bits.

use super::conv::ConvGeom;
use super::depthwise_vector::{first_lanes, Column, TapTable, LANES_AVX2 as LANES, ROWS};
use super::lanes8::{lanes_of, load_masked, store_first, Readable};
use super::scratch::Scratch;
use std::arch::x86_64::*;

/// The even values of `lo` (lanes 0..4), then those of `hi` (4..8).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn evens(lo: __m256, hi: __m256) -> __m256 {
    every_other::<0b10_00_10_00>(lo, hi)
}

/// The odd values of `lo` (lanes 0..4), then those of `hi` (4..8).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn odds(lo: __m256, hi: __m256) -> __m256 {
    every_other::<0b11_01_11_01>(lo, hi)
}

/// Every other value of `lo`, then of `hi`: the values `PICK` selects from each 128-bit
/// half (values 0 and 2 of lo's half, then of hi's, for the evens).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn every_other<const PICK: i32>(lo: __m256, hi: __m256) -> __m256 {
    let mixed = _mm256_shuffle_ps::<PICK>(lo, hi);
    // Its pairs (lo 0-2, hi 0-2, lo 4-6, hi 4-6) into order.
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
        mixed,
    )))
}

/// `depthwise_vector`'s `planes_in_vector` in 8 lanes: `v = 8 / max(input, output plane)`
/// planes per vector, lane `j·out_len + o` of tap `t`'s permutation holding the input value
/// plane `j`'s output `o` sees through tap `t`; lanes over the padding (index 8 in the
/// table) are masked to 0. Planes of 9 to 16 values go to [`one_wide`].
///
/// # Safety
/// The CPU supports AVX2; `x`, `w` and `bias` have the lengths `g` gives them, `taps` is
/// `g`'s table (for 8 lanes, or 16 where a plane has more than 8 values), and `out` holds
/// whole output planes `p0..` of `g`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn planes_in_vector(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    taps: &TapTable,
    p0: usize,
    out: &mut [f32],
) {
    if g.in_len().max(g.out_len()) > LANES {
        // SAFETY: the caller's contract.
        return unsafe { wide_planes(g, x, w, bias, taps, p0, out) };
    }
    let padding = _mm256_set1_epi32(LANES as i32);
    let index: Vec<(__m256i, __m256)> = taps
        .index
        .iter()
        .map(|i| {
            // SAFETY: reads the first 8 of the row's 16 i32.
            let idx = unsafe { _mm256_loadu_si256(i.as_ptr().cast()) };
            (idx, _mm256_castsi256_ps(_mm256_cmpgt_epi32(padding, idx)))
        })
        .collect();
    // SAFETY: the caller's contract.
    unsafe {
        match (taps.per, index.len()) {
            (1, 9) => one_plane::<9>(g, x, w, bias, &index, p0, out),
            (1, _) => one_plane::<0>(g, x, w, bias, &index, p0, out),
            _ => several_planes(g, x, taps, &index, p0, out),
        }
    }
}

/// Where each output lane of one half of a 16-lane permutation reads ([`one_wide`]).
#[derive(Clone, Copy)]
struct Half {
    /// The input lane within its half (the low 3 bits count).
    index: __m256i,
    /// All ones where it is in the input's high half.
    high: __m256,
    /// All ones where it is in the input at all (else padding: 0).
    inside: __m256,
}

/// [`planes_in_vector`] for planes of 9 to 16 values (4×4) with a table for 16 lanes: each
/// 16-lane vector of AVX-512's kernel as two of 8, an input half and an output half each.
///
/// # Safety
/// As for [`planes_in_vector`], with the table for 16 lanes.
#[target_feature(enable = "avx2,fma")]
unsafe fn wide_planes(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    taps: &TapTable,
    p0: usize,
    out: &mut [f32],
) {
    let index: Vec<[Half; 2]> = taps
        .index
        .iter()
        .map(|i| {
            [0, 1].map(|h| {
                // SAFETY: reads 8 of the row's 16 i32.
                let index = unsafe { _mm256_loadu_si256(i.as_ptr().add(h * LANES).cast()) };
                let above = |n: usize| _mm256_cmpgt_epi32(index, _mm256_set1_epi32(n as i32 - 1));
                Half {
                    index,
                    high: _mm256_castsi256_ps(_mm256_andnot_si256(above(2 * LANES), above(LANES))),
                    inside: _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                        _mm256_set1_epi32(2 * LANES as i32),
                        index,
                    )),
                }
            })
        })
        .collect();
    // SAFETY: the caller's contract.
    unsafe {
        match (g.out_len() > LANES, index.len()) {
            (false, 9) => one_wide::<1, 9>(g, x, w, bias, &index, p0, out),
            (false, _) => one_wide::<1, 0>(g, x, w, bias, &index, p0, out),
            (true, 9) => one_wide::<2, 9>(g, x, w, bias, &index, p0, out),
            (true, _) => one_wide::<2, 0>(g, x, w, bias, &index, p0, out),
        }
    }
}

/// [`wide_planes`] over `H` output halves (planes of up to 8 or 16 values out): per tap,
/// each half picks its lanes from both input halves and zeroes those over the padding, then
/// takes AVX-512's multiply and add. `K` as in [`one_plane`].
///
/// # Safety
/// As for [`wide_planes`]; `index` holds the table's rows as halves.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn one_wide<const H: usize, const K: usize>(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    index: &[[Half; 2]],
    p0: usize,
    out: &mut [f32],
) {
    let (c, l, il) = (g.channels, g.out_len(), g.in_len());
    let k = if K > 0 { K } else { index.len() };
    let half = |n: usize| lanes_of(first_lanes(n.min(LANES)));
    let load = [half(il), half(il.saturating_sub(LANES))];
    let widths = [l.min(LANES), l.saturating_sub(LANES)];
    let read = [Readable::of(x)];
    for (q, dst) in out.chunks_exact_mut(l).enumerate() {
        let p = p0 + q;
        let ch = p % c;
        let plane = x.as_ptr().wrapping_add(p * il);
        // SAFETY: plane p of x lies inside it (the caller's lengths); the masks read only it.
        let src = unsafe {
            [
                load_masked(plane, load[0], &read),
                load_masked(plane.wrapping_add(LANES), load[1], &read),
            ]
        };
        let wp = &w[ch * k..(ch + 1) * k];
        let mut acc = [_mm256_setzero_ps(); H];
        for (t, (halves, &wt)) in index.iter().zip(wp).enumerate().take(k) {
            let wv = _mm256_set1_ps(wt);
            for (acc, h) in acc.iter_mut().zip(halves) {
                let lo = _mm256_permutevar8x32_ps(src[0], h.index);
                let hi = _mm256_permutevar8x32_ps(src[1], h.index);
                let v = _mm256_and_ps(_mm256_blendv_ps(lo, hi, h.high), h.inside);
                let prod = _mm256_mul_ps(wv, v);
                *acc = if t == 0 {
                    prod
                } else {
                    _mm256_add_ps(*acc, prod)
                };
            }
        }
        for (h, mut acc) in acc.into_iter().enumerate() {
            if let Some(b) = bias {
                acc = _mm256_add_ps(acc, _mm256_set1_ps(b[ch]));
            }
            // SAFETY: half h holds the plane's values h·8.. of `dst`, `widths[h]` of them.
            unsafe {
                store_first(dst.as_mut_ptr().add(h * LANES), widths[h], acc);
            }
        }
    }
}

/// [`planes_in_vector`] with one plane to a vector: its channel's weights broadcast from
/// `w`. `K` > 0 says the window has `K` taps (so the loop unrolls); 0 reads it from `index`.
///
/// # Safety
/// As for [`planes_in_vector`]; `index` holds the table's rows (indices and where they are
/// inside the plane).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn one_plane<const K: usize>(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    index: &[(__m256i, __m256)],
    p0: usize,
    out: &mut [f32],
) {
    let (c, l, il) = (g.channels, g.out_len(), g.in_len());
    let k = if K > 0 { K } else { index.len() };
    let load = lanes_of(first_lanes(il));
    let read = [Readable::of(x)];
    for (q, dst) in out.chunks_exact_mut(l).enumerate() {
        let p = p0 + q;
        let ch = p % c;
        // SAFETY: plane p of x lies inside it (the caller's lengths); the mask reads only it.
        let src = unsafe { load_masked(x.as_ptr().add(p * il), load, &read) };
        let wp = &w[ch * k..(ch + 1) * k];
        let mut acc = _mm256_setzero_ps();
        for (t, (&(idx, inside), &wt)) in index.iter().zip(wp).enumerate().take(k) {
            let v = _mm256_and_ps(_mm256_permutevar8x32_ps(src, idx), inside);
            let prod = _mm256_mul_ps(_mm256_set1_ps(wt), v);
            acc = if t == 0 {
                prod
            } else {
                _mm256_add_ps(acc, prod)
            };
        }
        if let Some(b) = bias {
            acc = _mm256_add_ps(acc, _mm256_set1_ps(b[ch]));
        }
        // SAFETY: `dst` holds the plane's l values.
        unsafe { store_first(dst.as_mut_ptr(), l, acc) };
    }
}

/// [`planes_in_vector`] with several planes to a vector: each lane takes its plane's weight
/// from the table's rows.
///
/// # Safety
/// As for [`one_plane`].
#[target_feature(enable = "avx2,fma")]
unsafe fn several_planes(
    g: &ConvGeom,
    x: &[f32],
    taps: &TapTable,
    index: &[(__m256i, __m256)],
    p0: usize,
    out: &mut [f32],
) {
    let (c, l, il) = (g.channels, g.out_len(), g.in_len());
    let per = taps.per;
    // Lane j·l + o takes the weight of plane j.
    let spread: [i32; LANES] = std::array::from_fn(|lane| (lane / l.max(1)).min(per - 1) as i32);
    // SAFETY: reads 8 i32 from the array.
    let spread = unsafe { _mm256_loadu_si256(spread.as_ptr().cast()) };
    let whole = lanes_of(first_lanes(per * il));
    let planes = out.len() / l;
    let read = [Readable::of(x)];
    for q0 in (0..planes).step_by(per) {
        let n = (planes - q0).min(per);
        let p = p0 + q0;
        let c0 = p % c;
        let load = if n == per {
            whole
        } else {
            lanes_of(first_lanes(n * il))
        };
        // SAFETY: planes p..p + n of x lie inside it (the caller's lengths); the mask reads
        // only them.
        let src = unsafe { load_masked(x.as_ptr().add(p * il), load, &read) };
        let mut acc = _mm256_setzero_ps();
        for (t, &(idx, inside)) in index.iter().enumerate() {
            // SAFETY: a table row holds c + 16 values from any channel's start.
            let wv = unsafe { _mm256_loadu_ps(taps.taps.as_ptr().add(t * taps.row + c0)) };
            let v = _mm256_and_ps(_mm256_permutevar8x32_ps(src, idx), inside);
            let prod = _mm256_mul_ps(_mm256_permutevar8x32_ps(wv, spread), v);
            acc = if t == 0 {
                prod
            } else {
                _mm256_add_ps(acc, prod)
            };
        }
        if let Some(b) = &taps.bias {
            // SAFETY: as for the weight rows.
            let bv = unsafe { _mm256_loadu_ps(b.as_ptr().add(c0)) };
            acc = _mm256_add_ps(acc, _mm256_permutevar8x32_ps(bv, spread));
        }
        let dst = &mut out[q0 * l..(q0 + n) * l];
        // SAFETY: `dst` holds the n planes' values.
        unsafe { store_first(dst.as_mut_ptr(), n * l, acc) };
    }
}

/// A [`Column`] with its masks as integer lanes.
struct Col {
    offset: isize,
    masks: [__m256i; 2],
}

impl Col {
    /// Mask `m`'s lanes at `at`: a plain load and the mask where `readable` says all 8
    /// values may be read, else through [`load_masked`].
    ///
    /// # Safety
    /// AVX2; the lanes under the mask may be read at `at`, all 8 if `readable`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(&self, m: usize, at: *const f32, readable: bool, read: &[Readable]) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe {
            if readable {
                _mm256_and_ps(_mm256_loadu_ps(at), _mm256_castsi256_ps(self.masks[m]))
            } else {
                load_masked(at, self.masks[m], read)
            }
        }
    }
}

/// The 8 values of `plane`'s row from `start`, `len` values long, from column `from` on, 0
/// where a column is outside the row (masked only at the row's ends, and there through a
/// masked load only where the 8 values pass the plane's ends).
///
/// # Safety
/// AVX2; the row lies inside the plane.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load_in_row(plane: &[f32], start: usize, len: usize, from: isize) -> __m256 {
    let row = plane.as_ptr().wrapping_add(start);
    if from >= 0 && from as usize + LANES <= len {
        // SAFETY: the 8 values lie in the row.
        return unsafe { _mm256_loadu_ps(row.offset(from)) };
    }
    let at = _mm256_add_epi32(
        _mm256_set1_epi32(from as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    );
    let from_start = _mm256_cmpgt_epi32(at, _mm256_set1_epi32(-1));
    let before_end = _mm256_cmpgt_epi32(_mm256_set1_epi32(len as i32), at);
    // SAFETY: only the lanes inside the row are read; masked-off ones do not fault.
    unsafe {
        load_masked(
            row.wrapping_offset(from),
            _mm256_and_si256(from_start, before_end),
            &[Readable::of(plane)],
        )
    }
}

/// Input rows split by column parity for stride-2 columns, so that each tap reads its 8
/// values with one load instead of two loads and a shuffle: input row `iy` becomes its even
/// columns, then its odd ones, each run `width` values long with `lead` zeros before it and
/// zeros after. Column `2i + q` of the row is then value `lead + i + ⌊q/2⌋` of run `q mod 2`.
/// Each input value is shuffled once here, where the two-load reads shuffled it once per
/// tap column and output row that saw it (4.5 times in a 3×3 window).
struct SplitRows {
    /// Zeros before each run: the most any tap column reaches left of the row.
    lead: usize,
    /// Values per run: the lead, the row's half, and what the last vector reads past it, in
    /// whole vectors.
    width: usize,
    /// The plane's rows, `2 · width` values each (on loan: with a task of one plane, as
    /// MobileNet's widest layers make, a fresh zeroed buffer per plane cost a tenth of the
    /// layer).
    rows: Scratch,
    /// A row of zeros (for rows over the padding).
    zeros: Vec<f32>,
}

impl SplitRows {
    /// The layout for `g` with `cols` its row columns (for 8 lanes, stride 2).
    fn new(g: &ConvGeom, cols: &[Column]) -> SplitRows {
        let [_, ih, iw] = g.input;
        let lead = cols
            .iter()
            .map(|c| (-c.offset.div_euclid(2)).max(0) as usize)
            .max()
            .unwrap_or(0);
        // A vector at split index `offset / 2` reads 8 values from there.
        let reach = cols
            .iter()
            .map(|c| c.offset.div_euclid(2) + LANES as isize)
            .max()
            .unwrap_or(0)
            .max(0) as usize;
        // Whole vectors, as `split` writes them.
        let width = (lead + reach.max(iw.div_ceil(2))).next_multiple_of(LANES);
        SplitRows {
            lead,
            width,
            rows: Scratch::take(ih * 2 * width),
            zeros: vec![0.0; 2 * width],
        }
    }

    /// Where column `c` (a stride-2 row column) reads in a split row.
    fn offset(&self, c: &Column) -> isize {
        let parity = c.offset.rem_euclid(2) as usize;
        (parity * self.width + self.lead) as isize + c.offset.div_euclid(2)
    }

    /// Splits the rows of `plane` (`ih` rows of `iw`) into [`SplitRows::rows`], zeros
    /// around each run included: vector `j` of both runs comes from the same two loads (of
    /// 16 input values, masked where they pass the row's ends), so every value of the runs
    /// is written once, in order.
    ///
    /// # Safety
    /// AVX2; `plane` holds `ih · iw` values for the `ih` of [`SplitRows::new`].
    #[target_feature(enable = "avx2,fma")]
    unsafe fn split(&mut self, plane: &[f32], iw: usize) {
        let (lead, width) = (self.lead as isize, self.width);
        for (iy, dst) in self.rows.chunks_exact_mut(2 * width).enumerate() {
            let (even, odd) = dst.split_at_mut(width);
            for (j, (e, o)) in even
                .chunks_exact_mut(LANES)
                .zip(odd.chunks_exact_mut(LANES))
                .enumerate()
            {
                // Value i of the runs' vector j: columns 2(8j + i − lead) and that + 1.
                let from = 2 * (LANES * j) as isize - 2 * lead;
                // SAFETY: each run's vector j holds 8 values; the loads read inside the row.
                unsafe {
                    let lo = load_in_row(plane, iy * iw, iw, from);
                    let hi = load_in_row(plane, iy * iw, iw, from + LANES as isize);
                    _mm256_storeu_ps(e.as_mut_ptr(), evens(lo, hi));
                    _mm256_storeu_ps(o.as_mut_ptr(), odds(lo, hi));
                }
            }
        }
    }
}

/// `depthwise_vector`'s `rows_in_vector` in 8 lanes: each output row one vector or more
/// (`columns` from `row_columns` for 8 lanes), the sum over the taps in order, then the
/// bias; tiles of [`ROWS`] output rows (stride-2 rows of at most 4 values: 2·[`ROWS`], two
/// to a vector) whose input rows are chosen once (a row of zeros above and below the image).
///
/// # Safety
/// The CPU supports AVX2; `x`, `w` and `bias` have the lengths `g` gives them, `columns`
/// are `g`'s for 8 lanes, and `out` holds whole output planes `p0..` of `g`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_in_vector(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    columns: &[Column],
    p0: usize,
    out: &mut [f32],
) {
    let [_, ih, iw] = g.input;
    let [_, oh, ow] = g.output;
    let [_, kh, kw] = g.kernel;
    let (sh, dh, ph) = (g.stride[1], g.dilate[1], g.pad[1]);
    let (c, l, il, k) = (g.channels, g.out_len(), g.in_len(), g.kernel_len());
    let stride2 = g.stride[2] == 2;
    let paired = stride2 && ow <= LANES / 2;
    // Stride-2 rows of more than a vector read split rows instead, through the stride-1
    // loads (every lane read: the runs' zeros cover the padding, the lanes past the row are
    // not stored). A row of one vector would split into runs of two (the lead and the
    // vector's reach past it) and cost more than the shuffles it saves: 64 × 16² → 8² ran
    // 0.0156–0.0162 ms shuffled, 0.0163–0.0170 split.
    let mut split = (stride2 && ow > LANES).then(|| SplitRows::new(g, columns));
    let shuffled = stride2 && split.is_none();
    let cols: Vec<Col> = columns
        .iter()
        .map(|col| match &split {
            Some(s) => Col {
                offset: s.offset(col),
                masks: [lanes_of(u16::MAX), lanes_of(0)],
            },
            None => Col {
                offset: col.offset,
                masks: [lanes_of(col.masks[0]), lanes_of(col.masks[1])],
            },
        })
        .collect();
    // What the columns' loads reach, relative to a row's start: from `reach.0` to before
    // `reach.1` (two vectors for the shuffled stride-2 rows).
    let loaded = if shuffled { 2 * LANES } else { LANES } as isize;
    let reach = cols.iter().fold((0, iw as isize), |(lo, hi), c| {
        (lo.min(c.offset), hi.max(c.offset + loaded))
    });
    // A row of zeros (for rows over the padding) with zeros around it as far as the loads
    // reach. (Row pointers come from whole slices: the plain loads read past a row's ends.)
    let zeros_around = vec![0.0f32; (reach.1 - reach.0) as usize];
    let zeros = zeros_around.as_ptr().wrapping_add(reach.0.unsigned_abs());
    // Where the plane's rows and the zero row lie (the split rows are always `readable`).
    let read = [Readable::of(x), Readable::of(&zeros_around)];
    let tile_rows = if paired { 2 * ROWS } else { ROWS };
    let mut rows = vec![zeros; tile_rows * kh];
    let mut wv = vec![_mm256_setzero_ps(); k];
    let square3 = (kh, kw) == (3, 3);
    for (j, plane_out) in out.chunks_exact_mut(l).enumerate() {
        let p = p0 + j;
        let ch = p % c;
        assert!((p + 1) * il <= x.len(), "plane {p} outside the input");
        let plane = x.as_ptr().wrapping_add(p * il);
        for (v, &wt) in wv.iter_mut().zip(&w[ch * k..(ch + 1) * k]) {
            *v = _mm256_set1_ps(wt);
        }
        let bias = bias.map(|b| _mm256_set1_ps(b[ch]));
        // Input rows: the plane's, or its split rows.
        let (plane, zero_row, row_len) = match &mut split {
            Some(s) => {
                // SAFETY: the plane holds `ih · iw` values (the caller's contract).
                unsafe { s.split(&x[p * il..(p + 1) * il], iw) };
                (s.rows.as_ptr(), s.zeros.as_ptr(), 2 * s.width)
            }
            None => (plane, zeros, iw),
        };
        // Whether every load may read all its 8 values: the split rows are laid out so; the
        // plane's rows when the loads of its first and last rows stay inside `x` (all but
        // the ends of `x`), as those of the zero row stay inside `zeros_around`.
        let first = (p * il) as isize;
        let readable = split.is_some()
            || (first + reach.0 >= 0
                && first + ((ih - 1) * iw) as isize + reach.1 <= x.len() as isize);
        for y0 in (0..oh).step_by(tile_rows) {
            for (r, window) in rows.chunks_exact_mut(kh).enumerate() {
                for (a, row) in window.iter_mut().enumerate() {
                    let iy = ((y0 + r) * sh + a * dh) as isize - ph as isize;
                    *row = if iy < 0 || iy as usize >= ih {
                        zero_row
                    } else {
                        plane.wrapping_add(iy as usize * row_len)
                    };
                }
            }
            let left = oh - y0;
            for (vi, cols) in cols.chunks_exact(kw).enumerate() {
                let x0 = vi * LANES;
                let width = (ow - x0).min(LANES);
                let tile = Tile {
                    rows: &rows,
                    read: &read,
                    readable,
                    kh,
                    wv: &wv,
                    cols,
                    bias,
                    width,
                };
                // SAFETY: rows y0.. of vector x0 lie inside the output plane; the columns'
                // masks keep the reads inside the rows (or `zeros`).
                unsafe {
                    let dst = plane_out.as_mut_ptr().add(y0 * ow + x0);
                    match (paired, square3) {
                        (true, true) => tile.pairs_left::<3>(left, dst, ow),
                        (true, false) => tile.pairs_left::<0>(left, dst, ow),
                        (false, true) => tile.rows_left::<3>(left, shuffled, dst, ow),
                        (false, false) => tile.rows_left::<0>(left, shuffled, dst, ow),
                    }
                }
            }
        }
    }
}

/// One vector of columns over up to [`ROWS`] output rows of [`rows_in_vector`].
struct Tile<'a> {
    /// Input row `a` of the window of output row `r` at `r · kh + a` (or a row of zeros).
    rows: &'a [*const f32],
    /// Where the rows lie, for the loads that are not `readable`.
    read: &'a [Readable],
    /// Whether the columns' loads may read all their 8 values from every row.
    readable: bool,
    kh: usize,
    /// The plane's weights, one broadcast vector per tap.
    wv: &'a [__m256],
    /// The vector's tap columns.
    cols: &'a [Col],
    bias: Option<__m256>,
    /// The output lanes that exist.
    width: usize,
}

impl Tile<'_> {
    /// [`Tile::run`] over the `left` rows that remain (up to [`ROWS`]), with `K` as in it.
    ///
    /// # Safety
    /// As for [`Tile::run`].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_left<const K: usize>(
        &self,
        left: usize,
        stride2: bool,
        dst: *mut f32,
        ow: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            match (left.min(ROWS), stride2) {
                (1, false) => self.run::<1, false, K>(dst, ow),
                (2, false) => self.run::<2, false, K>(dst, ow),
                (3, false) => self.run::<3, false, K>(dst, ow),
                (_, false) => self.run::<ROWS, false, K>(dst, ow),
                (1, true) => self.run::<1, true, K>(dst, ow),
                (2, true) => self.run::<2, true, K>(dst, ow),
                (3, true) => self.run::<3, true, K>(dst, ow),
                (_, true) => self.run::<ROWS, true, K>(dst, ow),
            }
        }
    }

    /// The first `R` rows' sums over the taps in order, plus the bias, stored at `dst` and
    /// `ow` apart; columns at stride 1, or 2 when `STRIDE2` (the even values of two loads).
    /// `K` > 0 says the window is `K`×`K` (so its loops unroll); 0 reads it from the tile.
    /// `R` sums run side by side and stay in registers.
    ///
    /// # Safety
    /// AVX2; the rows' pointers and the columns' masks read inside their rows, and the `R`
    /// stores lie inside the output.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run<const R: usize, const STRIDE2: bool, const K: usize>(
        &self,
        dst: *mut f32,
        ow: usize,
    ) {
        let (kh, kw) = if K > 0 {
            (K, K)
        } else {
            (self.kh, self.cols.len())
        };
        let mut acc = [_mm256_setzero_ps(); R];
        for a in 0..kh {
            for (e, col) in self.cols.iter().enumerate().take(kw) {
                let wv = self.wv[a * kw + e];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let at = self.rows[r * kh + a].wrapping_offset(col.offset);
                    // SAFETY: only the lanes under the masks are read (the caller's
                    // contract); masked-off ones do not fault.
                    let v = unsafe {
                        if STRIDE2 {
                            let lo = col.load(0, at, self.readable, self.read);
                            let hi = col.load(1, at.wrapping_add(LANES), self.readable, self.read);
                            evens(lo, hi)
                        } else {
                            col.load(0, at, self.readable, self.read)
                        }
                    };
                    let p = _mm256_mul_ps(wv, v);
                    *acc = if a == 0 && e == 0 {
                        p
                    } else {
                        _mm256_add_ps(*acc, p)
                    };
                }
            }
        }
        for (r, mut acc) in acc.into_iter().enumerate() {
            if let Some(b) = self.bias {
                acc = _mm256_add_ps(acc, b);
            }
            // SAFETY: the caller's contract (the lanes that exist).
            unsafe { store_first(dst.add(r * ow), self.width, acc) };
        }
    }

    /// [`Tile::pairs`] over the `left` rows that remain (up to 2·[`ROWS`]), with `K` as in
    /// it.
    ///
    /// # Safety
    /// As for [`Tile::pairs`].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pairs_left<const K: usize>(&self, left: usize, dst: *mut f32, ow: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match left.min(2 * ROWS) {
                1 => self.pairs::<1, K>(dst, ow),
                2 => self.pairs::<2, K>(dst, ow),
                3 => self.pairs::<3, K>(dst, ow),
                4 => self.pairs::<4, K>(dst, ow),
                5 => self.pairs::<5, K>(dst, ow),
                6 => self.pairs::<6, K>(dst, ow),
                7 => self.pairs::<7, K>(dst, ow),
                _ => self.pairs::<{ 2 * ROWS }, K>(dst, ow),
            }
        }
    }

    /// [`Tile::run`] at column stride 2 for output rows of at most half a vector (`ow` ≤ 4:
    /// MobileNet's stride-2 layers into 4² and 2²), two to a vector: rows 2i and 2i + 1 in
    /// its low and high halves, from one shuffle of both rows' loads. The first `N` rows of
    /// the tile; `K` as in [`Tile::run`]. The same operations on each value as there.
    ///
    /// # Safety
    /// As for [`Tile::run`] over `N` rows, each at most 4 wide.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pairs<const N: usize, const K: usize>(&self, dst: *mut f32, ow: usize) {
        let (kh, kw) = if K > 0 {
            (K, K)
        } else {
            (self.kh, self.cols.len())
        };
        let pairs = N.div_ceil(2);
        let mut acc = [_mm256_setzero_ps(); ROWS];
        for a in 0..kh {
            for (e, col) in self.cols.iter().enumerate().take(kw) {
                let wv = self.wv[a * kw + e];
                for (i, acc) in acc.iter_mut().enumerate().take(pairs) {
                    let (r0, r1) = (2 * i, 2 * i + 1);
                    let at0 = self.rows[r0 * kh + a].wrapping_offset(col.offset);
                    // A missing second row (N odd) reads the first again; its half is never
                    // stored.
                    let r1 = if r1 < N { r1 } else { r0 };
                    let at1 = self.rows[r1 * kh + a].wrapping_offset(col.offset);
                    // SAFETY: only the lanes under the mask are read (the caller's
                    // contract); masked-off ones do not fault. The first 8 values loaded
                    // hold the 4 outputs' windows.
                    let v = unsafe {
                        let lo = col.load(0, at0, self.readable, self.read);
                        let hi = col.load(0, at1, self.readable, self.read);
                        evens(lo, hi)
                    };
                    let p = _mm256_mul_ps(wv, v);
                    *acc = if a == 0 && e == 0 {
                        p
                    } else {
                        _mm256_add_ps(*acc, p)
                    };
                }
            }
        }
        for (i, mut acc) in acc.into_iter().enumerate().take(pairs) {
            if let Some(b) = self.bias {
                acc = _mm256_add_ps(acc, b);
            }
            let halves = [_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc)];
            for (r, half) in halves.into_iter().enumerate().take(N - 2 * i) {
                // SAFETY: the caller's contract; row 2i + 1 is stored only if it exists.
                unsafe {
                    let row = dst.add((2 * i + r) * ow);
                    store_first(row, self.width, _mm256_castps128_ps256(half));
                }
            }
        }
    }
}
