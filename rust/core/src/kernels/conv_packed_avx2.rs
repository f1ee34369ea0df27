//! The packed convolution product of [`super::conv_packed`] in AVX2 + FMA vectors, for CPUs
//! without AVX-512 (where the plain loops ran one filter at a time). A panel row of 16
//! filters is two 8-lane vectors here, and there are 16 vector registers instead of 32, so
//! a tile holds fewer sums: 6 positions × one panel (12 sums, the 2 vectors of the panel row
//! and a broadcast value) where positions are many, and up to 3 panels at once for the last
//! one or two positions. The steps are those of the AVX-512 kernel: each output sums its
//! rows in order from 0 with one fused multiply-add a row, carried through the `acc` rows
//! between blocks of rows, so both give the same bits.
#![cfg(target_arch = "x86_64")]

use super::conv_packed::{store, Columns, OutLayout, PackedFilters, ACC, LANES};
use std::arch::x86_64::*;

/// Lanes of one vector: a panel row is `LANES / VEC` = 2 vectors.
const VEC: usize = 8;

/// Rows of `k` per block: a block of 3 panels (12 KB) stays in the core's L1 cache while
/// every tile of positions runs over it, so the weight streams in from memory or L3 once
/// however many positions there are.
const KC: usize = 64;

/// Rows of a panel ahead of the current one that the first tile of a block asks the cache
/// for: each block starts a new 4 KB page of every panel, where the hardware's stream
/// prefetcher stops and must find the stream again.
const FETCH_ROWS: usize = 32;

/// Positions per tile, against one panel: 12 sums, the panel row's 2 vectors and one
/// broadcast value take 15 of the 16 registers. Per row, 8 loads (2 of the weight, 6
/// broadcasts) feed 12 FMAs, and 12 independent sums cover the FMA latency on both pipes.
/// Two panels at once would hold 4 × 2 = 8 sums at most with their 4 weight vectors, a
/// worse ratio of loads to FMAs.
const MR: usize = 6;

/// One tile: `M` consecutive positions `q..` against `NV` consecutive panels (the first at
/// `w`, `ps` apart, which are panels `v0..v0 + NV` of the `acc` rows) over rows
/// `k0..k0 + kc` of the columns (panel rows from `w` on), the `M · NV · 2` sums in
/// registers. The sums start from `acc` (or 0 when `fresh`) and go back to it, so a product
/// over several blocks of rows adds them in order, as one pass over all rows would.
///
/// # Safety
/// The CPU supports AVX2 and FMA; panels `v0..v0 + NV` hold `kc` rows from `w` (`ps` apart)
/// and `v0 + NV ≤ 3`; the column values of rows `k0..k0 + kc` at positions `q..q + M` lie
/// inside the slice `b` points into.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<C: Columns, const M: usize, const NV: usize, const FETCH: bool>(
    (b, cols): (*const f32, &C),
    (k0, q): (usize, usize),
    kc: usize,
    (w, ps): (*const f32, usize),
    acc: &mut [[f32; ACC]; M],
    v0: usize,
    fresh: bool,
) {
    let mut sums = [[[_mm256_setzero_ps(); 2]; NV]; M];
    if !fresh {
        for (row, sum) in acc.iter().zip(sums.iter_mut()) {
            for (v, pair) in sum.iter_mut().enumerate() {
                for (h, s) in pair.iter_mut().enumerate() {
                    // SAFETY: acc rows hold 3 · LANES values, and v0 + NV ≤ 3.
                    *s = unsafe { _mm256_loadu_ps(row.as_ptr().add((v0 + v) * LANES + h * VEC)) };
                }
            }
        }
    }
    // SAFETY (the pointers and the loads through them): the caller's contract puts every
    // column value inside `b`.
    let at: [*const f32; M] = std::array::from_fn(|i| unsafe { b.add(cols.at(q + i)) });
    for r in 0..kc {
        if FETCH {
            for v in 0..NV {
                // A hint only: the address may lie past the weight, which is never read.
                let ahead = w.wrapping_add(v * ps + (r + FETCH_ROWS) * LANES);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
            }
        }
        let off = cols.row(k0 + r);
        // SAFETY: panel v holds kc rows of LANES values from w (the caller's contract).
        let wrow =
            |v: usize, h: usize| unsafe { _mm256_loadu_ps(w.add(v * ps + r * LANES + h * VEC)) };
        // SAFETY: see `at`.
        let x = |i: usize| _mm256_set1_ps(unsafe { *at[i].add(off) });
        // The order of the loads keeps the live vectors within the 16 registers: the row of
        // weights held against the broadcasts one at a time when the positions outnumber
        // its vectors, else the broadcasts held against each weight vector in turn.
        if M > 2 * NV {
            let wv: [[__m256; 2]; NV] = std::array::from_fn(|v| [wrow(v, 0), wrow(v, 1)]);
            for (i, row) in sums.iter_mut().enumerate() {
                let x = x(i);
                for (pair, y) in row.iter_mut().zip(&wv) {
                    for (s, &y) in pair.iter_mut().zip(y) {
                        *s = _mm256_fmadd_ps(x, y, *s);
                    }
                }
            }
        } else {
            let xs: [__m256; M] = std::array::from_fn(x);
            for v in 0..NV {
                for h in 0..2 {
                    let y = wrow(v, h);
                    for (row, &x) in sums.iter_mut().zip(&xs) {
                        row[v][h] = _mm256_fmadd_ps(x, y, row[v][h]);
                    }
                }
            }
        }
    }
    for (row, sum) in acc.iter_mut().zip(&sums) {
        for (v, pair) in sum.iter().enumerate() {
            for (h, &s) in pair.iter().enumerate() {
                // SAFETY: as above.
                unsafe { _mm256_storeu_ps(row.as_mut_ptr().add((v0 + v) * LANES + h * VEC), s) };
            }
        }
    }
}

