//! Reusable per-thread scratch buffers for kernels' large temporaries (convolution columns).
//!
//! A fresh multi-megabyte `vec![0.0; n]` per call costs a memset (or page faults) every
//! batch; these buffers keep their memory across calls and are only zeroed when they grow.
//! Their contents on loan are unspecified: callers overwrite every value they read.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

thread_local! {
    static POOL: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `len` values on loan from this thread's pool; returned on drop.
pub struct Scratch {
    buf: Vec<f32>,
    len: usize,
}

impl Scratch {
    /// Borrows a buffer of `len` values (stale contents; overwrite before reading).
    pub fn take(len: usize) -> Self {
        let mut buf = POOL.with(|p| {
            let mut p = p.borrow_mut();
            // The largest pooled buffer is the most likely to fit without growing.
            let best = (0..p.len()).max_by_key(|&i| p[i].len());
            best.map(|i| p.swap_remove(i)).unwrap_or_default()
        });
        if buf.len() < len {
            buf.resize(len, 0.0);
        }
        Scratch { buf, len }
    }
}

impl Deref for Scratch {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[..self.len]
    }
}

impl DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // try_with: during thread teardown the pool may already be gone; then just free.
        let _ = POOL.try_with(|p| p.borrow_mut().push(buf));
    }
}

#[cfg(test)]
mod tests {
    use super::Scratch;

    #[test]
    fn buffers_are_reused_and_sized() {
        let ptr = {
            let mut a = Scratch::take(1000);
            a[999] = 1.0;
            a.as_ptr()
        };
        let b = Scratch::take(10);
        assert_eq!(b.len(), 10);
        assert_eq!(b.as_ptr(), ptr); // the same memory, no new allocation
        let c = Scratch::take(5); // a second loan while b is out
        assert_eq!(c.len(), 5);
        assert_ne!(c.as_ptr(), b.as_ptr());
    }
}
