//! Q6_K: 16 sub-blocks of 16 values, `x = d * sc * q` with 6-bit signed `q` (-32..=31) and 8-bit
//! signed `sc` (6.5625 bits per weight).

use super::{make_qx_quants, nearest_int, simd_vec_dot, GROUP_MAX_EPS, QK_K};
use crate::quant::act::{f16_to_f32, f32_to_f16, ActKind, BlockQ8K};
use crate::quant::QuantBlock;

/// ggml's `block_q6_K` (210 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits. Per 128-value half: byte `l` of the first 32 holds elements `l` (low nibble) and
    /// `l + 64` (high); byte `l` of the next 32 holds elements `l + 32` and `l + 96`.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits. Per half: byte `l` holds elements `l`, `l + 32`, `l + 64`, `l + 96`, lowest first.
    pub qh: [u8; QK_K / 4],
    /// Per sub-block scale.
    pub scales: [i8; QK_K / 16],
    /// f16 super-block scale.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210 && std::mem::align_of::<BlockQ6K>() == 1);

impl Default for BlockQ6K {
    fn default() -> Self {
        BlockQ6K { ql: [0; QK_K / 2], qh: [0; QK_K / 4], scales: [0; QK_K / 16], d: [0; 2] }
    }
}

impl BlockQ6K {
    /// The 256 quants (-32..=31) in element order.
    fn unpack(&self) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for ((ql, qh), q) in self.ql.chunks_exact(64).zip(self.qh.chunks_exact(32)).zip(q.chunks_exact_mut(128)) {
            for l in 0..32 {
                q[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                q[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        q
    }
}

impl QuantBlock for BlockQ6K {
    const ELEMS: usize = QK_K;
    const ACT: ActKind = ActKind::Q8K;
    type Act = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK_K);
        for (x, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_to_f32(x.d);
            let q = x.unpack();
            for ((q, y), &sc) in q.chunks_exact(16).zip(y.chunks_exact_mut(16)).zip(&x.scales) {
                for (&q, y) in q.iter().zip(y) {
                    *y = d * sc as f32 * q as f32;
                }
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK_K);
        for (x, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let mut l = [0i8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
            for (ib, scale) in scales.iter_mut().enumerate() {
                *scale = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
                if scale.abs() > max_abs_scale {
                    max_abs_scale = scale.abs();
                    max_scale = *scale;
                }
            }
            if max_abs_scale < GROUP_MAX_EPS {
                *y = BlockQ6K::default();
                continue;
            }

            let iscale = -128.0 / max_scale;
            y.d = f32_to_f16(1.0 / iscale);
            for (s, &scale) in y.scales.iter_mut().zip(&scales) {
                *s = nearest_int(iscale * scale).min(127) as i8;
            }

            // Requantize against the scales as stored.
            for j in 0..QK_K / 16 {
                let d = f16_to_f32(y.d) * y.scales[j] as f32;
                if d == 0.0 {
                    continue;
                }
                for ii in 0..16 {
                    l[16 * j + ii] = nearest_int(x[16 * j + ii] / d).clamp(-32, 31) as i8 + 32;
                }
            }

            for ((ql, qh), l) in y.ql.chunks_exact_mut(64).zip(y.qh.chunks_exact_mut(32)).zip(l.chunks_exact(128)) {
                let l: [u8; 128] = std::array::from_fn(|i| l[i] as u8);
                for i in 0..32 {
                    ql[i] = (l[i] & 0xF) | ((l[i + 64] & 0xF) << 4);
                    ql[i + 32] = (l[i + 32] & 0xF) | ((l[i + 96] & 0xF) << 4);
                    qh[i] = (l[i] >> 4) | ((l[i + 32] >> 4) << 2) | ((l[i + 64] >> 4) << 4) | ((l[i + 96] >> 4) << 6);
                }
            }
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8K]) -> f32 {
        // As ggml: 8 integer lanes per block, scaled into 8 float lanes, summed at the end.
        let mut sums = [0f32; 8];
        for (x, y) in w.iter().zip(a) {
            let aux8 = x.unpack();
            let mut aux32 = [0i32; 8];
            for ((q8, a), &scale) in y.qs.chunks_exact(16).zip(aux8.chunks_exact(16)).zip(&x.scales) {
                for (q8, a) in q8.chunks_exact(8).zip(a.chunks_exact(8)) {
                    for l in 0..8 {
                        aux32[l] += scale as i32 * (q8[l] as i32 * a[l] as i32);
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
        simd_vec_dot!(vec_dot_q6k, w, a, Self::vec_dot_ref)
    }
}
