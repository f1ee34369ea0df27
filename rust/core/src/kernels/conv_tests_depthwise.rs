//! Unit tests of the depthwise convolution kernels (`depthwise`, `depthwise_vector`) against
//! the GEMM path, the naive sum and each other.

use super::*;
use crate::kernels::depthwise::depthwise_parallel;

/// The depthwise kernels against the im2col + GEMM path on a parallel-sized batch.
#[test]
fn depthwise_matches_the_gemm_path() {
    let mut g = geoms()[11];
    assert!(g.is_depthwise_2d());
    (g.batch, g.channels, g.filters, g.groups) = (8, 32, 32, 32);
    (g.input, g.output) = ([1, 17, 17], [1, 9, 9]);
    assert!(depthwise_parallel(&g));
    let x = vals(g.batch * g.channels * g.in_len(), 12);
    let w = vals(g.weight_len(), 13);
    let b = vals(g.filters, 14);
    let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
    let mut want = y.clone();
    let relu = |v: &mut [f32]| v.iter_mut().for_each(|a| *a = a.max(0.0));
    conv_forward(&g, &x, &w, Some(&b), &mut y, Some(&relu)).unwrap();
    conv_forward_gemm(&g, &x, &w, Some(&b), &mut want, Some(&relu)).unwrap();
    close(&y, &want);
}

