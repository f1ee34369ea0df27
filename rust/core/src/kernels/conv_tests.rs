//! Unit tests of the convolution kernels (im2col / GEMM, packed, tiled, direct; the depthwise
//! kernels in `conv_tests_depthwise`).
use super::*;
use crate::kernels::conv_packed::PackedFilters;
use crate::kernels::conv_tiled::FilterPanels;
use crate::kernels::unary::AffineAct;

/// The depthwise kernels' tests, which share this module's reference sums.
#[path = "conv_tests_depthwise.rs"]
mod depthwise;

fn vals(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 8.0)
        .collect()
}

/// Naive convolution: y[n, f, o] = Σ_{c in group, k} w[f, c, k] · x[n, c, o·s + k·d − p].
fn naive_forward(g: &ConvGeom, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f32> {
    let (cg, fg) = (g.channels / g.groups, g.filters / g.groups);
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [kd, kh, kw] = g.kernel;
    let mut y = vec![0.0f32; g.batch * g.filters * g.out_len()];
    for n in 0..g.batch {
        for f in 0..g.filters {
            let grp = f / fg;
            for z in 0..od {
                for yy in 0..oh {
                    for xx in 0..ow {
                        let mut s = b.map_or(0.0, |b| b[f]);
                        for ci in 0..cg {
                            let c = grp * cg + ci;
                            for a in 0..kd {
                                for bb in 0..kh {
                                    for e in 0..kw {
                                        let pz = (z * g.stride[0] + a * g.dilate[0]) as isize
                                            - g.pad[0] as isize;
                                        let py = (yy * g.stride[1] + bb * g.dilate[1]) as isize
                                            - g.pad[1] as isize;
                                        let px = (xx * g.stride[2] + e * g.dilate[2]) as isize
                                            - g.pad[2] as isize;
                                        if pz < 0
                                            || py < 0
                                            || px < 0
                                            || pz as usize >= id
                                            || py as usize >= ih
                                            || px as usize >= iw
                                        {
                                            continue;
                                        }
                                        let xi =
                                            ((n * g.channels + c) * id + pz as usize) * ih * iw
                                                + py as usize * iw
                                                + px as usize;
                                        let wi = (((f * cg + ci) * kd + a) * kh + bb) * kw + e;
                                        s += w[wi] * x[xi];
                                    }
                                }
                            }
                        }
                        y[((n * g.filters + f) * od + z) * oh * ow + yy * ow + xx] = s;
                    }
                }
            }
        }
    }
    y
}

/// A geometry with its output sizes worked out.
#[allow(clippy::too_many_arguments)]
pub(in crate::kernels) fn mk(
    batch: usize,
    channels: usize,
    filters: usize,
    groups: usize,
    input: [usize; 3],
    kernel: [usize; 3],
    stride: [usize; 3],
    dilate: [usize; 3],
    pad: [usize; 3],
) -> ConvGeom {
    let output = [0, 1, 2]
        .map(|i| conv_out_size(input[i], kernel[i], stride[i], dilate[i], pad[i]).unwrap());
    ConvGeom {
        batch,
        channels,
        filters,
        groups,
        input,
        output,
        kernel,
        stride,
        dilate,
        pad,
    }
}

fn geoms() -> Vec<ConvGeom> {
    vec![
        mk(2, 3, 4, 1, [1, 5, 6], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        mk(
            2,
            2,
            3,
            1,
            [1, 7, 5],
            [1, 3, 2],
            [1, 2, 2],
            [1; 3],
            [0, 1, 0],
        ),
        mk(
            1,
            4,
            6,
            2,
            [1, 5, 5],
            [1, 3, 3],
            [1; 3],
            [1, 2, 2],
            [0, 2, 1],
        ),
        mk(
            3,
            2,
            2,
            1,
            [1, 1, 9],
            [1, 1, 3],
            [1, 1, 2],
            [1; 3],
            [0, 0, 1],
        ),
        mk(2, 3, 2, 1, [1, 4, 4], [1; 3], [1; 3], [1; 3], [0; 3]),
        mk(
            1,
            2,
            2,
            2,
            [3, 4, 4],
            [2, 2, 3],
            [1, 2, 1],
            [1; 3],
            [1, 0, 1],
        ),
        mk(5, 1, 2, 1, [1, 3, 3], [1, 3, 3], [1; 3], [1; 3], [0, 2, 2]),
        // plain (no padding, stride or dilation): the contiguous-run fast path
        mk(3, 2, 4, 1, [1, 7, 6], [1, 3, 2], [1; 3], [1; 3], [0; 3]),
        mk(2, 4, 2, 2, [1, 5, 5], [1, 2, 2], [1; 3], [1; 3], [0; 3]),
        mk(2, 3, 2, 1, [1, 1, 9], [1, 1, 4], [1; 3], [1; 3], [0; 3]),
        // depthwise (the direct kernels): MobileNet's 3×3 pad 1 at stride 1 and 2, a
        // dilated one, a 1-D one, and one channel
        mk(2, 4, 4, 4, [1, 6, 7], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        mk(
            3,
            3,
            3,
            3,
            [1, 7, 8],
            [1, 3, 3],
            [1, 2, 2],
            [1; 3],
            [0, 1, 1],
        ),
        mk(
            1,
            2,
            2,
            2,
            [1, 7, 7],
            [1, 3, 2],
            [1, 1, 2],
            [1, 2, 2],
            [0, 2, 0],
        ),
        mk(2, 3, 3, 3, [1, 1, 9], [1, 1, 3], [1; 3], [1; 3], [0, 0, 1]),
        mk(2, 1, 1, 1, [1, 5, 5], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        // 1×1 over enough positions for the direct per-sample products, one and two groups
        mk(3, 4, 5, 1, [1, 9, 8], [1; 3], [1; 3], [1; 3], [0; 3]),
        mk(2, 4, 6, 2, [1, 8, 9], [1; 3], [1; 3], [1; 3], [0; 3]),
        // border taps that read only padding, cut off (`conv_trim`): 3×3 over 1×1, the same
        // at stride 2 in two groups, 5×5 over 1×3 (a row of five taps kept), a 3-D kernel
        // over one depth slice (a row of three)
        mk(2, 3, 4, 1, [1, 1, 1], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]),
        mk(
            2,
            4,
            2,
            2,
            [1, 1, 1],
            [1, 3, 3],
            [1, 2, 2],
            [1; 3],
            [0, 1, 1],
        ),
        mk(1, 2, 3, 1, [1, 1, 3], [1, 5, 5], [1; 3], [1; 3], [0, 2, 2]),
        mk(1, 2, 2, 1, [1, 1, 2], [3, 3, 3], [1; 3], [1; 3], [1, 1, 1]),
    ]
}

/// The direct 1×1 products against the naive sum on a batch large enough that samples run
/// side by side, with bias and an epilogue.
#[test]
fn pointwise_samples_in_parallel_match_the_naive_sum() {
    let mut g = geoms()[0];
    (g.batch, g.channels, g.filters, g.groups) = (8, 16, 32, 2);
    (g.input, g.output, g.kernel, g.pad) = ([1, 16, 16], [1, 16, 16], [1; 3], [0; 3]);
    assert!(g.is_pointwise() && g.parallel());
    let x = vals(g.batch * g.channels * g.in_len(), 31);
    let w = vals(g.weight_len(), 32);
    let b = vals(g.filters, 33);
    let relu = |v: &mut [f32]| v.iter_mut().for_each(|a| *a = a.max(0.0));
    let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
    conv_forward(&g, &x, &w, Some(&b), &mut y, Some(&relu)).unwrap();
    let mut want = naive_forward(&g, &x, &w, Some(&b));
    relu(&mut want);
    close(&y, &want);
}

/// A 1×1 layer whose output outgrows the cache runs by blocks of positions
/// (`conv_pointwise::blocks`), on the caller and split across a 2-thread pool: the same bits
/// as one product over every position followed by the bias and the epilogue.
#[test]
fn pointwise_blocks_match_one_product() {
    use crate::kernels::gemm::gemm_split;
    use crate::kernels::tuning::POINTWISE_BLOCKS_FROM;
    for (batch, c, f, side) in [(1, 16, 96, 56), (2, 24, 80, 61)] {
        let g = mk(
            batch,
            c,
            f,
            1,
            [1, side, side],
            [1; 3],
            [1; 3],
            [1; 3],
            [0; 3],
        );
        let l = g.out_len();
        assert!(g.is_pointwise() && f * l >= POINTWISE_BLOCKS_FROM);
        let x = vals(batch * c * l, 41);
        let w = vals(f * c, 42);
        let b = vals(f, 43);
        let relu = |v: &mut [f32]| v.iter_mut().for_each(|a| *a = a.max(0.0));
        let mut want = vec![0.0f32; batch * f * l];
        for (x_n, y_n) in x.chunks(c * l).zip(want.chunks_mut(f * l)) {
            let (a, bm) = (MatRef::row_major(&w, f, c), MatRef::row_major(x_n, c, l));
            gemm_split(a, bm, y_n, false, usize::MAX).unwrap();
            for (row, bias) in y_n.chunks_mut(l).zip(&b) {
                row.iter_mut().for_each(|v| *v += bias);
                relu(row);
            }
        }
        let run = || {
            let mut y = vec![f32::NAN; batch * f * l];
            conv_forward(&g, &x, &w, Some(&b), &mut y, Some(&relu)).unwrap();
            y
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&run()), bits(&want), "{g:?}");
        assert_eq!(bits(&pool.install(run)), bits(&want), "{g:?} on a pool");
    }
}

/// A convolution's GEMM splits from a quarter of the work on a thread of the pool (where
/// the other threads are awake) that it needs elsewhere.
#[test]
fn conv_gemms_on_the_pool_split_sooner() {
    use crate::kernels::tuning::CONV_GEMM_PARALLEL_ABOVE;
    assert!(rayon::current_thread_index().is_none());
    assert_eq!(conv_gemm_split_above(), CONV_GEMM_PARALLEL_ABOVE);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let on_pool = pool.install(conv_gemm_split_above);
    assert_eq!(on_pool, CONV_GEMM_PARALLEL_ABOVE / 4);
}

/// The packed-weight kernel (its columns read from the padded input) against the GEMM path:
/// every one-group geometry above, a 1×1 convolution at batch 1 (its input read as the column
/// matrix) and at batch 3, layers split across the pool (by filters, by positions), and mid-sized images
/// (`packs_weight`'s second rule: position counts off the tile size, a 1×7 window, a stride
/// with padding, a dilation, a batch, a 1×1 window); with bias and an epilogue, which runs panel by panel.
#[test]
fn packed_weights_match_the_gemm_path() {
    let mut cases: Vec<ConvGeom> = geoms().into_iter().filter(|g| g.groups == 1).collect();
    let mut one = geoms()[4];
    (one.batch, one.channels, one.filters) = (1, 40, 37);
    assert!(one.is_pointwise());
    cases.push(one);
    one.batch = 3;
    cases.push(one);
    // Split across the pool, each part padding its own image: by panels, and (few filters)
    // by positions.
    for (c, f, size) in [
        (128, 128, 8),
        (256, 256, 4),
        (40, 70, 5),
        (128, 32, 7),
        (120, 20, 8),
    ] {
        let hw = [1, size, size];
        cases.push(mk(1, c, f, 1, hw, [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]));
    }
    let mid = [
        mk(
            1,
            32,
            64,
            1,
            [1, 13, 13],
            [1, 3, 3],
            [1; 3],
            [1; 3],
            [0, 1, 1],
        ),
        mk(
            1,
            40,
            80,
            1,
            [1, 17, 17],
            [1, 1, 7],
            [1; 3],
            [1; 3],
            [0, 0, 3],
        ),
        mk(
            1,
            36,
            96,
            1,
            [1, 31, 29],
            [1, 3, 3],
            [1, 2, 2],
            [1; 3],
            [0, 1, 1],
        ),
        mk(
            1,
            30,
            70,
            1,
            [1, 12, 12],
            [1, 3, 3],
            [1; 3],
            [1, 2, 2],
            [0, 2, 2],
        ),
        // over a batch, a block of samples per thread (3: blocks of 2 and 1)
        mk(
            3,
            32,
            64,
            1,
            [1, 9, 9],
            [1, 3, 3],
            [1; 3],
            [1; 3],
            [0, 1, 1],
        ),
        // 1×1 into many filters (a remainder panel)
        mk(1, 256, 272, 1, [1, 9, 9], [1; 3], [1; 3], [1; 3], [0; 3]),
        // 1×1 over a batch of tiny images, into fewer filters (a remainder panel)
        mk(3, 64, 80, 1, [1, 4, 4], [1; 3], [1; 3], [1; 3], [0; 3]),
    ];
    for g in mid {
        assert!(packs_weight(&g), "{g:?}");
        cases.push(g);
    }
    for g in cases {
        let x = vals(g.batch * g.channels * g.in_len(), 15);
        let w = vals(g.weight_len(), 16);
        let b = vals(g.filters, 17);
        let packed = PackedFilters::new(&w, g.filters, g.col_rows());
        let relu = |v: &mut [f32]| v.iter_mut().for_each(|a| *a = a.max(0.0));
        let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
        let mut want = y.clone();
        conv_forward_packed(&g, &x, &packed, Some(&b), &mut y, Some(&relu)).unwrap();
        conv_forward_gemm(&g, &x, &w, Some(&b), &mut want, Some(&relu)).unwrap();
        close(&y, &want);
    }
    let g = geoms()[2]; // two groups
    let packed = PackedFilters::new(
        &vals(g.weight_len(), 1),
        g.filters,
        g.weight_len() / g.filters,
    );
    let mut y = vec![0.0; g.batch * g.filters * g.out_len()];
    let x = vals(g.batch * g.channels * g.in_len(), 2);
    assert!(conv_forward_packed(&g, &x, &packed, None, &mut y, None).is_err());
}

/// The tiled path (columns gathered tile by tile from the input) against the GEMM path, on
/// every one-group geometry and on larger ones: several tiles and k blocks, a row of tiles
/// crossing output rows, strides with padding, a 3-D kernel; with bias and an epilogue.
#[test]
fn tiled_weights_match_the_gemm_path() {
    for g in tiled_cases() {
        let x = vals(g.batch * g.channels * g.in_len(), 25);
        let w = vals(g.weight_len(), 26);
        let b = vals(g.filters, 27);
        let panels = FilterPanels::new(&w, g.filters, g.col_rows());
        let relu = |v: &mut [f32]| v.iter_mut().for_each(|a| *a = a.max(0.0));
        let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
        let mut want = y.clone();
        conv_forward_tiled(&g, &x, None, &panels, Some(&b), &mut y, Some(&relu)).unwrap();
        conv_forward_gemm(&g, &x, &w, Some(&b), &mut want, Some(&relu)).unwrap();
        close(&y, &want);
        // A weight packed for another geometry is an error, not a read out of bounds.
        let other = FilterPanels::new(&w, g.filters - 1, g.col_rows());
        assert!(conv_forward_tiled(&g, &x, None, &other, None, &mut y, None).is_err());
    }
}

/// An input map applied as the tiled and direct kernels read their columns gives the very
/// bits of the input mapped first: the matrix of a 1×1 convolution, columns gathered with
/// padding and strides, the direct kernel's padded image (stride 1 and phases); relu, clip
/// and no activation after the affine map. The padding stays zero (the map's offsets are
/// not, so a mapped pad would show). A map of the wrong length is an error.
#[test]
fn mapped_inputs_match_mapping_first() {
    let (mut pointwise, mut gathered, mut direct) = (0, 0, 0);
    let mut cases = tiled_cases();
    // The direct kernel, stride 1 and stride 2 (its image split into phases).
    cases.push(mk(
        2,
        16,
        20,
        1,
        [1, 30, 30],
        [1, 3, 3],
        [1; 3],
        [1; 3],
        [0, 1, 1],
    ));
    cases.push(mk(
        1,
        3,
        12,
        1,
        [1, 40, 40],
        [1, 3, 3],
        [1, 2, 2],
        [1; 3],
        [0, 1, 1],
    ));
    // One sample split across the pool: a padded image per part, and one shared.
    for (c, f, size) in [(16, 64, 40), (40, 8, 60)] {
        let hw = [1, size, size];
        cases.push(mk(1, c, f, 1, hw, [1, 3, 3], [1; 3], [1; 3], [0, 1, 1]));
    }
    let acts = [
        AffineAct::Relu,
        AffineAct::Identity,
        AffineAct::Clip { lo: -0.25, hi: 0.5 },
    ];
    for (i, g) in cases.into_iter().enumerate() {
        let x = vals(g.batch * g.channels * g.in_len(), 25);
        let w = vals(g.weight_len(), 26);
        let b = vals(g.filters, 27);
        let scale: Vec<f32> = (0..g.channels)
            .map(|c| 0.5 + (c % 5) as f32 * 0.3)
            .collect();
        let shift: Vec<f32> = (0..g.channels)
            .map(|c| 0.25 - (c % 3) as f32 * 0.2)
            .collect();
        let map = InputMap {
            scale: &scale,
            shift: &shift,
            act: acts[i % acts.len()],
        };
        let mut mapped = x.clone();
        for (i, v) in mapped.iter_mut().enumerate() {
            map.apply(i / g.in_len() % g.channels, std::slice::from_mut(v));
        }
        let panels = FilterPanels::new(&w, g.filters, g.col_rows());
        let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
        let mut want = y.clone();
        conv_forward_tiled(&g, &x, Some(&map), &panels, Some(&b), &mut y, None).unwrap();
        conv_forward_tiled(&g, &mapped, None, &panels, Some(&b), &mut want, None).unwrap();
        assert_eq!(
            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{g:?}"
        );
        match (
            g.is_pointwise(),
            crate::kernels::conv_direct::runs_direct(&g),
        ) {
            (true, _) => pointwise += 1,
            (_, true) => direct += usize::from(g.pad != [0; 3]),
            _ => gathered += usize::from(g.pad != [0; 3]),
        }
        let short = InputMap {
            shift: &shift[1..],
            ..map
        };
        let r = conv_forward_tiled(&g, &x, Some(&short), &panels, None, &mut y, None);
        assert!(r.is_err(), "{g:?}");
    }
    assert!(
        pointwise > 0 && gathered > 0 && direct > 1,
        "{pointwise} {gathered} {direct}"
    );
}

/// The one-group geometries of [`geoms`] and larger ones for the tiled path: several tiles
/// and k blocks, a row of tiles crossing output rows, strides with padding, a 3-D kernel.
fn tiled_cases() -> Vec<ConvGeom> {
    let mut cases: Vec<ConvGeom> = geoms().into_iter().filter(|g| g.groups == 1).collect();
    cases.push(mk(
        1,
        40,
        37,
        1,
        [1, 13, 11],
        [1, 3, 3],
        [1; 3],
        [1; 3],
        [0, 1, 1],
    ));
    cases.push(mk(
        2,
        30,
        20,
        1,
        [1, 17, 19],
        [1, 3, 5],
        [1, 2, 3],
        [1, 1, 2],
        [0, 2, 1],
    ));
    cases.push(mk(
        1,
        3,
        64,
        1,
        [1, 40, 40],
        [1, 3, 3],
        [1, 2, 2],
        [1; 3],
        [0; 3],
    ));
    cases.push(mk(
        2,
        5,
        9,
        1,
        [4, 6, 7],
        [3, 3, 3],
        [1, 1, 2],
        [1; 3],
        [1, 1, 1],
    ));
    cases.push(mk(
        1,
        300,
        17,
        1,
        [1, 9, 9],
        [1, 1, 1],
        [1; 3],
        [1; 3],
        [0; 3],
    ));
    cases
}

/// Which inference convolutions take the tiled path: 3×3 over wide rows, over a batch only
/// into few filters; any stride-1 window with a small weight (the direct kernel); 1×1 only
/// when it narrows to a few filters at batch 1 (see `conv_tiled::pointwise_tiles`).
#[test]
fn tiled_path_choice() {
    let one = |batch, c, f, size, k: usize| {
        let pad = k / 2;
        tiles_weight(&mk(
            batch,
            c,
            f,
            1,
            [1, size, size],
            [1, k, k],
            [1; 3],
            [1; 3],
            [0, pad, pad],
        ))
    };
    assert!(one(1, 64, 64, 56, 3));
    assert!(!one(1, 256, 256, 14, 3)); // rows narrower than TILED_MIN_WIDTH
    assert!(!one(16, 256, 256, 28, 3)); // a batch: the GEMM spans the block's samples
    assert!(one(16, 128, 32, 56, 3)); // ... unless the filters are few
    assert!(one(16, 16, 64, 55, 3)); // or the weight is small (the direct kernel)
    assert!(!one(1, 64, 64, 14, 3)); // mid-sized over one image: packed (`packs_weight`)
    assert!(!one(1, 128, 32, 14, 3)); // few filters too, the threads splitting positions
    assert!(one(1, 128, 32, 28, 3)); // ... but over larger images the direct kernel
    assert!(!one(1, 32, 32, 7, 3)); // a vector would span three rows
    assert!(!one(1, 16, 16, 20, 5)); // 4 of each 24 padded positions thrown away
    assert!(one(1, 128, 16, 55, 1)); // narrowing to few filters
    assert!(one(1, 144, 24, 56, 1));
    assert!(!one(16, 128, 16, 55, 1)); // a batch: one GEMM over the block's samples
    assert!(!one(1, 32, 16, 112, 1)); // too few inputs per filter
    assert!(!one(1, 16, 96, 112, 1)); // widening
    assert!(!one(1, 1024, 128, 14, 1)); // the GEMM's register tile fits
}

/// A 1×1 layer into many filters runs packed over one image, and over a batch only while
/// each thread's block of samples is small (`CONV_GATHER_POINTWISE_BLOCK_POSITIONS`); into
/// fewer filters only over a batch of tiny images (`CONV_GATHER_POINTWISE_SMALL_IMAGE`).
#[test]
fn packed_pointwise_choice() {
    let pointwise = |batch, c, f, size| {
        let g = mk(
            batch,
            c,
            f,
            1,
            [1, size, size],
            [1; 3],
            [1; 3],
            [1; 3],
            [0; 3],
        );
        packs_weight(&g)
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        assert!(pointwise(1, 320, 1280, 7));
        assert!(pointwise(1, 512, 1000, 13));
        assert!(pointwise(16, 256, 1024, 4)); // 8 samples × 16 positions a thread
        assert!(!pointwise(16, 1280, 320, 8)); // 8 × 64: the GEMM
        assert!(!pointwise(16, 512, 1000, 13));
        assert!(!pointwise(1, 576, 96, 14)); // too few filters
        assert!(pointwise(16, 128, 128, 4)); // ... unless the images are tiny, over a batch
        assert!(!pointwise(16, 32, 64, 16));
        assert!(!pointwise(16, 32, 64, 4)); // too few column rows
    });
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "[{i}] {x} vs {y}");
    }
}

