//! Parallel helpers: the one place that decides how work is split across rayon threads.
//!
//! Work is cut into fixed-size chunks (independent of the thread count), so any reduction
//! built on these chunks combines in the same order and gives the same bits on any machine.

use rayon::prelude::*;

pub use super::tuning::{CHUNK, SERIAL_BELOW};

/// Flushes denormal floats to zero (x86 FTZ and DAZ) on this thread while it lives, then
/// restores the previous mode. Training pushes values into the denormal range (momentum of a
/// weight whose gradient stays zero decays geometrically) and each denormal operation costs
/// ~100 cycles: an SGD update became 8x slower after 800 steps. Values below 1.2e-38 become
/// 0, as in oneDNN and TensorFlow kernels. The mode is set per kernel call, never left on
/// the caller's thread, so numpy code running on it is unaffected.
pub struct FlushDenormals {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

impl FlushDenormals {
    /// Turns flushing on for the current thread.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let mut saved: u32 = 0;
            // SAFETY: stmxcsr / ldmxcsr only read / write the MXCSR control register of this
            // thread (SSE is baseline on x86_64); the bits set only change denormal handling.
            unsafe {
                std::arch::asm!("stmxcsr [{}]", in(reg) &mut saved, options(nostack));
                let on = saved | FTZ_DAZ;
                std::arch::asm!("ldmxcsr [{}]", in(reg) &on, options(nostack, readonly));
            }
            Self { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Self {}
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: restores the MXCSR value read in `new` on the same thread.
        unsafe {
            std::arch::asm!("ldmxcsr [{}]", in(reg) &self.saved, options(nostack, readonly));
        }
    }
}

/// Runs `f` on a thread of the rayon pool (directly when already on one). Each entry from
/// another thread costs a hand-over each way — 25–75 µs on the 2-core machine, 8% of an MLP
/// inference batch — so a loop of passes (prediction over an iterator, forward + backward)
/// enters once, and the passes' own parallel kernels then split work inside the pool.
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        f()
    } else {
        rayon::scope(|_| f())
    }
}

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

#[cfg(test)]
mod denormal_tests {
    use super::FlushDenormals;

    #[test]
    fn flushing_is_scoped_to_the_guard() {
        // Opaque operands: the compiler assumes the default FP mode and could otherwise
        // fold or reuse the product across the mode switch.
        let half = |x: f32| std::hint::black_box(x) * std::hint::black_box(0.5f32);
        assert!(half(1e-38) > 0.0); // a denormal result survives normally
        {
            let _g = FlushDenormals::new();
            #[cfg(target_arch = "x86_64")]
            assert_eq!(half(1e-38), 0.0);
        }
        assert!(half(1e-38) > 0.0);
    }
}
