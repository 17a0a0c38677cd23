//! K-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Super-blocks of `QK_K = 256` values with per-sub-block
//! scales, laid out exactly as ggml's `block_qX_K` (ggml-common.h), dotted against Q8_K activations.
//!
//! Each type lives in its own file: the block struct, `dequantize` (ggml's `dequantize_row_qX_K`),
//! `quantize` (ggml's `quantize_row_qX_K_ref`) and `vec_dot_ref` (ggml's generic
//! `ggml_vec_dot_qX_K_q8_K`, same integer sums and float order; plain multiplies and adds, never
//! fused, so the reference gives the same bits on every target). This file holds what they share:
//! the quantizer helpers of ggml-quants.c, the packed-scale decoders, and the SIMD dispatch.

mod q2_k;
mod q3_k;
mod q4_k;
mod q5_k;
mod q6_k;

pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_k::BlockQ4K;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;

pub(crate) use super::act::QK_K;
use super::act::{signed_max, BlockQ8K};
use super::GgmlType;

/// Below this max |x| a group counts as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Calls the best `vec_dot` kernel named `$kernel` for this machine, else `$fallback`.
/// AVX2 (with FMA, F16C) is detected at run time on x86_64; simd128 and NEON are compile-time features.
macro_rules! simd_vec_dot {
    ($kernel:ident, $w:expr, $a:expr, $fallback:expr) => {{
        let (w, a) = ($w, $a);
        assert_eq!(w.len(), a.len(), "weight and activation rows have different block counts");
        simd_kernel!(avx2_k, simd128_k, neon_k; $kernel(w, a)).unwrap_or_else(|| $fallback(w, a))
    }};
}
pub(crate) use simd_vec_dot;

/// [`super::dot_rows`] for Q4_K, Q5_K and Q6_K (`ty`, rows of `row_blocks` blocks in `w`) with Q8_K rows `a`:
/// this machine's row kernel, or `false`, with `out` untouched, where there is none.
#[allow(unused_variables)] // on targets without row kernels
pub(crate) fn dot_rows<const A: usize>(
    ty: GgmlType,
    w: &[u8],
    row_blocks: usize,
    a: [&[BlockQ8K]; A],
    out: &mut [[f32; A]],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::cpu::has_avx2() {
        use super::as_blocks;
        use super::avx2_k::*;
        use super::avx2_k_tiles::{k4_rows_tiled, k4_rows_tiled_vnni};
        let vnni = crate::simd::cpu::has_vnni();
        // SAFETY: the CPU has AVX2, FMA and F16C, and AVX512 F/VL/VNNI where `vnni`.
        unsafe {
            match (ty, vnni) {
                (GgmlType::Q4_K, false) => k4_rows_tiled::<BlockQ4K, A>(as_blocks(w), row_blocks, a, out),
                (GgmlType::Q4_K, true) => k4_rows_tiled_vnni::<BlockQ4K, A>(as_blocks(w), row_blocks, a, out),
                (GgmlType::Q5_K, false) => k4_rows_tiled::<BlockQ5K, A>(as_blocks(w), row_blocks, a, out),
                (GgmlType::Q5_K, true) => k4_rows_tiled_vnni::<BlockQ5K, A>(as_blocks(w), row_blocks, a, out),
                (GgmlType::Q6_K, false) => q6k_rows(as_blocks(w), row_blocks, a, out),
                (GgmlType::Q6_K, true) => q6k_rows_vnni(as_blocks(w), row_blocks, a, out),
                _ => return false,
            }
        }
        return true;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        use super::as_blocks;
        use super::simd128_k::*;
        match ty {
            GgmlType::Q4_K => q4k_rows(as_blocks(w), row_blocks, a, out),
            GgmlType::Q5_K => q5k_rows(as_blocks(w), row_blocks, a, out),
            GgmlType::Q6_K => q6k_rows(as_blocks(w), row_blocks, a, out),
            _ => return false,
        }
        return true;
    }
    #[allow(unreachable_code)]
    {
        false
    }
}

