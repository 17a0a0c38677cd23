//! Quantized tensor formats, exactly as ggml lays them out, and the kernels that use them in place: one block
//! struct per GGUF type behind [`QuantBlock`], each with a scalar reference dot and one per instruction set
//! ([`vec_dot`]), and row kernels that dot weight rows with several activation rows at once ([`dot_rows`]).
//! Activations are quantized once per matmul into the format the weight type is dotted against ([`act`]).
//!
//! # Design
//!
//! One block struct per GGUF type (one file per format family) behind `QuantBlock` (`dequantize`, a reference
//! `quantize`, a scalar `vec_dot_ref`, an optimized `vec_dot`), `#[repr(C)]` in ggml's exact layout with alignment 1,
//! so a tensor's bytes are viewed as `&[Block]` in place: weights are never dequantized as a whole. `QuantMatrix` is a
//! matrix as the kernels read it. `act.rs` holds the activation formats (ggml's "vec_dot_type": Q8_0, Q8_1 or Q8_K;
//! plain f32 for float weights): a matmul quantizes its input once, then `dot_rows` dots a task's weight rows with 1 or
//! 4 activation rows so an unpacked block is reused in registers. F16 weights have no row kernel: `matmul`'s `f16_dots`
//! converts each weight row to f32 once for the 4 rows and runs the f32 kernel (the same bits as `vec_dot`, whose f16
//! kernel converts as it goes; simd128 has no f16 conversion).
//!
//! Per-ISA kernels sit in their own files (`avx2*.rs`, `simd128*.rs`, `neon*.rs`; `*_k.rs` for the K-quants), and
//! `simd_kernel!` picks them: AVX2+FMA+F16C detected once at run time on x86_64, simd128 and NEON at compile time. The
//! legacy types share one generic dot (`legacy_dot`) and row kernel (`legacy_rows`) per ISA: `LegacyBlock` says what a
//! type's scales are, the ISA's `Unpack` how its quants unpack.
//!
//! On x86_64, Q4_0, Q4_1, Q5_0 and Q8_0 take weight rows eight at a time (`avx2_tiles.rs`, stamped for AVX2 and
//! AVX512-VNNI), prefill and decode alike: the eight rows' quants transposed so that each 32-bit lane holds one row
//! and one multiply against four broadcast activation bytes adds 32 products; weight quants made unsigned (Q4_0's
//! and Q4_1's nibbles, Q5_0's nibbles with their fifth bits, Q8_0's `q + 128` with VNNI) with the offset times the
//! activation block's sum of quants (`Activations::row_sums`) taken off the exact integer sum (Q4_1: its `m` times the
//! activation's `s`, a second FMA). Every output adds block i's exact
//! sum times its scales into partial sum `i % 8` and the eight partial sums as a vector's lanes: the tiles, the
//! per-row kernel for the rows left over, and both stampings give the same bits (their `vec_dot` keeps its own order:
//! `dot_rows` does not use it). (Q8_0's tiles alone, before Q5_0 had them, moved one position of Gemma 3 270M's
//! llama.cpp comparison past its bound, |dp1| 0.158 > 0.15; with both, its largest |dp1| is 0.137.)
//!
//! Q4_K, Q5_K and Q6_K have row kernels of their own (`q4k_rows` and so on in `simd128_k.rs`; in `avx2_k.rs` Q4_K and
//! Q5_K share `k4_rows`, `K4Block` saying where a type's fifth bits are, if any): each unpacks a block's quants and
//! sub-block scales once for the activation rows, then does per output exactly its `vec_dot`'s integer sums and float
//! operations, so the results equal `vec_dot`'s bits (aarch64 has none yet: there they go through `vec_dot`). On
//! x86_64, prefill of Q4_K and Q5_K takes weight rows eight at a time (`avx2_k_tiles.rs`, stamped for AVX2 and
//! AVX512-VNNI): the eight rows' quant bytes are transposed so that each 32-bit lane holds one row, one
//! `_mm256_dpbusd_epi32` (or, without VNNI, `maddubs` with the 16-bit sums of four added before one `madd`) against four
//! broadcast activation bytes adds 32 products, and a sub-block's scale is one multiply for all eight rows. The tiles
//! sum each block's integers exactly before any float operation; these types' `vec_dot` and per-row kernels add in that
//! same order, so all give the same bits (`avx2_k::DotSum`; Q6_K, which has no tile, keeps the cheaper lane-by-lane
//! order). Decode (one activation row) keeps the per-row kernels, for which the
//! transposition costs more than it saves; with one activation row a kernel's multiply-adds would wait on each other,
//! so they run in two chains per row that meet at the block's end (integers: the same sums). `matmul` gives these types
//! sixteen activation rows at a time there (`quant::dot_rows_batch`), Q6_K's per-row kernel too.
//!
//! wasm32 has a second form of the simd128 kernels, compiled where `target_feature = "relaxed-simd"` is on (the
//! npm package's relaxed builds): the K-quants and the legacy types whose quants fit in seven bits multiply bytes
//! with `relaxed_dot_i8x16_i7x16` instead of widening to i16. Weights stay in 0..=127 and no i16 pair can
//! overflow, so every engine computes the same exact integers, and each float lane sums the same elements as the plain
//! kernel's: the float operations after them are the plain kernels', so the relaxed build gives the plain build's
//! bits (`simd128`'s test `byte_dots_give_the_widening_dots_bits`; npm/test/simd.test.mjs compares the builds' whole
//! distributions) and passes the same tests (run in Node and Chromium by scripts/test.sh).
//!
//! The simd128 kernels take their vector constants as values made once per call (`simd128::Consts`), because V8
//! rebuilds a `v128.const` at every use inside a loop.
//!
//! `quant/tests/` checks every optimized kernel against its scalar reference, at the values' extremes too. A new type:
//! its block struct, its `GgmlType`, its kernels through `simd_kernel!`, its checks in `quant/tests/`.
//!
//! `iq4.rs` holds the non-linear IQ4_NL (blocks of 32, against Q8_0) and IQ4_XS (256 with 6-bit sub-block scales,
//! against Q8_K): each nibble indexes ggml's 16-value table `kvalues_iq4nl`. IQ4_NL is a legacy block to the SIMD
//! kernels (its `Unpack` is a 16-byte table shuffle), so it has `legacy_dot` and `legacy_rows`; IQ4_XS has its own
//! `vec_dot_iq4_xs` per ISA (in the legacy kernels' files), products widened to i16 because Q8_K's quants take all of
//! i8. A quantizer of ours (ggml's best-scale search without importance weights) writes IQ4 matrices for the tests: the
//! fixtures' Python writer cannot quantize them.
//!
//! `kv.rs` holds attention's ops over the KV cache's cold tier (rows of Q8_0 or Q4_0 blocks, `KvBlock`): the scores of
//! a group of query heads against cold keys, and their weighted sums of cold values, each block unpacked once for the
//! group, by the legacy kernels' `Unpack`, into its exact values (an f16 scale times a quant of at most 8 bits is exact
//! in f32). Its per-ISA kernels are `avx2_kv.rs`, `neon_kv.rs` and `simd128_kv.rs`; its tests check each against its
//! scalar reference (`scores_ref`, `weighted_sums_ref`) and against float64 sums.

