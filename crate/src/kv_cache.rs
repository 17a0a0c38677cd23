//! The KV cache: per layer, keys and values of every processed position, stored as f16 like
//! llama.cpp's default cache (half the memory of f32, and the same rounding as the reference).

use crate::quant::act::f32_to_f16;

/// One layer's keys and values: a row of `kv_dim` (KV heads × head dim) per position.
pub struct LayerCache {
    kv_dim: usize,
    keys: Vec<[u8; 2]>,   // [n_ctx × kv_dim] f16
    values: Vec<[u8; 2]>, // [n_ctx × kv_dim] f16
}

impl LayerCache {
    /// Store rows of keys and values (each `kv_dim` wide) for positions `pos0..`.
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let start = pos0 * self.kv_dim;
        for (dst, &x) in self.keys[start..start + k.len()].iter_mut().zip(k) {
            *dst = f32_to_f16(x);
        }
        for (dst, &x) in self.values[start..start + v.len()].iter_mut().zip(v) {
            *dst = f32_to_f16(x);
        }
    }

    /// The keys and values of `positions`, to overwrite (the prefix cache restores rows this way).
    pub fn rows_mut(&mut self, positions: std::ops::Range<usize>) -> (&mut [[u8; 2]], &mut [[u8; 2]]) {
        let rows = positions.start * self.kv_dim..positions.end * self.kv_dim;
        (&mut self.keys[rows.clone()], &mut self.values[rows])
    }

    /// The keys of every position, `kv_dim` a row.
    pub fn keys(&self) -> &[[u8; 2]] {
        &self.keys
    }

    /// The values of every position, `kv_dim` a row.
    pub fn values(&self) -> &[[u8; 2]] {
        &self.values
    }
}

pub struct KvCache {
    pub layers: Vec<LayerCache>,
    pub n_ctx: usize,
}

impl KvCache {
    /// A cache of `n_ctx` positions for `n_layers` layers, each position's keys (and values) `kv_dim` wide.
    pub fn new(n_layers: usize, kv_dim: usize, n_ctx: usize) -> KvCache {
        let layers = (0..n_layers)
            .map(|_| LayerCache { kv_dim, keys: vec![[0; 2]; n_ctx * kv_dim], values: vec![[0; 2]; n_ctx * kv_dim] })
            .collect();
        KvCache { layers, n_ctx }
    }

    /// Width of one position's keys (or values) in every layer.
    pub fn kv_dim(&self) -> usize {
        self.layers.first().map_or(0, |l| l.kv_dim)
    }

    /// Bytes held by the cache.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| (l.keys.len() + l.values.len()) * 2).sum()
    }
}
