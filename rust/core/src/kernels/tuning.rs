//! Every size at which work changes strategy (stays on the calling thread, goes to the pool,
//! is cut into blocks), named in one place with the reason. The values were chosen by
//! measuring the benchmark workloads (`benchmarks/run.py`); the reasons say what trades off,
//! so they can be re-tuned on another machine by changing one line.

/// Elements below which elementwise work (maps, broadcasts, reductions, unary kernels) stays
/// on the calling thread. Waking the pool costs tens of microseconds, about what one thread
/// needs for this many elements of a memory-bound elementwise pass.
pub const SERIAL_BELOW: usize = 1 << 17;

/// The fixed chunk length for parallel elementwise work and ordered reductions. Fixed (not
/// derived from the thread count), so a reduction built on chunks combines in the same order
/// and gives the same bits on any machine.
pub const CHUNK: usize = 1 << 14;

/// Outputs per task when a reduction accumulates whole rows at once (the innermost axis is
/// kept): fixed for the same reason as [`CHUNK`].
pub const REDUCE_OUT_BLOCK: usize = 1024;

/// Work (m·n·k) below which a GEMM runs on one thread. After a parallel region the pool's
/// threads spin beside the caller's serial work, and a product must take about half a
/// millisecond before splitting it pays for waking them: the MLP workload (largest product
/// 100×784×128) trains faster with every product on one thread, while LeNet's larger
/// products still gain from the pool.
pub const GEMM_PARALLEL_ABOVE: usize = 1 << 25;

/// Work (rows · gate units · inner size) of one recurrent step's product from which its
/// hidden units are cut among the pool's threads. The threads meet once per step (a few
/// hundred nanoseconds when both are awake): the LSTM language model's steps (32 × 800 × 200,
/// about 60 µs alone) gain from sharing; one sequence's (1 × 800 × 200, a few µs) does not.
pub const RNN_STEP_PARALLEL_ABOVE: usize = 1 << 20;

/// Weight values (n · k) from which a dense layer's product splits across the pool whatever
/// its work: streaming a large weight is bound by one core's cache and memory bandwidth, so
/// the last layer of a CNN at batch 1 (2048 → 1000, 2M multiply-adds) ran in 130 µs split
/// against 270 on one thread. The MLP workload's weights (784 × 128) stay below it.
pub const DENSE_SPLIT_WEIGHT: usize = 1 << 20;

/// Rows (batch) up to which an inference FullyConnected runs through its weight packed ahead
/// (`kernels::conv_packed`, as a 1×1 convolution over that many positions): a GEMM packs
/// the weight on every call, the larger cost when the rows are few. MobileNet's 256 → 1000
/// classifier at batch 16 took 90 µs through the GEMM.
pub const DENSE_PACKED_MAX_ROWS: usize = 64;

/// Work (m·n·k) from which a convolution's GEMM splits across the pool's threads. Lower than
/// [`GEMM_PARALLEL_ABOVE`]: a convolutional network's forward is a chain of products of a
/// tenth of a millisecond and up (ResNet at batch 1: 2–10M multiply-adds each), with the pool
/// awake from the previous layer, so splitting pays from about 50 µs of work.
pub const CONV_GEMM_PARALLEL_ABOVE: usize = 1 << 22;

/// Output positions (batch × output size) up to which an inference convolution runs through
/// its weight packed ahead (`kernels::conv_packed`) instead of a GEMM that packs it per call.
/// With so few positions the product is bound by streaming the weight: at 4 positions (512
/// filters × 4608) the packed kernel ran 2.4× the GEMM's speed, at 16 1.3×, at 64 0.8×.
pub const CONV_PACKED_MAX_POSITIONS: usize = 32;

/// Output values (filters × positions) from which a 1×1 convolution through the GEMM runs
/// its product, bias and activation over blocks of one sample's positions (see
/// `conv_pointwise::blocks`): outputs of 1 MB and more leave the core's L2 cache before the
/// pass over them.
pub const POINTWISE_BLOCKS_FROM: usize = 1 << 18;

/// Output values per block of [`POINTWISE_BLOCKS_FROM`] (a band of filters' share): a
/// block stays in the core's L2 cache between its product and the pass over it.
pub const POINTWISE_BLOCK_VALUES: usize = 1 << 16;

