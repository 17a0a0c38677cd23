//! Q5_K: 8 sub-blocks of 32 values, `x = d * sc * q - dmin * m` with 5-bit `q` and 6-bit `sc`, `m`
//! (5.5 bits per weight). Q4_K's layout plus one high bit per value.

use super::q4_k::{quantize_scales_k4, requantize_k4, K4Dot};
use super::{scales_mins_k4, simd_vec_dot, QK_K};
use crate::quant::act::{f16_to_f32, ActKind, BlockQ8K};
use crate::quant::QuantBlock;

/// ggml's `block_q5_K` (176 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ5K {
    /// f16 super-block scale for the scales.
    pub d: [u8; 2],
    /// f16 super-block scale for the mins.
    pub dmin: [u8; 2],
    /// 8 six-bit scales and 8 six-bit mins, packed (see [`scales_mins_k4`]).
    pub scales: [u8; 12],
    /// High bit of each quant: bit `k` of byte `l` is for element `32k + l`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits, laid out as in Q4_K.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176 && std::mem::align_of::<BlockQ5K>() == 1);

impl Default for BlockQ5K {
    fn default() -> Self {
        BlockQ5K { d: [0; 2], dmin: [0; 2], scales: [0; 12], qh: [0; QK_K / 8], qs: [0; QK_K / 2] }
    }
}

impl BlockQ5K {
    /// The 256 quants (0..=31) in element order.
    fn unpack(&self) -> [i8; QK_K] {
        let mut aux8 = [0i8; QK_K];
        for (j, (q, a)) in self.qs.chunks_exact(32).zip(aux8.chunks_exact_mut(64)).enumerate() {
            let (m1, m2) = (1u8 << (2 * j), 1u8 << (2 * j + 1));
            for l in 0..32 {
                a[l] = ((q[l] & 0xF) + if self.qh[l] & m1 != 0 { 16 } else { 0 }) as i8;
                a[l + 32] = ((q[l] >> 4) + if self.qh[l] & m2 != 0 { 16 } else { 0 }) as i8;
            }
        }
        aux8
    }
}

impl QuantBlock for BlockQ5K {
    const ELEMS: usize = QK_K;
    const ACT: ActKind = ActKind::Q8K;
    type Act = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK_K);
        for (x, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_to_f32(x.d);
            let min = f16_to_f32(x.dmin);
            let sm = scales_mins_k4(&x.scales);
            let q = x.unpack();
            for (j, (q, y)) in q.chunks_exact(32).zip(y.chunks_exact_mut(32)).enumerate() {
                let (dl, ml) = (d * sm[j] as f32, min * sm[8 + j] as f32);
                for (&q, y) in q.iter().zip(y) {
                    *y = dl * q as f32 - ml;
                }
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK_K);
        for (x, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let mut l = [0u8; QK_K];
            (y.scales, y.d, y.dmin) = quantize_scales_k4(x, 31, -0.5, 15, &mut l);
            requantize_k4(x, 31, &y.scales, y.d, y.dmin, &mut l);
            y.qh = [0; QK_K / 8];
            for (j, (q, l)) in y.qs.chunks_exact_mut(32).zip(l.chunks_exact(64)).enumerate() {
                let (m1, m2) = (1u8 << (2 * j), 1u8 << (2 * j + 1));
                for i in 0..32 {
                    let (mut l1, mut l2) = (l[i], l[i + 32]);
                    if l1 > 15 {
                        l1 -= 16;
                        y.qh[i] |= m1;
                    }
                    if l2 > 15 {
                        l2 -= 16;
                        y.qh[i] |= m2;
                    }
                    q[i] = l1 | (l2 << 4);
                }
            }
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8K]) -> f32 {
        let mut dot = K4Dot::new();
        for (x, y) in w.iter().zip(a) {
            dot.add_block(&x.unpack(), &x.scales, x.d, x.dmin, y);
        }
        dot.finish()
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8K]) -> f32 {
        simd_vec_dot!(vec_dot_q5k, w, a, Self::vec_dot_ref)
    }
}
