//! The gated delta net of Qwen3.5's linear-attention layers (llama.cpp's `ggml_ssm_conv` and
//! `ggml_gated_delta_net`): a causal depthwise convolution over time, then per value head a `head_dim × head_dim`
//! state that each token decays, corrects towards its value and reads with its query. Both carry a recurrent state
//! from one call to the next in place of a KV cache: the convolution its last inputs, the rule its matrices.
//!
//! The arithmetic is ggml's CPU kernels': the convolution sums its taps in order in f32; queries and keys are
//! L2-normed as `build_gdn_l2_norm` does (an RMSNorm with `eps / n`, times `1 / sqrt(n)`); the state is f32, stored
//! per head as rows over the key index (`state[j·d + i]` is `S[i][j]`), and the output scaled by `1 / sqrt(d)`.

use crate::kernels::exp::Exp;
use crate::parallel::{for_each_row_chunk, SharedMut};
use crate::simd::{axpy, dot};

/// A gated delta-net layer's shape: `k_heads` query/key heads and `v_heads` value heads (a multiple: value head
/// `h` reads key head `h % k_heads`, as ggml tiles them), all `head_dim` wide; a convolution of `conv_kernel` taps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaNetShape {
    pub k_heads: usize,
    pub v_heads: usize,
    pub head_dim: usize,
    pub conv_kernel: usize,
}

impl DeltaNetShape {
    /// The queries' (and the keys') width.
    pub fn key_dim(&self) -> usize {
        self.k_heads * self.head_dim
    }

    pub fn value_dim(&self) -> usize {
        self.v_heads * self.head_dim
    }

    /// The convolved channels of a token: queries, keys, values.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// Floats of [`causal_conv_silu`]'s scratch for `n` tokens.
    pub fn conv_inputs_len(&self, n: usize) -> usize {
        (self.conv_kernel - 1 + n) * self.conv_dim()
    }

    /// Floats of the convolution's state: the last `conv_kernel - 1` inputs.
    pub fn conv_state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }

    /// Floats of the delta rule's state: one `head_dim × head_dim` matrix per value head.
    pub fn state_len(&self) -> usize {
        self.v_heads * self.head_dim * self.head_dim
    }
}

/// Convolve each channel of `x` (`[n × conv_dim]`, in place) over time with its `conv_kernel` taps (`weight`,
/// `[conv_dim × conv_kernel]`, the oldest input's tap first), the inputs before `x` being `state`'s rows
/// (`[(conv_kernel - 1) × conv_dim]`, oldest first), then apply SiLU. `state` becomes the last inputs. `inputs`:
/// scratch of at least `(conv_kernel - 1 + n) × conv_dim`.
pub fn causal_conv_silu(shape: &DeltaNetShape, x: &mut [f32], weight: &[f32], state: &mut [f32], inputs: &mut [f32]) {
    let (dim, taps) = (shape.conv_dim(), shape.conv_kernel);
    let (n, past) = (x.len() / dim, taps - 1);
    assert!(x.len() == n * dim && weight.len() == dim * taps && state.len() == past * dim);
    // The inputs of all taps: the state's rows, then x's.
    let inputs = &mut inputs[..(past + n) * dim];
    inputs[..past * dim].copy_from_slice(state);
    inputs[past * dim..].copy_from_slice(x);
    let inputs = &*inputs;
    let e = Exp::new();
    for (t, out) in x.chunks_exact_mut(dim).enumerate() {
        let window = &inputs[t * dim..(t + taps) * dim];
        for (c, o) in out.iter_mut().enumerate() {
            let w = &weight[c * taps..(c + 1) * taps];
            let sum = w.iter().enumerate().fold(0f32, |s, (j, &w)| s + window[j * dim + c] * w);
            *o = sum / (1.0 + e.at(-sum));
        }
    }
    state.copy_from_slice(&inputs[n * dim..]);
}

