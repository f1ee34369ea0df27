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

/// Stores `v`'s first `n` lanes at `p` (all 8 from 8 on). A whole vector takes a plain
/// store: AMD's masked store to memory (`VMASKMOVPS`) is microcoded, a dozen cycles and
/// more against one, and the first layers of the zoo CNNs (3 channels, few rows of `k`)
/// spent most of their time in it.
///
/// # Safety
/// The CPU supports AVX2; `p` may be written for the stored lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn store_first(p: *mut f32, n: usize, v: __m256) {
    // SAFETY: the caller's contract.
    unsafe {
        if n >= LANES8 {
            _mm256_storeu_ps(p, v);
        } else {
            _mm256_maskstore_ps(p, first_lanes(n), v);
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
