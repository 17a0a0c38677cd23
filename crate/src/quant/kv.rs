//! Attention's vector ops over the KV cache's cold tier: rows of keys or values stored as Q8_0 or Q4_0
//! blocks (32 values `d * q` each, along a position's row), read in place.
//!
//! A query head's score against a cold key is `dot(q, dequant(k))`, and a head's output adds
//! `w * dequant(v)` for each cold value: the same ops as over the f16 tier (`kernels::f16`), on values
//! unpacked from blocks instead of converted from f16. Both block types hold `d * q` with an f16 `d` and
//! a quant of at most 8 bits, a product f32 holds exactly, so every kernel unpacks exactly the values
//! [`QuantBlock::dequantize`] gives: they differ from their scalar references (`*_ref`) only in the order
//! of the float additions (and, on x86_64 and aarch64, in fused multiply-adds).
//!
//! Each op takes the query heads that share a KV head at once, so a block is unpacked once for all of
//! them. The SIMD versions (`avx2_kv.rs`, `neon_kv.rs`, `simd128_kv.rs`) are picked as the other quantized
//! kernels are: AVX2+FMA+F16C at run time on x86_64, NEON on aarch64 and simd128 on wasm32 at compile time;
//! elsewhere the references run.

use super::act::{f16_to_f32, BlockQ8_0};
use super::legacy::{BlockQ4_0, LegacyBlock};
use super::{QuantBlock, SimdLegacy};

/// Values per block (a cold row's width must be a multiple of it).
pub(crate) const KV_BLOCK: usize = 32;

/// A block type of the cold tier: 32 values `d * q` with signed quants (Q8_0, Q4_0).
pub(crate) trait KvBlock: QuantBlock + LegacyBlock + SimdLegacy {
    /// The block's 32 values, exactly.
    fn values(&self) -> [f32; KV_BLOCK] {
        let mut out = [0f32; KV_BLOCK];
        Self::dequantize(std::slice::from_ref(self), &mut out);
        out
    }
}

impl KvBlock for BlockQ8_0 {}
impl KvBlock for BlockQ4_0 {}

