//! Next-token sampling from raw logits, in the order of llama.cpp's common sampler chain:
//! penalties -> top-k -> top-p -> min-p -> temperature -> draw.
//!
//! The filters use llama.cpp's formulas, so top-p and min-p see the probabilities at temperature 1
//! (temperature only reshapes what is left). The random draw uses our own xoshiro256** generator so a
//! seed gives the same tokens on x86_64, aarch64 and wasm32 (given the same logits).
//! After the first call, sampling allocates nothing: the decode loop calls it for every token.
//!
//! # Design
//!
//! Penalties → top-k → top-p → min-p → temperature → draw, as llama.cpp's chain, with our own PRNG so a seed gives the
//! same tokens on every platform. Greedy sampling without penalties is a plain argmax: building the candidate list of
//! a large vocabulary is serial time threads cannot share. `stop.rs` matches stop strings across streamed pieces and
//! never emits them.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::splitmix::SplitMix64;

/// Sampling options. Each filter has a value that turns it off (noted per field).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; `<= 0` (only 0 passes validation) means greedy: argmax after penalties.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`; 1 = off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 = off.
    pub min_p: f32,
    /// Divide positive (multiply non-positive) logits of recent tokens by this; 1 = off.
    pub repeat_penalty: f32,
    /// Subtracted from the logit of every recent token once; 0 = off.
    pub presence_penalty: f32,
    /// Subtracted from the logit of every recent token once per occurrence; 0 = off.
    pub frequency_penalty: f32,
    /// How many of the latest tokens the penalties look at; 0 = penalties off.
    pub penalty_last_n: usize,
    /// Seed of the random generator; the same seed and logits give the same tokens everywhere.
    pub seed: u64,
}

/// llama.cpp's defaults (`common_params_sampling`): temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
/// penalties off with a window of 64. One difference: the seed is 0, not "random", so that runs are
/// reproducible unless the caller picks a seed.
impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding (argmax), penalties off.
    pub fn greedy() -> Self {
        SamplerConfig { temperature: 0.0, ..Default::default() }
    }

    /// Check every field; the error names the field and the allowed range.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &str, value: f32, range: &str| {
            Err(Error::InvalidArgument(format!("{field} must be {range}, got {value}")))
        };
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature", self.temperature, "a finite number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "in (0, 1]");
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return bad("min_p", self.min_p, "in [0, 1]");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat_penalty", self.repeat_penalty, "a finite number > 0");
        }
        if !self.presence_penalty.is_finite() {
            return bad("presence_penalty", self.presence_penalty, "finite");
        }
        if !self.frequency_penalty.is_finite() {
            return bad("frequency_penalty", self.frequency_penalty, "finite");
        }
        Ok(())
    }

    /// Whether sampling is the plain argmax of the logits (temperature 0, no penalties), which a
    /// backend may compute without handing over the logits.
    pub fn is_argmax(&self) -> bool {
        self.temperature <= 0.0 && !self.penalties_active()
    }

    fn penalties_active(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0)
    }
}

