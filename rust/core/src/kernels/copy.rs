//! Block copies for the shape operators (concat, split, slice, transpose gradients): whole
//! contiguous runs moved in parallel over the outer rows, for any element type.

use super::par;
use crate::tensor::Element;
use std::collections::TryReserveError;
use std::mem::MaybeUninit;

/// Elements `[begin, begin + len)` of the middle axis of `src` viewed as (outer, n, inner):
/// the result is (outer, len, inner), one contiguous copy per outer row.
pub fn take_range<T: Element>(
    src: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    begin: usize,
    len: usize,
) -> Vec<T> {
    let row = len * inner;
    let mut out = vec![T::default(); outer * row];
    par::for_each_row_mut(&mut out, row, |o, dst| {
        let s = (o * n + begin) * inner;
        if let Some(part) = src.get(s..s + row) {
            dst.copy_from_slice(part);
        }
    });
    out
}

/// Joins rows: output row o is row o of `parts[0]`, then row o of `parts[1]`, …, where part
/// k has rows of `widths[k]` elements (the concatenation of (outer, w_k) blocks along axis 1).
/// The output is cut into fixed chunks, copied side by side whatever the number of rows (a
/// batch-1 concatenation is a single row of megabytes), and never zeroed first.
pub fn join_rows<T: Element>(parts: &[&[T]], widths: &[usize], outer: usize) -> Vec<T> {
    let total: usize = widths.iter().sum();
    if total == 0 || outer == 0 {
        return Vec::new();
    }
    // SAFETY: `write_joined` writes every element.
    unsafe { par::written(outer * total, |out| write_joined(out, parts, widths)) }
}

/// `parts` (each whole) appended to `out` in one pass split across the pool, as a batch-1
/// Concat along channels does to its first input: into the spare capacity when it holds
/// them, else into a new buffer of at least twice the capacity (so a concatenation grown
/// layer by layer, DenseNet's, copies each value a bounded number of times), `out` copied
/// along. `Vec::extend_from_slice` grew and copied on one thread: SqueezeNet's Concats at
/// batch 1 (two 0.8 MB halves) each left the other core idle.
pub fn append_rows(mut out: Vec<f32>, parts: &[&[f32]]) -> Result<Vec<f32>, TryReserveError> {
    let total = out.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    if out.capacity() >= total {
        extend_joined(&mut out, parts);
        return Ok(out);
    }
    let mut grown = Vec::new();
    grown.try_reserve_exact(total.max(2 * out.capacity()))?;
    let all: Vec<&[f32]> = std::iter::once(&out[..])
        .chain(parts.iter().copied())
        .collect();
    extend_joined(&mut grown, &all);
    Ok(grown)
}

/// `parts` written one after another into `v`'s spare capacity (which holds them), across
/// the pool.
fn extend_joined(v: &mut Vec<f32>, parts: &[&[f32]]) {
    let widths: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    let (from, more) = (v.len(), widths.iter().sum::<usize>());
    write_joined(&mut v.spare_capacity_mut()[..more], parts, &widths);
    // SAFETY: `write_joined` wrote the `more` values after the first `from`.
    unsafe { v.set_len(from + more) };
}

/// Writes every element of `out` (rows of `widths`' sum): the rows of [`join_rows`], chunk by
/// chunk across the pool.
fn write_joined<T: Element>(out: &mut [MaybeUninit<T>], parts: &[&[T]], widths: &[usize]) {
    let total: usize = widths.iter().sum();
    if total == 0 {
        return;
    }
    par::for_each_chunk_mut(out, |start, chunk| {
        let end = start + chunk.len();
        let mut at = start;
        while at < end {
            // The pieces of row `o` inside [at, end): each part's run, clipped.
            let o = at / total;
            let mut col = o * total;
            for (p, &w) in parts.iter().zip(widths) {
                let (lo, hi) = (at.max(col), (col + w).min(end));
                if lo < hi {
                    let s = o * w + lo - col;
                    let src = &p[s..s + hi - lo];
                    for (d, &v) in chunk[lo - start..hi - start].iter_mut().zip(src) {
                        d.write(v);
                    }
                }
                col += w;
            }
            at = col.min(end);
        }
    });
}