/// Evaluates to `Some(kernel(args..))` from the SIMD module this machine runs (AVX2 on x86_64 when the
/// CPU has it, simd128 on wasm32 builds with it enabled, NEON on aarch64), or `None` where there is none.
/// The modules are `avx2`, `simd128` and `neon` unless named first: `simd_kernel!(x86, wasm, arm; k(w, a))`.
macro_rules! simd_kernel {
    ($kernel:ident($($arg:expr),* $(,)?)) => {
        simd_kernel!(avx2, simd128, neon; $kernel($($arg),*))
    };
    ($x86:ident, $wasm:ident, $arm:ident; $kernel:ident($($arg:expr),* $(,)?)) => {{
        #[cfg(target_arch = "x86_64")]
        let out = if $crate::simd::cpu::has_avx2() {
            // SAFETY: the CPU has AVX2, FMA and F16C, the features the x86_64 kernels are compiled for.
            Some(unsafe { $crate::quant::$x86::$kernel($($arg),*) })
        } else {
            None
        };
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        let out = Some($crate::quant::$wasm::$kernel($($arg),*));
        // SAFETY: NEON is part of the aarch64 baseline (some kernels declare it as a target feature).
        #[cfg(target_arch = "aarch64")]
        #[allow(unused_unsafe)]
        let out = Some(unsafe { $crate::quant::$arm::$kernel($($arg),*) });
        #[cfg(not(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            all(target_arch = "wasm32", target_feature = "simd128")
        )))]
        let out: Option<f32> = {
            $(let _ = $arg;)*
            None
        };
        out
    }};
}

