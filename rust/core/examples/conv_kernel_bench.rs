//! Times the convolution kernels alone (no operator or Python around them) on the 3×3 layers
//! of ResNet-18 v2 in issue #12's training workload (batch 32, 32×32 images: the stages run
//! at 8×8, 4×4, 2×2 and 1×1). Prints the best of the repeats in ms for the forward pass, the
//! data gradient and the weight gradient of each layer; then the forward pass alone of
//! MobileNet's depthwise and pointwise layers (inference, batch 1 and 16); then layers of
//! the zoo models at batch 1 through the GEMM path and through the tiled one
//! (`kernels::conv_tiled`, which inference uses for windows wider than 1×1 on images at
//! least `TILED_MIN_WIDTH` wide; 1×1 rows show why those stay on the GEMM). Meant for
//! profiling (`perf record`).
//!
//! ```text
//! cargo run --release -p mxfn-core --example conv_kernel_bench [-- BATCH [REPEATS]]
//! ```

use mxfn_core::kernels::conv::{
    conv_backward_data, conv_backward_weight, conv_forward, conv_forward_tiled, ConvGeom,
};
use mxfn_core::kernels::conv_tiled::FilterPanels;
use mxfn_core::kernels::par::on_pool;
use mxfn_core::Result;
use std::time::Instant;

/// A fixed pseudo-random fill in [-1, 1).
fn fill(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Best wall time of `reps` calls of `f` after one warm-up call, in ms.
fn best_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

/// A `k`×`k` convolution (padded to keep the size at stride 1) of `channels` → `filters` in
/// `groups` over `size`² images at `stride`.
fn geom(
    batch: usize,
    (channels, filters, groups): (usize, usize, usize),
    size: usize,
    k: usize,
    stride: usize,
) -> ConvGeom {
    let pad = k / 2;
    let out = (size + 2 * pad - k) / stride + 1;
    ConvGeom {
        batch,
        channels,
        filters,
        groups,
        input: [1, size, size],
        output: [1, out, out],
        kernel: [1, k, k],
        stride: [1, stride, stride],
        dilate: [1, 1, 1],
        pad: [0, pad, pad],
    }
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let batch = args.first().copied().unwrap_or(32);
    let reps = args.get(1).copied().unwrap_or(5);
    let layers = [
        (64, 64, 8, 1),
        (64, 128, 8, 2),
        (128, 128, 4, 1),
        (128, 256, 4, 2),
        (256, 256, 2, 1),
        (256, 512, 2, 2),
        (512, 512, 1, 1),
    ];
    println!("layer (c→f, size/stride)      forward  data-grad  weight-grad  (ms)");
    on_pool(|| {
        for (c, f, size, stride) in layers {
            let g = geom(batch, (c, f, 1), size, 3, stride);
            let x = fill(batch * c * g.in_len(), 1);
            let w = fill(g.weight_len(), 2);
            let dy = fill(batch * f * g.out_len(), 3);
            let (mut y, mut dx, mut dw) =
                (vec![0.0; dy.len()], vec![0.0; x.len()], vec![0.0; w.len()]);
            let mut db = vec![0.0; f];
            let fwd = best_ms(reps, || conv_forward(&g, &x, &w, None, &mut y, None))?;
            let data = best_ms(reps, || conv_backward_data(&g, &dy, &w, &mut dx))?;
            let weight = best_ms(reps, || {
                conv_backward_weight(&g, &x, &dy, &mut dw, Some(&mut db))
            })?;
            println!(
                "{c:>4}→{f:<4} {size:>2}²/{stride}             {fwd:8.3} {data:9.3} {weight:11.3}"
            );
        }
        // MobileNet's layers: (channels, filters, groups, size, kernel, stride).
        let mobile = [
            (8, 8, 8, 32, 3, 1),
            (16, 16, 16, 32, 3, 2),
            (32, 32, 32, 16, 3, 1),
            (128, 128, 128, 4, 3, 1),
            (256, 256, 256, 2, 3, 1),
            (96, 96, 96, 112, 3, 2),
            (144, 144, 144, 56, 3, 1),
            (8, 16, 1, 32, 1, 1),
            (128, 128, 1, 4, 1, 1),
            (16, 96, 1, 112, 1, 1),
            (144, 24, 1, 56, 1, 1),
            (32, 192, 1, 28, 1, 1),
            (320, 1280, 1, 7, 1, 1),
        ];
        println!("inference forward (c→f/groups, size, k/stride)   batch 1   batch 16  (ms)");
        for (c, f, groups, size, k, stride) in mobile {
            let mut ms = [0.0; 2];
            for (t, batch) in [1, 16].into_iter().enumerate() {
                let g = geom(batch, (c, f, groups), size, k, stride);
                let x = fill(batch * c * g.in_len(), 1);
                let w = fill(g.weight_len(), 2);
                let mut y = vec![0.0; batch * f * g.out_len()];
                ms[t] = best_ms(reps * 4, || conv_forward(&g, &x, &w, None, &mut y, None))?;
            }
            println!(
                "{c:>4}→{f:<4}/{groups:<4} {size:>3}² {k}/{stride}                   {:8.3} {:9.3}",
                ms[0], ms[1]
            );
        }
        // Layers of SqueezeNet, DenseNet-121, MobileNet v2 and Inception v3 at batch 1: the
        // GEMM path against the tiled one with the weight packed ahead (inference).
        let zoo = [
            (3, 64, 224, 3, 2),
            (16, 64, 55, 3, 1),
            (16, 64, 55, 1, 1),
            (64, 16, 55, 1, 1),
            (512, 1000, 13, 1, 1),
            (128, 32, 56, 3, 1),
            (256, 128, 56, 1, 1),
            (128, 32, 28, 3, 1),
            (64, 96, 35, 3, 1),
            (128, 32, 14, 3, 1),
            (1024, 128, 14, 1, 1),
            (128, 32, 7, 3, 1),
            (16, 96, 112, 1, 1),
            (144, 24, 56, 1, 1),
            (320, 1280, 7, 1, 1),
            (24, 144, 56, 1, 1),
            (144, 32, 28, 1, 1),
            (192, 32, 28, 1, 1),
            (64, 384, 14, 1, 1),
            (384, 64, 14, 1, 1),
            (576, 96, 14, 1, 1),
            (160, 960, 7, 1, 1),
            (960, 160, 7, 1, 1),
            (32, 32, 147, 3, 1),
            (80, 192, 71, 3, 1),
            (768, 192, 17, 1, 1),
        ];
        println!("batch-1 forward (c→f, size, k/stride)             gemm     tiled  (ms)");
        for (c, f, size, k, stride) in zoo {
            let g = geom(1, (c, f, 1), size, k, stride);
            let x = fill(c * g.in_len(), 1);
            let w = fill(g.weight_len(), 2);
            let b = fill(f, 4);
            let relu = |v: &mut [f32]| v.iter_mut().for_each(|x| *x = x.max(0.0));
            let mut y = vec![0.0; f * g.out_len()];
            let gemm = best_ms(reps * 4, || {
                conv_forward(&g, &x, &w, Some(&b), &mut y, Some(&relu))
            })?;
            let panels = FilterPanels::new(&w, f, g.col_rows());
            let tiled = best_ms(reps * 4, || {
                conv_forward_tiled(&g, &x, None, &panels, Some(&b), &mut y, Some(&relu))
            })?;
            println!("{c:>4}→{f:<4} {size:>3}² {k}/{stride}                        {gemm:8.3} {tiled:9.3}");
        }
        Ok(())
    })
}