/// The inverse of `take_range`: (outer, n, inner) zeros with `g` (outer, len, inner) written
/// at `[begin, begin + len)` of the middle axis (the gradient of a slice).
pub fn place_range<T: Element>(
    g: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    begin: usize,
    len: usize,
) -> Vec<T> {
    let row = n * inner;
    let glen = len * inner;
    let mut out = vec![T::default(); outer * row];
    par::for_each_row_mut(&mut out, row, |o, dst| {
        let at = begin * inner;
        if let (Some(d), Some(s)) = (dst.get_mut(at..at + glen), g.get(o * glen..(o + 1) * glen)) {
            d.copy_from_slice(s);
        }
    });
    out
}

/// One axis of a strided region: first index, element count and step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AxisRange {
    /// Index of the first element taken.
    pub start: usize,
    /// Number of elements taken.
    pub count: usize,
    /// Distance between taken elements (negative walks backwards).
    pub step: isize,
}

/// Row-major offsets of the first element of each output row (the last axis being the row)
/// of the strided region `r` of an array of `shape`; the row's elements are then at
/// `base + (start + j·step)` along the last axis.
pub fn region_rows(shape: &[usize], r: &[AxisRange]) -> (Vec<usize>, AxisRange) {
    let nd = shape.len();
    let mut strides = vec![1usize; nd];
    for a in (0..nd.saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let Some((last, lead)) = r.split_last() else {
        // 0-d: one row of one element.
        return (
            vec![0],
            AxisRange {
                start: 0,
                count: 1,
                step: 1,
            },
        );
    };
    let mut bases = vec![0usize];
    for (a, ar) in lead.iter().enumerate() {
        let mut next = Vec::with_capacity(bases.len() * ar.count);
        for &b in &bases {
            for j in 0..ar.count {
                let idx = ar.start as isize + j as isize * ar.step;
                next.push(b + idx as usize * strides[a]);
            }
        }
        bases = next;
    }
    (bases, *last)
}

/// Copies the strided region `r` of `src` (shape `shape`) into a new row-major vector.
pub fn strided_gather<T: Element>(src: &[T], shape: &[usize], r: &[AxisRange]) -> Vec<T> {
    let (bases, last) = region_rows(shape, r);
    let mut out = vec![T::default(); bases.len() * last.count];
    par::for_each_row_mut(&mut out, last.count, |i, dst| {
        let b = bases[i] + last.start;
        if last.step == 1 {
            if let Some(s) = src.get(b..b + last.count) {
                dst.copy_from_slice(s);
            }
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                let at = (b as isize + j as isize * last.step) as usize;
                *d = src.get(at).copied().unwrap_or_default();
            }
        }
    });
    out
}

/// The gradient of `strided_gather`: zeros of `shape` with `g` written back into region `r`
/// (the region's positions are distinct, so writing is the same as adding).
pub fn strided_scatter<T: Element>(g: &[T], shape: &[usize], r: &[AxisRange]) -> Vec<T> {
    let (bases, last) = region_rows(shape, r);
    let mut out = vec![T::default(); shape.iter().product()];
    if last.count == 0 {
        return out;
    }
    for (row, &base) in g.chunks(last.count).zip(&bases) {
        let b = base + last.start;
        for (j, &v) in row.iter().enumerate() {
            let at = (b as isize + j as isize * last.step) as usize;
            if let Some(d) = out.get_mut(at) {
                *d = v;
            }
        }
    }
    out
}

/// Rows `rows[i]` of the row-major table `table` (rows of `d` values), one after another; an
/// index past the table leaves its row zero (callers check indices first).
pub fn gather_rows<T: Copy + Default + Send + Sync>(
    table: &[T],
    d: usize,
    rows: &[usize],
) -> Vec<T> {
    let mut out = vec![T::default(); rows.len() * d];
    par::for_each_row_mut(&mut out, d, |i, dst| {
        let r = rows[i] * d;
        if let Some(src) = table.get(r..r + d) {
            dst.copy_from_slice(src);
        }
    });
    out
}