pub mod act;
mod float;
mod iq4;
mod k_quants;
pub(crate) mod kv;
mod legacy;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_k;
#[cfg(target_arch = "x86_64")]
mod avx2_k_tiles;
#[cfg(target_arch = "x86_64")]
mod avx2_kv;
#[cfg(target_arch = "x86_64")]
mod avx2_tiles;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
mod neon_k;
#[cfg(target_arch = "aarch64")]
mod neon_kv;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) mod simd128;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128_k;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128_kv;

#[cfg(test)]
mod tests;

#[cfg(target_arch = "x86_64")]
use crate::simd::cpu::{has_avx2, has_vnni};

pub use act::{ActKind, ActRow, Activations, BlockQ8K, BlockQ8_0, BlockQ8_1};
pub use float::{BlockBF16, BlockF16, BlockF32};
pub use iq4::{BlockIQ4NL, BlockIQ4XS};
pub use k_quants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1};

/// The GGUF tensor types this engine reads. Discriminants are ggml's type ids.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
}

/// Calls `$body` with `$B` bound to the block struct of `$ty`.
macro_rules! with_block {
    ($ty:expr, $B:ident => $body:expr) => {
        match $ty {
            GgmlType::F32 => {
                type $B = BlockF32;
                $body
            }
            GgmlType::F16 => {
                type $B = BlockF16;
                $body
            }
            GgmlType::BF16 => {
                type $B = BlockBF16;
                $body
            }
            GgmlType::Q4_0 => {
                type $B = BlockQ4_0;
                $body
            }
            GgmlType::Q4_1 => {
                type $B = BlockQ4_1;
                $body
            }
            GgmlType::Q5_0 => {
                type $B = BlockQ5_0;
                $body
            }
            GgmlType::Q5_1 => {
                type $B = BlockQ5_1;
                $body
            }
            GgmlType::Q8_0 => {
                type $B = BlockQ8_0;
                $body
            }
            GgmlType::Q2_K => {
                type $B = BlockQ2K;
                $body
            }
            GgmlType::Q3_K => {
                type $B = BlockQ3K;
                $body
            }
            GgmlType::Q4_K => {
                type $B = BlockQ4K;
                $body
            }
            GgmlType::Q5_K => {
                type $B = BlockQ5K;
                $body
            }
            GgmlType::Q6_K => {
                type $B = BlockQ6K;
                $body
            }
            GgmlType::IQ4_NL => {
                type $B = BlockIQ4NL;
                $body
            }
            GgmlType::IQ4_XS => {
                type $B = BlockIQ4XS;
                $body
            }
        }
    };
}

