//! Q4_K: 8 sub-blocks of 32 values, `x = d * sc * q - dmin * m` with 4-bit `q` and 6-bit `sc`, `m`
//! (4.5 bits per weight).

use super::{make_qkx2_quants, nearest_int, pack_scales_mins_k4, scales_mins_k4, simd_vec_dot, QK_K};
use crate::quant::act::{f16_to_f32, f32_to_f16, ActKind, BlockQ8K};
use crate::quant::QuantBlock;

/// ggml's `block_q4_K` (144 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ4K {
    /// f16 super-block scale for the scales.
    pub d: [u8; 2],
    /// f16 super-block scale for the mins.
    pub dmin: [u8; 2],
    /// 8 six-bit scales and 8 six-bit mins, packed (see [`scales_mins_k4`]).
    pub scales: [u8; 12],
    /// 4-bit quants: byte `l` of each 32-byte group holds elements `l` (low nibble) and `l + 32`
    /// (high nibble) of its 64 values.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144 && std::mem::align_of::<BlockQ4K>() == 1);

impl Default for BlockQ4K {
    fn default() -> Self {
        BlockQ4K { d: [0; 2], dmin: [0; 2], scales: [0; 12], qs: [0; QK_K / 2] }
    }
}

/// The first half of the K-quant `quantize_row_q4_K_ref`/`q5_K_ref`: per sub-block of 32, a
/// weighted fit to `nmax` levels (weights `rms + |x|`), then the 6-bit scales and mins and the
/// super-block `d`, `dmin`. Returns `(packed scales, d, dmin)`; `l` gets the first-pass quants.
pub(super) fn quantize_scales_k4(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l: &mut [u8; QK_K],
) -> ([u8; 12], [u8; 2], [u8; 2]) {
    let mut scales = [0f32; QK_K / 32];
    let mut mins = [0f32; QK_K / 32];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let sum_x2: f32 = xs.iter().fold(0.0, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        let (scale, min) = make_qkx2_quants(nmax, xs, &weights, &mut l[32 * j..32 * j + 32], rmin, 0.1, nstep, false);
        scales[j] = scale;
        mins[j] = min;
        max_scale = max_scale.max(scale);
        max_min = max_min.max(min);
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // As ggml: truncated to u8 first, then clamped.
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    (pack_scales_mins_k4(&ls, &lm), f32_to_f16(max_scale / 63.0), f32_to_f16(max_min / 63.0))
}

/// The second half: requantize each value to `0..=nmax` against the scales and mins as stored.
pub(super) fn requantize_k4(x: &[f32], nmax: i32, scales: &[u8; 12], d: [u8; 2], dmin: [u8; 2], l: &mut [u8; QK_K]) {
    let sm = scales_mins_k4(scales);
    for j in 0..QK_K / 32 {
        let d = f16_to_f32(d) * sm[j] as f32;
        if d == 0.0 {
            continue;
        }
        let dm = f16_to_f32(dmin) * sm[8 + j] as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

/// ggml's generic Q4_K/Q5_K dot product once the quants `aux8` of a block are unpacked: 8 integer
/// lanes per block (mins through `bsums`), scaled into 8 float lanes that are summed at the end.
pub(super) struct K4Dot {
    sums: [f32; 8],
    sumf: f32,
}

impl K4Dot {
    pub(super) fn new() -> Self {
        K4Dot { sums: [0.0; 8], sumf: 0.0 }
    }

    pub(super) fn add_block(&mut self, aux8: &[i8; QK_K], scales: &[u8; 12], d: [u8; 2], dmin: [u8; 2], y: &BlockQ8K) {
        let sm = scales_mins_k4(scales);
        let (sc, mins) = sm.split_at(8);
        let sumi: i32 = y.bsums.iter().enumerate().map(|(j, &b)| b as i32 * mins[j / 2] as i32).sum();
        let mut aux32 = [0i32; 8];
        for (j, (q8, a)) in y.qs.chunks_exact(32).zip(aux8.chunks_exact(32)).enumerate() {
            let scale = sc[j] as i32;
            for (q8, a) in q8.chunks_exact(8).zip(a.chunks_exact(8)) {
                for l in 0..8 {
                    aux32[l] += scale * (q8[l] as i32 * a[l] as i32);
                }
            }
        }
        let d = f16_to_f32(d) * y.d;
        for (s, &v) in self.sums.iter_mut().zip(&aux32) {
            *s += d * v as f32;
        }
        let dmin = f16_to_f32(dmin) * y.d;
        self.sumf -= dmin * sumi as f32;
    }

    pub(super) fn finish(self) -> f32 {
        self.sums.iter().fold(self.sumf, |acc, &s| acc + s)
    }
}

impl QuantBlock for BlockQ4K {
    const ELEMS: usize = QK_K;
    const ACT: ActKind = ActKind::Q8K;
    type Act = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK_K);
        for (x, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_to_f32(x.d);
            let min = f16_to_f32(x.dmin);
            let sm = scales_mins_k4(&x.scales);
            for (j, (q, y)) in x.qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
                let (d1, m1) = (d * sm[2 * j] as f32, min * sm[8 + 2 * j] as f32);
                let (d2, m2) = (d * sm[2 * j + 1] as f32, min * sm[8 + 2 * j + 1] as f32);
                let (lo, hi) = y.split_at_mut(32);
                for ((&b, lo), hi) in q.iter().zip(lo).zip(hi) {
                    *lo = d1 * (b & 0xF) as f32 - m1;
                    *hi = d2 * (b >> 4) as f32 - m2;
                }
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK_K);
        for (x, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let mut l = [0u8; QK_K];
            (y.scales, y.d, y.dmin) = quantize_scales_k4(x, 15, -1.0, 20, &mut l);
            requantize_k4(x, 15, &y.scales, y.d, y.dmin, &mut l);
            for (q, l) in y.qs.chunks_exact_mut(32).zip(l.chunks_exact(64)) {
                for i in 0..32 {
                    q[i] = l[i] | (l[i + 32] << 4);
                }
            }
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8K]) -> f32 {
        let mut dot = K4Dot::new();
        for (x, y) in w.iter().zip(a) {
            let mut aux8 = [0i8; QK_K];
            for (q, a) in x.qs.chunks_exact(32).zip(aux8.chunks_exact_mut(64)) {
                for l in 0..32 {
                    a[l] = (q[l] & 0xF) as i8;
                    a[l + 32] = (q[l] >> 4) as i8;
                }
            }
            dot.add_block(&aux8, &x.scales, x.d, x.dmin, y);
        }
        dot.finish()
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8K]) -> f32 {
        simd_vec_dot!(vec_dot_q4k, w, a, Self::vec_dot_ref)
    }
}