#[test]
fn forward_matches_naive_loops() {
    for g in geoms() {
        let x = vals(g.batch * g.channels * g.in_len(), 1);
        let w = vals(g.weight_len(), 2);
        let b = vals(g.filters, 3);
        let mut y = vec![f32::NAN; g.batch * g.filters * g.out_len()];
        conv_forward(&g, &x, &w, Some(&b), &mut y, None).unwrap();
        close(&y, &naive_forward(&g, &x, &w, Some(&b)));
        conv_forward(&g, &x, &w, None, &mut y, None).unwrap();
        close(&y, &naive_forward(&g, &x, &w, None));
    }
}

/// The backward passes are the transposes of the (linear) forward: checks
/// <conv(x), dy> = <x, conv_backward_data(dy)> = <w, conv_backward_weight(x, dy)> against
/// the naive forward, and the weight gradient entrywise against naive sums.
#[test]
fn backward_matches_naive_transposes() {
    for g in geoms() {
        let x = vals(g.batch * g.channels * g.in_len(), 4);
        let w = vals(g.weight_len(), 5);
        let dy = vals(g.batch * g.filters * g.out_len(), 6);
        let mut dx = vec![f32::NAN; x.len()];
        conv_backward_data(&g, &dy, &w, &mut dx).unwrap();
        // dx[i] = d<naive(x, w), dy>/dx[i]: probe with unit vectors.
        let mut want_dx = vec![0.0f32; x.len()];
        for (i, wd) in want_dx.iter_mut().enumerate() {
            let mut e = vec![0.0f32; x.len()];
            e[i] = 1.0;
            *wd = naive_forward(&g, &e, &w, None)
                .iter()
                .zip(&dy)
                .map(|(a, b)| a * b)
                .sum();
        }
        close(&dx, &want_dx);
        let mut dw = vec![f32::NAN; w.len()];
        let mut db = vec![f32::NAN; g.filters];
        conv_backward_weight(&g, &x, &dy, &mut dw, Some(&mut db)).unwrap();
        close(&db, &channel_sums(&dy, g.filters, g.out_len()).unwrap());
        let mut want_dw = vec![0.0f32; w.len()];
        for (i, wd) in want_dw.iter_mut().enumerate() {
            let mut e = vec![0.0f32; w.len()];
            e[i] = 1.0;
            *wd = naive_forward(&g, &x, &e, None)
                .iter()
                .zip(&dy)
                .map(|(a, b)| a * b)
                .sum();
        }
        close(&dw, &want_dw);
    }
}