impl GgmlType {
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];

    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| *t as u32 == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::IQ4_NL => "IQ4_NL",
            GgmlType::IQ4_XS => "IQ4_XS",
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        with_block!(self, B => B::ELEMS)
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        with_block!(self, B => std::mem::size_of::<B>())
    }

    /// Bytes of one row of `n` elements (`n` must be a multiple of the block size).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }

    /// The activation format this weight type is dotted against.
    pub fn act_kind(self) -> ActKind {
        with_block!(self, B => B::ACT)
    }
}

/// A matrix in its GGUF blocks, read where it lies: `rows` rows of `cols` elements of type `ty`, back to
/// back in `bytes` (`rows * ty.row_bytes(cols)` of them).
#[derive(Clone, Copy, Debug)]
pub struct QuantMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: &'a [u8],
}

impl QuantMatrix<'_> {
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols)
    }
}

/// One GGUF block format.
pub trait QuantBlock: Copy + 'static {
    /// Elements per block.
    const ELEMS: usize;
    /// The activation format `vec_dot` takes.
    const ACT: ActKind;
    /// The activation block type (`f32` for float weights, else a Q8 block of `ACT`).
    type Act: Copy + 'static;

    /// `blocks.len() * ELEMS` values into `out`.
    fn dequantize(blocks: &[Self], out: &mut [f32]);
    /// Reference quantizer (as ggml's `quantize_row_*_ref`): `x.len() == out.len() * ELEMS`.
    fn quantize(x: &[f32], out: &mut [Self]);
    /// Plain scalar dot product of a weight row with an activation row: the reference for `vec_dot`.
    fn vec_dot_ref(w: &[Self], a: &[Self::Act]) -> f32;
    /// The fastest dot product this machine supports; equals `vec_dot_ref` up to float rounding.
    fn vec_dot(w: &[Self], a: &[Self::Act]) -> f32 {
        Self::vec_dot_ref(w, a)
    }
}

/// View raw tensor bytes as blocks, in place. Blocks have alignment 1 (checked at compile time
/// by each block file), so any byte offset is valid.
pub fn as_blocks<B: QuantBlock>(bytes: &[u8]) -> &[B] {
    assert_eq!(std::mem::align_of::<B>(), 1, "block structs must have alignment 1");
    let n = bytes.len() / std::mem::size_of::<B>();
    debug_assert_eq!(bytes.len(), n * std::mem::size_of::<B>());
    // SAFETY: B is repr(C), alignment 1, valid for every bit pattern (made of byte arrays), and
    // `n * size_of::<B>()` bytes are in bounds.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const B, n) }
}

/// Mutable view of bytes as blocks (for the reference quantizers).
pub fn as_blocks_mut<B: QuantBlock>(bytes: &mut [u8]) -> &mut [B] {
    assert_eq!(std::mem::align_of::<B>(), 1, "block structs must have alignment 1");
    let n = bytes.len() / std::mem::size_of::<B>();
    // SAFETY: as in `as_blocks`, and the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr() as *mut B, n) }
}

/// Dequantize one row (or any whole number of blocks) of type `ty`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    with_block!(ty, B => B::dequantize(as_blocks::<B>(src), out))
}

/// Quantize `x` into `out` with ggml's reference quantizer for `ty` (used to write test models).
pub fn quantize_row(ty: GgmlType, x: &[f32], out: &mut [u8]) {
    with_block!(ty, B => B::quantize(x, as_blocks_mut::<B>(out)))
}

/// Dot product of one weight row (raw bytes of type `ty`) with one activation row.
/// Panics if the activation kind does not match `ty.act_kind()`: that is a bug in the caller.
pub fn vec_dot(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    with_block!(ty, B => B::vec_dot(as_blocks::<B>(w), a.blocks::<<B as QuantBlock>::Act>()))
}