/// The transpose of [`gather_rows`] for gradients: a `(k, d)` table where row `r` sums the
/// rows `i` of `g` with `rows[i] == r`. Positions are grouped by row (a stable counting sort)
/// and each row adds its positions in position order: parallel over rows, and the same sum
/// order at any thread count.
pub fn scatter_add_rows(g: &[f32], d: usize, rows: &[usize], k: usize) -> Vec<f32> {
    let mut start = vec![0usize; k + 1];
    for &r in rows.iter().filter(|&&r| r < k) {
        start[r + 1] += 1;
    }
    for i in 0..k {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut order = vec![0usize; start[k]];
    for (pos, &r) in rows.iter().enumerate().filter(|(_, &r)| r < k) {
        order[fill[r]] = pos;
        fill[r] += 1;
    }
    let mut dw = vec![0.0f32; k * d];
    par::for_each_row_mut(&mut dw, d, |r, dst| {
        for &pos in &order[start[r]..start[r + 1]] {
            if let Some(src) = g.get(pos * d..(pos + 1) * d) {
                dst.iter_mut().zip(src).for_each(|(a, b)| *a += b);
            }
        }
    });
    dw
}

/// One row of `depth` values per index: `on` at the index, `off` elsewhere. Like MXNet, each
/// index is cast to int (truncating) and an index outside [0, depth) leaves its row at `off`.
pub fn one_hot_rows(indices: &[f32], depth: usize, on: f32, off: f32) -> Vec<f32> {
    let mut out = vec![off; indices.len() * depth];
    par::for_each_row_mut(&mut out, depth, |r, row| {
        let j = indices.get(r).map_or(-1, |&v| v as i64);
        if j >= 0 && (j as usize) < row.len() {
            row[j as usize] = on;
        }
    });
    out
}

/// MXNet's `take` along an axis: `src` viewed as `(outer, n, inner)`; the result is
/// `(outer, rows.len(), inner)` with block `rows[j]` of each outer slice at position `j`
/// (every `rows[j] < n`: callers map indices into range first).
pub fn take_along(src: &[f32], outer: usize, n: usize, inner: usize, rows: &[usize]) -> Vec<f32> {
    let k = rows.len();
    let mut out = vec![0.0f32; outer * k * inner];
    par::for_each_row_mut(&mut out, k * inner, |o, dst| {
        let table = &src[o * n * inner..(o + 1) * n * inner];
        dst.copy_from_slice(&gather_rows(table, inner, rows));
    });
    out
}

/// The gradient of [`take_along`]: each outer slice's `(n, inner)` table sums the blocks of
/// `g` taken from each of its rows ([`scatter_add_rows`], the same sum order at any thread
/// count).
pub fn take_along_grad(
    g: &[f32],
    outer: usize,
    n: usize,
    inner: usize,
    rows: &[usize],
) -> Vec<f32> {
    let k = rows.len();
    let mut out = vec![0.0f32; outer * n * inner];
    par::for_each_row_mut(&mut out, n * inner, |o, dst| {
        let part = &g[o * k * inner..(o + 1) * k * inner];
        dst.copy_from_slice(&scatter_add_rows(part, inner, rows, n));
    });
    out
}

/// MXNet's `pick`: `src` viewed as `(outer, n, inner)` and `pos` as `(outer, inner)`; element
/// `(o, i)` of the result is `src[o, pos[o, i], i]` (every `pos < n`).
pub fn pick_along(src: &[f32], outer: usize, n: usize, inner: usize, pos: &[usize]) -> Vec<f32> {
    let mut out = vec![0.0f32; outer * inner];
    par::for_each_row_mut(&mut out, inner, |o, dst| {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = src[(o * n + pos[o * inner + i]) * inner + i];
        }
    });
    out
}

/// The gradient of [`pick_along`]: `g[o, i]` placed at `(o, pos[o, i], i)`, zeros elsewhere.
pub fn pick_along_grad(g: &[f32], outer: usize, n: usize, inner: usize, pos: &[usize]) -> Vec<f32> {
    let mut out = vec![0.0f32; outer * n * inner];
    par::for_each_row_mut(&mut out, n * inner, |o, dst| {
        for i in 0..inner {
            dst[pos[o * inner + i] * inner + i] = g[o * inner + i];
        }
    });
    out
}