/// A batch large enough to be cut into blocks that run in parallel: the forward against
/// naive loops, both backward passes through the adjoint identities
/// <conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_weight(x, dy)>.
#[test]
fn blocked_batches_match() {
    let mut g = geoms()[0];
    (g.batch, g.channels, g.filters) = (23, 16, 4);
    (g.input, g.pad) = ([1, 20, 19], [0, 1, 0]);
    g.output = [1, 20, 17];
    assert!(blocks(&g).len() > 2 && blocks_in_parallel(&g, &blocks(&g)));
    let x = vals(g.batch * g.channels * g.in_len(), 9);
    let w = vals(g.weight_len(), 10);
    let dy = vals(g.batch * g.filters * g.out_len(), 11);
    let mut y = vec![f32::NAN; dy.len()];
    conv_forward(&g, &x, &w, None, &mut y, None).unwrap();
    close(&y, &naive_forward(&g, &x, &w, None));
    let mut dx = vec![f32::NAN; x.len()];
    conv_backward_data(&g, &dy, &w, &mut dx).unwrap();
    let (mut dw, mut db) = (vec![f32::NAN; w.len()], vec![f32::NAN; g.filters]);
    conv_backward_weight(&g, &x, &dy, &mut dw, Some(&mut db)).unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(p, q)| (p * q) as f64).sum::<f64>();
    let want = dot(&y, &dy);
    assert!((dot(&x, &dx) - want).abs() < 1e-3 * want.abs().max(1.0));
    assert!((dot(&w, &dw) - want).abs() < 1e-3 * want.abs().max(1.0));
    close(&db, &channel_sums(&dy, g.filters, g.out_len()).unwrap());
}

