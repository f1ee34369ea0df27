//! Parallel helpers: the one place that decides how work is split across rayon threads.
//!
//! Work is cut into fixed-size chunks (independent of the thread count), so any reduction
//! built on these chunks combines in the same order and gives the same bits on any machine.

use rayon::prelude::*;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use super::tuning::{CHUNK, ON_POOL_SHARE, SERIAL_BELOW};
use super::tuning::{PLACEMENT_PROBE, PLACEMENT_ROUND};
use std::time::Duration;

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

/// A split threshold `off_pool` (work from which a kernel splits when called from outside
/// the pool, where a split hands the work over and back), or its [`ON_POOL_SHARE`]-th on a
/// thread of the pool, where the other threads take their parts by stealing.
pub fn on_pool_threshold(off_pool: usize) -> usize {
    match rayon::current_thread_index() {
        Some(_) => off_pool / ON_POOL_SHARE,
        None => off_pool,
    }
}

/// Work (a rough count of values or multiply-adds) below which a kernel stays on its thread:
/// [`SERIAL_BELOW`], lowered on the pool ([`on_pool_threshold`]).
pub fn serial_below() -> usize {
    on_pool_threshold(SERIAL_BELOW)
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

/// Runs `f` on the pool (as [`on_pool`]) while the pool's other threads stay awake: each
/// waits for work by polling the pool instead of going to sleep. A rayon thread sleeps after
/// a few dozen idle polls, and a pass of many short layers (MobileNet at batch 1: 160
/// convolutions of 10–50 µs) then pays a wake-up of the helper thread at nearly every
/// layer — a tenth of the pass in the kernel's scheduler. OpenMP runtimes keep their
/// threads spinning between parallel regions for the same reason. The helpers poll with a
/// pause between polls and stop when `f` returns, so this suits one bounded pass, not a
/// loop that waits on the user.
pub fn with_pool_awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    /// Tells the helpers to stop when the pass ends, by return or by unwinding.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    on_pool(|| {
        let helpers = rayon::current_num_threads().saturating_sub(1);
        if helpers == 0 {
            return f();
        }
        let owner = rayon::current_thread_index();
        let done = AtomicBool::new(false);
        let done = &done;
        rayon::in_place_scope(|s| {
            for _ in 0..helpers {
                s.spawn(move |_| {
                    // The pass's own thread may pop a helper job while it waits for stolen
                    // work; it must not spin there, under the pass it is part of.
                    if rayon::current_thread_index() == owner {
                        return;
                    }
                    while !done.load(Ordering::Acquire) {
                        if rayon::yield_now() != Some(rayon::Yield::Executed) {
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            let _done = Done(done);
            f()
        })
    })
}

/// Where a module runs its passes: on the calling thread, or on the pool as a whole (held
/// awake, see [`with_pool_awake`]). Decided by how long the previous pass took, since the
/// hand-over's cost is a time: from `from` a pass moves to the pool, and it returns to the
/// caller below `from / 2` (or a bar of its own, see [`PassPlacement::with_return`]), so a
/// pass that the move itself speeds up does not flip back and forth. A [measured]
/// placement decides its short passes by timing both places instead. The first pass runs on
/// the caller. Values are the same bits either way (kernels split work independently of the
/// thread they start on).
///
/// [measured]: PassPlacement::measured
#[derive(Clone, Copy, Debug)]
pub struct PassPlacement {
    from: Duration,
    back_below: Duration,
    on_pool: bool,
    /// For a measured placement: passes since its last probe began, and the fastest pass
    /// of that probe on the caller and on the pool.
    probe: Option<(u32, [Duration; 2])>,
}

impl Default for PassPlacement {
    fn default() -> Self {
        Self::new(super::tuning::POOL_PASS_FROM)
    }
}

impl PassPlacement {
    /// Passes move to the pool once one takes `from` or longer, and back below `from / 2`.
    pub fn new(from: Duration) -> Self {
        Self::with_return(from, from / 2)
    }

    /// Passes move to the pool once one takes `from` or longer, and back below `back_below`.
    pub fn with_return(from: Duration, back_below: Duration) -> Self {
        Self {
            from,
            back_below,
            on_pool: false,
            probe: None,
        }
    }

    /// Passes of `from` or longer run on the pool; shorter ones where they ran faster: every
    /// [`PLACEMENT_ROUND`] passes begin with [`PLACEMENT_PROBE`] passes alternating between
    /// the caller and the pool, and the rest of the round runs where the probe's fastest
    /// pass ran. Whether a short pass gains from the pool depends on the machine as much as
    /// on the pass: MobileNet-0.25 at batch 1 ran 5–10% slower there on a Zen 3 VM and 17%
    /// faster on a Zen 5 one, whose threads hand work over sooner.
    pub fn measured(from: Duration) -> Self {
        Self {
            probe: Some((0, [Duration::MAX; 2])),
            ..Self::new(from)
        }
    }

    /// Whether the next pass runs on the pool.
    pub fn on_pool(&self) -> bool {
        self.on_pool
    }

    /// Runs one pass where the previous ones say, and times it for the next.
    pub fn run<R: Send>(&mut self, pass: impl FnOnce() -> R + Send) -> R {
        let start = std::time::Instant::now();
        let r = if self.on_pool {
            with_pool_awake(pass)
        } else {
            pass()
        };
        let took = start.elapsed();
        self.on_pool = match &mut self.probe {
            Some((count, best)) => {
                let phase = *count % PLACEMENT_ROUND;
                if phase < PLACEMENT_PROBE {
                    let place = &mut best[usize::from(self.on_pool)];
                    *place = (*place).min(took);
                }
                *count = count.wrapping_add(1);
                let next = *count % PLACEMENT_ROUND;
                if next == 0 {
                    *best = [Duration::MAX; 2];
                }
                took >= self.from
                    || match next < PLACEMENT_PROBE {
                        true => next % 2 == 1,
                        false => best[1] < best[0],
                    }
            }
            None => {
                let bar = if self.on_pool {
                    self.back_below
                } else {
                    self.from
                };
                took >= bar
            }
        };
        r
    }
}

/// A vector of `len` values that `fill` writes in place (on parts of it, in parallel if it
/// likes) without zeroing the memory first: a language model's vocabulary-wide arrays are
/// tens of MB, and zeroing each before a kernel overwrites it was a serial pass over them.
///
/// # Safety
/// `fill` must write every element of the slice it is given.
pub unsafe fn written<T>(len: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    fill(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: the caller's `fill` wrote all `len` elements.
    unsafe { v.set_len(len) };
    v
}

/// A vector of `len` floats that `fill` overwrites completely (a convolution's output):
/// [`written`] for kernels that take a plain `&mut [f32]`, skipping the zero fill of
/// `vec![0.0; len]` — a serial memset over every layer's output, about a tenth of a small
/// network's inference. On an error the vector is dropped unread.
///
/// # Safety
/// `fill` writes every element of the slice before reading it, and writes all of them when
/// it returns `Ok`.
pub unsafe fn overwritten<E>(
    len: usize,
    fill: impl FnOnce(&mut [f32]) -> Result<(), E>,
) -> Result<Vec<f32>, E> {
    let mut v = Vec::<f32>::with_capacity(len);
    // SAFETY: the allocation holds `len` floats; the caller's `fill` writes each one before
    // any read of it, so no value is observed before it is written.
    let s = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr(), len) };
    fill(s)?;
    // SAFETY: `fill` returned Ok, so all `len` elements are written.
    unsafe { v.set_len(len) };
    Ok(v)
}

/// `len` copies of `value`, written by the pool's threads side by side when `len` is large:
/// a serial zero fill of a language model's vocabulary-wide output (tens of MB) left the
/// other thread idle for a millisecond and more.
pub fn filled<T: Copy + Send + Sync>(len: usize, value: T) -> Vec<T> {
    let fill = |out: &mut [MaybeUninit<T>]| {
        for_each_chunk_mut(out, |_, c| {
            c.iter_mut().for_each(|v| {
                v.write(value);
            });
        });
    };
    // SAFETY: every chunk of the slice is written.
    unsafe { written(len, fill) }
}

/// `rows` copies of `row` one after another, written side by side when large (see
/// [`filled`]).
pub fn tiled<T: Copy + Send + Sync>(row: &[T], rows: usize) -> Vec<T> {
    let fill = |out: &mut [MaybeUninit<T>]| {
        for_each_row_mut(out, row.len(), |_, r| {
            r.iter_mut().zip(row).for_each(|(v, &x)| {
                v.write(x);
            });
        });
    };
    // SAFETY: every row of the slice is written (row.len() values each).
    unsafe { written(row.len() * rows, fill) }
}

/// `s` as the values written into it.
///
/// # Safety
/// Every element of `s` has been written.
pub unsafe fn assume_written<T>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: MaybeUninit<T> has T's layout, and the caller says every element holds a T.
    unsafe { &mut *(std::ptr::from_mut::<[MaybeUninit<T>]>(s) as *mut [T]) }
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
    rows_mut(out, row_len, out.len() >= SERIAL_BELOW, f);
}

/// As [`for_each_row_mut`], in parallel when `work` (the values or multiply-adds all calls
/// take together: a pooling writes a fraction of what it reads, a global one a value per
/// plane) reaches [`serial_below`] — the kernels' rule, lower on the pool.
pub fn for_each_row_mut_by_work<T: Send>(
    out: &mut [T],
    row_len: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    rows_mut(out, row_len, work >= serial_below(), f);
}

/// `f(row_index, row)` for each row of length `row_len` in `out`, in parallel when `split`.
fn rows_mut<T: Send>(
    out: &mut [T],
    row_len: usize,
    split: bool,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if row_len == 0 {
        return;
    }
    if split {
        out.par_chunks_mut(row_len)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        out.chunks_mut(row_len)
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

/// Runs `f(set, part)` for every part of every set, sets in order: no part of a set starts
/// before every part of the previous set has finished, the parts of one set run side by side
/// on up to `workers` threads. Built for recurrences (one set per time step, one part per slice
/// of the hidden units), whose steps are too short (tens of microseconds) for a rayon
/// fork-join each: the threads stay in one parallel region and meet at an atomic counter.
///
/// Parts are claimed in order from a shared ticket counter, so a thread that waits only waits
/// for parts another thread has claimed and is running: when the pool's other threads are busy
/// (or there are none), the calling thread claims every part itself and nothing deadlocks. A
/// panic in `f` releases the waiters and reaches the caller through the join.
pub fn lockstep(sets: usize, parts: usize, workers: usize, f: impl Fn(usize, usize) + Sync) {
    let total = sets * parts;
    let workers = workers.min(parts).min(rayon::current_num_threads());
    if workers < 2 {
        (0..total).for_each(|id| f(id / parts, id % parts));
        return;
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || {
        loop {
            let id = next.fetch_add(1, Ordering::Relaxed);
            if id >= total {
                return;
            }
            // Every part of the earlier sets done; Acquire pairs with their Release below,
            // so what they wrote is visible here.
            let base = id - id % parts;
            let mut spins = 0u32;
            while done.load(Ordering::Acquire) < base {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                spins += 1;
                if spins < LOCKSTEP_SPINS {
                    std::hint::spin_loop();
                } else {
                    // On a busy machine the thread we wait for may be descheduled: give it
                    // the core instead of spinning against it.
                    std::thread::yield_now();
                }
            }
            let guard = PanicFlag(&failed);
            f(id / parts, id % parts);
            std::mem::forget(guard);
            done.fetch_add(1, Ordering::Release);
        }
    };
    rayon::scope(|s| {
        for _ in 1..workers {
            s.spawn(|_| work());
        }
        work();
    });
}

/// Spins of a [`lockstep`] waiter before it starts yielding its core: a pause takes about a
/// hundred cycles, so this is some ten microseconds, about the imbalance between the two
/// halves of one step when both threads have a core.
const LOCKSTEP_SPINS: u32 = 1 << 8;

/// Sets the flag if dropped while unwinding out of a [`lockstep`] part (forgotten otherwise).
struct PanicFlag<'a>(&'a AtomicBool);

impl Drop for PanicFlag<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A mutable slice that the parts of a [`lockstep`] share: each part writes its own disjoint
/// pieces, and reads pieces other parts wrote only in a later set.
#[derive(Clone, Copy)]
pub struct Shared<'a, T> {
    ptr: *mut T,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: access goes through the unsafe `get` / `get_mut`, whose callers guarantee that no
// two threads touch the same elements unsynchronised.
unsafe impl<T: Send> Send for Shared<'_, T> {}
unsafe impl<T: Send> Sync for Shared<'_, T> {}

impl<'a, T> Shared<'a, T> {
    /// Shares `s` for the lifetime of the borrow.
    pub fn new(s: &'a mut [T]) -> Self {
        Shared {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            _slice: std::marker::PhantomData,
        }
    }

    /// Length of the whole slice.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `start..start + len`, read-only.
    ///
    /// # Safety
    /// No thread writes them while the returned slice lives.
    pub unsafe fn get(&self, start: usize, len: usize) -> &[T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "Shared: range out of bounds"
        );
        // SAFETY: in bounds (checked); the caller rules out concurrent writes.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), len) }
    }

    /// Elements `start..start + len`, writable.
    ///
    /// # Safety
    /// No other thread reads or writes them while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "Shared: range out of bounds"
        );
        // SAFETY: in bounds (checked); the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of its own, so a test's timing and thread count don't depend on other tests.
    fn pool_of(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap_or_else(|e| panic!("pool: {e}"))
    }

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

    /// A pass run with the pool held awake gives its result, nests, runs parallel work on
    /// every thread count, and an unwinding pass releases the helpers instead of hanging.
    #[test]
    fn pool_awake_runs_the_pass_and_releases_the_helpers() {
        for threads in [1, 2, 3] {
            let pool = pool_of(threads);
            let sum = pool.install(|| {
                with_pool_awake(|| {
                    let inner: u64 = with_pool_awake(|| (0..1000u64).into_par_iter().sum());
                    inner + (0..100_000u64).into_par_iter().map(|i| i % 7).sum::<u64>()
                })
            });
            let expected = 499_500 + (0..100_000u64).map(|i| i % 7).sum::<u64>();
            assert_eq!(sum, expected, "{threads} threads");
            let unwound = pool
                .install(|| std::panic::catch_unwind(|| with_pool_awake(|| panic!("pass failed"))));
            assert!(unwound.is_err(), "{threads} threads");
            // The pool still serves work: the helpers stopped when the pass unwound.
            assert_eq!(pool.install(|| with_pool_awake(|| 7)), 7);
        }
    }

    /// A pass moves to the pool once one takes the threshold, and back once one takes less
    /// than half of it. (On a pool of its own: the global one may be busy with other tests,
    /// and a pass waiting for it would take its wait as its duration.)
    #[test]
    fn passes_move_to_the_pool_by_their_duration() {
        let pool = pool_of(2);
        let from = std::time::Duration::from_millis(200);
        let mut p = PassPlacement::new(from);
        assert!(!p.on_pool());
        assert_eq!(p.run(|| 1), 1);
        assert!(!p.on_pool(), "a short pass stays on the caller");
        p.run(|| std::thread::sleep(from));
        assert!(p.on_pool(), "a long pass moves the next one to the pool");
        let sum = pool.install(|| p.run(|| (0..1000u64).into_par_iter().sum::<u64>()));
        assert_eq!(sum, 499_500);
        assert!(!p.on_pool(), "a short pass on the pool moves back");
        // With a return bar of its own (inference passes).
        let mut p = PassPlacement::with_return(from, from * 3 / 4);
        p.run(|| std::thread::sleep(from));
        assert!(p.on_pool());
        pool.install(|| p.run(|| std::thread::sleep(from * 4 / 5)));
        assert!(p.on_pool(), "a pass above the return bar stays on the pool");
        pool.install(|| p.run(|| std::thread::sleep(from / 2)));
        assert!(
            !p.on_pool(),
            "a pass below the return bar (above half) moves back"
        );
    }

    /// A measured placement alternates its probe's passes, then runs the round's others
    /// where the probe's fastest pass ran; a pass of `from` or longer goes to the pool.
    #[test]
    fn measured_passes_run_where_they_ran_faster() {
        // Inside a pool of its own, where a pass "on the pool" runs directly: each pass's
        // duration follows the place the placement chose, whatever else the machine runs.
        let pool = pool_of(2);
        let ms = std::time::Duration::from_millis;
        let (round, n) = (PLACEMENT_ROUND as usize, PLACEMENT_PROBE as usize);
        let probe: Vec<bool> = (0..n).map(|i| i % 2 == 1).collect();
        for pool_faster in [false, true] {
            let mut p = PassPlacement::measured(std::time::Duration::from_secs(60));
            let places: Vec<bool> = pool.install(|| {
                (0..round + n + 4)
                    .map(|_| {
                        let here = p.on_pool();
                        // 1 ms in the faster place, 3 in the other.
                        let took = ms(if here == pool_faster { 1 } else { 3 });
                        p.run(|| std::thread::sleep(took));
                        here
                    })
                    .collect()
            });
            assert_eq!(places[..n], probe[..], "the probe alternates");
            assert!(
                places[n..round].iter().all(|&x| x == pool_faster),
                "{pool_faster}"
            );
            assert_eq!(
                places[round..round + n],
                probe[..],
                "each round probes again"
            );
            assert!(places[round + n..].iter().all(|&x| x == pool_faster));
        }
        let mut p = PassPlacement::measured(ms(5));
        pool.install(|| p.run(|| std::thread::sleep(ms(6))));
        assert!(p.on_pool(), "a long probe pass sends the next to the pool");
    }

    /// Every part of a set sees everything the previous sets wrote, on one thread or several.
    #[test]
    fn lockstep_orders_sets() {
        for threads in [1, 2, 3] {
            let pool = pool_of(threads);
            let (sets, parts) = (200, 3);
            // Two rows by parity: set s reads row s % 2 whole and writes its own element of
            // the other row.
            let mut v = vec![0usize; 2 * parts];
            let shared = Shared::new(&mut v);
            pool.install(|| {
                lockstep(sets, parts, threads, |set, part| {
                    // SAFETY: the row read was written by the previous set only; each part
                    // writes its own element of the other row.
                    let seen = unsafe { shared.get(set % 2 * parts, parts) }.to_vec();
                    assert!(seen.iter().all(|&x| x == set), "set {set}: {seen:?}");
                    unsafe { shared.get_mut((set + 1) % 2 * parts + part, 1)[0] = set + 1 };
                })
            });
            assert_eq!(v[sets % 2 * parts..][..parts], vec![sets; parts]);
        }
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