/// ggml's `nearest_int`: round half to even through the mantissa of `x + 1.5 * 2^23`.
/// Exact for |x| <= 2^22; like ggml's release builds it returns garbage (but does not fail) beyond.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The 12 packed scale bytes of Q4_K/Q5_K as 8 six-bit scales followed by 8 six-bit mins
/// (ggml's `get_scale_min_k4` for j = 0..8, done four bytes at a time as its dot kernels do).
#[inline]
pub(crate) fn scales_mins_k4(s: &[u8; 12]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    let words = [
        u0 & KMASK1,
        (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4),
        u1 & KMASK1,
        ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Inverse of [`scales_mins_k4`] for 6-bit `scales` and `mins` (the packing of ggml's Q4_K/Q5_K quantizers).
pub(crate) fn pack_scales_mins_k4(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = scales[j];
            s[j + 4] = mins[j];
        } else {
            s[j + 4] = (scales[j] & 0xF) | ((mins[j] & 0xF) << 4);
            s[j - 4] |= (scales[j] >> 4) << 6;
            s[j] |= (mins[j] >> 4) << 6;
        }
    }
    s
}

/// The 12 packed scale bytes of Q3_K as 16 signed scales (6 bits, stored with a +32 offset).
#[inline]
pub(crate) fn scales_q3k(s: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, tmp) = (word(0), word(1), word(2));
    let words = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        for (v, b) in o.iter_mut().zip(w.to_le_bytes()) {
            *v = b as i8 - 32;
        }
    }
    out
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights (weights `x²`), the only
/// form the reference quantizers use. Writes `l[i] = q + nmax` and returns the scale.
pub(crate) fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // Weighted least-squares fit of `x ≈ scale * q` for a given rounding `iscale`.
    let fit = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let q = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let iscale = -(nmax as f32) / max;
    for (li, &v) in l.iter_mut().zip(x) {
        *li = (nmax + quant(iscale, v)) as i8;
    }
    let (sumlx, suml2) = fit(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &v) in l.iter_mut().zip(x) {
                *li = (nmax + quant(iscale, v)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse = true` (the Q3_K reference quantizer's form): a first
/// rounding, then up to 5 passes that move single values while the weighted fit improves.
/// Writes `l[i] = q + nmax` and returns the scale.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let max = signed_max(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *li = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (li, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let old = *li as f32;
            let mut slx = sumlx - w * v * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *li as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for li in l.iter_mut() {
        *li += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// ggml's `make_qkx2_quants`: fit `x ≈ scale * l - min` with `l` in `0..=nmax` (weighted), trying
/// `nstep + 1` roundings around `nmax / (max - min)`. Writes `l`, returns `(scale, min)` with `min >= 0`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    debug_assert!(n <= 32 && weights.len() == n && l.len() == n);
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let err = |scale: f32, min: f32, l: &[u8]| {
        let mut e = 0f32;
        for i in 0..n {
            let diff = scale * l[i] as f32 + min - x[i];
            e += weights[i] * if use_mad { diff.abs() } else { diff * diff };
        }
        e
    };
    let nmaxf = nmax as f32;
    let iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    for i in 0..n {
        l[i] = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
    }
    let mut best_error = err(scale, min, l);
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..n];
    for is in 0..=nstep {
        let iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = li as u8;
            let (w, lf) = (weights[i], li as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = err(this_scale, this_min, laux);
            if cur_error < best_error {
                l.copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs 2-bit values the ggml way: byte `l` of each 32-byte group holds elements `l`, `l+32`,
/// `l+64`, `l+96` of its 128-value half, lowest bits first (Q2_K and Q3_K low bits).
pub(crate) fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for (q, lh) in qs.chunks_exact_mut(32).zip(l.chunks_exact(128)) {
        for i in 0..32 {
            q[i] = lh[i] | (lh[i + 32] << 2) | (lh[i + 64] << 4) | (lh[i + 96] << 6);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    /// ggml's `get_scale_min_k4`, byte by byte.
    fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        }
    }

    #[test]
    fn scale_decoders_match_ggml_bytewise_forms() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            let mut s = [0u8; 12];
            rng.fill(&mut s);
            let sm = scales_mins_k4(&s);
            for j in 0..8 {
                assert_eq!((sm[j], sm[j + 8]), get_scale_min_k4(j, &s), "j={j} s={s:?}");
            }
            let (scales, mins) = (sm[..8].try_into().unwrap(), sm[8..].try_into().unwrap());
            assert_eq!(pack_scales_mins_k4(&scales, &mins), s);

            // Q3_K: low 4 bits in bytes 0..8 (two per byte), high 2 bits in bytes 8..12.
            let q3 = scales_q3k(&s);
            for (j, &v) in q3.iter().enumerate() {
                let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
                let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
                assert_eq!(v, (low | (high << 4)) as i8 - 32, "j={j}");
            }
        }
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for (x, want) in [(0.5, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2), (3.49, 3), (-3.51, -4), (1e6, 1_000_000)]
        {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }
}
