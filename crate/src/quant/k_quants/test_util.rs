//! Shared checks for the K-quant tests: a deterministic PRNG, random blocks, and the properties
//! every type must have. Each type's own tests call these with its bounds.

use crate::quant::act::{f32_to_f16, quantize_q8k, BlockQ8K, QK_K};
use crate::quant::{as_blocks_mut, QuantBlock};

/// splitmix64: small, deterministic, good enough for test data.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn fill(&mut self, bytes: &mut [u8]) {
        for b in bytes {
            *b = self.next_u64() as u8;
        }
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }

    /// A finite f16 scale of either sign with magnitude in [1e-3, 1e-1).
    pub(crate) fn f16_scale(&mut self) -> [u8; 2] {
        let mag = 1e-3 * 100f32.powf(self.uniform());
        f32_to_f16(if self.next_u64() & 1 == 0 { mag } else { -mag })
    }
}

/// `n` blocks of random bytes, passed through `fix` to make their f16 scales finite and sane.
pub(crate) fn random_blocks<B: QuantBlock>(rng: &mut Rng, n: usize, fix: fn(&mut B, &mut Rng)) -> Vec<B> {
    let mut bytes = vec![0u8; n * std::mem::size_of::<B>()];
    rng.fill(&mut bytes);
    let mut blocks = as_blocks_mut::<B>(&mut bytes).to_vec();
    for b in &mut blocks {
        fix(b, rng);
    }
    blocks
}

/// `n` Q8_K blocks with random quants over the whole i8 range (-128 included, which ggml's own
/// quantizer never writes but the kernels must survive), consistent `bsums`, and a random `d`.
pub(crate) fn random_q8k(rng: &mut Rng, n: usize) -> Vec<BlockQ8K> {
    (0..n)
        .map(|_| {
            let mut y = BlockQ8K::default();
            for q in &mut y.qs {
                *q = rng.next_u64() as i8;
            }
            fix_bsums(&mut y);
            y.d = (if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 }) * 1e-3 * 100f32.powf(rng.uniform());
            y
        })
        .collect()
}

fn fix_bsums(y: &mut BlockQ8K) {
    for (s, q) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
        *s = q.iter().map(|&v| v as i16).sum();
    }
}

/// Q8_K activations the way inference makes them: ggml's quantizer on normal values.
pub(crate) fn quantized_q8k(rng: &mut Rng, n: usize) -> Vec<BlockQ8K> {
    let x: Vec<f32> = (0..n * QK_K).map(|_| rng.normal()).collect();
    let mut a = vec![BlockQ8K::default(); n];
    quantize_q8k(&x, &mut a);
    a
}

fn dequantized<B: QuantBlock>(w: &[B]) -> Vec<f32> {
    let mut out = vec![0f32; w.len() * B::ELEMS];
    B::dequantize(w, &mut out);
    out
}

/// The dot product of dequantized weights and activations in f64, and the sum of |terms|
/// (the scale that float rounding errors are measured against).
fn f64_dot<B: QuantBlock<Act = BlockQ8K>>(w: &[B], a: &[BlockQ8K]) -> (f64, f64) {
    let wf = dequantized(w);
    let af = a.iter().flat_map(|y| y.qs.iter().map(move |&q| y.d as f64 * q as f64));
    let (mut dot, mut mag) = (0f64, 0f64);
    for (&wi, ai) in wf.iter().zip(af) {
        dot += wi as f64 * ai;
        mag += (wi as f64 * ai).abs();
    }
    (dot, mag)
}

/// `vec_dot` (the SIMD kernel of this machine) equals `vec_dot_ref` on random rows of several
/// lengths, to within `1e-6 * Σ|w_i a_i|`: both sum the same integers exactly per block, so they
/// differ only in the rounding of the few float operations per block.
pub(crate) fn check_vec_dot_matches_ref<B: QuantBlock<Act = BlockQ8K>>(seed: u64, fix: fn(&mut B, &mut Rng)) {
    let mut rng = Rng::new(seed);
    for n in [1, 2, 3, 8, 17] {
        for trial in 0..20 {
            let w = random_blocks::<B>(&mut rng, n, fix);
            let a = if trial % 2 == 0 { random_q8k(&mut rng, n) } else { quantized_q8k(&mut rng, n) };
            let (r, o) = (B::vec_dot_ref(&w, &a), B::vec_dot(&w, &a));
            let (_, mag) = f64_dot(&w, &a);
            assert!(
                ((r - o).abs() as f64) <= 1e-6 * mag,
                "n={n} trial={trial}: vec_dot {o} != vec_dot_ref {r} (sum |terms| {mag})"
            );
        }
    }
}