/// Weight values from which a packed product splits across the pool's threads however few
/// its positions (see `conv_packed::worth_splitting`): a classifier at batch 1 streams its
/// weight from the shared cache, which the layers before it took the core's L2 from, and two
/// cores draw it faster than one (MobileNet-0.25's 256 → 1000 in the network 27 → 22 µs;
/// alone, its 1 MB still in L2, 9 → 11).
pub const PACKED_SPLIT_WEIGHT: usize = 1 << 17;

/// Weight values up to which an inference convolution over one image also runs packed over up
/// to twice [`CONV_PACKED_MAX_POSITIONS`]: the weight then stays in the core's L2 cache while
/// the packed product takes it a block at a time through every tile of positions, and the
/// GEMM's packing of it on every call is the larger cost. DenseNet at 7²: 1000 → 128 1×1 (128 K
/// values) ran in 32 µs packed against 82 through the GEMM, 128 → 32 3×3 in 43 against 54;
/// Inception's 448 → 384 3×3 at 8² (1.5 M values) in 680 against 530. Over a batch of small
/// images the GEMM, which unfolds and splits the batch once, kept up: MobileNet-0.25's
/// 256 → 256 1×1 over 16 × 2² ran in 42 µs through it against 51 packed.
pub const CONV_PACKED_L2_WEIGHT: usize = 1 << 18;

/// Output positions per image up to which an inference convolution with a window wider than
/// 1×1 (see also [`CONV_GATHER_POINTWISE_MIN_FILTERS`]) runs through its weight packed ahead (`kernels::conv_packed`), reading its columns
/// straight from the padded image, when it also has at least [`CONV_GATHER_MIN_FILTERS`]
/// filters, [`CONV_GATHER_MIN_ROWS`] column rows and at most [`CONV_GATHER_MAX_WEIGHT`]
/// weight values. Each block of the weight then stays in L1 while every position passes it,
/// the positions' sums in L2. Over one image: Inception v3's 1×7 and 7×1 layers over 17² ran
/// in 0.39 ms against 0.56 (the GEMM), its 64 → 96 3×3 over 35² in 0.49 against 0.57,
/// SqueezeNet's 64 → 256 3×3 over 13² in 0.13 against 0.19, 256 → 256 3×3 over 14² in 0.55
/// against 0.77. Over a batch, each thread takes a block of samples: the 17² layers at batch
/// 16 took 6.4 ms against 8.0, ResNet-18 v2 at batch 16 13.4 against 15.1. With fewer rows the
/// sums' traffic dominates: SqueezeNet's 16 → 64 3×3 over 55² (144 rows) took 0.24 ms
/// against 0.16 on the direct path, ResNet's 3 → 64 7×7 over 32² output 98 µs against 81.
pub const CONV_GATHER_MAX_POSITIONS: usize = 1600;

/// Filters from which [`CONV_GATHER_MAX_POSITIONS`] applies at any size: over one image its
/// product splits the filters among the threads, two panels of 16 a thread at least. (With
/// fewer, see [`CONV_GATHER_FEW_FILTERS_POSITIONS`].)
pub const CONV_GATHER_MIN_FILTERS: usize = 64;

/// Filters from which [`CONV_GATHER_MAX_POSITIONS`] applies to a 1×1 window too. MobileNet
/// v2's 320 → 1280 over 7² ran in 136 µs there against 217 on the GEMM, 960 → 320 in 108
/// against 160; into 96 filters (576 → 96 over 14²) 135 against 107.
pub const CONV_GATHER_POINTWISE_MIN_FILTERS: usize = 256;

/// Positions per thread's block of samples up to which a 1×1 layer over a batch runs packed
/// ([`CONV_GATHER_POINTWISE_MIN_FILTERS`]). A block of 64 rows of its columns must stay in
/// L1 while every panel passes over it; past that the GEMM, which reads a 1×1 layer's input
/// as its own column matrix, was faster at batch 16: SqueezeNet's 512 → 1000 over 13² in 8.2
/// ms against 9.9, MobileNet v2's 1280 → 320 over 8² 2.1 against 2.7, 64 → 256 over 16²
/// 0.45 against 0.56. Over 4² images the packed path kept its lead (1024 → 256 in 0.34 ms
/// against 0.43, 256 → 1024 0.36 against 0.43).
pub const CONV_GATHER_POINTWISE_BLOCK_POSITIONS: usize = 192;

