//! The saved training state: options, weights, the EWC anchor and Fisher estimate, and Adam's moments as bytes in
//! `crate::record`'s frame, and back, for a store to keep between sessions.

use crate::error::{Error, Result};
use crate::model::lora::Proj;
use crate::model::Model;
use crate::record::{f32_at, seal, u32_at, u64_at, Kind};

use super::{proj_shape, MicroLora, MicroLoraOptions, MAX_RANK};

const STATE_HEADER_BYTES: usize = 96;
/// The saved training state's frame (`crate::record`).
const STATE_KIND: Kind =
    Kind { what: "a saved MicroLoRA state", magic: *b"RVMLORA\0", version: 1, oldest: 1, header: STATE_HEADER_BYTES };

impl MicroLora {
    /// The whole training state as bytes (options, weights, the EWC anchor and Fisher estimate, Adam's moments),
    /// for a store to keep; [`MicroLora::from_bytes`] reads it back for the same model.
    ///
    /// ```text
    /// 0   magic "RVMLORA\0", version u32, model id (32 bytes)
    /// 44  rank, layers, projections (bit i: Proj::ALL[i]) u32 ×3; alpha, learning rate, EWC lambda,
    ///     Fisher decay f32 ×4; seed u64; steps u64; session steps u32; parameters u32
    /// 96  weights, anchor, Fisher, session squares, Adam m, Adam v: parameters × f32 each
    /// end CRC-32 of all the above
    /// ```
    /// The frame (magic, version, CRC-32) is `crate::record`'s.
    pub fn to_bytes(&self, model: &Model) -> Vec<u8> {
        let (o, opt) = (&self.options, &self.optimizer);
        let mut out = STATE_KIND.begin();
        out.extend(model.id().0);
        let mask =
            Proj::ALL.iter().enumerate().filter(|(_, p)| o.projections.contains(p)).fold(0u32, |m, (i, _)| m | 1 << i);
        for v in [o.rank as u32, o.layers as u32, mask] {
            out.extend(v.to_le_bytes());
        }
        for v in [o.alpha, o.learning_rate, o.ewc_lambda, o.fisher_decay] {
            out.extend(v.to_le_bytes());
        }
        out.extend(o.seed.to_le_bytes());
        out.extend(opt.steps.to_le_bytes());
        out.extend(opt.session_steps.to_le_bytes());
        out.extend((self.theta.len() as u32).to_le_bytes());
        for vs in [&self.theta, &opt.anchor, &opt.fisher, &opt.session_sq, &opt.m, &opt.v] {
            vs.iter().for_each(|v| out.extend(v.to_le_bytes()));
        }
        seal(out)
    }

    /// How many bytes [`MicroLora::to_bytes`] writes for this adapter: what a store keeps of it.
    pub fn state_bytes(&self) -> usize {
        self.theta.len() * 6 * 4 + STATE_HEADER_BYTES + 4
    }

    /// The largest state [`MicroLora::to_bytes`] writes for `model` (the largest rank on every projection of
    /// every layer): longer bytes are refused before they are read.
    pub fn largest_state_bytes(model: &Model) -> usize {
        let c = &model.config;
        let layer: usize = Proj::ALL.iter().map(|&p| proj_shape(c, p)).map(|(n_in, n_out)| n_in + n_out).sum();
        let parameters = c.n_layers.saturating_mul(MAX_RANK).saturating_mul(layer);
        parameters.saturating_mul(6 * 4).saturating_add(STATE_HEADER_BYTES + 4)
    }