/// The scores of the query heads `q` (rows of `d` values, `d` = a cold row's values) against cold keys
/// `k` (rows of `d / 32` blocks): `out[g * stride + i] = dot(q[g], dequant(k[i])) * scale`.
#[inline]
pub(crate) fn scores<B: KvBlock>(q: &[f32], k: &[&[B]], scale: f32, out: &mut [f32], stride: usize) {
    let Some(d) = check_scores(q, k, out, stride) else { return };
    #[cfg(target_arch = "x86_64")]
    if crate::simd::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the shapes are checked.
        return unsafe { super::avx2_kv::scores(q, k, d, scale, out, stride) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return super::simd128_kv::scores(q, k, d, scale, out, stride);
    // SAFETY: NEON is part of the aarch64 baseline; the shapes are checked.
    #[cfg(target_arch = "aarch64")]
    return unsafe { super::neon_kv::scores(q, k, d, scale, out, stride) };
    #[allow(unreachable_code)]
    scores_ref(q, k, scale, out, stride)
}

/// The weighted sums of cold values `v` (rows of `d / 32` blocks) for a group of heads: for each head
/// `g`, `o[g * o_stride..][..d] += w[g * w_stride + i] * dequant(v[i])` for `i` in order, `o` ending with
/// the last head's row.
#[inline]
pub(crate) fn weighted_sums<B: KvBlock>(v: &[&[B]], w: &[f32], w_stride: usize, o: &mut [f32], o_stride: usize) {
    let Some((d, heads)) = check_sums(v, w, w_stride, o, o_stride) else { return };
    #[cfg(target_arch = "x86_64")]
    if crate::simd::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the shapes are checked.
        return unsafe { super::avx2_kv::weighted_sums(v, d, heads, w, w_stride, o, o_stride) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return super::simd128_kv::weighted_sums(v, d, heads, w, w_stride, o, o_stride);
    // SAFETY: NEON is part of the aarch64 baseline; the shapes are checked.
    #[cfg(target_arch = "aarch64")]
    return unsafe { super::neon_kv::weighted_sums(v, d, heads, w, w_stride, o, o_stride) };
    #[allow(unreachable_code)]
    {
        let _ = (d, heads);
        weighted_sums_ref(v, w, w_stride, o, o_stride)
    }
}

/// The scalar reference of [`scores`]: each dot summed in element order.
pub(crate) fn scores_ref<B: KvBlock>(q: &[f32], k: &[&[B]], scale: f32, out: &mut [f32], stride: usize) {
    let Some(d) = check_scores(q, k, out, stride) else { return };
    for (i, row) in k.iter().enumerate() {
        for (g, qh) in q.chunks_exact(d).enumerate() {
            let mut sum = 0f32;
            for (b, block) in row.iter().enumerate() {
                let x = block.values();
                qh[b * KV_BLOCK..][..KV_BLOCK].iter().zip(&x).for_each(|(&q, &x)| sum += q * x);
            }
            out[g * stride + i] = sum * scale;
        }
    }
}

/// The scalar reference of [`weighted_sums`]: `o += w * x` element by element, row by row.
pub(crate) fn weighted_sums_ref<B: KvBlock>(v: &[&[B]], w: &[f32], w_stride: usize, o: &mut [f32], o_stride: usize) {
    let Some((d, heads)) = check_sums(v, w, w_stride, o, o_stride) else { return };
    for (i, row) in v.iter().enumerate() {
        for g in 0..heads {
            let (wi, og) = (w[g * w_stride + i], &mut o[g * o_stride..][..d]);
            for (b, block) in row.iter().enumerate() {
                let x = block.values();
                og[b * KV_BLOCK..][..KV_BLOCK].iter_mut().zip(&x).for_each(|(o, &x)| *o += wi * x);
            }
        }
    }
}

/// The row width of a [`scores`] call, checked (`None`: no rows or no heads, nothing to do). The SIMD
/// kernels read within these bounds unchecked.
fn check_scores<B>(q: &[f32], k: &[&[B]], out: &[f32], stride: usize) -> Option<usize> {
    let d = k.first()?.len() * KV_BLOCK;
    assert!(d > 0 && k.iter().all(|r| r.len() * KV_BLOCK == d), "cold rows of one width");
    assert!(q.len().is_multiple_of(d), "query heads of the rows' width");
    let heads = q.len() / d;
    assert!(heads == 0 || out.len() >= (heads - 1) * stride + k.len(), "scores out of bounds");
    (heads > 0).then_some(d)
}

/// The row width and head count of a [`weighted_sums`] call, checked (`None`: no rows).
fn check_sums<B>(v: &[&[B]], w: &[f32], w_stride: usize, o: &[f32], o_stride: usize) -> Option<(usize, usize)> {
    let d = v.first()?.len() * KV_BLOCK;
    assert!(d > 0 && v.iter().all(|r| r.len() * KV_BLOCK == d), "cold rows of one width");
    // `o` holds exactly the heads' rows: (heads - 1) * o_stride + d floats.
    assert!(o.len() >= d && (o.len() - d).is_multiple_of(o_stride.max(1)), "output rows");
    let heads = if o.len() == d { 1 } else { (o.len() - d) / o_stride + 1 };
    assert!(w.len() >= (heads - 1) * w_stride + v.len(), "weights out of bounds");
    Some((d, heads))
}

/// A block's scale as f32 (for the SIMD kernels, which broadcast it).
#[allow(dead_code)] // on targets without SIMD kernels
#[inline(always)]
pub(super) fn scale_of<B: LegacyBlock>(b: &B) -> f32 {
    f16_to_f32(b.d())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{as_blocks, GgmlType};
    use crate::test_support::{test, Rng};

    /// `n` random rows of `blocks` blocks of `B`: random quants and sane scales (`d` leads both types),
    /// and a few blocks of extreme quants: bytes 0x80 (Q8_0's -128) or 0x7F, nibbles 0 and 8 or 15 and 7.
    fn rows<B: KvBlock>(ty: GgmlType, n: usize, blocks: usize, rng: &mut Rng) -> Vec<u8> {
        let mut bytes = vec![0u8; n * blocks * ty.block_bytes()];
        rng.fill(&mut bytes);
        for (i, block) in bytes.chunks_exact_mut(ty.block_bytes()).enumerate() {
            block[..2].copy_from_slice(&crate::quant::act::f32_to_f16(rng.sane()));
            if i % 7 == 3 {
                block[2..].fill(if i % 2 == 0 { 0x80 } else { 0x7F });
            }
        }
        bytes
    }

    fn f32s(n: usize, rng: &mut Rng) -> Vec<f32> {
        (0..n).map(|i| rng.uniform(-2.0, 2.0) * if i % 13 == 0 { 40.0 } else { 1.0 }).collect()
    }

    /// Every shape a group of heads can take (1 to 9 heads: the SIMD kernels go 4 at a time), row widths
    /// of 1 to 16 blocks, 1 to 33 rows: each kernel within float rounding of its reference, and both
    /// within it of the float64 sums of the exactly dequantized values.
    fn check<B: KvBlock>(ty: GgmlType) {
        let mut rng = Rng::new(ty as u64 + 40);
        for (heads, blocks, n) in [(1, 1, 1), (3, 2, 32), (4, 2, 7), (5, 4, 33), (9, 2, 16), (2, 16, 3), (8, 1, 5)] {
            let d = blocks * KV_BLOCK;
            let at = format!("{ty:?}, {heads} heads, {blocks} blocks, {n} rows");
            let bytes = rows::<B>(ty, n, blocks, &mut rng);
            let all: &[B] = as_blocks(&bytes);
            let k: Vec<&[B]> = all.chunks_exact(blocks).collect();
            let exact: Vec<Vec<f32>> = k.iter().map(|r| r.iter().flat_map(|b| b.values()).collect()).collect();
            let mut dq = vec![0f32; n * d];
            B::dequantize(all, &mut dq);
            assert_eq!(exact.concat(), dq, "{at}: values() is dequantize()");

            // Scores: head g's at g * stride, as attention lays them out.
            let stride = n + 3;
            let q = f32s(heads * d, &mut rng);
            let (mut fast, mut reference) = (vec![f32::NAN; heads * stride], vec![f32::NAN; heads * stride]);
            scores(&q, &k, 0.125, &mut fast, stride);
            scores_ref(&q, &k, 0.125, &mut reference, stride);
            for g in 0..heads {
                for (i, x) in exact.iter().enumerate() {
                    let qh = &q[g * d..][..d];
                    let want: f64 = qh.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * 0.125;
                    let terms: f64 = qh.iter().zip(x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum::<f64>() * 0.125;
                    let limit = terms * d as f64 * f32::EPSILON as f64 + 1e-30;
                    let (f, r) = (fast[g * stride + i] as f64, reference[g * stride + i] as f64);
                    assert!((f - want).abs() <= limit, "{at}: score [{g}, {i}] {f} != {want} (limit {limit})");
                    assert!((r - want).abs() <= limit, "{at}: reference score [{g}, {i}] {r} != {want}");
                }
            }

            // Weighted sums into [m, l, o[d]] parts, as attention's.
            let o_stride = d + 2;
            let o0 = f32s(heads * o_stride, &mut rng);
            let w: Vec<f32> = (0..heads * stride).map(|_| rng.uniform(0.0, 1.0)).collect();
            let (mut fast, mut reference) = (o0.clone(), o0.clone());
            let len = (heads - 1) * o_stride + d;
            weighted_sums(&k, &w, stride, &mut fast[2..2 + len], o_stride);
            weighted_sums_ref(&k, &w, stride, &mut reference[2..2 + len], o_stride);
            for g in 0..heads {
                for j in 0..d {
                    let at_j = 2 + g * o_stride + j;
                    let terms = exact.iter().enumerate().map(|(i, x)| w[g * stride + i] as f64 * x[j] as f64);
                    let want = o0[at_j] as f64 + terms.clone().sum::<f64>();
                    let size = o0[at_j].abs() as f64 + terms.map(f64::abs).sum::<f64>();
                    let limit = size * 2.0 * n as f64 * f32::EPSILON as f64 + 1e-30;
                    let (f, r) = (fast[at_j] as f64, reference[at_j] as f64);
                    assert!((f - want).abs() <= limit, "{at}: sum [{g}, {j}] {f} != {want} (limit {limit})");
                    assert!((r - want).abs() <= limit, "{at}: reference sum [{g}, {j}] {r} != {want}");
                }
            }
            // What lies between the heads' rows (their [m, l]) is left alone.
            for g in 0..heads {
                assert_eq!(fast[g * o_stride..][..2], o0[g * o_stride..][..2], "{at}: [m, l] of head {g}");
            }
        }
    }

    #[test]
    fn q8_0_kernels_match_the_reference() {
        check::<BlockQ8_0>(GgmlType::Q8_0);
    }

    #[test]
    fn q4_0_kernels_match_the_reference() {
        check::<BlockQ4_0>(GgmlType::Q4_0);
    }

    /// One head at a time gives the same bits as a group: results do not depend on how heads are grouped.
    #[test]
    fn a_group_gives_each_head_the_bits_it_gets_alone() {
        let mut rng = Rng::new(77);
        let (heads, blocks, n) = (7, 2, 9);
        let d = blocks * KV_BLOCK;
        let bytes = rows::<BlockQ8_0>(GgmlType::Q8_0, n, blocks, &mut rng);
        let k: Vec<&[BlockQ8_0]> = as_blocks::<BlockQ8_0>(&bytes).chunks_exact(blocks).collect();
        let q = f32s(heads * d, &mut rng);
        let mut group = vec![0f32; heads * n];
        scores(&q, &k, 0.5, &mut group, n);
        let w = f32s(heads * n, &mut rng);
        let mut sums = vec![0f32; heads * d];
        weighted_sums(&k, &w, n, &mut sums, d);
        for g in 0..heads {
            let mut one = vec![0f32; n];
            scores(&q[g * d..][..d], &k, 0.5, &mut one, n);
            assert_eq!(one, group[g * n..][..n], "scores of head {g}");
            let mut alone = vec![0f32; d];
            weighted_sums(&k, &w[g * n..][..n], n, &mut alone, d);
            assert_eq!(alone, sums[g * d..][..d], "sums of head {g}");
        }
    }
}
