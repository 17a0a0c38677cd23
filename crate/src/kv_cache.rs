//! The KV cache: per layer, keys and values of every processed position, stored as f16 like
//! llama.cpp's default cache (half the memory of f32, and the same rounding as the reference).

use crate::model::config::Config;
use crate::quant::act::f32_to_f16;

pub struct LayerCache {
    kv_dim: usize,
    head_dim: usize,
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

    #[inline]
    pub fn key(&self, pos: usize, kv_head: usize) -> &[[u8; 2]] {
        &self.keys[pos * self.kv_dim + kv_head * self.head_dim..][..self.head_dim]
    }

    #[inline]
    pub fn value(&self, pos: usize, kv_head: usize) -> &[[u8; 2]] {
        &self.values[pos * self.kv_dim + kv_head * self.head_dim..][..self.head_dim]
    }
}

pub struct KvCache {
    pub layers: Vec<LayerCache>,
    pub n_ctx: usize,
}

impl KvCache {
    pub fn new(c: &Config, n_ctx: usize) -> KvCache {
        let kv_dim = c.kv_dim();
        let layers = (0..c.n_layers)
            .map(|_| LayerCache {
                kv_dim,
                head_dim: c.head_dim,
                keys: vec![[0; 2]; n_ctx * kv_dim],
                values: vec![[0; 2]; n_ctx * kv_dim],
            })
            .collect();
        KvCache { layers, n_ctx }
    }

    /// Bytes held by the cache.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| (l.keys.len() + l.values.len()) * 2).sum()
    }
}