    /// Read a state [`MicroLora::to_bytes`] wrote, for `model`. Bytes from outside: a damaged, foreign or
    /// other model's state is `Error::Adapter`, and nothing is believed before the checksum and the layout hold.
    pub fn from_bytes(model: &Model, bytes: &[u8]) -> Result<MicroLora> {
        let bad = |m: &str| Error::Adapter(format!("saved MicroLoRA: {m}"));
        let (_, body) = STATE_KIND.open(bytes).map_err(|e| Error::Adapter(e.to_string()))?;
        if body[12..44] != model.id().0 {
            return Err(bad("it was trained for another model"));
        }
        let mask = u32_at(body, 52);
        let options = MicroLoraOptions {
            rank: u32_at(body, 44) as usize,
            layers: u32_at(body, 48) as usize,
            projections: Proj::ALL.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, &p)| p).collect(),
            alpha: f32_at(body, 56),
            learning_rate: f32_at(body, 60),
            ewc_lambda: f32_at(body, 64),
            fisher_decay: f32_at(body, 68),
            seed: u64_at(body, 72),
        };
        if mask >> Proj::ALL.len() != 0 {
            return Err(bad(&format!("unknown projections in mask {mask:#x}")));
        }
        let mut lora = MicroLora::new(model, options).map_err(|e| bad(&e.to_string()))?;
        let n = lora.theta.len();
        if u32_at(body, 92) as usize != n || body.len() != STATE_HEADER_BYTES + 6 * 4 * n {
            return Err(bad(&format!("{} bytes do not hold {n} parameters six times", body.len())));
        }
        let mut floats = body[STATE_HEADER_BYTES..].chunks_exact(4).map(|b| f32_at(b, 0));
        let (theta, opt) = (&mut lora.theta, &mut lora.optimizer);
        for vs in [theta, &mut opt.anchor, &mut opt.fisher, &mut opt.session_sq, &mut opt.m, &mut opt.v] {
            vs.iter_mut().for_each(|v| *v = floats.next().expect("sized above"));
        }
        let all = [&lora.theta, &opt.anchor, &opt.fisher, &opt.session_sq, &opt.m, &opt.v];
        if all.iter().any(|vs| vs.iter().any(|v| !v.is_finite())) {
            return Err(bad("a weight or moment is not finite"));
        }
        if [&opt.fisher, &opt.session_sq, &opt.v].iter().any(|vs| vs.iter().any(|&v| v < 0.0)) {
            return Err(bad("a squared quantity is negative"));
        }
        opt.steps = u64_at(body, 80);
        opt.session_steps = u32_at(body, 88);
        Ok(lora)
    }
}

// On the tiny models the fixture script writes (natively: the wasm32 suites read no files from here).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::tests::tiny;
    use super::*;
    use crate::test_support::test;

    #[test]
    fn a_saved_state_reads_back_whole_and_damage_is_refused() {
        let model = tiny("tiny-llama-spm.gguf");
        let options = MicroLoraOptions { rank: 3, projections: vec![Proj::K, Proj::Up], ..MicroLoraOptions::default() };
        let mut lora = MicroLora::new(&model, options).unwrap();
        let tokens: Vec<u32> = (1..20).collect();
        lora.train_step(&model, &tokens, 8, 1.0).unwrap();
        lora.consolidate();
        lora.train_step(&model, &tokens, 8, -1.0).unwrap();
        let bytes = lora.to_bytes(&model);
        assert_eq!(bytes.len(), lora.state_bytes());
        let mut back = MicroLora::from_bytes(&model, &bytes).unwrap();
        assert_eq!(back.options, lora.options);
        let (o, p) = (&back.optimizer, &lora.optimizer);
        assert_eq!((o.steps, o.session_steps), (p.steps, p.session_steps));
        assert_eq!(
            [&back.theta, &o.anchor, &o.fisher, &o.session_sq, &o.m, &o.v],
            [&lora.theta, &p.anchor, &p.fisher, &p.session_sq, &p.m, &p.v]
        );
        assert_eq!(back.to_bytes(&model), bytes);
        let c = &model.config;
        let options = MicroLoraOptions {
            rank: MAX_RANK,
            layers: c.n_layers,
            projections: Proj::ALL.to_vec(),
            ..Default::default()
        };
        let largest = MicroLora::new(&model, options).unwrap().to_bytes(&model);
        assert_eq!(largest.len(), MicroLora::largest_state_bytes(&model));
        // The next step is the same step.
        let (a, b) =
            (lora.train_step(&model, &tokens, 8, 1.0).unwrap(), back.train_step(&model, &tokens, 8, 1.0).unwrap());
        assert_eq!(a.loss, b.loss);
        assert_eq!(lora.theta, back.theta);

        let refused = |b: &[u8]| matches!(MicroLora::from_bytes(&model, b), Err(Error::Adapter(_)));
        assert!(refused(&bytes[..bytes.len() - 1]));
        assert!(refused(&bytes[..10]));
        assert!(refused(b""));
        for at in [0, 9, 20, 50, 100, bytes.len() - 2] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(refused(&damaged), "a flipped bit at {at}");
        }
        assert!(refused(
            &MicroLora::new(&model, MicroLoraOptions::default()).unwrap().to_bytes(&tiny("tiny-llama3.gguf"))
        ));
    }
}
