//! Random numbers from one global seed (`mx.random.seed(n)`): the same seed gives the same
//! numbers, whatever the thread count.
//!
//! Every draw takes the next ticket of the global stream; its values come from ChaCha8
//! keyed by (seed, ticket), and a large draw is cut into fixed chunks, each starting at its
//! own position of that stream, so chunks can be filled in parallel and still be identical.

use super::{DType, NDArray};
use crate::error::{Error, Result};
use crate::kernels::par::{self, CHUNK};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};
use rayon::prelude::*;
use std::sync::Mutex;

struct State {
    seed: u64,
    ticket: u64,
}

static STATE: Mutex<State> = Mutex::new(State { seed: 0, ticket: 0 });

fn lock() -> std::sync::MutexGuard<'static, State> {
    // A poisoned lock only means another thread panicked mid-draw; the state is two integers
    // and always valid, so keep going.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Seeds the global generator and restarts its stream.
pub fn seed(seed: u64) {
    let mut s = lock();
    s.seed = seed;
    s.ticket = 0;
}

/// A fresh generator for one draw: (seed, next ticket).
pub fn next_key() -> (u64, u64) {
    let mut s = lock();
    s.ticket += 1;
    (s.seed, s.ticket)
}

/// A generator for chunk `chunk` of the draw `key`.
pub fn chunk_rng(key: (u64, u64), chunk: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(key.0);
    rng.set_stream(key.1);
    // 2^40 words per chunk: far more than a chunk of CHUNK samples can consume.
    rng.set_word_pos((chunk as u128) << 40);
    rng
}

/// Fills `n` values from `dist`, in parallel fixed chunks.
pub fn sample_f64<D: Distribution<f64> + Sync>(n: usize, dist: &D) -> Vec<f64> {
    let key = next_key();
    let mut out = vec![0.0; n];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut rng = chunk_rng(key, c);
            chunk.iter_mut().for_each(|v| *v = rng.sample(dist));
        });
    out
}

/// A random permutation of `0..n` (Fisher–Yates from the global stream).
pub fn permutation(n: usize) -> Vec<usize> {
    let mut rng = chunk_rng(next_key(), 0);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        p.swap(i, rng.gen_range(0..=i));
    }
    p
}

/// Uniform values in `[low, high)`.
pub fn uniform(low: f64, high: f64, shape: &[usize], dtype: DType) -> Result<NDArray> {
    if !(low.is_finite() && high.is_finite() && low <= high) {
        return Err(Error::invalid(
            "random_uniform: low/high",
            "finite low <= high",
            format!("low={low}, high={high}"),
        ));
    }
    let n = shape.iter().product();
    let vals = if low == high {
        vec![low; n]
    } else {
        let d = Uniform::new(low, high);
        sample_f64(n, &d)
    };
    NDArray::from_f64_slice(shape, &vals, dtype)
}

/// Normal values with mean `loc` and standard deviation `scale`.
pub fn normal(loc: f64, scale: f64, shape: &[usize], dtype: DType) -> Result<NDArray> {
    let bad_scale = || {
        Error::invalid(
            "random_normal: scale",
            "a finite non-negative standard deviation",
            scale.to_string(),
        )
    };
    if !(scale.is_finite() && scale >= 0.0) {
        return Err(bad_scale());
    }
    let d = Normal::new(loc, scale).map_err(|_| bad_scale())?;
    if !loc.is_finite() {
        return Err(Error::invalid(
            "random_normal: loc",
            "a finite mean",
            loc.to_string(),
        ));
    }
    NDArray::from_f64_slice(shape, &sample_f64(shape.iter().product(), &d), dtype)
}

/// `n` values `f(u)`, u uniform in [0, 1), from the global seeded stream (mx.random.seed):
/// chunk k of `par::CHUNK` values comes from its own position of the draw, as in
/// `tensor::random`, so the result does not depend on the thread count.
pub(crate) fn seeded_uniform(n: usize, f: impl Fn(f32) -> f32 + Sync + Send) -> Vec<f32> {
    let key = next_key();
    let mut out = vec![0.0f32; n];
    par::for_each_chunk_mut(&mut out, |start, chunk| {
        for (k, sub) in chunk.chunks_mut(par::CHUNK).enumerate() {
            let mut rng = chunk_rng(key, start / par::CHUNK + k);
            sub.iter_mut().for_each(|v| *v = f(rng.gen::<f32>()));
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test touches the global stream, so parallel tests cannot interleave with it.
    #[test]
    fn same_seed_same_numbers_and_sane_moments() {
        seed(42);
        let a = uniform(-1.0, 1.0, &[3 * CHUNK + 5], DType::Float32)
            .unwrap()
            .to_f64_vec();
        let b = normal(2.0, 3.0, &[50_000], DType::Float64)
            .unwrap()
            .to_f64_vec();
        seed(42);
        assert_eq!(
            a,
            uniform(-1.0, 1.0, &[3 * CHUNK + 5], DType::Float32)
                .unwrap()
                .to_f64_vec()
        );
        assert_eq!(
            b,
            normal(2.0, 3.0, &[50_000], DType::Float64)
                .unwrap()
                .to_f64_vec()
        );
        assert!(a.iter().all(|&v| (-1.0..1.0).contains(&v)));
        let mean = b.iter().sum::<f64>() / b.len() as f64;
        let var = b.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / b.len() as f64;
        assert!(
            (mean - 2.0).abs() < 0.05 && (var.sqrt() - 3.0).abs() < 0.05,
            "{mean} {var}"
        );
        let p = permutation(10);
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..10).collect::<Vec<_>>());
        assert!(uniform(1.0, 0.0, &[2], DType::Float32).is_err());
        assert!(normal(0.0, -1.0, &[2], DType::Float32).is_err());
    }
}