/// Dots of whole weight rows `w` (raw bytes of type `ty`, rows of `cols` elements) with `A` rows of `acts`,
/// into `out[row][j] = dot(w row, acts.row(a_rows[j]))`. The row kernels unpack each weight block once
/// for the `A` rows, and every output goes through the same float operations whatever `A`, so results
/// do not depend on it (nor on how a matmul groups its work). Returns `false`, with `out` untouched,
/// where `ty` has no row kernel on this machine: use [`vec_dot`] instead.
pub fn dot_rows<const A: usize>(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    acts: &Activations,
    a_rows: [usize; A],
    out: &mut [[f32; A]],
) -> bool {
    let row_blocks = cols / ty.block_size();
    match ty {
        GgmlType::Q4_0 => tile_rows::<BlockQ4_0, A>(as_blocks(w), row_blocks, acts, a_rows, out),
        GgmlType::Q4_1 => tile_rows::<BlockQ4_1, A>(as_blocks(w), row_blocks, acts, a_rows, out),
        GgmlType::Q5_0 => tile_rows::<BlockQ5_0, A>(as_blocks(w), row_blocks, acts, a_rows, out),
        GgmlType::Q5_1 => legacy_rows::<BlockQ5_1, A>(as_blocks(w), row_blocks, acts, a_rows, out),
        GgmlType::Q8_0 => tile_rows::<BlockQ8_0, A>(as_blocks(w), row_blocks, acts, a_rows, out),
        GgmlType::IQ4_NL => legacy_rows::<BlockIQ4NL, A>(as_blocks(w), row_blocks, acts, a_rows, out),
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
            k_quants::dot_rows(ty, w, row_blocks, a_rows.map(|r| acts.row(r).blocks()), out)
        }
        _ => false,
    }
}

/// How many activation rows to give [`dot_rows`] at once for `ty`, where there are that many: 16 for the x86_64
/// tiles, which share a transposition of eight or sixteen weight rows among all of them (the K-quants',
/// `avx2_k_tiles`, Q6_K's per-row kernel too; the legacy types', `avx2_tiles`: all with AVX2; with 8 the
/// transposition was over a quarter of the sixteen-row tiles' time, 32 was slower again); 8 for the K-quants on
/// wasm32 (`simd128_k` unpacks a few sub-blocks at a time for all the rows); 4 elsewhere (what the row kernels keep
/// in registers).
pub fn dot_rows_batch(ty: GgmlType) -> usize {
    let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
    #[cfg(target_arch = "x86_64")]
    let tiles =
        has_avx2() && (k_quant || matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0));
    #[cfg(target_arch = "wasm32")]
    let tiles = k_quant;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    let tiles = false;
    if tiles && cfg!(target_arch = "x86_64") {
        16
    } else if tiles {
        8
    } else {
        let _ = k_quant;
        4
    }
}

/// The legacy blocks this machine's SIMD kernels unpack (each ISA's own `Unpack`; every block where none).
#[cfg(target_arch = "x86_64")]
use avx2::Unpack as SimdLegacy;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
)))]
use legacy::LegacyBlock as SimdLegacy;
#[cfg(target_arch = "aarch64")]
use neon::Unpack as SimdLegacy;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use simd128::Unpack as SimdLegacy;

/// [`dot_rows`] for Q4_0, Q4_1, Q5_0 and Q8_0: the tiles on x86_64 (`avx2_tiles`), the legacy row kernel elsewhere.
fn tile_rows<B: TileRows, const A: usize>(
    w: &[B],
    row_blocks: usize,
    acts: &Activations,
    a_rows: [usize; A],
    out: &mut [[f32; A]],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        let a = a_rows.map(|r| acts.row(r).blocks());
        // Sums of the activations' quants for the types with an offset (Q8_0 activations); Q4_1's have none.
        let sums = a_rows.map(|r| if B::WITH_MIN { &[][..] } else { acts.row_sums(r) });
        let scales = a_rows.map(|r| acts.row_scales(r));
        // SAFETY: the CPU has AVX2, FMA and F16C, and AVX512 F/VL/VNNI where `has_vnni`.
        unsafe {
            match has_vnni() {
                true => avx2_tiles::tile_rows_vnni(w, row_blocks, a, scales, sums, out),
                false => avx2_tiles::tile_rows(w, row_blocks, a, scales, sums, out),
            }
        }
        return true;
    }
    legacy_rows(w, row_blocks, acts, a_rows, out)
}