/// Positions per image up to which a 1×1 layer over a batch also runs packed into fewer
/// filters than [`CONV_GATHER_POINTWISE_MIN_FILTERS`] (64 or more) and from fewer column rows
/// than [`CONV_GATHER_MIN_ROWS`] (see [`CONV_GATHER_POINTWISE_SMALL_IMAGE_MIN_ROWS`]), within
/// [`CONV_GATHER_POINTWISE_BLOCK_POSITIONS`]. The GEMM's products over such small images are
/// short: MobileNet-0.25's 128 → 128 over 16 × 4² ran in 27 µs packed against 37 (the
/// network at batch 16 about 6% faster), 64 → 128 over 16 × 4² 26 against 32. Over larger
/// images the GEMM kept the lead (32 → 64 over 16 × 16²: 73 µs against 116 packed).
pub const CONV_GATHER_POINTWISE_SMALL_IMAGE: usize = 16;

/// Column rows (input channels) from which [`CONV_GATHER_POINTWISE_SMALL_IMAGE`] applies.
pub const CONV_GATHER_POINTWISE_SMALL_IMAGE_MIN_ROWS: usize = 64;

/// Output positions up to which [`CONV_GATHER_MAX_POSITIONS`] applies over one image into
/// fewer than [`CONV_GATHER_MIN_FILTERS`] filters too, the threads then splitting the
/// positions: DenseNet's 128 → 32 3×3 over 14² ran in 63 µs there against 79 on the direct
/// path, over 28² no faster (189 against 181); its 7² layers, packed already, 33 → 27 µs.
pub const CONV_GATHER_FEW_FILTERS_POSITIONS: usize = 256;

/// Column rows (channels × window) from which [`CONV_GATHER_MAX_POSITIONS`] applies.
pub const CONV_GATHER_MIN_ROWS: usize = 256;

/// Weight values up to which [`CONV_GATHER_MAX_POSITIONS`] applies: Inception's 288 → 384
/// 3×3/2 into 17² (1 M values) ran in 1.5 ms against 1.8 on the GEMM.
pub const CONV_GATHER_MAX_WEIGHT: usize = 1 << 20;

/// Output width from which an inference convolution (wider than 1×1) gathers its columns
/// tile by tile (`kernels::conv_tiled`) instead of im2col + GEMM. Each output row is one run
/// of the gather, with its own bookkeeping: at 14×14 and 7×7 that cost more than the
/// column matrix it saves (128 → 32, 3×3 at 14²: 0.19 ms against 0.13; at 28² 0.45 against
/// 0.50, at 56² 1.5 against 1.9).
pub const TILED_MIN_WIDTH: usize = 24;

/// Column rows (channels × window) up to which a strided convolution with fewer than 4 taps
/// per phase still reads its phase-split image directly (`kernels::conv_direct`): over 3
/// channels the tiled path's gather took as long as the product of its few panels.
pub const DIRECT_STRIDED_MAX_ROWS: usize = 64;

/// Bytes of output a convolution's fused activation runs over at once while the tiled and
/// direct products store it (see `conv_tiled::epilogue_tiles`): within L2, and long runs.
pub const EPILOGUE_RUN_BYTES: usize = 1 << 18;

/// Filters up to which a narrowing 1×1 convolution (4 channels per filter or more) at
/// batch 1 runs through its weight packed ahead (`kernels::conv_tiled`) at any size, and a
/// wider window over a batch (DenseNet's 128 → 32 3×3): the GEMM's register tile spans more
/// filters and ran mostly empty on them.
pub const POINTWISE_TILED_NARROW_FILTERS: usize = 32;

/// Padded-image values up to which each part of a direct convolution split across the pool
/// pads its own copy of the image (`kernels::conv_direct`) instead of sharing one. Over larger
/// images the second copy costs more than it saves: 128 → 32 at 56² (430 K values) ran 3%
/// slower with two.
pub const DIRECT_OWN_PAD_MAX: usize = 1 << 17;