/// The delta rule over the `n` tokens of `conv` (`[n × conv_dim]`: each token's queries, keys and values, the
/// convolution's output; its queries and keys are L2-normed here, in place), with each value head's decay `g`
/// (the log of the factor, `[n × v_heads]`) and write strength `beta` (`[n × v_heads]`). Per token and head:
/// `S *= e^g; d = (v - Sᵀk)·beta; S += k ⊗ d; out = Sᵀq / sqrt(head_dim)`. `state`: `[v_heads × head_dim ×
/// head_dim]`, carried over; `out`: `[n × value_dim]`.
pub fn delta_rule(
    shape: &DeltaNetShape,
    conv: &mut [f32],
    g: &[f32],
    beta: &[f32],
    state: &mut [f32],
    out: &mut [f32],
    eps: f32,
) {
    let (dim, hd, vh, kd) = (shape.conv_dim(), shape.head_dim, shape.v_heads, shape.key_dim());
    let n = conv.len() / dim;
    assert!(conv.len() == n * dim && g.len() == n * vh && beta.len() == n * vh);
    assert!(state.len() == shape.state_len() && out.len() == n * shape.value_dim());
    for_each_row_chunk(conv, dim, |_, rows| {
        for row in rows.chunks_exact_mut(dim) {
            row[..2 * kd].chunks_exact_mut(hd).for_each(|head| l2_norm(head, eps));
        }
    });
    let conv = &*conv;
    let (out_len, out_ptr) = (out.len(), SharedMut::new(out));
    let scale = 1.0 / (hd as f32).sqrt();
    // One task per run of value heads: each owns its heads' states and output columns.
    for_each_row_chunk(state, hd * hd, |h0, states| {
        let mut delta = [0f32; crate::kernels::attention::MAX_HEAD_DIM];
        let delta = &mut delta[..hd];
        for (h, s) in states.chunks_exact_mut(hd * hd).enumerate().map(|(i, s)| (h0 + i, s)) {
            let kh = h % shape.k_heads;
            for t in 0..n {
                let row = &conv[t * dim..(t + 1) * dim];
                let q = &row[kh * hd..][..hd];
                let k = &row[kd + kh * hd..][..hd];
                let v = &row[2 * kd + h * hd..][..hd];
                let decay = g[t * vh + h].exp();
                let b = beta[t * vh + h];
                s.iter_mut().for_each(|x| *x *= decay);
                for ((d, sj), &vj) in delta.iter_mut().zip(s.chunks_exact(hd)).zip(v) {
                    *d = (vj - dot(sj, k)) * b;
                }
                let o0 = t * shape.value_dim() + h * hd;
                assert!(o0 + hd <= out_len);
                for (j, (sj, &d)) in s.chunks_exact_mut(hd).zip(delta.iter()).enumerate() {
                    axpy(sj, d, k);
                    // SAFETY: in bounds (checked above); column `h·hd + j` of row `t` is this head's alone.
                    unsafe { out_ptr.write(o0 + j, dot(sj, q) * scale) };
                }
            }
        }
    });
}