/// The blocks of [`tile_rows`]: Q4_0, Q4_1, Q5_0 and Q8_0.
#[cfg(target_arch = "x86_64")]
use avx2_tiles::TileBlock as TileRows;
#[cfg(not(target_arch = "x86_64"))]
use SimdLegacy as TileRows;

/// [`dot_rows`] for a legacy type: this machine's row kernel, or `false` where there is none.
fn legacy_rows<B: SimdLegacy, const A: usize>(
    w: &[B],
    row_blocks: usize,
    acts: &Activations,
    a_rows: [usize; A],
    out: &mut [[f32; A]],
) -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    let scales = || a_rows.map(|r| acts.row_scales(r));
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        let a = a_rows.map(|r| acts.row(r).blocks());
        // SAFETY: the CPU has AVX2, FMA and F16C, and AVX512 F/VL/VNNI where `has_vnni`.
        unsafe {
            match has_vnni() {
                true => avx2::legacy_rows_vnni(w, row_blocks, a, scales(), out),
                false => avx2::legacy_rows(w, row_blocks, a, scales(), out),
            }
        }
        return true;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        simd128::legacy_rows(w, row_blocks, acts, a_rows, out);
        return true;
    }
    #[cfg(target_arch = "aarch64")]
    {
        neon::legacy_rows(w, row_blocks, a_rows.map(|r| acts.row(r).blocks()), scales(), out);
        return true;
    }
    #[allow(unreachable_code)]
    {
        let _ = (w, row_blocks, acts, a_rows, out);
        false
    }
}

/// Checks the row kernels' arguments: `w` blocks are `rows` whole rows of `row_blocks`, the activation rows
/// have at least `row_blocks` blocks and scales (the kernels then read them unchecked).
#[allow(dead_code)] // on targets without row kernels
#[inline]
fn check_rows<T, const A: usize>(w: usize, row_blocks: usize, a: &[&[T]; A], a_scales: &[&[[f32; 2]]; A], rows: usize) {
    assert!(row_blocks > 0 && w == rows * row_blocks, "weights must be {rows} rows of {row_blocks} blocks");
    assert!(
        a.iter().zip(a_scales).all(|(a, s)| a.len() >= row_blocks && s.len() >= row_blocks),
        "activation rows too short"
    );
}

/// [`check_rows`] for the K-quants' row kernels (Q8_K activations carry their scales in the blocks): `w` is `rows`
/// rows of `row_blocks` blocks, and every activation row has at least `row_blocks` blocks.
#[allow(dead_code)] // on targets without K-quant row kernels
#[inline]
fn check_k_rows<T, const A: usize>(w: &[T], row_blocks: usize, a: &[&[BlockQ8K]; A], rows: usize) {
    assert!(row_blocks > 0 && w.len() == rows * row_blocks, "weights must be {rows} rows of {row_blocks} blocks");
    assert!(a.iter().all(|a| a.len() >= row_blocks), "activation rows too short");
}

/// Calls `block(i, i % 2)` for `i` in `0..n`, two at a time so that the parity is a constant: the row
/// kernels keep an accumulator per parity, so one block's FMA does not wait for the previous one's.
#[allow(dead_code)] // on targets without row kernels
#[inline(always)]
fn even_odd(n: usize, mut block: impl FnMut(usize, usize)) {
    for i in (0..n / 2).map(|i| 2 * i) {
        block(i, 0);
        block(i + 1, 1);
    }
    if n % 2 == 1 {
        block(n - 1, 0);
    }
}

/// The scalar reference of [`vec_dot`].
pub fn vec_dot_ref(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    with_block!(ty, B => B::vec_dot_ref(as_blocks::<B>(w), a.blocks::<<B as QuantBlock>::Act>()))
}
