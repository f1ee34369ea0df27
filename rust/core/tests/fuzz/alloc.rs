//! The counting global allocator of the fuzz binary: live bytes, a resettable peak, and hard
//! limits past which a request is refused.
//!
//! A refused request returns null; Rust then aborts the process ("memory allocation of N bytes
//! failed"). That is why every fuzz input runs in a child process (see `child.rs`): the parent
//! test sees the abort, reads the input the child recorded before running it, and fails with
//! that reproducer instead of the whole test binary dying silently.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// One request above this is refused. No reader needs a single 1 GiB buffer for a fuzz input
/// (at most 256 KiB), and refusing it keeps a size read from the input from reaching the OS.
pub const HARD_SINGLE: usize = 1 << 30;
/// Live bytes above this are refused too, so a flood of small allocations (a count read from
/// the input, one `String` each) cannot take the machine down either (2 GiB per child; at most
/// two children run at a time on a 2-core machine).
pub const HARD_TOTAL: usize = 2 << 30;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// `System`, counting.
pub struct Counting;

/// Accounts for `n` more live bytes; false (nothing accounted) when a limit refuses them.
fn reserve(request: usize, n: usize) -> bool {
    if request > HARD_SINGLE {
        return false;
    }
    let now = CURRENT.fetch_add(n, Relaxed).saturating_add(n);
    if now > HARD_TOTAL {
        CURRENT.fetch_sub(n, Relaxed);
        return false;
    }
    PEAK.fetch_max(now, Relaxed);
    true
}

fn release(n: usize) {
    CURRENT.fetch_sub(n, Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size(), layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged (the caller upholds `alloc`'s contract).
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size(), layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        release(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !reserve(new_size, new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size > old {
            if p.is_null() {
                release(new_size - old);
            }
        } else if !p.is_null() {
            release(old - new_size);
        }
        p
    }
}

/// Live bytes now.
pub fn current() -> usize {
    CURRENT.load(Relaxed)
}

/// Starts a new peak measurement at the current live bytes.
pub fn reset_peak() {
    PEAK.store(CURRENT.load(Relaxed), Relaxed);
}

/// The most live bytes since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}
