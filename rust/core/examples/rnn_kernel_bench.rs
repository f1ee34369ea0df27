//! Times the fused-RNN kernels alone (no operator or Python around them) on issue #13's LSTM
//! language-model sizes: 2 layers of 200 units over 200 inputs, float32. Prints the best of
//! the repeats in ms for the training forward and forward + backward at batch 32, and the
//! inference forward of one sequence; meant for profiling (`perf record` on this binary).
//!
//! ```text
//! cargo run --release -p mxfn-core --example rnn_kernel_bench [-- SEQ [REPEATS [PHASE]]]
//! ```
//!
//! PHASE (`fwd`, `fwdbwd`, `infer`; default all) runs one phase only.

use mxfn_core::kernels::par::on_pool;
use mxfn_core::kernels::rnn::{rnn_backward, rnn_forward, RnnConfig, RnnDims, RnnInputs, RnnMode};
use mxfn_core::Result;
use std::time::Instant;

/// A fixed pseudo-random fill in [-scale, scale).
fn fill(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Best wall time of `reps` calls of `f` after two warm-up calls, in ms.
fn best_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    f()?;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

fn phase(name: &str, seq: usize, batch: usize, reps: usize) -> Result<()> {
    let dims = RnnDims {
        mode: RnnMode::Lstm,
        layers: 2,
        dirs: 1,
        seq,
        batch,
        input: 200,
        hidden: 200,
    };
    let cfg = RnnConfig { dims, clip: None };
    let x = fill(seq * batch * dims.input, 1, 1.0);
    let params = fill(dims.param_len(), 2, 0.1);
    let h0 = vec![0.0f32; dims.state_len()];
    let c0 = h0.clone();
    let lens = vec![seq; batch];
    let dy = fill(seq * batch * dims.hidden, 3, 1.0);
    let inp = RnnInputs {
        x: &x,
        params: &params,
        h0: &h0,
        c0: Some(&c0),
        lens: &lens,
    };
    let ms = on_pool(|| {
        best_ms(reps, || {
            let o = rnn_forward(&cfg, &inp, None, name != "infer")?;
            if name == "fwdbwd" {
                let g = rnn_backward(&cfg, &inp, &o.y, &o.reserve, false, &dy, None, None, true)?;
                std::hint::black_box(g);
            }
            std::hint::black_box(o);
            Ok(())
        })
    })?;
    println!("{name:<7} T={seq:<3} N={batch:<3} {ms:8.3} ms");
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seq = args.first().and_then(|a| a.parse().ok()).unwrap_or(35);
    let reps = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let only = args.get(2).map(String::as_str);
    for (name, batch) in [("fwd", 32), ("fwdbwd", 32), ("infer", 1)] {
        if only.is_none_or(|o| o == name) {
            phase(name, seq, batch, if batch == 1 { 5 * reps } else { reps })?;
        }
    }
    Ok(())
}
