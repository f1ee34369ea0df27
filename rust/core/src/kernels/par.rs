//! Parallel helpers: the one place that decides how work is split across rayon threads.
//!
//! Work is cut into fixed-size chunks (independent of the thread count), so any reduction
//! built on these chunks combines in the same order and gives the same bits on any machine.

use rayon::prelude::*;

/// Elements below which elementwise work stays on the calling thread: spawning costs more
/// than it saves for small arrays.
pub const SERIAL_BELOW: usize = 1 << 15;

/// The fixed chunk length for parallel elementwise work and ordered reductions.
pub const CHUNK: usize = 1 << 14;

/// Calls `f(start, chunk)` on consecutive chunks of `out`, in parallel when `out` is large.
pub fn for_each_chunk_mut<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if out.len() < SERIAL_BELOW {
        f(0, out);
    } else {
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(i, c)| f(i * CHUNK, c));
    }
}

/// Calls `f(row_index, row)` for each row of length `row_len` in `out`, in parallel when the
/// total is large.
pub fn for_each_row_mut<T: Send>(
    out: &mut [T],
    row_len: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if row_len == 0 {
        return;
    }
    if out.len() < SERIAL_BELOW {
        out.chunks_mut(row_len)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        out.par_chunks_mut(row_len)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    }
}

/// `f(i)` for every `i` in `0..n`, collected in order; in parallel when `work` (the number of
/// elements all calls touch together) is large. Each result comes from one call, so the values
/// do not depend on the thread count (per-channel statistics, per-group partial sums).
pub fn map_indices<T: Send>(n: usize, work: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    if work < SERIAL_BELOW || n < 2 {
        (0..n).map(f).collect()
    } else {
        (0..n).into_par_iter().map(f).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_everything_once() {
        for n in [0, 10, SERIAL_BELOW + 7] {
            let mut v = vec![0usize; n];
            for_each_chunk_mut(&mut v, |s, c| {
                c.iter_mut().enumerate().for_each(|(i, x)| *x = s + i)
            });
            assert!(v.iter().enumerate().all(|(i, &x)| i == x));
        }
        let mut v = vec![0usize; 12];
        for_each_row_mut(&mut v, 4, |r, row| row.iter_mut().for_each(|x| *x = r));
        assert_eq!(v, vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    }
}