/// `vec_dot_ref` equals the f64 dot of the dequantized weights and activations, to within
/// `1e-6 * Σ|w_i a_i|` (f32 rounding of the scales and of the dequantized values).
pub(crate) fn check_ref_matches_dequantized<B: QuantBlock<Act = BlockQ8K>>(seed: u64, fix: fn(&mut B, &mut Rng)) {
    let mut rng = Rng::new(seed);
    for n in [1, 4, 9] {
        for trial in 0..20 {
            let w = random_blocks::<B>(&mut rng, n, fix);
            let a = if trial % 2 == 0 { random_q8k(&mut rng, n) } else { quantized_q8k(&mut rng, n) };
            let r = B::vec_dot_ref(&w, &a);
            let (dot, mag) = f64_dot(&w, &a);
            assert!(
                (r as f64 - dot).abs() <= 1e-6 * mag,
                "n={n} trial={trial}: vec_dot_ref {r} != dequantized dot {dot} (sum |terms| {mag})"
            );
        }
    }
}

/// Saturated inputs: every weight byte 0x00 or 0xFF (largest quants and scales) against
/// activations of all -128, all 127 or alternating. Catches 16-bit overflow in SIMD kernels.
pub(crate) fn check_extremes<B: QuantBlock<Act = BlockQ8K>>(fix: fn(&mut B, &mut Rng)) {
    let mut rng = Rng::new(99);
    for fill in [0x00u8, 0xFF, 0xAA, 0x55] {
        let mut bytes = vec![fill; 2 * std::mem::size_of::<B>()];
        let mut w = as_blocks_mut::<B>(&mut bytes).to_vec();
        for b in &mut w {
            fix(b, &mut rng);
        }
        for pattern in 0..3 {
            let mut a = vec![BlockQ8K::default(); 2];
            for y in &mut a {
                for (i, q) in y.qs.iter_mut().enumerate() {
                    *q = match pattern {
                        0 => -128,
                        1 => 127,
                        _ => {
                            if i % 2 == 0 {
                                -128
                            } else {
                                127
                            }
                        }
                    };
                }
                fix_bsums(y);
                y.d = 0.01;
            }
            let (r, o) = (B::vec_dot_ref(&w, &a), B::vec_dot(&w, &a));
            let (dot, mag) = f64_dot(&w, &a);
            assert!(((r - o).abs() as f64) <= 1e-6 * mag, "fill {fill:#x} pattern {pattern}: {o} != {r}");
            assert!((r as f64 - dot).abs() <= 1e-6 * mag, "fill {fill:#x} pattern {pattern}: {r} != {dot}");
        }
    }
}

/// Quantize then dequantize rows of several distributions. Per block of 256: the largest error is at
/// most `max_rel * max|x|`, and the RMS error at most `rms_rel * rms(x)`. All-zero blocks stay zero.
pub(crate) fn check_quantize_roundtrip<B: QuantBlock>(seed: u64, max_rel: f32, rms_rel: f32) {
    let mut rng = Rng::new(seed);
    let zero = std::iter::repeat_n(0f32, QK_K);
    type Gen = fn(&mut Rng, usize) -> f32;
    let distributions: [(&str, Gen); 6] = [
        ("normal", |r, _| r.normal()),
        ("uniform", |r, _| 2.0 * r.uniform() - 1.0),
        ("positive", |r, _| 0.5 + r.uniform()),
        ("negative", |r, _| -2.0 - r.uniform()),
        ("weight-like", |r, _| 0.02 * r.normal()),
        ("outlier", |r, i| if i % 97 == 5 { 8.0 } else { 0.05 * r.normal() }),
    ];
    for (name, gen) in distributions {
        let n = 4;
        let x: Vec<f32> = (0..n * QK_K).map(|i| gen(&mut rng, i)).chain(zero.clone()).collect();
        let mut bytes = vec![0u8; (n + 1) * std::mem::size_of::<B>()];
        let q = as_blocks_mut::<B>(&mut bytes);
        B::quantize(&x, q);
        let y = dequantized(q);
        for (b, (xb, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact(QK_K)).enumerate() {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let rms = (xb.iter().map(|v| v * v).sum::<f32>() / QK_K as f32).sqrt();
            let max_err = xb.iter().zip(yb).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let rms_err = (xb.iter().zip(yb).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / QK_K as f32).sqrt();
            assert!(yb.iter().all(|v| v.is_finite()), "{name} block {b}: non-finite output");
            assert!(max_err <= max_rel * amax, "{name} block {b}: max error {max_err} > {max_rel} * {amax}");
            assert!(rms_err <= rms_rel * rms, "{name} block {b}: rms error {rms_err} > {rms_rel} * {rms}");
        }
    }
}
