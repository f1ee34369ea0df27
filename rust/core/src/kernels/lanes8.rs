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
}