/// The depthwise forward's phase layout against the naive sum: strides 1 to 3 with uneven
/// pads and dilations, planes too large for one stack (several stacks per channel, the last
/// one short), tiny planes stacked across the batch and an input of width 0.
#[test]
fn depthwise_phases_match_the_naive_sum() {
    let dw = |batch, input, kernel, stride, dilate, pad| {
        mk(batch, 3, 3, 3, input, kernel, stride, dilate, pad)
    };
    let cases = [
        dw(5, [1, 70, 61], [1, 3, 3], [1, 2, 2], [1; 3], [0, 1, 1]),
        dw(7, [1, 90, 90], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        dw(3, [1, 11, 13], [1, 5, 4], [1, 3, 2], [1, 2, 1], [0, 2, 3]),
        dw(4, [1, 9, 10], [1, 2, 3], [1, 3, 3], [1, 1, 2], [0, 0, 1]),
        dw(6, [1, 2, 2], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        dw(2, [1, 1, 1], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        // an empty input row: the output is the padding's (bias only)
        dw(2, [1, 3, 0], [1, 3, 1], [1; 3], [1; 3], [0, 1, 1]),
    ];
    for g in cases {
        assert!(g.is_depthwise_2d());
        let x = vals(g.batch * g.channels * g.in_len(), 21);
        let w = vals(g.weight_len(), 22);
        let b = vals(g.filters, 23);
        for bias in [None, Some(&b[..])] {
            let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
            conv_forward(&g, &x, &w, bias, &mut y, None).unwrap();
            close(&y, &naive_forward(&g, &x, &w, bias));
        }
    }
}

/// The AVX-512 or AVX2 depthwise kernels (`depthwise_vector`) against the stacked one, bit for
/// bit (they sum the same taps in the same order), and against the naive sum: whole planes
/// in a vector (4×4, 2×2 with several planes per vector whose channels wrap into the next
/// sample, 1×1, stride 2 from 4×4, uneven pads), rows in vectors (7 to 112 wide, stride 2
/// columns, stride 2 and 3 rows, dilation, a 5×4 window; narrow stride-2 rows in pairs), at
/// batch 1 and in parallel, with bias and relu.
#[test]
fn narrow_depthwise_kernels_match_the_stacked_one() {
    use crate::kernels::depthwise::stacked_forward;
    use crate::kernels::depthwise_vector::{vector_kernel, VectorKernel};
    let dw = |batch, channels, input, kernel, stride, dilate, pad| {
        mk(
            batch, channels, channels, channels, input, kernel, stride, dilate, pad,
        )
    };
    let pad1 = [0, 1, 1];
    let cases = [
        (
            dw(16, 128, [1, 4, 4], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(1, 128, [1, 4, 4], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(3, 5, [1, 2, 2], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(16, 256, [1, 2, 2], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(2, 7, [1, 1, 1], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(4, 6, [1, 4, 4], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(2, 3, [1, 3, 5], [1, 2, 3], [1, 1, 2], [1; 3], [0, 0, 2]),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(16, 32, [1, 16, 16], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(1, 16, [1, 32, 32], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(3, 9, [1, 12, 12], [1, 3, 3], [1; 3], [1, 2, 2], [0, 2, 2]),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 4, [1, 9, 13], [1, 5, 4], [1, 3, 2], [1; 3], [0, 2, 1]),
            VectorKernel::RowsInVector,
        ),
        (
            dw(8, 40, [1, 7, 7], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 3, [1, 6, 31], [1, 3, 3], [1, 1, 2], [1; 3], [0, 0, 0]),
            VectorKernel::RowsInVector,
        ),
        // rows of several vectors: a short last vector, stride 2, a wider window, dilation
        (
            dw(3, 5, [1, 9, 40], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 4, [1, 13, 70], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(
                2,
                3,
                [1, 11, 50],
                [1, 5, 4],
                [1, 2, 1],
                [1, 1, 2],
                [0, 2, 3],
            ),
            VectorKernel::RowsInVector,
        ),
        (
            dw(4, 16, [1, 56, 56], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        // stride-2 rows through split rows: taps 3 and 1 columns left of the row (dilation
        // 2, pad 3), a row ending in an odd column, and MobileNet's 3×3 at 112²
        (
            dw(
                2,
                3,
                [1, 11, 37],
                [1, 3, 5],
                [1, 2, 2],
                [1, 1, 2],
                [0, 1, 3],
            ),
            VectorKernel::RowsInVector,
        ),
        (
            dw(1, 4, [1, 112, 112], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        // stride-2 rows of at most 8 values, two to a vector: whole tiles of 8 rows, 7 rows
        // (the last pair half empty), 11 rows at row stride 1 (a tile of 3 after one of 8),
        // a wider dilated window
        (
            dw(16, 64, [1, 16, 16], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 5, [1, 14, 14], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(3, 4, [1, 11, 9], [1, 3, 3], [1, 1, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 3, [1, 9, 12], [1, 5, 4], [1, 2, 2], [1, 1, 2], [0, 2, 3]),
            VectorKernel::RowsInVector,
        ),
        // AVX2's 8 lanes: planes of exactly 8 values (one to a vector, 3×3 and a 2×3
        // window), 1×2 planes four to a vector wrapping into the next sample, 3×3 planes
        // (two vectors in, one out); rows of 8 (whole vectors), of 9 (a last vector of
        // one), stride-2 rows of 4 and 3 in pairs
        (
            dw(3, 5, [1, 2, 4], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(2, 3, [1, 2, 4], [1, 2, 3], [1, 2, 2], [1; 3], [0, 0, 1]),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(2, 7, [1, 1, 2], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(2, 3, [1, 3, 3], [1, 3, 3], [1; 3], [1; 3], [0, 0, 1]),
            VectorKernel::PlanesInVector,
        ),
        (
            dw(4, 8, [1, 8, 8], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 3, [1, 5, 9], [1, 3, 3], [1; 3], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 6, [1, 8, 8], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
        (
            dw(2, 3, [1, 6, 6], [1, 3, 3], [1, 2, 2], [1; 3], pad1),
            VectorKernel::RowsInVector,
        ),
    ];
    let has_vectors = crate::kernels::has_avx512() || crate::kernels::has_avx2_fma();
    let relu = |v: &mut [f32]| v.iter_mut().for_each(|a| *a = a.max(0.0));
    for (g, kernel) in cases {
        assert!(g.is_depthwise_2d());
        assert_eq!(vector_kernel(&g), has_vectors.then_some(kernel), "{g:?}");
        let x = vals(g.batch * g.channels * g.in_len(), 41);
        let w = vals(g.weight_len(), 42);
        let b = vals(g.filters, 43);
        let epilogue: &(dyn Fn(&mut [f32]) + Sync) = &relu;
        for (bias, epi) in [(None, None), (Some(&b[..]), Some(epilogue))] {
            let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
            let mut want = y.clone();
            conv_forward(&g, &x, &w, bias, &mut y, epi).unwrap();
            stacked_forward(&g, &x, &w, bias, &mut want, epi);
            assert_eq!(
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{g:?}"
            );
            let mut naive = naive_forward(&g, &x, &w, bias);
            if epi.is_some() {
                relu(&mut naive);
            }
            close(&y, &naive);
        }
    }
}