/// Every tile of positions against the `NV` panels from `p`, block of rows by block of rows:
/// `MR` positions at a time against each panel in turn, then the last positions (fewer than
/// `MR`) in the tile shape that fits them; `acc` holds a row of sums per position.
///
/// # Safety
/// The CPU supports AVX2 and FMA; panels `p..p + NV` exist (`NV ≤ 3`), and the columns hold
/// `w.k` rows of `positions` values inside the slice `b` points into.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn panels<C: Columns, const NV: usize>(
    w: &PackedFilters,
    p: usize,
    (b, cols): (*const f32, &C),
    positions: usize,
    acc: &mut [[f32; ACC]],
) {
    let (k, ps) = (w.k, w.k * LANES);
    // SAFETY: panel p + NV - 1 exists (the caller's contract).
    let wp = unsafe { w.data.as_ptr().add(p * ps) };
    for k0 in (0..k).step_by(KC) {
        let kc = KC.min(k - k0);
        let fresh = k0 == 0;
        let bc = (b, cols);
        // SAFETY (all tiles): rows k0..k0 + kc of the panels and of the columns exist, the
        // tiles' positions are columns, and each tile's panels are among the NV ≤ 3.
        unsafe {
            let wk = wp.add(k0 * LANES);
            let panel = |v: usize| (wk.add(v * ps), ps);
            let (tiles, rest) = acc[..positions].as_chunks_mut::<MR>();
            let q = tiles.len() * MR;
            for (t, a) in tiles.iter_mut().enumerate() {
                for v in 0..NV {
                    // The first tile of a block brings its weight in (and fetches ahead of
                    // it); the others find it in L1.
                    match t {
                        0 => tile::<C, MR, 1, true>(bc, (k0, 0), kc, panel(v), a, v, fresh),
                        _ => tile::<C, MR, 1, false>(bc, (k0, t * MR), kc, panel(v), a, v, fresh),
                    }
                }
            }
            // The last positions: one or two against all the panels at once (up to 12
            // sums), three against two panels and then the third, four or five against one
            // panel at a time (8 or 10 sums).
            let at = (k0, q);
            match rest.len() {
                1 => {
                    if let Some(a) = rest.first_chunk_mut::<1>() {
                        tile::<C, 1, NV, true>(bc, at, kc, panel(0), a, 0, fresh);
                    }
                }
                2 => {
                    if let Some(a) = rest.first_chunk_mut::<2>() {
                        tile::<C, 2, NV, true>(bc, at, kc, panel(0), a, 0, fresh);
                    }
                }
                3 => {
                    if let Some(a) = rest.first_chunk_mut::<3>() {
                        match NV {
                            1 => tile::<C, 3, 1, true>(bc, at, kc, panel(0), a, 0, fresh),
                            2 => tile::<C, 3, 2, true>(bc, at, kc, panel(0), a, 0, fresh),
                            _ => {
                                tile::<C, 3, 2, true>(bc, at, kc, panel(0), a, 0, fresh);
                                tile::<C, 3, 1, true>(bc, at, kc, panel(2), a, 2, fresh);
                            }
                        }
                    }
                }
                4 => {
                    if let Some(a) = rest.first_chunk_mut::<4>() {
                        for v in 0..NV {
                            tile::<C, 4, 1, true>(bc, at, kc, panel(v), a, v, fresh);
                        }
                    }
                }
                5 => {
                    if let Some(a) = rest.first_chunk_mut::<5>() {
                        for v in 0..NV {
                            tile::<C, 5, 1, true>(bc, at, kc, panel(v), a, v, fresh);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// See `conv_packed::product_panels`. Panels go 3 at a time, the rest 2 or 1 at once (as in
/// the AVX-512 kernel: the `acc` rows and `done` ranges are the same), each group's weight a
/// block of rows at a time through every tile of positions.
///
/// # Safety
/// The CPU supports AVX2 and FMA, and `product_panels`' contract.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product<C: Columns>(
    w: &PackedFilters,
    panels_range: std::ops::Range<usize>,
    b: &[f32],
    cols: &C,
    positions: usize,
    out: OutLayout,
    bias: Option<&[f32]>,
    y: *mut f32,
    done: &(dyn Fn(usize, usize) + Sync),
) {
    let bc = (b.as_ptr(), cols);
    let mut acc = vec![[0.0f32; ACC]; positions];
    let mut p = panels_range.start;
    while p < panels_range.end {
        // Four panels left go as two pairs, not three and a single.
        let nv = match panels_range.end - p {
            4 => 2,
            left => left.min(3),
        };
        // SAFETY: panels p..p + nv exist, the positions are columns of b (the caller's
        // contract), acc holds a row per position, and the stores stay in the output.
        unsafe {
            match nv {
                3 => panels::<C, 3>(w, p, bc, positions, &mut acc),
                2 => panels::<C, 2>(w, p, bc, positions, &mut acc),
                _ => panels::<C, 1>(w, p, bc, positions, &mut acc),
            }
            store(&acc, 0, p * LANES, nv * LANES, out, bias, y);
        }
        done(p * LANES, ((p + nv) * LANES).min(w.filters));
        p += nv;
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv::{conv_out_size, ConvGeom};
    use super::super::conv_packed::{
        pad_input, padded_dims, product_plain, Gathered, Matrix, Shifted,
    };
    use super::*;
    use std::ops::Range;
    use std::sync::Mutex;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + seed * 11) % 29) as f32 / 9.0 - 1.5)
            .collect()
    }

    /// The operands of one product: the output goes `shift` values into a buffer of `len`.
    struct Case<'a, C> {
        w: &'a PackedFilters,
        panels: Range<usize>,
        b: &'a [f32],
        cols: &'a C,
        positions: usize,
        out: OutLayout,
        bias: Option<&'a [f32]>,
        len: usize,
        shift: usize,
    }

    /// The group ranges of filters `done` reports: panels 3 at a time, four left as two
    /// pairs, the last group cut at the filters.
    fn groups(panels: Range<usize>, filters: usize) -> Vec<(usize, usize)> {
        let (mut p, mut v) = (panels.start, Vec::new());
        while p < panels.end {
            let nv = match panels.end - p {
                4 => 2,
                left => left.min(3),
            };
            v.push((p * LANES, ((p + nv) * LANES).min(filters)));
            p += nv;
        }
        v
    }

    /// Runs the AVX2 product and the plain loops over `c`; checks that every output agrees
    /// within 1e-4 relative, that the same outputs are written, and that `done` reports
    /// the groups in order, each once its outputs are written. Returns the AVX2 output.
    fn compare<C: Columns>(name: &str, c: &Case<'_, C>) -> Vec<f32> {
        let run = |avx2: bool| {
            let mut y = vec![f32::NAN; c.len];
            let base = y.as_mut_ptr() as usize + c.shift * 4;
            let reported = Mutex::new(Vec::new());
            let done = |f0: usize, f1: usize| {
                for q in 0..c.positions {
                    for f in f0..f1 {
                        let at = c.out.base(q) + f * c.out.l;
                        // SAFETY: inside the output (the case's sizes); nothing writes it now.
                        let v = unsafe { *(base as *const f32).add(at) };
                        assert!(!v.is_nan(), "{name}: filter {f} position {q} not written");
                    }
                }
                if let Ok(mut r) = reported.lock() {
                    r.push((f0, f1));
                }
            };
            let (y_ptr, p) = (base as *mut f32, c.panels.clone());
            let (w, b, cols, out, bias) = (c.w, c.b, c.cols, c.out, c.bias);
            // SAFETY: the case's operands have the sizes the products need, and the CPU has
            // AVX2 and FMA (checked by each test).
            unsafe {
                if avx2 {
                    product(w, p, b, cols, c.positions, out, bias, y_ptr, &done);
                } else {
                    product_plain(w, p, b, cols, c.positions, out, bias, y_ptr, &|_, _| {});
                }
            }
            let reported = reported.into_inner().unwrap_or_default();
            (y, reported)
        };
        let (fast, reported) = run(true);
        let (plain, _) = run(false);
        assert_eq!(
            reported,
            groups(c.panels.clone(), c.w.filters()),
            "{name}: done"
        );
        for (i, (&got, &want)) in fast.iter().zip(&plain).enumerate() {
            assert_eq!(
                got.is_nan(),
                want.is_nan(),
                "{name} [{i}]: written by one only"
            );
            assert!(
                got.is_nan() || (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "{name} [{i}]: {got} vs {want}"
            );
        }
        fast
    }

    /// The AVX2 product against the plain loops over a column matrix: every remainder of
    /// positions against the tile of 6 and its shapes of the last positions, 1 to 7 panels
    /// (a part's panels from 0 or not), filters that fill the last panel or not, `k` over
    /// several blocks of rows and not a multiple of them, bias or none, one sample or
    /// several. Each output also has the bits of one fused multiply-add per row in order
    /// from 0, as the AVX-512 kernel sums.
    #[test]
    fn avx2_matches_plain_over_a_matrix() {
        if !crate::kernels::has_avx2_fma() {
            return;
        }
        let mut case = 0;
        for f in [5, 16, 20, 33, 48, 50, 64, 80, 97, 112] {
            for k in [1, 7, 64, 65, 130, 200] {
                for positions in 1..=14 {
                    case += 1;
                    let l = if case % 3 == 0 && positions % 2 == 0 {
                        positions / 2
                    } else {
                        positions
                    };
                    let ldb = positions + case % 4;
                    let w = values(f * k, case);
                    let b = values(k * ldb, case + 1);
                    let bias = values(f, case + 2);
                    let bias = (case % 2 == 0).then_some(&bias[..]);
                    let packed = PackedFilters::new(&w, f, k);
                    let all = packed.panels();
                    let ranges = [0..all, (all / 2)..all, 0..(all / 2).max(1)];
                    for panels in ranges.into_iter().filter(|r| !r.is_empty()) {
                        let c = Case {
                            w: &packed,
                            panels: panels.clone(),
                            b: &b,
                            cols: &Matrix { ldb },
                            positions,
                            out: OutLayout { filters: f, l },
                            bias,
                            len: positions * f,
                            shift: 0,
                        };
                        let name = format!("f{f} k{k} q{positions} l{l} panels {panels:?}");
                        let got = compare(&name, &c);
                        for q in 0..positions {
                            for fi in
                                (panels.start * LANES..panels.end * LANES).take_while(|&x| x < f)
                            {
                                let s = (0..k)
                                    .fold(0.0f32, |s, r| w[fi * k + r].mul_add(b[r * ldb + q], s));
                                let want = s + bias.map_or(0.0, |b| b[fi]);
                                let g = got[c.out.base(q) + fi * l];
                                assert_eq!(g.to_bits(), want.to_bits(), "{name} f{fi} q{q}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The AVX2 product against the plain loops over columns gathered from a padded,
    /// strided input (several samples), and over a run of positions shifted into one
    /// image's output, as the split by positions runs it.
    #[test]
    fn avx2_matches_plain_over_gathered_columns() {
        if !crate::kernels::has_avx2_fma() {
            return;
        }
        for (batch, channels, filters, [h, wd], stride, pad) in [
            (2, 3, 37, [7, 6], 2, 1),
            (1, 8, 64, [9, 9], 1, 1),
            (3, 5, 20, [5, 8], 1, 0),
            (1, 16, 100, [13, 13], 1, 1),
        ] {
            let size = |n| conv_out_size(n, 3, stride, 1, pad).unwrap_or(0);
            let g = ConvGeom {
                batch,
                channels,
                filters,
                groups: 1,
                input: [1, h, wd],
                output: [1, size(h), size(wd)],
                kernel: [1, 3, 3],
                stride: [1, stride, stride],
                dilate: [1, 1, 1],
                pad: [0, pad, pad],
            };
            let (k, l) = (g.col_rows(), g.out_len());
            let x = values(batch * channels * h * wd, filters);
            let mut xp = vec![0.0f32; batch * channels * padded_dims(&g).iter().product::<usize>()];
            pad_input(&g, &x, &mut xp);
            let w = values(filters * k, k);
            let bias = values(filters, 3);
            let packed = PackedFilters::new(&w, filters, k);
            let cols = Gathered::new(&g);
            let out = OutLayout { filters, l };
            let name = format!("{g:?}");
            compare(
                &name,
                &Case {
                    w: &packed,
                    panels: 0..packed.panels(),
                    b: &xp,
                    cols: &cols,
                    positions: batch * l,
                    out,
                    bias: Some(&bias),
                    len: batch * filters * l,
                    shift: 0,
                },
            );
            if batch == 1 {
                for (q0, q1) in [(0, l / 2), (l / 2, l), (l / 3, l / 3 + 7)] {
                    let shifted = Shifted { cols: &cols, q0 };
                    compare(
                        &format!("{name} positions {q0}..{q1}"),
                        &Case {
                            w: &packed,
                            panels: 0..packed.panels(),
                            b: &xp,
                            cols: &shifted,
                            positions: q1 - q0,
                            out,
                            bias: None,
                            len: filters * l,
                            shift: q0,
                        },
                    );
                }
            }
        }
    }
}
