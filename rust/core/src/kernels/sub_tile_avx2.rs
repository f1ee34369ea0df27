//! The inner loop of the AVX2 convolution tiles (`conv_tiled::avx2`, `conv_direct::avx2`)
//! for a full sub-tile, 4 filters × 3 vectors of 8 positions, written in assembly.
//!
//! The sub-tile needs every one of the 16 vector registers: 12 sums, the row's 3 vectors of
//! positions and one broadcast filter value. Built from intrinsics, LLVM kept a second
//! broadcast live to start the next filter early and paid for it with a sum spilled to the
//! stack (its chain of FMAs then ran through memory: a store and a reload per row) or, in
//! the tiled build, a dozen register moves per row; the tiles ran at 35–45% of the FMA
//! units' rate. Here the sums stay pinned in `ymm4`–`ymm15`. The FMAs are the same, in the
//! same order (per sum: over the rows in order, `w · x + sum` rounded once), so the results
//! are bit for bit those of the intrinsics and of the AVX-512 kernels.

#![cfg(target_arch = "x86_64")]

use std::arch::asm;

/// Filters per sub-tile.
pub(super) const ROWS: usize = 4;
/// Vectors of 8 positions per sub-tile.
pub(super) const VECTORS: usize = 3;

/// One row's 12 FMAs: the row's positions in `ymm0..ymm2`, filter `i`'s value broadcast
/// from `[{w} + 4i]` into `ymm3`, sums `acc[i][v]` in `ymm(4 + 3i + v)`.
macro_rules! row_fmas {
    () => {
        concat!(
            "vbroadcastss ymm3, dword ptr [{w}]\n",
            "vfmadd231ps ymm4, ymm3, ymm0\n",
            "vfmadd231ps ymm5, ymm3, ymm1\n",
            "vfmadd231ps ymm6, ymm3, ymm2\n",
            "vbroadcastss ymm3, dword ptr [{w} + 4]\n",
            "vfmadd231ps ymm7, ymm3, ymm0\n",
            "vfmadd231ps ymm8, ymm3, ymm1\n",
            "vfmadd231ps ymm9, ymm3, ymm2\n",
            "vbroadcastss ymm3, dword ptr [{w} + 8]\n",
            "vfmadd231ps ymm10, ymm3, ymm0\n",
            "vfmadd231ps ymm11, ymm3, ymm1\n",
            "vfmadd231ps ymm12, ymm3, ymm2\n",
            "vbroadcastss ymm3, dword ptr [{w} + 12]\n",
            "vfmadd231ps ymm13, ymm3, ymm0\n",
            "vfmadd231ps ymm14, ymm3, ymm1\n",
            "vfmadd231ps ymm15, ymm3, ymm2\n",
        )
    };
}

/// `acc[i][v] += Σ_r w[r·w_step + i] · b[offsets[r] + 8v + lane]` over the rows of `offsets`
/// in order, the sums `acc[i][v]` held at `sums + (3i + v) · 8`: for the direct path each row
/// is a shifted run of the padded image, for the tiled path a row of its packed block
/// (offsets `r · TILE`). The sums go into `ymm4`–`ymm15` (zeros when `fresh`), the rows are
/// summed, and they go back. Passed to the assembly as values instead, the direct tiles' sums
/// made a round trip through the stack between chunks of `k` that LLVM wrote as two `memcpy`
/// calls of 384 bytes per sub-tile, each behind a `vzeroupper`.
///
/// # Safety
/// The CPU supports AVX2 and FMA; for every row `r`, `w + r·w_step` holds 4 values and
/// `b + offsets[r]` 24; `sums` holds 96 values, readable unless `fresh`, writable.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn offset_rows(
    sums: *mut f32,
    fresh: bool,
    w: *const f32,
    w_step: usize,
    b: *const f32,
    offsets: &[usize],
) {
    // SAFETY: the caller's contract: every load lies in the rows it names, `sums` holds the
    // 12 vectors.
    unsafe {
        asm!(
            "test {fresh}, {fresh}",
            "jz 4f",
            "vxorps ymm4, ymm4, ymm4",
            "vxorps ymm5, ymm5, ymm5",
            "vxorps ymm6, ymm6, ymm6",
            "vxorps ymm7, ymm7, ymm7",
            "vxorps ymm8, ymm8, ymm8",
            "vxorps ymm9, ymm9, ymm9",
            "vxorps ymm10, ymm10, ymm10",
            "vxorps ymm11, ymm11, ymm11",
            "vxorps ymm12, ymm12, ymm12",
            "vxorps ymm13, ymm13, ymm13",
            "vxorps ymm14, ymm14, ymm14",
            "vxorps ymm15, ymm15, ymm15",
            "jmp 5f",
            "4:",
            "vmovups ymm4, ymmword ptr [{s}]",
            "vmovups ymm5, ymmword ptr [{s} + 32]",
            "vmovups ymm6, ymmword ptr [{s} + 64]",
            "vmovups ymm7, ymmword ptr [{s} + 96]",
            "vmovups ymm8, ymmword ptr [{s} + 128]",
            "vmovups ymm9, ymmword ptr [{s} + 160]",
            "vmovups ymm10, ymmword ptr [{s} + 192]",
            "vmovups ymm11, ymmword ptr [{s} + 224]",
            "vmovups ymm12, ymmword ptr [{s} + 256]",
            "vmovups ymm13, ymmword ptr [{s} + 288]",
            "vmovups ymm14, ymmword ptr [{s} + 320]",
            "vmovups ymm15, ymmword ptr [{s} + 352]",
            "5:",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "mov {t}, qword ptr [{o}]",
            "vmovups ymm0, ymmword ptr [{b} + 4*{t}]",
            "vmovups ymm1, ymmword ptr [{b} + 4*{t} + 32]",
            "vmovups ymm2, ymmword ptr [{b} + 4*{t} + 64]",
            row_fmas!(),
            "add {o}, 8",
            "add {w}, {ws}",
            "dec {n}",
            "jnz 2b",
            "3:",
            "vmovups ymmword ptr [{s}], ymm4",
            "vmovups ymmword ptr [{s} + 32], ymm5",
            "vmovups ymmword ptr [{s} + 64], ymm6",
            "vmovups ymmword ptr [{s} + 96], ymm7",
            "vmovups ymmword ptr [{s} + 128], ymm8",
            "vmovups ymmword ptr [{s} + 160], ymm9",
            "vmovups ymmword ptr [{s} + 192], ymm10",
            "vmovups ymmword ptr [{s} + 224], ymm11",
            "vmovups ymmword ptr [{s} + 256], ymm12",
            "vmovups ymmword ptr [{s} + 288], ymm13",
            "vmovups ymmword ptr [{s} + 320], ymm14",
            "vmovups ymmword ptr [{s} + 352], ymm15",
            fresh = in(reg) usize::from(fresh),
            s = in(reg) sums,
            n = inout(reg) offsets.len() => _,
            o = inout(reg) offsets.as_ptr() => _,
            t = out(reg) _,
            b = in(reg) b,
            w = inout(reg) w => _,
            ws = in(reg) w_step * 4,
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
            out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
            out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        );
    }
}
