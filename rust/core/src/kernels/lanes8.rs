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
