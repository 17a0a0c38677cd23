//! Attention of every token of one sequence over every token of it (no causal mask, no KV cache): an encoder's
//! (BERT's) self-attention. Keys and values are the f32 rows of this call, so nothing is converted.

use crate::parallel::for_each_row_chunk;

/// `out[t] = softmax(q[t]·K / sqrt(head_dim)) · V` for each head, for the `n` tokens of one sequence.
/// `q`, `k`, `v` and `out` are `n` rows of `n_heads * head_dim`, head after head.
pub fn full_attention(n_heads: usize, head_dim: usize, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
    let dim = n_heads * head_dim;
    let n = q.len() / dim;
    assert!(q.len() == n * dim && k.len() == n * dim && v.len() == n * dim && out.len() == n * dim);
    let scale = 1.0 / (head_dim as f32).sqrt();
    for_each_row_chunk(out, dim, |t0, rows| {
        let mut scores = vec![0f32; n];
        for (t, out_row) in rows.chunks_exact_mut(dim).enumerate() {
            let q_row = &q[(t0 + t) * dim..][..dim];
            for h in 0..n_heads {
                let head = h * head_dim..(h + 1) * head_dim;
                let qh = &q_row[head.clone()];
                for (s, k_row) in scores.iter_mut().zip(k.chunks_exact(dim)) {
                    *s = qh.iter().zip(&k_row[head.clone()]).map(|(a, b)| a * b).sum::<f32>() * scale;
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let oh = &mut out_row[head.clone()];
                oh.fill(0.0);
                for (&p, v_row) in scores.iter().zip(v.chunks_exact(dim)) {
                    let w = p / sum;
                    oh.iter_mut().zip(&v_row[head.clone()]).for_each(|(o, v)| *o += w * v);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn equal_keys_average_the_values() {
        // Two tokens, one head of dim 2, identical keys: each output is the mean of the two values.
        let q = [1.0f32, 0.0, 0.0, 1.0];
        let k = [1.0f32, 1.0, 1.0, 1.0];
        let v = [2.0f32, 4.0, 6.0, 8.0];
        let mut out = [0f32; 4];
        full_attention(1, 2, &q, &k, &v, &mut out);
        assert_eq!(out, [4.0, 6.0, 4.0, 6.0]);
    }

    #[test]
    fn a_dominant_key_takes_its_value() {
        let q = [10.0f32, 0.0];
        let k = [10.0f32, 0.0, -10.0, 0.0];
        let v = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [0f32; 2];
        full_attention(1, 2, &q[..2], &k[..2], &v[..2], &mut out);
        assert_eq!(out, [1.0, 2.0]); // one token: its own value
        let (q2, mut out2) = ([10.0f32, 0.0, 10.0, 0.0], [0f32; 4]);
        full_attention(1, 2, &q2, &k, &v, &mut out2);
        assert!((out2[0] - 1.0).abs() < 1e-6 && (out2[1] - 2.0).abs() < 1e-6);
    }
}