/// The id of the highest logit, lowest id on ties, NaN counted as impossible (as `Sampler::load` does).
pub(crate) fn argmax(logits: &[f32]) -> u32 {
    let mut best = (0, f32::NEG_INFINITY);
    for (id, &l) in logits.iter().enumerate() {
        if l > best.1 {
            best = (id, l);
        }
    }
    best.0 as u32
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Most likely first; equal logits by lowest id, so every ordering is deterministic.
fn by_likelihood(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// A sampler holds its configuration, random state and scratch buffers.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Xoshiro256StarStar,
    /// The tokens still in play, in id order until a filter sorts them.
    candidates: Vec<Candidate>,
    /// Per-token occurrence counts in the penalty window; all zero between calls.
    counts: Vec<u32>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Result<Sampler> {
        cfg.validate()?;
        let rng = Xoshiro256StarStar::new(cfg.seed);
        Ok(Sampler { cfg, rng, candidates: Vec::new(), counts: Vec::new() })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Pick the next token from raw logits; `history` = all previous token ids (prompt + generated) for penalties.
    /// History ids outside the vocabulary are ignored. `logits` must not be empty.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        assert!(!logits.is_empty(), "sampler needs at least one logit");
        assert!(u32::try_from(logits.len()).is_ok(), "vocabulary larger than u32 ids");
        if self.cfg.is_argmax() {
            return argmax(logits); // what the chain below gives too, without building the candidates
        }
        self.load(logits);
        self.apply_penalties(history);
        if self.cfg.temperature <= 0.0 {
            return self.argmax();
        }
        self.top_k();
        self.top_p();
        self.min_p();
        self.draw()
    }

    fn load(&mut self, logits: &[f32]) {
        self.candidates.clear();
        // A NaN logit would win every comparison; treat it as impossible instead.
        let sane = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { l };
        self.candidates.extend(logits.iter().enumerate().map(|(id, &l)| Candidate { id: id as u32, logit: sane(l) }));
    }

    /// llama.cpp's penalties: for each distinct token among the last `penalty_last_n`, with `count`
    /// occurrences: logit /= repeat (or *= when logit <= 0), then logit -= count * frequency + presence.
    fn apply_penalties(&mut self, history: &[u32]) {
        if !self.cfg.penalties_active() {
            return;
        }
        let n_vocab = self.candidates.len();
        if self.counts.len() < n_vocab {
            self.counts.resize(n_vocab, 0);
        }
        let window = &history[history.len().saturating_sub(self.cfg.penalty_last_n)..];
        let in_vocab = |id: &&u32| (**id as usize) < n_vocab;
        for &id in window.iter().filter(in_vocab) {
            self.counts[id as usize] += 1;
        }
        // Candidates are still in id order here. Reset each count once used, so each token is penalized once.
        for &id in window.iter().filter(in_vocab) {
            let count = std::mem::take(&mut self.counts[id as usize]);
            if count == 0 {
                continue;
            }
            let c = &mut self.candidates[id as usize];
            c.logit =
                if c.logit <= 0.0 { c.logit * self.cfg.repeat_penalty } else { c.logit / self.cfg.repeat_penalty };
            c.logit -= count as f32 * self.cfg.frequency_penalty + self.cfg.presence_penalty;
        }
    }

    /// Highest logit, lowest id on ties (of the candidates).
    fn argmax(&self) -> u32 {
        let best = self.candidates.iter().min_by(|a, b| by_likelihood(a, b));
        best.map_or(0, |c| c.id)
    }

    /// Keep the `top_k` most likely, sorted.
    fn top_k(&mut self) {
        let k = self.cfg.top_k;
        if k > 0 && k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_likelihood);
            self.candidates.truncate(k);
        }
        // top-p needs them sorted; with top-k this is cheap, without it top-p pays for the full sort.
        if k > 0 || self.cfg.top_p < 1.0 {
            self.candidates.sort_unstable_by(by_likelihood);
        }
    }

    /// Keep the most likely tokens until their probability (temperature 1) reaches `top_p`.
    /// Candidates are sorted here when top-p is on.
    fn top_p(&mut self) {
        let p = self.cfg.top_p;
        if p >= 1.0 {
            return;
        }
        let max = self.candidates[0].logit;
        if !max.is_finite() {
            return;
        }
        let total: f32 = self.candidates.iter().map(|c| (c.logit - max).exp()).sum();
        let mut cumulative = 0.0f32;
        let mut keep = self.candidates.len();
        for (i, c) in self.candidates.iter().enumerate() {
            cumulative += (c.logit - max).exp() / total;
            if cumulative >= p {
                keep = i + 1;
                break;
            }
        }
        self.candidates.truncate(keep);
    }

    /// Keep tokens whose probability is at least `min_p` times the top one: logit >= max + ln(min_p).
    fn min_p(&mut self) {
        let p = self.cfg.min_p;
        if p <= 0.0 {
            return;
        }
        let max = self.max_logit();
        let min_logit = max + p.ln();
        self.candidates.retain(|c| c.logit >= min_logit);
    }

    fn max_logit(&self) -> f32 {
        self.candidates.iter().map(|c| c.logit).fold(f32::NEG_INFINITY, f32::max)
    }

    /// Softmax at the configured temperature over what is left, then one draw.
    fn draw(&mut self) -> u32 {
        let max = self.max_logit();
        if !max.is_finite() {
            return self.argmax();
        }
        let inv_t = 1.0 / self.cfg.temperature;
        let weight = |c: &Candidate| ((c.logit - max) * inv_t).exp() as f64;
        let total: f64 = self.candidates.iter().map(weight).sum();
        let target = self.rng.next_f64() * total;
        let mut cumulative = 0.0f64;
        for c in &self.candidates {
            let w = weight(c);
            cumulative += w;
            if target < cumulative {
                return c.id;
            }
        }
        // Rounding left `target` at the very top: take the last token that had any weight.
        self.candidates.iter().rev().find(|c| weight(c) > 0.0).map_or_else(|| self.argmax(), |c| c.id)
    }
}

