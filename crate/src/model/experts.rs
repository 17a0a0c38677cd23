//! A mixture of experts' feed-forward block (qwen3moe), as llama.cpp's `build_moe_ffn` with softmax gating and the
//! chosen weights renormalized: each token's router logits -> the `used` experts of highest probability, weighted by
//! their probabilities over the sum of theirs -> each expert's SwiGLU block on the tokens that chose it, batched ->
//! the outputs added up by those weights.
//!
//! Renormalized over the chosen experts, the softmax's denominator cancels: a chosen expert's weight is the softmax of
//! the chosen logits alone, and the ranking is the logits'.

use crate::gguf::bytes::ModelBytes;
use crate::kernels::swiglu::swiglu;
use crate::model::config::Experts;
use crate::model::forward::project;
use crate::model::weights::LayerWeights;
use crate::parallel::{for_each_row_chunk, LineBuf};
use crate::quant::Activations;

/// Scratch of one forward call of up to `n_batch` tokens (in `RunState`).
pub(crate) struct ExpertScratch {
    logits: Vec<f32>,        // [n × n_experts] router logits
    chosen: Vec<(u32, f32)>, // [n × used] (expert, weight), best first
    rows: Vec<(usize, f32)>, // the tokens routed to one expert, and their weights
    input: LineBuf,          // [n × d_model] their rows of the block's input
    output: LineBuf,         // [n × d_model] the expert's output for them
}

impl ExpertScratch {
    pub(crate) fn new(experts: Option<Experts>, n_batch: usize, d_model: usize) -> ExpertScratch {
        let (count, used, rows) = match experts {
            Some(e) => (e.count, e.used, n_batch),
            None => (0, 0, 0),
        };
        ExpertScratch {
            logits: vec![0.0; rows * count],
            chosen: vec![(0, 0.0); rows * used],
            rows: Vec::with_capacity(rows),
            input: LineBuf::zeros(rows * d_model),
            output: LineBuf::zeros(rows * d_model),
        }
    }

    /// The bytes [`ExpertScratch::new`] allocates, saturating.
    pub(crate) fn bytes(experts: Option<Experts>, n_batch: usize, d_model: usize) -> usize {
        let Some(e) = experts else { return 0 };
        let logits = n_batch.saturating_mul(e.count).saturating_mul(std::mem::size_of::<f32>());
        let chosen = n_batch.saturating_mul(e.used).saturating_mul(std::mem::size_of::<(u32, f32)>());
        let rows = n_batch.saturating_mul(std::mem::size_of::<(usize, f32)>());
        logits
            .saturating_add(chosen)
            .saturating_add(rows)
            .saturating_add(LineBuf::bytes(n_batch.saturating_mul(d_model)).saturating_mul(2))
    }
}

/// The `chosen.len()` experts of one token's router `logits` that score highest, best first (ties to the lower
/// index), each with its weight: the softmax over the chosen logits.
pub(crate) fn route(logits: &[f32], chosen: &mut [(u32, f32)]) {
    for k in 0..chosen.len() {
        let taken = &chosen[..k];
        let best = (0..logits.len())
            .filter(|&e| !taken.iter().any(|&(t, _)| t as usize == e))
            .fold(None, |best: Option<usize>, e| match best {
                Some(b) if logits[b] >= logits[e] => Some(b),
                _ => Some(e),
            })
            .expect("fewer experts chosen than there are");
        chosen[k] = (best as u32, logits[best]);
    }
    let top = chosen[0].1;
    let mut sum = 0.0;
    for (_, w) in chosen.iter_mut() {
        *w = (*w - top).exp();
        sum += *w;
    }
    chosen.iter_mut().for_each(|(_, w)| *w /= sum);
}

/// The experts' block for the `n` normed rows `x` ([n × d_model]) into `out` ([n × d_model], overwritten); `gate` and
/// `up` are scratch of [n × ffn_dim].
#[allow(clippy::too_many_arguments)]
pub(crate) fn ffn(
    experts: Experts,
    lw: &LayerWeights,
    file: &ModelBytes,
    x: &[f32],
    n: usize,
    s: &mut ExpertScratch,
    acts: &mut Activations,
    gate: &mut [f32],
    up: &mut [f32],
    out: &mut [f32],
) {
    let router = lw.router.as_ref().expect("a layer of experts has a router");
    let (count, used) = (experts.count, experts.used);
    let (d, ff) = (router.cols, lw.w_gate.rows / count);
    project(acts, x, n, &mut [(router.view(file), &mut s.logits[..n * count])]);
    for (logits, chosen) in s.logits[..n * count].chunks_exact(count).zip(s.chosen[..n * used].chunks_exact_mut(used)) {
        route(logits, chosen);
    }
    out.fill(0.0);
    for e in 0..count {
        s.rows.clear();
        for (t, chosen) in s.chosen[..n * used].chunks_exact(used).enumerate() {
            if let Some(&(_, w)) = chosen.iter().find(|&&(c, _)| c as usize == e) {
                s.input[s.rows.len() * d..][..d].copy_from_slice(&x[t * d..][..d]);
                s.rows.push((t, w));
            }
        }
        let m = s.rows.len();
        if m == 0 {
            continue;
        }
        let (g, u) = (&mut gate[..m * ff], &mut up[..m * ff]);
        let (w_gate, w_up) = (lw.w_gate.row_range(e * ff..(e + 1) * ff), lw.w_up.row_range(e * ff..(e + 1) * ff));
        project(acts, &s.input[..m * d], m, &mut [(w_gate.view(file), &mut *g), (w_up.view(file), &mut *u)]);
        let u = &*u;
        for_each_row_chunk(g, ff, |t0, g| swiglu(g, &u[t0 * ff..][..g.len()]));
        let w_down = lw.w_down.row_range(e * d..(e + 1) * d);
        project(acts, &gate[..m * ff], m, &mut [(w_down.view(file), &mut s.output[..m * d])]);
        for (i, &(t, w)) in s.rows.iter().enumerate() {
            let y = &s.output[i * d..][..d];
            out[t * d..][..d].iter_mut().zip(y).for_each(|(o, y)| *o += w * y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn route_takes_the_highest_logits_and_weighs_them_by_their_softmax() {
        let mut chosen = [(0, 0.0); 2];
        route(&[0.5, 2.0, -1.0, 1.0], &mut chosen);
        assert_eq!([chosen[0].0, chosen[1].0], [1, 3]);
        let (a, b) = (2.0f32.exp(), 1.0f32.exp());
        assert!((chosen[0].1 - a / (a + b)).abs() < 1e-6 && (chosen[1].1 - b / (a + b)).abs() < 1e-6);
        // The full softmax renormalized over the chosen ones gives the same weights.
        let p: Vec<f32> = [0.5f32, 2.0, -1.0, 1.0].iter().map(|l| l.exp()).collect();
        assert!((chosen[0].1 - p[1] / (p[1] + p[3])).abs() < 1e-6);
    }

    #[test]
    fn route_breaks_ties_to_the_lower_expert_and_one_expert_weighs_one() {
        let mut chosen = [(0, 0.0); 3];
        route(&[1.0, 3.0, 1.0, 1.0], &mut chosen);
        assert_eq!(chosen.map(|c| c.0), [1, 0, 2]);
        let mut one = [(0, 0.0)];
        route(&[f32::MIN, -5.0], &mut one);
        assert_eq!(one, [(1, 1.0)]);
    }
}