#[test]
fn col2im_is_the_transpose_of_im2col() {
    for mut g in geoms() {
        g.batch = 2;
        let img = vals(g.batch * g.channels * g.in_len(), 7);
        let cols_in = vals(g.batch * g.col_rows() * g.out_len(), 8);
        let mut cols = vec![f32::NAN; cols_in.len()];
        im2col(&g, &img, g.batch, &mut cols, false);
        let mut back = vec![f32::NAN; img.len()];
        col2im(&g, &cols_in, g.batch, &mut back, true);
        let lhs: f64 = cols.iter().zip(&cols_in).map(|(a, b)| (a * b) as f64).sum();
        let rhs: f64 = img.iter().zip(&back).map(|(a, b)| (a * b) as f64).sum();
        assert!((lhs - rhs).abs() < 1e-3, "{lhs} vs {rhs}");
    }
}

#[test]
fn bias_helpers_and_bad_lengths() {
    let mut y = vec![0.0f32; 2 * 3 * 2];
    add_channel_bias(&mut y, 3, 2, &[1.0, 2.0, 3.0]).unwrap();
    assert_eq!(y, vec![1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.]);
    assert_eq!(channel_sums(&y, 3, 2).unwrap(), vec![4.0, 8.0, 12.0]);
    let g = geoms()[0];
    let mut y = vec![0.0f32; 3];
    assert!(conv_forward(&g, &[0.0; 2], &[0.0; 2], None, &mut y, None).is_err());
    assert!(conv_out_size(2, 5, 1, 1, 1).is_none());
    assert_eq!(conv_out_size(28, 5, 1, 1, 0), Some(24));
    assert_eq!(conv_out_size(7, 3, 2, 2, 2), Some(4));
}