/// A `(time, batch, inner)` or `(batch, time, inner)` block of sequences.
#[derive(Clone, Copy, Debug)]
pub struct SeqLayout {
    /// Steps per sequence.
    pub time: usize,
    /// Sequences.
    pub batch: usize,
    /// Values per step.
    pub inner: usize,
    /// `(batch, time, …)` instead of `(time, batch, …)`.
    pub batch_major: bool,
}

impl SeqLayout {
    /// Where step `t` of sequence `b` starts.
    fn at(&self, t: usize, b: usize) -> usize {
        let row = if self.batch_major {
            b * self.time + t
        } else {
            t * self.batch + b
        };
        row * self.inner
    }
}

/// `src` with every step at or past its sequence's length set to `value`.
pub fn sequence_mask(src: &[f32], l: &SeqLayout, lens: &[usize], value: f32) -> Vec<f32> {
    let mut out = src.to_vec();
    for (b, &n) in lens.iter().enumerate() {
        for t in n..l.time {
            let s = l.at(t, b);
            out[s..s + l.inner].fill(value);
        }
    }
    out
}

/// The last step of every sequence: `(batch, inner)`.
pub fn sequence_last(src: &[f32], l: &SeqLayout, lens: &[usize]) -> Vec<f32> {
    let mut out = Vec::with_capacity(l.batch * l.inner);
    for (b, &n) in lens.iter().enumerate() {
        let s = l.at(n - 1, b);
        out.extend_from_slice(&src[s..s + l.inner]);
    }
    out
}

/// The gradient of [`sequence_last`]: each sequence's gradient at its last step.
pub fn sequence_last_grad(g: &[f32], l: &SeqLayout, lens: &[usize]) -> Vec<f32> {
    let mut out = vec![0.0f32; l.time * l.batch * l.inner];
    for (b, &n) in lens.iter().enumerate() {
        let s = l.at(n - 1, b);
        out[s..s + l.inner].copy_from_slice(&g[b * l.inner..(b + 1) * l.inner]);
    }
    out
}

