//! Q2_K: 16 sub-blocks of 16 values, `x = d * sc * q - dmin * m` with 2-bit `q` and 4-bit `sc`, `m`
//! (2.625 bits per weight).

use super::{make_qkx2_quants, nearest_int, pack_2bit, simd_vec_dot, QK_K};
use crate::quant::act::{f16_to_f32, f32_to_f16, ActKind, BlockQ8K};
use crate::quant::QuantBlock;

/// ggml's `block_q2_K` (84 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ2K {
    /// Per sub-block: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants, four per byte (see [`pack_2bit`]).
    pub qs: [u8; QK_K / 4],
    /// f16 super-block scale for the scales.
    pub d: [u8; 2],
    /// f16 super-block scale for the mins.
    pub dmin: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84 && std::mem::align_of::<BlockQ2K>() == 1);

impl Default for BlockQ2K {
    fn default() -> Self {
        BlockQ2K { scales: [0; QK_K / 16], qs: [0; QK_K / 4], d: [0; 2], dmin: [0; 2] }
    }
}

impl QuantBlock for BlockQ2K {
    const ELEMS: usize = QK_K;
    const ACT: ActKind = ActKind::Q8K;
    type Act = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK_K);
        for (x, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_to_f32(x.d);
            let min = f16_to_f32(x.dmin);
            let mut y = y.iter_mut();
            let mut is = 0;
            for q in x.qs.chunks_exact(32) {
                for shift in [0, 2, 4, 6] {
                    for half in q.chunks_exact(16) {
                        let sc = x.scales[is];
                        is += 1;
                        let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
                        for &b in half {
                            *y.next().unwrap() = dl * ((b >> shift) & 3) as f32 - ml;
                        }
                    }
                }
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK_K);
        const Q4SCALE: f32 = 15.0;
        for (x, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let mut l = [0u8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            let mut mins = [0f32; QK_K / 16];
            let (mut max_scale, mut max_min) = (0f32, 0f32);
            for j in 0..QK_K / 16 {
                let xs = &x[16 * j..16 * j + 16];
                let weights: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
                let (scale, min) = make_qkx2_quants(3, xs, &weights, &mut l[16 * j..16 * j + 16], -0.5, 0.1, 15, true);
                scales[j] = scale;
                mins[j] = min;
                max_scale = max_scale.max(scale);
                max_min = max_min.max(min);
            }

            if max_scale > 0.0 {
                let iscale = Q4SCALE / max_scale;
                for (s, &scale) in y.scales.iter_mut().zip(&scales) {
                    *s = nearest_int(iscale * scale) as u8;
                }
                y.d = f32_to_f16(max_scale / Q4SCALE);
            } else {
                y.scales = [0; QK_K / 16];
                y.d = f32_to_f16(0.0);
            }
            if max_min > 0.0 {
                let iscale = Q4SCALE / max_min;
                for (s, &min) in y.scales.iter_mut().zip(&mins) {
                    *s |= (nearest_int(iscale * min) << 4) as u8;
                }
                y.dmin = f32_to_f16(max_min / Q4SCALE);
            } else {
                y.dmin = f32_to_f16(0.0);
            }

            // Requantize against the scales as stored.
            for j in 0..QK_K / 16 {
                let d = f16_to_f32(y.d) * (y.scales[j] & 0xF) as f32;
                if d == 0.0 {
                    continue;
                }
                let dm = f16_to_f32(y.dmin) * (y.scales[j] >> 4) as f32;
                for ii in 0..16 {
                    l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
                }
            }
            pack_2bit(&l, &mut y.qs);
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8K]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let summs: i32 = y.bsums.iter().zip(&x.scales).map(|(&b, &sc)| b as i32 * (sc >> 4) as i32).sum();
            let dall = y.d * f16_to_f32(x.d);
            let dmin = y.d * f16_to_f32(x.dmin);

            let mut isum = 0i32;
            let mut is = 0;
            for (q2, q8) in x.qs.chunks_exact(32).zip(y.qs.chunks_exact(128)) {
                for (k, q8) in q8.chunks_exact(32).enumerate() {
                    let shift = 2 * k;
                    for (q2h, q8h) in q2.chunks_exact(16).zip(q8.chunks_exact(16)) {
                        let d = (x.scales[is] & 0xF) as i32;
                        is += 1;
                        let isuml: i32 = q2h.iter().zip(q8h).map(|(&q, &v)| v as i32 * ((q >> shift) & 3) as i32).sum();
                        isum += d * isuml;
                    }
                }
            }
            sumf += dall * isum as f32 - dmin * summs as f32;
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8K]) -> f32 {
        simd_vec_dot!(vec_dot_q2k, w, a, Self::vec_dot_ref)
    }
}