/// Weight values up to which a 1×1 convolution whose input arrives through a BatchNorm's map
/// (`kernels::conv_tiled::InputMap`) runs tiled, mapping each value as it packs it. The
/// tiled loops pass over the whole weight once per tile of positions: DenseNet's 1024 → 512
/// at 14² (5 tiles, 512 K values) took 0.84 ms there against 0.58 + 0.03 (BatchNorm) on the
/// GEMM, while 1024 → 128 (128 K) took 0.19 against 0.16 + 0.02.
pub const MAPPED_POINTWISE_MAX_WEIGHT: usize = 1 << 18;

/// Weight values (filters × channels × window) up to which a stride-1 inference convolution
/// that runs tiled reads its columns straight from a padded image (`kernels::conv_direct`):
/// every tile there runs all panels over all of `k`, reading the whole weight, which must
/// stay in the core's L2 beside the image. DenseNet's 128 → 32 3×3 weight is 37 K values,
/// Inception's 80 → 192 3×3 138 K (4.6 ms here against 5.4 tiled at 71²); 384 → 384 3×3
/// (1.3 M) ran no faster than the GEMM.
pub const DIRECT_MAX_WEIGHT: usize = 1 << 18;
/// Bytes of the widest activation (the largest output of any op) of one block of samples
/// when an inference pass over a batch runs in blocks (`executor::blocks`): each block's
/// layers then hand their outputs to the next through the cache instead of memory. At batch
/// 16, blocks of 2 samples ran MobileNet v2 1.0 at 224² (4.8 MB per sample) in 50 ms against
/// 71 whole, DenseNet-121 (3.2 MB) in 354–364 against 386, Inception v3 (5.5 MB) in 576
/// against 601; blocks of 4 were no better, and ResNet-50 at 64² (0.25 MB per sample) ran
/// slower in any blocks (40 ms whole, 43 in blocks of 4), which this size leaves whole.
pub const INFERENCE_BLOCK_BYTES: usize = 12 << 20;

/// Rows (or columns) of a GEMM output below which a band is not worth its own thread.
pub const GEMM_MIN_BAND: usize = 32;

/// Column-matrix values of one block of samples in a convolution (1 MB of float32). A
/// block's columns are written by im2col and read by its GEMM while still in the core's L2
/// cache, and blocks run side by side; unfolding a whole batch at once sends the columns
/// through memory twice. A layer whose weight is larger than this (ResNet's deep layers:
/// 2.4M values over 2×2 or 4×4 positions) takes blocks as large as its weight instead: every
/// block streams the whole weight through its GEMM, and 16 blocks of 16 positions each ran
/// 5× slower than one of 256.
pub const CONV_BLOCK_VALUES: usize = 1 << 18;

/// Elements below which an optimizer update stays on the calling thread. An update streams a
/// few arrays once (memory-bound), so the pool pays only for large parameters.
pub const UPDATE_SERIAL_BELOW: usize = 1 << 19;

/// By how much a kernel that already runs on the pool (a pass there) lowers its split
/// threshold (see [`super::par::on_pool_threshold`]): a split then costs a steal by a thread
/// that is awake, not a hand-over into the pool. For [`SERIAL_BELOW`]: ResNet's stem pool at batch 1 (64 × 32² → 16², 82K values)
/// went 29 → 18 µs; MobileNet v2 1.0 at batch 1 ran 2–3% faster, ResNet-18 v2 and
/// SqueezeNet about 1%, a MobileNet v2 0.25 training step 10%. With a sixteenth of
/// `SERIAL_BELOW`, MobileNet-0.25 at batch 1 (its passes forced onto the pool) ran slower
/// than with a quarter. For `CONV_GEMM_PARALLEL_ABOVE`: SqueezeNet's 1×1 expand layers at
/// batch 1 (16 → 64 at 55², 3.1M multiply-adds) then split, the network 2–3% faster,
/// ResNet-18 v2 about 1% (a twelfth was no better).
pub const ON_POOL_SHARE: usize = 4;

/// Duration of a module's pass from which its next pass runs on the pool as a whole (see
/// [`super::par::PassPlacement`]): one hand-over into the pool (tens of µs on the 2-core
/// VM) instead of one per parallel kernel. Shorter passes stay on the caller, where the
/// hand-over would cost more than it saves (MobileNet-0.25 at batch 1, 0.23 ms, ran a
/// third slower on the pool; an MLP training step ran 3x slower).
pub const POOL_PASS_FROM: std::time::Duration = std::time::Duration::from_millis(1);

