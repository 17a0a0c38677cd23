//! Q3_K: 16 sub-blocks of 16 values, `x = d * sc * q` with 3-bit signed `q` (-4..=3) and 6-bit
//! signed `sc` (3.4375 bits per weight).

use super::{make_q3_quants, nearest_int, pack_2bit, scales_q3k, simd_vec_dot, QK_K};
use crate::quant::act::{f16_to_f32, f32_to_f16, signed_max, ActKind, BlockQ8K};
use crate::quant::QuantBlock;

/// ggml's `block_q3_K` (110 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ3K {
    /// High bit of each quant: bit `k` of byte `l` is for element `32k + l`; set means no -4 offset.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the quants, four per byte (see [`pack_2bit`]).
    pub qs: [u8; QK_K / 4],
    /// 16 six-bit scales (+32 offset), packed (see [`scales_q3k`]).
    pub scales: [u8; 12],
    /// f16 super-block scale.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110 && std::mem::align_of::<BlockQ3K>() == 1);

impl Default for BlockQ3K {
    fn default() -> Self {
        BlockQ3K { hmask: [0; QK_K / 8], qs: [0; QK_K / 4], scales: [0; 12], d: [0; 2] }
    }
}

/// The quant of element `32 * k + l` of a 128-value half: low bits `(qs[l] >> 2k) & 3`, minus 4
/// unless its high bit (`1 << m`, m counting over the whole block) is set.
#[inline]
fn q3(qs: u8, hmask: u8, shift: usize, m: u8) -> i32 {
    ((qs >> shift) & 3) as i32 - if hmask & m != 0 { 0 } else { 4 }
}

impl QuantBlock for BlockQ3K {
    const ELEMS: usize = QK_K;
    const ACT: ActKind = ActKind::Q8K;
    type Act = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK_K);
        for (x, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d_all = f16_to_f32(x.d);
            let scales = scales_q3k(&x.scales);
            let mut y = y.iter_mut();
            let mut is = 0;
            let mut m = 1u8;
            for q in x.qs.chunks_exact(32) {
                for shift in [0, 2, 4, 6] {
                    for (q, hm) in q.chunks_exact(16).zip(x.hmask.chunks_exact(16)) {
                        let dl = d_all * scales[is] as f32;
                        is += 1;
                        for (&b, &h) in q.iter().zip(hm) {
                            *y.next().unwrap() = dl * q3(b, h, shift, m) as f32;
                        }
                    }
                    m <<= 1;
                }
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK_K);
        for (x, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let mut l = [0i8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            for j in 0..QK_K / 16 {
                scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            }
            let max_scale = signed_max(&scales);

            y.scales = [0; 12];
            if max_scale != 0.0 {
                let iscale = -32.0 / max_scale;
                for (j, &scale) in scales.iter().enumerate() {
                    // As ggml: truncated to i8 first, then clamped and offset.
                    let l = ((nearest_int(iscale * scale) as i8).clamp(-32, 31) + 32) as u8;
                    if j < 8 {
                        y.scales[j] = l & 0xF;
                    } else {
                        y.scales[j - 8] |= (l & 0xF) << 4;
                    }
                    y.scales[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
                }
                y.d = f32_to_f16(1.0 / iscale);
            } else {
                y.d = f32_to_f16(0.0);
            }

            // Requantize against the scales as stored.
            let stored = scales_q3k(&y.scales);
            for j in 0..QK_K / 16 {
                let d = f16_to_f32(y.d) * stored[j] as f32;
                if d == 0.0 {
                    continue;
                }
                for ii in 0..16 {
                    l[16 * j + ii] = nearest_int(x[16 * j + ii] / d).clamp(-4, 3) as i8 + 4;
                }
            }

            // High bit of element j goes to bit j / 32 of hmask[j % 32]; the low 2 bits stay in l.
            y.hmask = [0; QK_K / 8];
            let mut low = [0u8; QK_K];
            for (j, (&lj, lo)) in l.iter().zip(low.iter_mut()).enumerate() {
                let lj = lj as u8;
                if lj > 3 {
                    y.hmask[j % 32] |= 1 << (j / 32);
                }
                *lo = lj & 3;
            }
            pack_2bit(&low, &mut y.qs);
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8K]) -> f32 {
        // As ggml: 8 integer lanes per block, scaled into 8 float lanes, summed at the end.
        let mut sums = [0f32; 8];
        for (x, y) in w.iter().zip(a) {
            let mut aux8 = [0i8; QK_K];
            let mut m = 1u8;
            for (q, a) in x.qs.chunks_exact(32).zip(aux8.chunks_exact_mut(128)) {
                for (shift, a) in [0, 2, 4, 6].into_iter().zip(a.chunks_exact_mut(32)) {
                    for l in 0..32 {
                        a[l] = q3(q[l], x.hmask[l], shift, m) as i8;
                    }
                    m <<= 1;
                }
            }
            let scales = scales_q3k(&x.scales);
            let mut aux32 = [0i32; 8];
            for (j, (q8, a)) in y.qs.chunks_exact(16).zip(aux8.chunks_exact(16)).enumerate() {
                for (q8, a) in q8.chunks_exact(8).zip(a.chunks_exact(8)) {
                    for l in 0..8 {
                        aux32[l] += scales[j] as i32 * (q8[l] as i32 * a[l] as i32);
                    }
                }
            }
            let d = f16_to_f32(x.d) * y.d;
            for (s, &v) in sums.iter_mut().zip(&aux32) {
                *s += d * v as f32;
            }
        }
        sums.iter().fold(0f32, |acc, &s| acc + s)
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8K]) -> f32 {
        simd_vec_dot!(vec_dot_q3k, w, a, Self::vec_dot_ref)
    }
}