/// `x / sqrt(Σx² + eps)`, as ggml's `rms_norm(x, eps / n) · (1 / sqrt(n))` computes it (the sum in f64).
fn l2_norm(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let scale = crate::kernels::rmsnorm::inv_rms(x, eps / n);
    let inv_sqrt_n = 1.0 / n.sqrt();
    x.iter_mut().for_each(|v| *v = (*v * scale) * inv_sqrt_n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    const SHAPE: DeltaNetShape = DeltaNetShape { k_heads: 2, v_heads: 4, head_dim: 4, conv_kernel: 3 };

    /// The rule written out plainly in f64, token by token, for value head `h` (state `s[i][j]`, key index first).
    fn reference(conv: &[f32], g: &[f32], beta: &[f32], eps: f64) -> Vec<f64> {
        let (dim, hd, vh, kd) = (SHAPE.conv_dim(), SHAPE.head_dim, SHAPE.v_heads, SHAPE.key_dim());
        let n = conv.len() / dim;
        let mut s = vec![vec![vec![0f64; hd]; hd]; vh];
        let mut out = vec![0f64; n * SHAPE.value_dim()];
        let norm = |x: &[f32]| {
            let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
            x.iter().map(|&v| v as f64 / (ss + eps).sqrt()).collect::<Vec<_>>()
        };
        for t in 0..n {
            let row = &conv[t * dim..(t + 1) * dim];
            for (h, s) in s.iter_mut().enumerate() {
                let kh = h % SHAPE.k_heads;
                let q = norm(&row[kh * hd..][..hd]);
                let k = norm(&row[kd + kh * hd..][..hd]);
                let v = &row[2 * kd + h * hd..][..hd];
                let (decay, b) = ((g[t * vh + h] as f64).exp(), beta[t * vh + h] as f64);
                s.iter_mut().flatten().for_each(|x| *x *= decay);
                let d: Vec<f64> =
                    (0..hd).map(|j| (v[j] as f64 - (0..hd).map(|i| s[i][j] * k[i]).sum::<f64>()) * b).collect();
                for i in 0..hd {
                    for j in 0..hd {
                        s[i][j] += k[i] * d[j];
                    }
                }
                for j in 0..hd {
                    out[t * SHAPE.value_dim() + h * hd + j] =
                        (0..hd).map(|i| s[i][j] * q[i]).sum::<f64>() / (hd as f64).sqrt();
                }
            }
        }
        out
    }

    fn inputs(n: usize, rng: &mut Rng) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let conv = (0..n * SHAPE.conv_dim()).map(|_| rng.normal()).collect();
        let g = (0..n * SHAPE.v_heads).map(|_| rng.uniform(-1.6, -0.1)).collect();
        let beta = (0..n * SHAPE.v_heads).map(|_| rng.uniform(0.0, 1.0)).collect();
        (conv, g, beta)
    }

    #[test]
    fn delta_rule_matches_the_rule_written_out() {
        let mut rng = Rng::new(7);
        let n = 9;
        let (conv, g, beta) = inputs(n, &mut rng);
        let want = reference(&conv, &g, &beta, 1e-6);
        let mut state = vec![0f32; SHAPE.state_len()];
        let mut out = vec![0f32; n * SHAPE.value_dim()];
        delta_rule(&SHAPE, &mut conv.clone(), &g, &beta, &mut state, &mut out, 1e-6);
        for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
            assert!((got as f64 - want).abs() < 1e-5, "output {i}: {got} against {want}");
        }
    }

    #[test]
    fn a_sequence_split_in_calls_gives_what_one_call_gives() {
        let mut rng = Rng::new(11);
        let n = 7;
        let (conv, g, beta) = inputs(n, &mut rng);
        let weight: Vec<f32> = (0..SHAPE.conv_dim() * SHAPE.conv_kernel).map(|_| rng.normal()).collect();
        let run = |splits: &[usize]| {
            let mut conv_state = vec![0f32; SHAPE.conv_state_len()];
            let mut state = vec![0f32; SHAPE.state_len()];
            let mut out = vec![0f32; n * SHAPE.value_dim()];
            let (dim, vd, vh) = (SHAPE.conv_dim(), SHAPE.value_dim(), SHAPE.v_heads);
            for w in splits.windows(2) {
                let (a, b) = (w[0], w[1]);
                let mut x = conv[a * dim..b * dim].to_vec();
                causal_conv_silu(
                    &SHAPE,
                    &mut x,
                    &weight,
                    &mut conv_state,
                    &mut vec![0.0; SHAPE.conv_inputs_len(b - a)],
                );
                let (g, beta) = (&g[a * vh..b * vh], &beta[a * vh..b * vh]);
                delta_rule(&SHAPE, &mut x, g, beta, &mut state, &mut out[a * vd..b * vd], 1e-6);
            }
            (out, state)
        };
        let whole = run(&[0, n]);
        assert_eq!(run(&[0, 1, 2, 3, 4, 5, 6, 7]), whole);
        assert_eq!(run(&[0, 3, 7]), whole);
    }

    #[test]
    fn the_convolution_reads_the_carried_inputs_oldest_first() {
        let shape = DeltaNetShape { k_heads: 1, v_heads: 1, head_dim: 1, conv_kernel: 3 };
        // Three channels; channel c's taps (oldest first) are [1, 10, 100] times (c + 1).
        let weight: Vec<f32> = (0..3).flat_map(|c| [1.0, 10.0, 100.0].map(|w| w * (c + 1) as f32)).collect();
        let mut state = vec![0.01, 0.02, 0.03, 0.1, 0.2, 0.3]; // the two inputs before, oldest first
        let mut x = vec![1.0, 2.0, 3.0];
        causal_conv_silu(&shape, &mut x, &weight, &mut state, &mut [0.0; 9]);
        let silu = |v: f32| v / (1.0 + (-v).exp());
        for (c, &got) in x.iter().enumerate() {
            // Channel c's inputs, oldest first, are 0.01·k, 0.1·k and k, with k = c + 1.
            let k = (c + 1) as f32;
            let sum = k * (0.01 * k + 10.0 * 0.1 * k + 100.0 * k);
            assert!((got - silu(sum)).abs() <= 1e-4 * silu(sum).abs(), "channel {c}: {got} against {}", silu(sum));
        }
        assert_eq!(state, [0.1, 0.2, 0.3, 1.0, 2.0, 3.0]);
    }
}
