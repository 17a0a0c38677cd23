//! Rotary position embedding, as llama.cpp applies it (`ggml_rope_ext`, no YaRN).
//!
//! Dimension pair `i` (of `rope_dims / 2`) of a head rotates by `pos * freq_scale * base^(-2i / rope_dims)`, divided
//! by the pair's frequency factor where the model has them (Llama 3.1+'s `rope_freqs.weight`, as `ggml_rope_ext`'s
//! `freq_factors`), and its cosine and sine scaled by an attention factor where the model has one (LongRoPE's
//! `mscale`). "Normal" mode (llama) pairs adjacent values `(2i, 2i+1)`; NeoX mode (qwen2) pairs
//! `(i, i + rope_dims/2)`.

/// Most rotated dimensions per head we support (llama-family heads are 64..256).
pub const MAX_ROPE_DIMS: usize = 512;

#[derive(Clone, Debug)]
pub struct Rope {
    theta_scale: f32,
    freq_scale: f32,
    pairs: usize,
    neox: bool,
    head_dim: usize,
    /// Each pair's frequency divisor (`rope_pairs` of them), if any.
    freq_factors: Option<Vec<f32>>,
    /// What every rotated value is multiplied by (ggml's `mscale`: LongRoPE's attention factor; 1 elsewhere).
    attn_factor: f32,
}

impl Rope {
    /// `rope_dims <= MAX_ROPE_DIMS` (checked when the model's config is read).
    pub fn new(head_dim: usize, rope_dims: usize, base: f32, freq_scale: f32, neox: bool) -> Rope {
        assert!(rope_dims <= MAX_ROPE_DIMS && rope_dims <= head_dim);
        let theta_scale = base.powf(-2.0 / rope_dims as f32);
        Rope { theta_scale, freq_scale, pairs: rope_dims / 2, neox, head_dim, freq_factors: None, attn_factor: 1.0 }
    }

    /// The same with the rotated values scaled by `factor` (folded into each angle's cos and sin, as ggml does).
    pub fn with_attn_factor(mut self, factor: f32) -> Rope {
        self.attn_factor = factor;
        self
    }

    /// The same with each pair's angle divided by its factor (one per pair, checked when the weights are read).
    pub fn with_freq_factors(mut self, factors: &[f32]) -> Rope {
        assert_eq!(factors.len(), self.pairs, "one frequency factor per rotated pair");
        self.freq_factors = Some(factors.to_vec());
        self
    }

    /// Rotate every head (of `head_dim`) in `x` for position `pos`.
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let mut angles = [(0f32, 0f32); MAX_ROPE_DIMS / 2];
        self.angles(pos, &mut angles[..self.pairs]);
        self.rotate(x, &angles[..self.pairs]);
    }

    /// Pairs (of dimensions) rotated per head: the length of an angle table.
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// `(cos, sin)` of each pair's angle at `pos` (a forward pass computes them once per token for all
    /// layers: a `sin_cos` per pair and layer would be a measurable share of a wasm32 decode step's
    /// serial work).
    pub fn angles(&self, pos: usize, out: &mut [(f32, f32)]) {
        // As ggml: theta starts at pos and is multiplied by theta_scale for each pair; a factor divides it first.
        let mut theta = pos as f32;
        for (i, c) in out.iter_mut().take(self.pairs).enumerate() {
            let t = match &self.freq_factors {
                Some(f) => theta / f[i],
                None => theta,
            };
            let (sin, cos) = (t * self.freq_scale).sin_cos();
            *c = (cos * self.attn_factor, sin * self.attn_factor);
            theta *= self.theta_scale;
        }
    }

    /// Rotate every head (of `head_dim`) in `x` by `angles` (from [`Rope::angles`]).
    pub fn rotate(&self, x: &mut [f32], angles: &[(f32, f32)]) {
        for head in x.chunks_exact_mut(self.head_dim) {
            for (i, &(cos, sin)) in angles[..self.pairs].iter().enumerate() {
                let (a, b) = if self.neox { (i, i + self.pairs) } else { (2 * i, 2 * i + 1) };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn rotates_pairs_by_position() {
        // head_dim 4, base 10000: pair 0 turns by pos rad, pair 1 by pos/100 rad.
        let rope = Rope::new(4, 4, 10000.0, 1.0, false);
        let mut x = [1.0f32, 0.0, 1.0, 0.0];
        rope.apply(&mut x, 2);
        let expect = [2f32.cos(), 2f32.sin(), 0.02f32.cos(), 0.02f32.sin()];
        for (a, b) in x.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{x:?} vs {expect:?}");
        }
        let neox = Rope::new(4, 4, 10000.0, 1.0, true);
        let mut y = [1.0f32, 1.0, 0.0, 0.0];
        neox.apply(&mut y, 2);
        let expect = [2f32.cos(), 0.02f32.cos(), 2f32.sin(), 0.02f32.sin()];
        for (a, b) in y.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{y:?} vs {expect:?}");
        }
        // Position 0 is the identity.
        let mut z = [0.3f32, -0.7, 0.1, 0.9];
        rope.apply(&mut z, 0);
        assert_eq!(z, [0.3, -0.7, 0.1, 0.9]);
    }

    #[test]
    fn frequency_factors_divide_each_pairs_angle() {
        // Pair 0 unchanged (factor 1), pair 1 turns 4 times slower: 0.02 / 4 rad at position 2.
        let rope = Rope::new(4, 4, 10000.0, 1.0, false).with_freq_factors(&[1.0, 4.0]);
        let mut x = [1.0f32, 0.0, 1.0, 0.0];
        rope.apply(&mut x, 2);
        let expect = [2f32.cos(), 2f32.sin(), 0.005f32.cos(), 0.005f32.sin()];
        for (a, b) in x.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{x:?} vs {expect:?}");
        }
    }
}