/// The `k` most likely ids with their softmax probabilities at temperature 1 (computed in f64),
/// most likely first, lowest id first on ties. Used for teacher-forced scoring.
pub fn top_k_probs(logits: &[f32], k: usize) -> Vec<(u32, f64)> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(idx.len());
    let cmp = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    if k > 0 && k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
    }
    idx.truncate(k);
    idx.sort_by(cmp);
    idx.into_iter().map(|i| (i, (logits[i as usize] as f64 - max).exp() / sum)).collect()
}

/// xoshiro256** (Blackman & Vigna), seeded through SplitMix64 as its authors recommend.
/// Pure integer arithmetic, so the sequence is the same on every platform.
#[derive(Clone, Debug)]
struct Xoshiro256StarStar {
    s: [u64; 4],
}

impl Xoshiro256StarStar {
    fn new(seed: u64) -> Self {
        let mut sm = SplitMix64(seed);
        // SplitMix64 never yields four zero words, so the state is valid for every seed.
        Xoshiro256StarStar { s: [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()] }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) from the top 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    fn cfg(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplerConfig {
        SamplerConfig { temperature, top_k, top_p, min_p, ..SamplerConfig::default() }
    }

    /// Draw `n` tokens and return how often each id came up.
    fn histogram(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<usize> {
        let mut counts = vec![0; logits.len()];
        for _ in 0..n {
            counts[s.sample(logits, &[]) as usize] += 1;
        }
        counts
    }

    /// Probabilities (temperature 1) 0.4, 0.25, 0.15, 0.1, 0.06, 0.04 in shuffled id order.
    fn hand_made() -> Vec<f32> {
        // id:      0     1     2     3     4     5
        [0.1f32, 0.4, 0.04, 0.25, 0.06, 0.15].iter().map(|p| p.ln()).collect()
    }

    #[test]
    fn xoshiro_matches_reference_values() {
        // xoshiro256** from the state {1, 2, 3, 4}: values of the reference C implementation.
        let mut x = Xoshiro256StarStar { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..4).map(|_| x.next_u64()).collect();
        assert_eq!(got, [11520, 0, 1509978240, 1215971899390074240]);
    }

    /// The cross-platform proof: these constants hold on x86_64, aarch64 and wasm32 alike.
    #[test]
    fn golden_draws_for_seed_42() {
        let mut rng = Xoshiro256StarStar::new(42);
        let u: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(u, GOLDEN_U64_SEED_42);

        // Uniform weights (logit 0) make the draw exact arithmetic: id = floor(u * 8).
        let mut s = Sampler::new(SamplerConfig { seed: 42, ..cfg(1.0, 0, 1.0, 0.0) }).unwrap();
        let ids: Vec<u32> = (0..16).map(|_| s.sample(&[0.0; 8], &[])).collect();
        assert_eq!(ids, GOLDEN_UNIFORM8_SEED_42);

        // The default chain on the hand-made distribution.
        let mut s = Sampler::new(SamplerConfig { seed: 42, ..SamplerConfig::default() }).unwrap();
        let ids: Vec<u32> = (0..16).map(|_| s.sample(&hand_made(), &[])).collect();
        assert_eq!(ids, GOLDEN_DEFAULT_SEED_42);
    }

    // Computed by an independent Python model of the generator and of the chain (numpy float32).
    const GOLDEN_U64_SEED_42: [u64; 3] = [1546998764402558742, 6990951692964543102, 12544586762248559009];
    const GOLDEN_UNIFORM8_SEED_42: [u32; 16] = [0, 3, 5, 7, 7, 6, 5, 6, 6, 4, 5, 2, 6, 2, 5, 7];
    // top-p 0.95 drops id 2 (0.04); min-p 0.05 keeps the rest; temperature 0.8 sharpens.
    const GOLDEN_DEFAULT_SEED_42: [u32; 16] = [1, 1, 3, 0, 4, 5, 3, 5, 5, 3, 3, 1, 5, 1, 3, 0];

    #[test]
    fn greedy_is_argmax_with_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplerConfig::greedy()).unwrap();
        assert_eq!(s.sample(&hand_made(), &[]), 1);
        assert_eq!(s.sample(&[1.0, 3.0, -2.0, 3.0], &[]), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0, 5.0, 5.0], &[]), 2);
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 3], &[]), 0);
    }

    #[test]
    fn top_k_1_equals_greedy() {
        let mut s = Sampler::new(SamplerConfig {
            top_k: 1,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 5.0,
            seed: 3,
            ..Default::default()
        })
        .unwrap();
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32 * 0.01).collect();
        let mut greedy = Sampler::new(SamplerConfig::greedy()).unwrap();
        let want = greedy.sample(&logits, &[]);
        for _ in 0..200 {
            assert_eq!(s.sample(&logits, &[]), want);
        }
    }

    #[test]
    fn top_k_keeps_exactly_k() {
        let mut s = Sampler::new(SamplerConfig { seed: 1, ..cfg(1.0, 3, 1.0, 0.0) }).unwrap();
        let h = histogram(&mut s, &hand_made(), 3000);
        // The three most likely: ids 1 (0.4), 3 (0.25), 5 (0.15).
        assert!(h[1] > 0 && h[3] > 0 && h[5] > 0, "{h:?}");
        assert_eq!(h[0] + h[2] + h[4], 0, "{h:?}");
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // Cumulative: 0.4, 0.65, 0.8, 0.9, ... so top_p 0.7 keeps ids 1, 3, 5 and 0.85 adds id 0.
        for (top_p, allowed) in [(0.7f32, &[1usize, 3, 5][..]), (0.85, &[1, 3, 5, 0]), (0.3, &[1])] {
            let mut s = Sampler::new(SamplerConfig { seed: 9, ..cfg(1.0, 0, top_p, 0.0) }).unwrap();
            let h = histogram(&mut s, &hand_made(), 4000);
            for id in 0..6 {
                assert_eq!(h[id] > 0, allowed.contains(&id), "top_p {top_p}, id {id}: {h:?}");
            }
        }
    }

    #[test]
    fn min_p_keeps_tokens_above_fraction_of_top() {
        // min_p 0.3: threshold 0.12 keeps 0.4, 0.25, 0.15 (ids 1, 3, 5); min_p 0.2: 0.08 adds 0.1 (id 0).
        for (min_p, allowed) in [(0.3f32, &[1usize, 3, 5][..]), (0.2, &[1, 3, 5, 0]), (1.0, &[1])] {
            let mut s = Sampler::new(SamplerConfig { seed: 5, ..cfg(1.0, 0, 1.0, min_p) }).unwrap();
            let h = histogram(&mut s, &hand_made(), 4000);
            for id in 0..6 {
                assert_eq!(h[id] > 0, allowed.contains(&id), "min_p {min_p}, id {id}: {h:?}");
            }
        }
    }

    #[test]
    fn draws_follow_the_distribution() {
        let mut s = Sampler::new(SamplerConfig { seed: 11, ..cfg(1.0, 0, 1.0, 0.0) }).unwrap();
        let n = 20000;
        let h = histogram(&mut s, &hand_made(), n);
        for (id, p) in [0.1f64, 0.4, 0.04, 0.25, 0.06, 0.15].into_iter().enumerate() {
            let freq = h[id] as f64 / n as f64;
            assert!((freq - p).abs() < 0.015, "id {id}: {freq} vs {p}");
        }
        // A low temperature sharpens towards the top token.
        let mut cold = Sampler::new(SamplerConfig { seed: 11, ..cfg(0.2, 0, 1.0, 0.0) }).unwrap();
        let h = histogram(&mut cold, &hand_made(), 2000);
        assert!(h[1] > 1800, "{h:?}");
    }

    #[test]
    fn same_seed_same_sequence() {
        let logits: Vec<f32> = (0..500).map(|i| ((i * 31) % 17) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplerConfig { seed, ..SamplerConfig::default() }).unwrap();
            (0..64).map(|_| s.sample(&logits, &[])).collect::<Vec<u32>>()
        };
        assert_eq!(run(123), run(123));
        assert_ne!(run(123), run(124));
    }

    #[test]
    fn penalties_change_the_choice() {
        let logits = [2.0f32, 1.9, 1.0, -0.5];
        let greedy = |cfg: SamplerConfig, history: &[u32]| Sampler::new(cfg).unwrap().sample(&logits, history);
        let base = SamplerConfig::greedy();
        assert_eq!(greedy(base.clone(), &[0, 0]), 0);

        // Repeat: 2.0 / 1.1 = 1.82 < 1.9.
        let repeat = SamplerConfig { repeat_penalty: 1.1, ..base.clone() };
        assert_eq!(greedy(repeat.clone(), &[0]), 1);
        // ... but only within the window: id 0 is 3 tokens back, the window is 2.
        assert_eq!(greedy(SamplerConfig { penalty_last_n: 2, ..repeat.clone() }, &[0, 2, 2]), 0);
        // Presence: once per token, however often it occurred. 2.0 - 0.05 > 1.9, 1.9 - 0.05 < 2.0 - 0.05.
        let presence = SamplerConfig { presence_penalty: 0.05, ..base.clone() };
        assert_eq!(greedy(presence.clone(), &[0, 0, 0, 0]), 0);
        assert_eq!(greedy(SamplerConfig { presence_penalty: 0.2, ..base.clone() }, &[0]), 1);
        // Frequency: per occurrence. 2.0 - 3 * 0.05 = 1.85 < 1.9, while one occurrence (1.95) is not enough.
        let frequency = SamplerConfig { frequency_penalty: 0.05, ..base.clone() };
        assert_eq!(greedy(frequency.clone(), &[0]), 0);
        assert_eq!(greedy(frequency, &[0, 5000, 0, 0]), 1); // ids outside the vocabulary are ignored
                                                            // Non-positive logits are multiplied: -0.5 * 10 pushes id 3 further down, it never rises.
        let mut s = Sampler::new(SamplerConfig { repeat_penalty: 10.0, ..base.clone() }).unwrap();
        assert_eq!(s.sample(&[-0.5, -1.0], &[0]), 1);
        // Counts are cleared between calls: the same history gives the same answer twice.
        let mut s = Sampler::new(SamplerConfig { frequency_penalty: 0.05, ..base }).unwrap();
        assert_eq!(s.sample(&logits, &[0]), 0);
        assert_eq!(s.sample(&logits, &[0]), 0);
    }

    #[test]
    fn scratch_buffers_are_reused_across_calls() {
        let logits: Vec<f32> = (0..4096).map(|i| (i % 97) as f32 * 0.1).collect();
        let history: Vec<u32> = (0..100).collect();
        let mut s = Sampler::new(SamplerConfig { repeat_penalty: 1.2, top_k: 0, ..SamplerConfig::default() }).unwrap();
        s.sample(&logits, &history);
        let buffers = (s.candidates.as_ptr(), s.candidates.capacity(), s.counts.as_ptr());
        for _ in 0..10 {
            s.sample(&logits, &history);
            assert_eq!((s.candidates.as_ptr(), s.candidates.capacity(), s.counts.as_ptr()), buffers);
        }
    }

    #[test]
    fn validate_names_the_field() {
        let d = SamplerConfig::default;
        let cases = [
            (SamplerConfig { temperature: f32::NAN, ..d() }, "temperature"),
            (SamplerConfig { temperature: -0.1, ..d() }, "temperature"),
            (SamplerConfig { top_p: 0.0, ..d() }, "top_p"),
            (SamplerConfig { top_p: 1.5, ..d() }, "top_p"),
            (SamplerConfig { min_p: -0.1, ..d() }, "min_p"),
            (SamplerConfig { min_p: f32::NAN, ..d() }, "min_p"),
            (SamplerConfig { repeat_penalty: 0.0, ..d() }, "repeat_penalty"),
            (SamplerConfig { presence_penalty: f32::INFINITY, ..d() }, "presence_penalty"),
            (SamplerConfig { frequency_penalty: f32::NAN, ..d() }, "frequency_penalty"),
        ];
        for (c, field) in cases {
            match Sampler::new(c).unwrap_err() {
                Error::InvalidArgument(m) => assert!(m.starts_with(field), "{field}: {m}"),
                e => panic!("{field}: {e}"),
            }
        }
        assert!(SamplerConfig::default().validate().is_ok());
        assert!(SamplerConfig::greedy().validate().is_ok());
    }
}