/// [`POOL_PASS_FROM`] for inference passes (forward with `is_train` false), whose shorter
/// passes choose their place by measuring both ([`super::par::PassPlacement::measured`]):
/// between passes the caller only collects outputs, and a pass of a third of a millisecond
/// has layers worth splitting. MobileNetV2-0.25 at batch 1 (0.4 ms on the caller, 0.35 on
/// the pool on a Zen 3 VM) ran 12% faster there, its 5 MB classifier weight streamed by both
/// threads.
pub const INFERENCE_POOL_PASS_FROM: std::time::Duration = std::time::Duration::from_micros(300);

/// Passes per round of a measured placement (see [`super::par::PassPlacement::measured`]):
/// a round re-measures both places, since a machine's load changes which one wins.
pub const PLACEMENT_ROUND: u32 = 256;

/// Passes of a round that alternate between the caller and the pool, half on each; the
/// fastest of each half decides the rest of the round. The cost of a probe is at most half
/// its passes run in the slower place (a few percent of a round's time at worst).
pub const PLACEMENT_PROBE: u32 = 8;

/// Channels from which a 3×3 stride-1 inference convolution runs as Winograd products
/// (`kernels::conv_winograd`): each tile's input transform costs about as much per channel
/// as a product over a few filters.
pub const WINOGRAD_MIN_CHANNELS: usize = 16;

/// Filters from which a 3×3 stride-1 inference convolution runs as Winograd products: the
/// output transform per filter and tile weighs against products over few channels.
pub const WINOGRAD_MIN_FILTERS: usize = 16;

/// 2×2 output tiles (over the whole batch) from which a 3×3 stride-1 inference convolution
/// runs as Winograd products: with fewer, its transformed weight (16 values per filter and
/// channel against 9) streams through for too few products.
pub const WINOGRAD_MIN_TILES: usize = 96;

/// Output height or width, when odd, from which a 3×3 stride-1 convolution runs as Winograd
/// products: an odd side's last tiles compute a row or column of outputs that is thrown
/// away, a seventh of the work at 13 (SqueezeNet's 48 → 192 at 13², batch 16, ran 10%
/// slower as Winograd products).
pub const WINOGRAD_ODD_MIN_SIDE: usize = 21;

/// Filters below which a 3×3 stride-1 convolution runs as Winograd products only over rows
/// of [`WINOGRAD_FEW_FILTERS_MIN_WIDTH`] outputs or more: DenseNet's 128 → 32 ran 15% faster
/// at 56², 6% at 28², and 17% slower at 14² (batch 16).
pub const WINOGRAD_FEW_FILTERS: usize = 64;

/// See [`WINOGRAD_FEW_FILTERS`].
pub const WINOGRAD_FEW_FILTERS_MIN_WIDTH: usize = 28;

/// The share of computed outputs a Winograd convolution's 4 × 4 tiles may throw away (sides
/// rounded up to multiples of 4) and still run instead of 2 × 2 tiles, which ran 1.3 to 1.45
/// times slower where both waste nothing (64 → 64 at 56², 128 → 128 at 28², 256 → 256 at
/// 16², batch 16) but won at 14² (a quarter of 16² wasted: 256 → 256 at batch 16, 3%).
pub const WINOGRAD_4X4_MAX_WASTE: f64 = 0.12;

/// 4 × 4 output tiles (over the whole batch) from which a Winograd convolution takes them
/// over 2 × 2 tiles. Few still won: 49 at 28² (batch 1, 64 and 128 channels: 9 to 15%), 64
/// at 8² (batch 16, 128 to 512 channels: 8 to 31%), 81 at 35² (96 channels, 37%).
pub const WINOGRAD_4X4_MIN_TILES: usize = 32;

/// Channels ahead of its input transform that a Winograd convolution asks the cache for a
/// segment's input rows (a few cache lines each, a plane apart: too short for the stream
/// prefetchers, and their loads were most of the transform's time). Measured against none,
/// in one process, on a Zen 5 core (batch 16): 64 → 64 at 56² 25% faster, DenseNet's 128 →
/// 32 at 56² 55%, 128 → 128 at 28² 11%, 256 → 256 at 16² 7%; 2 and 4 channels ahead did 1
/// to 5% better than 1.
pub const WINOGRAD_PREFETCH_AHEAD: usize = 4;
