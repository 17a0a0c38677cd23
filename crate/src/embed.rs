//! Sentence embeddings: texts -> token ids -> the encoder's last hidden states -> one pooled vector per text,
//! L2-normalized on request (as sentence-transformers' `Normalize` and llama.cpp's `--embd-normalize 2`).
//!
//! Texts are tokenized with the model's special tokens ([CLS] ... [SEP] for BERT, BOS where a decoder adds it).
//! An encoder's texts are packed, whole, into batches of at most [`BATCH_TOKENS`] tokens: one forward call
//! multiplies every matrix for all of a batch's tokens at once (the prefill path), while attention stays within
//! each text. A decoder (llama, qwen2, qwen3, phi3) runs each text through its causal forward pass in prefill batches of
//! [`BATCH_TOKENS`], and pools the final norm's outputs (llama.cpp's embeddings of a decoder).

use std::ops::Range;

use crate::error::{Error, Result};
use crate::model::bert;
use crate::model::config::Pooling;
use crate::model::forward::{self, LogitsFor, RunState};
use crate::model::Model;

/// The most tokens one encoder call takes: texts are added to a batch while they fit (a longer text runs alone).
pub const BATCH_TOKENS: usize = 512;

#[derive(Clone, Copy, Debug)]
pub struct EmbedOptions {
    /// None: the model's own (`<arch>.pooling_type`), else mean.
    pub pooling: Option<Pooling>,
    /// Scale each embedding to unit L2 norm.
    pub normalize: bool,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { pooling: None, normalize: true }
    }
}

impl Model {
    /// One embedding of `config.d_model` floats per text, in order.
    ///
    /// Errors: a text whose tokens do not fit the model's context (`Error::ContextOverflow`).
    pub fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let ids = texts.iter().map(|t| self.tokenizer().encode_with_special(t, false)).collect::<Result<Vec<_>>>()?;
        self.embed_tokens(&ids, opts)
    }

    /// [`embed`](Self::embed) of texts already tokenized (special tokens included).
    pub fn embed_tokens(&self, texts: &[Vec<u32>], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        self.check_weights_held()?;
        let c = &self.config;
        for ids in texts {
            if ids.len() > c.context_length {
                return Err(Error::ContextOverflow { needed: ids.len(), context: c.context_length });
            }
            if let Some(&id) = ids.iter().find(|&&id| id as usize >= c.vocab_size) {
                return Err(Error::TokenOutOfRange { id, vocab_size: c.vocab_size });
            }
        }
        let pooling = opts.pooling.or(c.pooling).unwrap_or(Pooling::Mean);
        // An encoder loads with its encoder weights (`Model::load`); a decoder has none.
        let mut out = match &self.encoder {
            Some(weights) => self.encoder_embeddings(weights, texts, pooling),
            None => texts.iter().map(|ids| self.decoder_embedding(ids, pooling)).collect(),
        };
        if opts.normalize {
            out.iter_mut().for_each(|e| normalize(e));
        }
        Ok(out)
    }

    fn encoder_embeddings(&self, weights: &bert::BertWeights, texts: &[Vec<u32>], pooling: Pooling) -> Vec<Vec<f32>> {
        let d = self.config.d_model;
        let mut out = Vec::with_capacity(texts.len());
        for batch in batches(texts) {
            let tokens: Vec<u32> = batch.iter().flat_map(|ids| ids.iter().copied()).collect();
            let seqs = ranges(batch);
            let hidden = bert::encode(&self.config, weights, self.file(), &tokens, &seqs);
            out.extend(seqs.into_iter().map(|seq| pool(&hidden[seq.start * d..seq.end * d], d, pooling)));
        }
        out
    }

    /// One text through the decoder from an empty KV cache of its own length.
    fn decoder_embedding(&self, ids: &[u32], pooling: Pooling) -> Vec<f32> {
        let (c, n) = (&self.config, ids.len());
        if n == 0 {
            return vec![0.0; c.d_model];
        }
        let n_batch = n.min(BATCH_TOKENS);
        let mut kv = self.conversation_cache(n);
        let mut state = RunState::new(self, n_batch, n);
        let mut hidden = vec![0f32; n * c.d_model];
        for (range, _) in forward::batches(n, n_batch, LogitsFor::None) {
            let out = &mut hidden[range.start * c.d_model..range.end * c.d_model];
            forward::hidden_states(self, &mut kv, &mut state, &ids[range.clone()], range.start, out);
        }
        pool(&hidden, c.d_model, pooling)
    }
}

/// Consecutive runs of texts of at most `BATCH_TOKENS` tokens in all (or one longer text).
fn batches(texts: &[Vec<u32>]) -> impl Iterator<Item = &[Vec<u32>]> {
    let mut rest = texts;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut total = 0;
        let n = rest.iter().take_while(|ids| {
            total += ids.len();
            total <= BATCH_TOKENS
        });
        let n = n.count().max(1);
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        Some(batch)
    })
}

/// Each text's rows in the batch's concatenated tokens.
fn ranges(batch: &[Vec<u32>]) -> Vec<Range<usize>> {
    let mut start = 0;
    batch
        .iter()
        .map(|ids| {
            start += ids.len();
            start - ids.len()..start
        })
        .collect()
}

/// One vector from a text's hidden states (`rows` of `d`). An empty text (no tokens at all) gives zeros.
pub fn pool(rows: &[f32], d: usize, pooling: Pooling) -> Vec<f32> {
    let n = rows.len() / d;
    if n == 0 {
        return vec![0.0; d];
    }
    match pooling {
        Pooling::Mean => {
            let mut sum = vec![0f32; d];
            for row in rows.chunks_exact(d) {
                sum.iter_mut().zip(row).for_each(|(s, x)| *s += x);
            }
            sum.iter_mut().for_each(|s| *s /= n as f32);
            sum
        }
        Pooling::Cls => rows[..d].to_vec(),
        Pooling::Last => rows[(n - 1) * d..].to_vec(),
    }
}

/// Scale `v` to unit L2 norm (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn pools_rows() {
        let rows = [1.0f32, 2.0, 3.0, 4.0, 5.0, 9.0];
        assert_eq!(pool(&rows, 2, Pooling::Mean), [3.0, 5.0]);
        assert_eq!(pool(&rows, 2, Pooling::Cls), [1.0, 2.0]);
        assert_eq!(pool(&rows, 2, Pooling::Last), [5.0, 9.0]);
        let mut v = [3.0f32, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
    }

    #[test]
    fn batches_pack_whole_texts() {
        let texts: Vec<Vec<u32>> = [300, 200, 100, 600, 5].iter().map(|&n| vec![0; n]).collect();
        let sizes: Vec<usize> = batches(&texts).map(|b| b.len()).collect();
        assert_eq!(sizes, [2, 1, 1, 1]); // 300+200; 100 (600 does not fit); 600 alone; 5
        assert_eq!(ranges(&texts[..2]), [0..300, 300..500]);
    }
}
