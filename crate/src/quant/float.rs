//! Float "block" types (one element per block): F32, F16, BF16. Dotted against f32 activations.
//! The optimized dots widen 8 (AVX2) or 4 (simd128, NEON) elements at a time to f32 and accumulate
//! with fused or plain multiply-adds; `vec_dot_ref` is the plain sequential sum.

use super::act::{f16_to_f32, ActKind};
use super::QuantBlock;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockF32(pub [u8; 4]);

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockF16(pub [u8; 2]);

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockBF16(pub [u8; 2]);

impl BlockF32 {
    #[inline]
    pub(super) fn get(self) -> f32 {
        f32::from_le_bytes(self.0)
    }
}
impl BlockF16 {
    #[inline]
    pub(super) fn get(self) -> f32 {
        f16_to_f32(self.0)
    }
}
impl BlockBF16 {
    #[inline]
    pub(super) fn get(self) -> f32 {
        f32::from_bits((u16::from_le_bytes(self.0) as u32) << 16)
    }
}

macro_rules! float_block {
    ($B:ident, $kernel:ident, $from:expr) => {
        impl QuantBlock for $B {
            const ELEMS: usize = 1;
            const ACT: ActKind = ActKind::F32;
            type Act = f32;

            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                for (o, b) in out.iter_mut().zip(blocks) {
                    *o = b.get();
                }
            }

            fn quantize(x: &[f32], out: &mut [Self]) {
                for (o, &v) in out.iter_mut().zip(x) {
                    *o = $from(v);
                }
            }

            fn vec_dot_ref(w: &[Self], a: &[f32]) -> f32 {
                w.iter().zip(a).map(|(w, a)| w.get() * a).sum()
            }

            fn vec_dot(w: &[Self], a: &[f32]) -> f32 {
                simd_kernel!($kernel(w, a)).unwrap_or_else(|| portable_dot(w, a, |b: &$B| b.get()))
            }
        }
    };
}

/// Eight independent accumulators: lets the compiler vectorize without reassociation.
fn portable_dot<B>(w: &[B], a: &[f32], get: impl Fn(&B) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let (wc, wr) = w.split_at(w.len().min(a.len()) / 8 * 8);
    let (ac, ar) = a.split_at(wc.len());
    for (w8, a8) in wc.chunks_exact(8).zip(ac.chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += get(&w8[k]) * a8[k];
        }
    }
    let tail: f32 = wr.iter().zip(ar).map(|(w, a)| get(w) * a).sum();
    acc.iter().sum::<f32>() + tail
}

float_block!(BlockF32, f32_f32, |v: f32| BlockF32(v.to_le_bytes()));
float_block!(BlockF16, f16_f32, |v: f32| BlockF16(half::f16::from_f32(v).to_le_bytes()));
float_block!(BlockBF16, bf16_f32, |v: f32| BlockBF16(half::bf16::from_f32(v).to_le_bytes()));
