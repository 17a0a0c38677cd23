//! The update and the slow loop's arithmetic: an Adam step on the gradient plus the EWC penalty `λ·F·(θ - θ*)`
//! toward the consolidated weights `θ*`, and the consolidation that folds a session's squared gradients into the
//! Fisher estimate `F` (online EWC's running mean) and moves the anchor to the weights as they are.

const BETA1: f32 = 0.9;
const BETA2: f32 = 0.999;
const EPS: f32 = 1e-8;

/// Adam's and the EWC penalty's state over a parameter vector: every vector as long as it, index for index.
pub(super) struct Optimizer {
    /// The consolidated weights (the EWC anchor), the Fisher estimate, and this session's sum of squared
    /// gradients with its step count.
    pub(super) anchor: Vec<f32>,
    pub(super) fisher: Vec<f32>,
    pub(super) session_sq: Vec<f32>,
    pub(super) session_steps: u32,
    /// Adam's moments and step count.
    pub(super) m: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) steps: u64,
}

impl Optimizer {
    /// No steps yet, no Fisher estimate, the anchor at `theta`.
    pub(super) fn new(theta: &[f32]) -> Optimizer {
        let len = theta.len();
        Optimizer {
            anchor: theta.to_vec(),
            fisher: vec![0.0; len],
            session_sq: vec![0.0; len],
            session_steps: 0,
            m: vec![0.0; len],
            v: vec![0.0; len],
            steps: 0,
        }
    }

    /// Adam on `grad` (clipped to a norm of 1) plus the EWC penalty's gradient `λ·F·(θ - θ*)`, at learning rate
    /// `lr`; the clipped gradient's squares go into this session's sum.
    pub(super) fn step(&mut self, theta: &mut [f32], grad: &[f32], lr: f32, lambda: f32) {
        let norm = grad.iter().map(|g| g * g).sum::<f32>().sqrt();
        let clip = if norm > 1.0 { 1.0 / norm } else { 1.0 };
        // A stored state may carry any count: the counters saturate, and the bias correction's power is taken
        // of at most 2^20 steps (by then it is 1 in f32), so no count turns it negative or into a NaN.
        self.steps = self.steps.saturating_add(1);
        self.session_steps = self.session_steps.saturating_add(1);
        let t = self.steps.min(1 << 20) as i32;
        let (b1, b2) = (1.0 - BETA1.powi(t), 1.0 - BETA2.powi(t));
        // One index over six parallel vectors: the loop says it more plainly than a six-way zip.
        #[allow(clippy::needless_range_loop)]
        for i in 0..theta.len() {
            let data = grad[i] * clip;
            self.session_sq[i] += data * data;
            let g = data + lambda * self.fisher[i] * (theta[i] - self.anchor[i]);
            self.m[i] = BETA1 * self.m[i] + (1.0 - BETA1) * g;
            self.v[i] = BETA2 * self.v[i] + (1.0 - BETA2) * g * g;
            theta[i] -= lr * (self.m[i] / b1) / ((self.v[i] / b2).sqrt() + EPS);
        }
    }

    /// Fold the steps since the last consolidation into the Fisher estimate (keeping `keep` of the old one) and
    /// anchor at `theta`; returns how many steps were folded.
    pub(super) fn consolidate(&mut self, theta: &[f32], keep: f32) -> u32 {
        let n = self.session_steps;
        if n > 0 {
            for (f, sq) in self.fisher.iter_mut().zip(&mut self.session_sq) {
                *f = keep * *f + (1.0 - keep) * *sq / n as f32;
                *sq = 0.0;
            }
        }
        self.anchor.copy_from_slice(theta);
        self.session_steps = 0;
        n
    }

    /// Add the mean of `sq`, the squared gradients summed over `examples` examples, to the Fisher estimate, and
    /// anchor at `theta`.
    pub(super) fn protect(&mut self, theta: &[f32], sq: &[f32], examples: usize) {
        let n = examples.max(1) as f32;
        self.fisher.iter_mut().zip(sq).for_each(|(f, s)| *f += s / n);
        self.anchor.copy_from_slice(theta);
    }
}

// On the tiny models the fixture script writes (natively: the wasm32 suites read no files from here).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::tests::tiny;
    use super::super::{MicroLora, MicroLoraOptions};
    use crate::test_support::{test, Rng};

    /// A stored state may carry any step counts (a long life, or bytes made with a fresh checksum): the next
    /// steps keep every weight and moment finite, and the state still reads back.
    #[test]
    fn any_stored_step_count_trains_on_with_finite_weights() {
        let model = tiny("tiny-llama-spm.gguf");
        let tokens: Vec<u32> = (1..20).collect();
        for (steps, session_steps) in [(u32::MAX as u64, u32::MAX), (u64::MAX, 7), ((1 << 31) - 1, 0)] {
            let mut lora = MicroLora::new(&model, MicroLoraOptions::default()).unwrap();
            lora.train_step(&model, &tokens, 8, 1.0).unwrap();
            (lora.optimizer.steps, lora.optimizer.session_steps) = (steps, session_steps);
            let mut back = MicroLora::from_bytes(&model, &lora.to_bytes(&model)).unwrap();
            for reward in [1.0, -1.0] {
                back.train_step(&model, &tokens, 8, reward).unwrap();
            }
            back.consolidate();
            let o = &back.optimizer;
            let all = [&back.theta, &o.anchor, &o.fisher, &o.session_sq, &o.m, &o.v];
            assert!(all.iter().all(|vs| vs.iter().all(|v| v.is_finite())), "{steps} steps");
            assert!(o.steps >= steps && MicroLora::from_bytes(&model, &back.to_bytes(&model)).is_ok());
        }
    }

    #[test]
    fn protected_text_moves_less_under_training_than_without_protection() {
        let model = tiny("tiny-llama-spm.gguf");
        let vocab = model.config.vocab_size as u64;
        let mut rng = Rng::new(11);
        let mut text = |n: usize| (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect::<Vec<u32>>();
        let (taught, kept) = (text(24), text(24));
        let mut moved = |protect: bool| {
            let options = MicroLoraOptions { learning_rate: 2e-2, ewc_lambda: 1e7, ..MicroLoraOptions::default() };
            let mut lora = MicroLora::new(&model, options).unwrap();
            // B = 0 makes A's gradient 0: one step elsewhere first, so that the estimate covers every weight.
            lora.train_step(&model, &text(24), 4, 1.0).unwrap();
            if protect {
                lora.protect(&model, &[(kept.clone(), 4)]).unwrap();
            } else {
                lora.consolidate();
            }
            let before = lora.loss(&model, &kept, 4).unwrap();
            for _ in 0..10 {
                lora.train_step(&model, &taught, 4, 1.0).unwrap();
            }
            (lora.loss(&model, &kept, 4).unwrap() - before).abs()
        };
        let (with, without) = (moved(true), moved(false));
        assert!(with < 0.5 * without, "the protected text's loss moved {with} with protection, {without} without");
    }
}
