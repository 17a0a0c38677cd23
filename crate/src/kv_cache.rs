//! The KV cache: per layer, keys and values of every processed position, stored as f16 like
//! llama.cpp's default cache (half the memory of f32, and the same rounding as the reference).
//! A session's cache holds positions `0..n_ctx`; a window (`KvCache::window`) holds a range of
//! them only, the host's staging copy of part of the GPU's cache.

use std::ops::Range;

use crate::quant::act::f32_to_f16;

/// One layer's keys and values: a row of `kv_dim` (KV heads × head dim) per position held.
pub struct LayerCache {
    kv_dim: usize,
    /// The first position held (0 but in a window).
    first: usize,
    keys: Vec<[u8; 2]>,   // [positions × kv_dim] f16
    values: Vec<[u8; 2]>, // [positions × kv_dim] f16
}

impl LayerCache {
    /// Store rows of keys and values (each `kv_dim` wide) for positions `pos0..`.
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let start = (pos0 - self.first) * self.kv_dim;
        for (dst, &x) in self.keys[start..start + k.len()].iter_mut().zip(k) {
            *dst = f32_to_f16(x);
        }
        for (dst, &x) in self.values[start..start + v.len()].iter_mut().zip(v) {
            *dst = f32_to_f16(x);
        }
    }

    fn span(&self, positions: Range<usize>) -> Range<usize> {
        (positions.start - self.first) * self.kv_dim..(positions.end - self.first) * self.kv_dim
    }

    /// The keys and values of `positions`.
    pub fn rows(&self, positions: Range<usize>) -> (&[[u8; 2]], &[[u8; 2]]) {
        let rows = self.span(positions);
        (&self.keys[rows.clone()], &self.values[rows])
    }

    /// The keys and values of `positions`, to overwrite (the prefix cache restores rows this way).
    pub fn rows_mut(&mut self, positions: Range<usize>) -> (&mut [[u8; 2]], &mut [[u8; 2]]) {
        let rows = self.span(positions);
        (&mut self.keys[rows.clone()], &mut self.values[rows])
    }

    /// The keys of every position held, `kv_dim` a row.
    pub fn keys(&self) -> &[[u8; 2]] {
        &self.keys
    }

    /// The values of every position held, `kv_dim` a row.
    pub fn values(&self) -> &[[u8; 2]] {
        &self.values
    }
}

pub struct KvCache {
    pub layers: Vec<LayerCache>,
    /// One past the last position held.
    pub n_ctx: usize,
}

impl KvCache {
    /// A cache of `n_ctx` positions for `n_layers` layers, each position's keys (and values) `kv_dim` wide.
    pub fn new(n_layers: usize, kv_dim: usize, n_ctx: usize) -> KvCache {
        KvCache::window(n_layers, kv_dim, 0..n_ctx)
    }

    /// A cache of `positions` only: the host's copy of part of another cache (the GPU's), for the
    /// prefix cache's `restore` and `insert`, which address rows by position.
    pub fn window(n_layers: usize, kv_dim: usize, positions: Range<usize>) -> KvCache {
        let len = positions.len() * kv_dim;
        let first = positions.start;
        let layers = (0..n_layers)
            .map(|_| LayerCache { kv_dim, first, keys: vec![[0; 2]; len], values: vec![[0; 2]; len] })
            .collect();
        KvCache { layers, n_ctx: positions.end }
    }

    /// Width of one position's keys (or values) in every layer.
    pub fn kv_dim(&self) -> usize {
        self.layers.first().map_or(0, |l| l.kv_dim)
    }

    /// The positions held: `0..n_ctx`, or a window's.
    pub fn positions(&self) -> Range<usize> {
        self.layers.first().map_or(0, |l| l.first)..self.n_ctx
    }

    /// Bytes held by the cache.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| (l.keys.len() + l.values.len()) * 2).sum()
    }
}