/// Every sequence's first `lens[b]` steps in reverse order, the rest in place (its own
/// inverse, so also its gradient).
pub fn sequence_reverse(src: &[f32], l: &SeqLayout, lens: &[usize]) -> Vec<f32> {
    let mut out = src.to_vec();
    for (b, &n) in lens.iter().enumerate() {
        for t in 0..n {
            let (d, s) = (l.at(t, b), l.at(n - 1 - t, b));
            out[d..d + l.inner].copy_from_slice(&src[s..s + l.inner]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_kernels() {
        // (2, 3, 2) viewed around axis 1.
        let x: Vec<i32> = (0..12).collect();
        assert_eq!(
            take_range(&x, 2, 3, 2, 1, 2),
            vec![2, 3, 4, 5, 8, 9, 10, 11]
        );
        let a = [1, 2, 3, 4];
        let b = [5, 6];
        assert_eq!(
            join_rows(&[&a[..], &b[..]], &[2, 1], 2),
            vec![1, 2, 5, 3, 4, 6]
        );
        assert_eq!(place_range(&[7, 8], 2, 3, 1, 2, 1), vec![0, 0, 7, 0, 0, 8]);
    }

    #[test]
    fn append_rows_fills_spare_capacity_or_grows_geometrically() {
        let part = |n: usize, k: f32| (0..n).map(|i| i as f32 + k).collect::<Vec<f32>>();
        let (a, b, c) = (part(70001, 0.5), part(90013, 0.25), part(3, -1.0));
        let want: Vec<f32> = [&a[..], &b, &c].concat();
        // Growing: the first input has no spare room.
        let grown = append_rows(a.clone(), &[&b, &c]).unwrap();
        assert_eq!(grown, want);
        assert!(grown.capacity() >= 2 * a.capacity());
        // In place: the room is already there, and the buffer stays where it is.
        let mut roomy = Vec::with_capacity(want.len() + 10);
        roomy.extend_from_slice(&a);
        let at = roomy.as_ptr();
        let same = append_rows(roomy, &[&b, &c]).unwrap();
        assert_eq!(same, want);
        assert_eq!(same.as_ptr(), at);
        assert_eq!(append_rows(Vec::new(), &[]).unwrap(), Vec::<f32>::new());
    }

    #[test]
    fn join_rows_cuts_chunks_through_rows_and_parts() {
        // One long row (batch 1), and many short rows, with widths that chunk boundaries cut
        // anywhere; against a row-by-row reference. Includes an empty part.
        for (outer, widths) in [(1, vec![70001, 0, 90013, 3]), (601, vec![129, 301, 0, 7])] {
            let parts: Vec<Vec<i32>> = widths
                .iter()
                .enumerate()
                .map(|(k, &w)| (0..(outer * w) as i32).map(|v| v * 4 + k as i32).collect())
                .collect();
            let refs: Vec<&[i32]> = parts.iter().map(Vec::as_slice).collect();
            let mut want = Vec::new();
            for o in 0..outer {
                for (p, &w) in refs.iter().zip(&widths) {
                    want.extend_from_slice(&p[o * w..(o + 1) * w]);
                }
            }
            assert_eq!(join_rows(&refs, &widths, outer), want);
        }
    }

    #[test]
    fn gather_and_scatter_rows_are_transposes() {
        let table = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // 3 rows of 2
        assert_eq!(
            gather_rows(&table, 2, &[2, 0, 2]),
            vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]
        );
        let g = [1.0f32, 1.0, 10.0, 10.0, 100.0, 100.0];
        assert_eq!(
            scatter_add_rows(&g, 2, &[2, 0, 2], 3),
            vec![10.0, 10.0, 0.0, 0.0, 101.0, 101.0]
        );
    }

    #[test]
    fn block_kernels_parallel_round_trip() {
        // Large enough for the parallel path: split (4, 3, 8192) along axis 1 and join back.
        let (outer, n, inner) = (4, 3, 8192);
        let x: Vec<i32> = (0..(outer * n * inner) as i32).collect();
        let parts: Vec<Vec<i32>> = (0..n)
            .map(|k| take_range(&x, outer, n, inner, k, 1))
            .collect();
        let refs: Vec<&[i32]> = parts.iter().map(Vec::as_slice).collect();
        assert_eq!(join_rows(&refs, &[inner; 3], outer), x);
        let mid = place_range(&parts[1], outer, n, inner, 1, 1);
        assert!(mid
            .iter()
            .enumerate()
            .all(|(i, &v)| v == if (i / inner) % n == 1 { i as i32 } else { 0 }));
        let r = [
            AxisRange {
                start: 0,
                count: outer,
                step: 1,
            },
            AxisRange {
                start: 2,
                count: 2,
                step: -1,
            },
            AxisRange {
                start: inner - 1,
                count: inner,
                step: -1,
            },
        ];
        let g = strided_gather(&x, &[outer, n, inner], &r);
        assert_eq!(g[0], (2 * inner + inner - 1) as i32);
        let back = strided_scatter(&g, &[outer, n, inner], &r);
        // Positions in the region get their own value back; axis-1 index 0 stays zero.
        assert!(back
            .iter()
            .enumerate()
            .all(|(i, &v)| v == if (i / inner) % n == 0 { 0 } else { i as i32 }));
    }

    #[test]
    fn strided_region_round_trip() {
        // x = arange(24).reshape(2, 3, 4); x[1:2, ::-2, 1:4:2]
        let x: Vec<i32> = (0..24).collect();
        let r = [
            AxisRange {
                start: 1,
                count: 1,
                step: 1,
            },
            AxisRange {
                start: 2,
                count: 2,
                step: -2,
            },
            AxisRange {
                start: 1,
                count: 2,
                step: 2,
            },
        ];
        let got = strided_gather(&x, &[2, 3, 4], &r);
        assert_eq!(got, vec![21, 23, 13, 15]);
        let back = strided_scatter(&got, &[2, 3, 4], &r);
        for (i, &v) in back.iter().enumerate() {
            assert!(v == 0 || v == i as i32);
        }
        assert_eq!(back.iter().filter(|&&v| v != 0).count(), 4);
    }
}
