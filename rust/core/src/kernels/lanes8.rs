//! Lane masks for the AVX2 kernels. AVX2 has no mask registers: a mask is a vector whose
//! lanes are each all ones or all zeros, as its masked loads, stores and blends read them.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// Float32 lanes per AVX2 vector.
pub(super) const LANES8: usize = 8;

/// The mask of a vector's first `n` lanes (all of them from 8 on).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn first_lanes(n: usize) -> __m256i {
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(LANES8) as i32), lanes)
}

/// The mask of the set bits of `bits` (lane `j` on when bit `j` is; bits from 8 on ignored).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn lanes_of(bits: u16) -> __m256i {
    let each = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let on = _mm256_and_si256(_mm256_set1_epi32(i32::from(bits)), each);
    _mm256_cmpeq_epi32(on, each)
}

/// Where an 8-lane load may read: a slice's addresses, for [`load_masked`].
#[derive(Clone, Copy)]
pub(super) struct Readable {
    start: usize,
    /// The last address an 8-lane load may start at (below `start` when none may).
    last: usize,
}

impl Readable {
    /// The loads that read inside `s`.
    pub(super) fn of(s: &[f32]) -> Readable {
        let start = s.as_ptr() as usize;
        let end = start + std::mem::size_of_val(s);
        Readable {
            start,
            // A slice's address is never 0, so with fewer than 8 values `last` < `start`.
            last: end.saturating_sub(LANES8 * std::mem::size_of::<f32>()),
        }
    }

    /// Whether the 8 values from `at` lie inside the slice.
    #[inline]
    pub(super) fn holds(&self, at: *const f32) -> bool {
        let a = at as usize;
        a >= self.start && a <= self.last
    }
}

/// `_mm256_maskload_ps(at, mask)`: the lanes of `mask`, the others 0. Where the 8 values
/// lie inside one of `readable`'s slices, a plain load and an AND give the same bits: AMD's
/// Zen 1 runs the masked load (`VMASKMOVPS` from memory) microcoded, about 13 cycles against
/// 1 for a plain load, and the depthwise kernels spent most of their time in it there.
///
/// # Safety
/// The CPU supports AVX2; the lanes under `mask` may be read at `at`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn load_masked(at: *const f32, mask: __m256i, readable: &[Readable]) -> __m256 {
    // SAFETY: the caller's contract, or all 8 values inside a slice.
    unsafe {
        if readable.iter().any(|r| r.holds(at)) {
            _mm256_and_ps(_mm256_loadu_ps(at), _mm256_castsi256_ps(mask))
        } else {
            _mm256_maskload_ps(at, mask)
        }
    }
}

/// Stores `v`'s first `n` lanes at `p` (all 8 from 8 on), through plain stores: a whole
/// vector, or runs of 4, 2 and 1 lanes. AMD's masked store to memory (`VMASKMOVPS`) is
/// microcoded, a dozen cycles and more against one, and the first layers of the zoo CNNs (3
/// channels, few rows of `k`) spent most of their time in it; the pooling rows' last vectors
/// went through the stack and a `memcpy` call instead.
///
/// # Safety
/// The CPU supports AVX2; `p` may be written for the stored lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn store_first(p: *mut f32, n: usize, v: __m256) {
    // SAFETY (whole body): the caller's contract; each store writes lanes below n.
    unsafe {
        if n >= LANES8 {
            _mm256_storeu_ps(p, v);
            return;
        }
        let (mut p, mut x) = (p, _mm256_castps256_ps128(v));
        if n & 4 != 0 {
            _mm_storeu_ps(p, x);
            (p, x) = (p.add(4), _mm256_extractf128_ps::<1>(v));
        }
        if n & 2 != 0 {
            _mm_store_sd(p.cast(), _mm_castps_pd(x));
            (p, x) = (p.add(2), _mm_movehl_ps(x, x));
        }
        if n & 1 != 0 {
            _mm_store_ss(p, x);
        }
    }
}

/// Stores the lanes of `v` that `bits` selects (see [`lanes_of`]) at `p`, lane `j` at
/// `p + j`: all 8 through a plain store, none not at all (see [`store_first`]).
///
/// # Safety
/// The CPU supports AVX2; `p + j` may be written for every selected lane `j`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn store_lanes(p: *mut f32, bits: u16, v: __m256) {
    // SAFETY: the caller's contract.
    unsafe {
        match bits & 0xff {
            0 => {}
            0xff => _mm256_storeu_ps(p, v),
            b => _mm256_maskstore_ps(p, lanes_of(b), v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `store_first` writes lanes `..n` in order and nothing past them, for every `n`.
    #[test]
    fn store_first_writes_the_first_lanes_only() {
        if !super::super::has_avx2_fma() {
            return;
        }
        for n in 0..=10 {
            let mut out = [-1.0f32; 12];
            // SAFETY: AVX2 (checked); out holds 12 values from 2, 8 of them stored at most.
            unsafe {
                let v = _mm256_setr_ps(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0);
                store_first(out.as_mut_ptr().add(2), n, v);
            }
            let kept = n.min(LANES8);
            let want: Vec<f32> = (0..12)
                .map(|i| {
                    if (2..2 + kept).contains(&i) {
                        (i - 2) as f32
                    } else {
                        -1.0
                    }
                })
                .collect();
            assert_eq!(out[..], want[..], "n = {n}");
        }
    }

    #[test]
    fn load_masked_reads_the_masked_lanes_inside_or_outside_a_slice() {
        if !super::super::has_avx2_fma() {
            return;
        }
        let data: Vec<f32> = (0..20).map(|i| i as f32 + 0.5).collect();
        let row = &data[4..14];
        let read = [Readable::of(row)];
        assert!(read[0].holds(row.as_ptr()) && read[0].holds(row[2..].as_ptr()));
        assert!(!read[0].holds(row[3..].as_ptr()) && !Readable::of(&row[..7]).holds(row.as_ptr()));
        for from in 0..=6 {
            for bits in [0u16, 0x0f, 0xf0, 0x5a, 0xff] {
                // SAFETY: AVX2 (checked); the masked lanes from `from` lie in `row`'s
                // first 10 values or `data` beyond (at most 4 + 6 + 8 = 18 < 20).
                let got: [f32; 8] = unsafe {
                    let v = load_masked(row.as_ptr().add(from), lanes_of(bits), &read);
                    std::mem::transmute(v)
                };
                for (j, g) in got.iter().enumerate() {
                    let want = if bits >> j & 1 == 1 {
                        row.as_ptr().wrapping_add(from + j)
                    } else {
                        std::ptr::null()
                    };
                    // SAFETY: in `data` (see above).
                    let want = if want.is_null() {
                        0.0
                    } else {
                        unsafe { *want }
                    };
                    assert_eq!(
                        g.to_bits(),
                        want.to_bits(),
                        "from {from} bits {bits:#x} lane {j}"
                    );
                }
            }
        }
    }
}
