//! The KV cache: per layer, keys and values of every processed position.
//!
//! By default every position is stored as f16, like llama.cpp's default cache (half the memory of f32,
//! and the same rounding as the reference). With a quantized cold type ([`KvCacheOptions`]) the cache has
//! two tiers: the most recent positions stay in f16 (the hot window) and older ones are stored as Q8_0 or
//! Q4_0 blocks (the cold tier), 32 values a block along a position's row of `kv_dim` values. The cold tier
//! is allocated for every position that can ever be cold, the hot one only for its window, so the cache
//! takes that much less memory.
//!
//! The boundary `n_cold` is a multiple of 32 (attention's block of positions), so each block of attention
//! lies in one tier. Positions `0..n_cold` are cold; the hot tier holds positions `n_cold..len`. The rules:
//! - writing positions `pos..pos + n` first forgets every position from `pos` on, then moves whole blocks
//!   of 32 to the cold tier until at most `hot_tokens + 31` positions are hot ([`KvCache::make_room`]);
//! - forgetting positions (a session keeps the prefix it shares with a new prompt) keeps the cold ones it
//!   keeps cold, except those of a block cut short: they go back to the hot tier;
//! - a prefix restored from the prefix cache or a saved state comes in as cold as it can
//!   ([`KvCache::resize`]).
//!
//! A row is quantized from its f16 values, whether it moves from the hot tier or is written straight to
//! the cold one (a prefill batch longer than the hot window), so a position's cold row does not depend on
//! how it got there. Persisted pages and saved states keep the cold type (`memory/`).
//!
//! A session's cache holds positions `0..n_ctx`; a window ([`KvCache::window`]) holds a range of them only,
//! in f16: the host's staging copy of part of the GPU's cache (which is always f16: the GPU backend refuses
//! a cold tier), for the prefix cache's `restore` and `insert` and saved states, which address rows by
//! absolute position.
//!
//! # Design
//!
//! Per-layer keys and values, made from the shape (layers, KV heads × head dim, positions) and `KvCacheOptions`. By
//! default every position is f16, as llama.cpp's default cache (half of f32's memory, the reference's rounding). With a
//! quantized `cold` type it has two tiers (RuVector's "f16 tail + Q4 store"): the most recent `hot_tokens` to
//! `hot_tokens + 31` positions stay f16 and older ones are Q8_0 or Q4_0 blocks along each position's row, so the cold
//! tier needs heads of whole blocks of 32 (`Error::KvCache` otherwise). The cold tier is allocated for every position
//! that can ever be cold and the hot one for its window only, which is what makes the cache smaller. The boundary
//! `n_cold` moves in blocks of 32 positions (attention's block; two of the prefix cache's pages): `make_room` before a
//! forward call forgets the positions from its first on and moves the blocks the hot window no longer holds to the cold
//! tier; a rewind keeps the cold rows it keeps, and the block it cuts goes back to f16 (dequantized); `resize` takes a
//! restored prefix or saved state in. Every cold row is quantized from its f16 values, by the same quantizer whether it
//! leaves the hot tier or a long prefill batch writes it cold, so a row's bytes do not depend on the path. `LayerCache`
//! reads and writes rows in the persisted type (`read`, `write`: the cold type, or f16) for the prefix cache and saved
//! states. One place decides the format for a model's sessions and its prefix cache: `Model::with_kv_cache`, before any
//! session exists. The GPU backend keeps an f16 cache: the evaluator makes a two-tier model a GPU fault of its own
//! (`GpuFault::Unsupported`), an error under `Backend::WebGpu` and the CPU under `Backend::Auto`. `KvCache::window` holds
//! a range of positions only, always f16: the host's staging copy of part of the GPU's cache, whose rows are addressed
//! by position as in a whole cache (`read`, `write`, and the f16 `rows`, `rows_mut` the GPU's transfers use).

use std::ops::Range;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::kernels::attention::{ColdRows, KvRows};
use crate::kv::recurrent::RecurrentState;
use crate::quant::act::{f16_to_f32, f32_to_f16};
use crate::quant::{as_blocks, dequantize_row, quantize_row, GgmlType};

/// Positions per block of the cold tier's boundary (attention's block), and values per quantized block.
const BLOCK: usize = 32;

/// How keys and values are stored: f16, or a quantized cold type (ggml's block formats).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvType {
    F16,
    Q8_0,
    Q4_0,
}

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// `f16`, `q8_0`, `q4_0`: the names the CLI and the npm package take.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    pub fn ggml(self) -> GgmlType {
        match self {
            KvType::F16 => GgmlType::F16,
            KvType::Q8_0 => GgmlType::Q8_0,
            KvType::Q4_0 => GgmlType::Q4_0,
        }
    }

    /// The type's id in persisted records and saved states: ggml's type id.
    pub fn id(self) -> u32 {
        self.ggml() as u32
    }

    pub fn from_id(id: u32) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// Bytes of one position's keys (or values), `kv_dim` of them (a multiple of 32 for a quantized type).
    pub fn row_bytes(self, kv_dim: usize) -> usize {
        self.ggml().row_bytes(kv_dim)
    }

    /// Whether every value of `rows` (whole rows of this type, as records and saved states hold them) is finite.
    /// Rows read from outside must pass: one NaN or infinite key or value spreads through attention to every
    /// later token. f16 rows: each value's exponent; Q8_0 and Q4_0 blocks: their f16 scale, since the quants
    /// are small integers. One pass over the bytes, a mask and a compare per value, folded without an early exit
    /// inside each run of 128 values so that it vectorizes: several GB/s natively, below the cost of the
    /// CRC-32 beside it on wasm32 (which has no carry-less multiply for it).
    pub fn rows_finite(self, rows: &[u8]) -> bool {
        /// An f16 whose exponent bits are all set is an infinity or a NaN.
        fn not_finite(h: &[u8]) -> bool {
            u16::from_le_bytes([h[0], h[1]]) & 0x7c00 == 0x7c00
        }
        match self {
            KvType::F16 => rows.chunks(256).all(|run| !run.chunks_exact(2).fold(false, |bad, h| bad | not_finite(h))),
            _ => !rows.chunks_exact(self.ggml().block_bytes()).any(not_finite),
        }
    }
}

impl FromStr for KvType {
    type Err = Error;

    fn from_str(s: &str) -> Result<KvType> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::InvalidArgument(format!("KV cache type '{s}': expected one of f16, q8_0, q4_0")))
    }
}

/// Positions the hot tier keeps in f16 by default.
pub const DEFAULT_HOT_TOKENS: usize = 128;

/// The KV cache's format, for every session of a model and its prefix cache (`Model::with_kv_cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCacheOptions {
    /// The type of positions older than the hot window. `F16` (the default) keeps every position in f16:
    /// one tier.
    pub cold: KvType,
    /// With a quantized `cold`: the most recent positions kept in f16 (at least this many, at most 31
    /// more; a multiple of 32, 0 included).
    pub hot_tokens: usize,
}

impl Default for KvCacheOptions {
    fn default() -> Self {
        KvCacheOptions { cold: KvType::F16, hot_tokens: DEFAULT_HOT_TOKENS }
    }
}

impl KvCacheOptions {
    /// Two tiers: `cold` for positions older than the default hot window.
    pub fn tiered(cold: KvType) -> KvCacheOptions {
        KvCacheOptions { cold, ..KvCacheOptions::default() }
    }

    /// Whether older positions are quantized.
    pub fn is_tiered(&self) -> bool {
        self.cold != KvType::F16
    }

    /// The type of persisted pages and saved states: the cold one.
    pub fn persisted(&self) -> KvType {
        self.cold
    }

    /// Whether a model of heads `head_dim` wide can have this cache (a quantized row's blocks must not
    /// straddle heads), and the hot window is whole blocks.
    pub fn check(&self, head_dim: usize) -> Result<()> {
        if !self.is_tiered() {
            return Ok(());
        }
        if head_dim == 0 || !head_dim.is_multiple_of(BLOCK) {
            return Err(Error::KvCache(format!(
                "a {} cold tier needs a head size that is a multiple of {BLOCK}; this model's is {head_dim}",
                self.cold.name()
            )));
        }
        if !self.hot_tokens.is_multiple_of(BLOCK) {
            return Err(Error::KvCache(format!(
                "the hot window must be a multiple of {BLOCK} positions, got {}",
                self.hot_tokens
            )));
        }
        Ok(())
    }

    /// Positions the cold and hot tiers hold at most in a cache of `n_ctx` positions.
    fn capacities(&self, n_ctx: usize) -> (usize, usize) {
        if !self.is_tiered() {
            return (0, n_ctx);
        }
        let cold = floor_block(n_ctx.saturating_sub(self.hot_tokens));
        (cold, n_ctx.min(self.hot_tokens + BLOCK - 1))
    }

    /// Bytes of a cache of `n_ctx` positions, `n_layers` layers of `kv_dim` wide rows.
    pub fn bytes(&self, n_layers: usize, kv_dim: usize, n_ctx: usize) -> usize {
        let (cold, hot) = self.capacities(n_ctx);
        let per_layer = cold.saturating_mul(self.cold.row_bytes(kv_dim)).saturating_add(hot.saturating_mul(kv_dim * 2));
        n_layers.saturating_mul(2).saturating_mul(per_layer)
    }
}

/// The largest multiple of the block at most `n`.
fn floor_block(n: usize) -> usize {
    n / BLOCK * BLOCK
}

/// One layer's keys and values: a row of `kv_dim` (KV heads × head dim) per position held, positions
/// `0..n_cold` in the cold tier, the rest in the hot one (from `first` on in a window).
pub struct LayerCache {
    kv_dim: usize,
    /// The first position held: 0 but in a window (which has no cold tier).
    first: usize,
    /// The cold tier's type (`F16`: there is none).
    ty: KvType,
    /// Positions in the cold tier: the cache's boundary, the same in every layer.
    n_cold: usize,
    cold_keys: Vec<u8>,   // [cold capacity × row bytes of `ty`]
    cold_values: Vec<u8>, // [cold capacity × row bytes of `ty`]
    keys: Vec<[u8; 2]>,   // [hot capacity × kv_dim] f16, position hot_start() + i at row i
    values: Vec<[u8; 2]>, // [hot capacity × kv_dim] f16
}

impl LayerCache {
    fn cold_row_bytes(&self) -> usize {
        self.ty.row_bytes(self.kv_dim)
    }

    /// The first position of the hot tier: `n_cold`, or a window's first position.
    fn hot_start(&self) -> usize {
        self.n_cold.max(self.first)
    }

    /// The span of the hot tier's rows (in f16 values) holding `positions`, all hot.
    fn hot_span(&self, positions: Range<usize>) -> Range<usize> {
        let start = self.hot_start();
        assert!(positions.start >= start, "positions {positions:?} of a hot tier from {start}");
        (positions.start - start) * self.kv_dim..(positions.end - start) * self.kv_dim
    }

    /// Store rows of keys and values (each `kv_dim` wide) for positions `pos0..` (within the cache's
    /// length: `KvCache::make_room` first), each in the tier its position is in.
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        for (t, (k, v)) in k.chunks_exact(d).zip(v.chunks_exact(d)).enumerate() {
            let p = pos0 + t;
            if p < self.n_cold {
                let rb = self.cold_row_bytes();
                quantize_f32(self.ty, k, &mut self.cold_keys[p * rb..][..rb]);
                quantize_f32(self.ty, v, &mut self.cold_values[p * rb..][..rb]);
            } else {
                let at = (p - self.hot_start()) * d;
                self.keys[at..at + d].iter_mut().zip(k).for_each(|(h, &x)| *h = f32_to_f16(x));
                self.values[at..at + d].iter_mut().zip(v).for_each(|(h, &x)| *h = f32_to_f16(x));
            }
        }
    }

    /// The layer as attention reads it.
    pub fn view(&self) -> KvRows<'_> {
        let cold = ..self.n_cold * self.cold_row_bytes();
        let cold = match self.ty {
            KvType::F16 => ColdRows::None,
            KvType::Q8_0 => {
                ColdRows::Q8_0 { keys: as_blocks(&self.cold_keys[cold]), values: as_blocks(&self.cold_values[cold]) }
            }
            KvType::Q4_0 => {
                ColdRows::Q4_0 { keys: as_blocks(&self.cold_keys[cold]), values: as_blocks(&self.cold_values[cold]) }
            }
        };
        KvRows { n_cold: self.n_cold, cold, keys: &self.keys, values: &self.values }
    }

    /// The hot tier's keys, `kv_dim` a row from position `n_cold` (a window's first) on.
    pub fn keys(&self) -> &[[u8; 2]] {
        &self.keys
    }

    /// The hot tier's values, `kv_dim` a row from position `n_cold` (a window's first) on.
    pub fn values(&self) -> &[[u8; 2]] {
        &self.values
    }

    /// The f16 keys and values of `positions`, all in the hot tier (every position held by an f16 cache
    /// or window): the GPU's rows go up from here.
    pub fn rows(&self, positions: Range<usize>) -> (&[[u8; 2]], &[[u8; 2]]) {
        let rows = self.hot_span(positions);
        (&self.keys[rows.clone()], &self.values[rows])
    }

    /// The f16 keys and values of `positions`, all in the hot tier, to overwrite: the GPU's rows come
    /// down into a window this way.
    pub fn rows_mut(&mut self, positions: Range<usize>) -> (&mut [[u8; 2]], &mut [[u8; 2]]) {
        let rows = self.hot_span(positions);
        (&mut self.keys[rows.clone()], &mut self.values[rows])
    }

    /// The keys and values of `positions` as rows of `ty`, the cold type or f16, into `keys` and
    /// `values`: a cold row as it is when `ty` is the cold type, a hot one quantized (or as it is in f16).
    pub fn read(&self, positions: Range<usize>, ty: KvType, keys: &mut [u8], values: &mut [u8]) {
        assert!(ty == KvType::F16 || ty == self.ty, "rows of {ty:?} from a {:?} cache", self.ty);
        let rb = ty.row_bytes(self.kv_dim);
        for (i, p) in positions.enumerate() {
            let (k, v) = (&mut keys[i * rb..][..rb], &mut values[i * rb..][..rb]);
            if p < self.n_cold {
                let crb = self.cold_row_bytes();
                let (ck, cv) = (&self.cold_keys[p * crb..][..crb], &self.cold_values[p * crb..][..crb]);
                match ty == self.ty {
                    true => (k.copy_from_slice(ck), v.copy_from_slice(cv)),
                    false => (dequantize_f16(self.ty, ck, k), dequantize_f16(self.ty, cv, v)),
                };
            } else {
                let at = (p - self.hot_start()) * self.kv_dim;
                let (hk, hv) = (&self.keys[at..at + self.kv_dim], &self.values[at..at + self.kv_dim]);
                match ty {
                    KvType::F16 => (k.copy_from_slice(hk.as_flattened()), v.copy_from_slice(hv.as_flattened())),
                    _ => (quantize_f16(ty, hk.as_flattened(), k), quantize_f16(ty, hv.as_flattened(), v)),
                };
            }
        }
    }

    /// Write rows of `ty` (the cold type or f16), `keys` and `values`, at positions `pos..` (within the
    /// cache's length), each into the tier its position is in.
    pub fn write(&mut self, pos: usize, ty: KvType, keys: &[u8], values: &[u8]) {
        assert!(ty == KvType::F16 || ty == self.ty, "rows of {ty:?} into a {:?} cache", self.ty);
        let rb = ty.row_bytes(self.kv_dim);
        assert_eq!(keys.len(), values.len());
        for (i, (k, v)) in keys.chunks_exact(rb).zip(values.chunks_exact(rb)).enumerate() {
            let p = pos + i;
            if p < self.n_cold {
                let crb = self.cold_row_bytes();
                let (ck, cv) = (&mut self.cold_keys[p * crb..][..crb], &mut self.cold_values[p * crb..][..crb]);
                match ty == self.ty {
                    true => (ck.copy_from_slice(k), cv.copy_from_slice(v)),
                    false => (quantize_f16(self.ty, k, ck), quantize_f16(self.ty, v, cv)),
                };
            } else {
                let at = (p - self.hot_start()) * self.kv_dim;
                let (hk, hv) = (&mut self.keys[at..at + self.kv_dim], &mut self.values[at..at + self.kv_dim]);
                match ty {
                    KvType::F16 => (hk.as_flattened_mut().copy_from_slice(k), hv.as_flattened_mut().copy_from_slice(v)),
                    _ => (dequantize_f16(ty, k, hk.as_flattened_mut()), dequantize_f16(ty, v, hv.as_flattened_mut())),
                };
            }
        }
    }

    /// Move positions `n_cold..to` to the cold tier; the hot tier then starts at `to`. Positions
    /// `..filled` hold rows; those after are to be written.
    fn freeze(&mut self, to: usize, filled: usize) {
        let (d, rb) = (self.kv_dim, self.cold_row_bytes());
        for p in self.n_cold..to.min(filled) {
            let at = (p - self.n_cold) * d;
            quantize_f16(self.ty, self.keys[at..at + d].as_flattened(), &mut self.cold_keys[p * rb..][..rb]);
            quantize_f16(self.ty, self.values[at..at + d].as_flattened(), &mut self.cold_values[p * rb..][..rb]);
        }
        if filled > to {
            let rows = (to - self.n_cold) * d..(filled - self.n_cold) * d;
            self.keys.copy_within(rows.clone(), 0);
            self.values.copy_within(rows, 0);
        }
        self.n_cold = to;
    }

    /// Move positions `to..len` (all below `n_cold`) back to the hot tier, forgetting every hot one.
    fn thaw(&mut self, to: usize, len: usize) {
        let (d, rb) = (self.kv_dim, self.cold_row_bytes());
        for p in to..len {
            let at = (p - to) * d;
            dequantize_f16(self.ty, &self.cold_keys[p * rb..][..rb], self.keys[at..at + d].as_flattened_mut());
            dequantize_f16(self.ty, &self.cold_values[p * rb..][..rb], self.values[at..at + d].as_flattened_mut());
        }
        self.n_cold = to;
    }
}

/// `x` (f32, a row) rounded to f16 as the hot tier stores it, then quantized into `out` (a row of `ty`).
fn quantize_f32(ty: KvType, x: &[f32], out: &mut [u8]) {
    let bb = ty.ggml().block_bytes();
    for (x, out) in x.chunks_exact(BLOCK).zip(out.chunks_exact_mut(bb)) {
        let rounded: [f32; BLOCK] = std::array::from_fn(|i| f16_to_f32(f32_to_f16(x[i])));
        quantize_row(ty.ggml(), &rounded, out);
    }
}

/// A row of f16 (raw little-endian bytes) quantized into `out` (a row of `ty`).
fn quantize_f16(ty: KvType, h: &[u8], out: &mut [u8]) {
    let bb = ty.ggml().block_bytes();
    for (h, out) in h.chunks_exact(2 * BLOCK).zip(out.chunks_exact_mut(bb)) {
        let x: [f32; BLOCK] = std::array::from_fn(|i| f16_to_f32([h[2 * i], h[2 * i + 1]]));
        quantize_row(ty.ggml(), &x, out);
    }
}

/// A row of `ty` dequantized into f16 (raw little-endian bytes).
fn dequantize_f16(ty: KvType, row: &[u8], h: &mut [u8]) {
    let bb = ty.ggml().block_bytes();
    for (block, h) in row.chunks_exact(bb).zip(h.chunks_exact_mut(2 * BLOCK)) {
        let mut x = [0f32; BLOCK];
        dequantize_row(ty.ggml(), block, &mut x);
        for (h, &x) in h.chunks_exact_mut(2).zip(&x) {
            h.copy_from_slice(&f32_to_f16(x));
        }
    }
}

pub struct KvCache {
    pub layers: Vec<LayerCache>,
    /// The linear-attention layers' state (Qwen3.5), where the model has such layers: the conversation's memory
    /// besides the keys and values, which a forward call continues from (`len` must be its first position).
    pub recurrent: Option<RecurrentState>,
    /// One past the last position held.
    pub n_ctx: usize,
    options: KvCacheOptions,
    /// Positions held: those written since the cache was last cut shorter (`make_room`, `resize`).
    len: usize,
    /// Positions the cold tier can hold at most.
    cold_capacity: usize,
}

impl KvCache {
    /// An f16 cache of `n_ctx` positions for `n_layers` layers, each position's keys (and values) `kv_dim` wide.
    pub fn new(n_layers: usize, kv_dim: usize, n_ctx: usize) -> KvCache {
        KvCache::with_options(n_layers, kv_dim, n_ctx, KvCacheOptions::default())
    }

    /// A cache of `options`' format (checked by `KvCacheOptions::check`; `kv_dim` a multiple of 32 if tiered).
    pub fn with_options(n_layers: usize, kv_dim: usize, n_ctx: usize, options: KvCacheOptions) -> KvCache {
        assert!(!options.is_tiered() || kv_dim.is_multiple_of(BLOCK), "quantized rows are whole blocks");
        let (cold, hot) = options.capacities(n_ctx);
        let cold_bytes = cold * options.cold.row_bytes(kv_dim);
        let layers = (0..n_layers)
            .map(|_| LayerCache {
                kv_dim,
                first: 0,
                ty: options.cold,
                n_cold: 0,
                cold_keys: vec![0; cold_bytes],
                cold_values: vec![0; cold_bytes],
                keys: vec![[0; 2]; hot * kv_dim],
                values: vec![[0; 2]; hot * kv_dim],
            })
            .collect();
        KvCache { layers, recurrent: None, n_ctx, options, len: 0, cold_capacity: cold }
    }

    /// An f16 cache of `positions` only: the host's copy of part of another cache (the GPU's), for the
    /// prefix cache's `restore` and `insert`, which address rows by position.
    pub fn window(n_layers: usize, kv_dim: usize, positions: Range<usize>) -> KvCache {
        let mut kv = KvCache::new(n_layers, kv_dim, positions.len());
        for l in &mut kv.layers {
            l.first = positions.start;
        }
        kv.n_ctx = positions.end;
        kv.len = positions.start;
        kv
    }

    /// The positions held: `0..n_ctx`, or a window's.
    pub fn positions(&self) -> Range<usize> {
        self.layers.first().map_or(0, |l| l.first)..self.n_ctx
    }

    /// Width of one position's keys (or values) in every layer.
    pub fn kv_dim(&self) -> usize {
        self.layers.first().map_or(0, |l| l.kv_dim)
    }

    pub fn options(&self) -> KvCacheOptions {
        self.options
    }

    /// Positions held (see the module doc); the caller's token count may be lower.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions in the cold tier: `0..n_cold`.
    pub fn n_cold(&self) -> usize {
        self.layers.first().map_or(0, |l| l.n_cold)
    }

    /// Bytes held by the cache.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.cold_keys.len() + l.cold_values.len() + (l.keys.len() + l.values.len()) * 2).sum()
    }

    /// Positions `pos..pos + n` are about to be written: forget those from `pos` on, and move the blocks
    /// the hot window no longer holds to the cold tier.
    pub fn make_room(&mut self, pos: usize, n: usize) {
        self.resize(pos, 0);
        self.resize(pos + n, 0);
    }

    /// Hold `len` positions, with `cold` of them in the cold tier if the rules allow (clamped: at least
    /// the blocks the hot window cannot hold, at most the whole blocks of `len` and the cold capacity, and
    /// never fewer than the cold positions kept). Positions beyond those held before are to be written.
    pub fn resize(&mut self, len: usize, cold: usize) {
        assert!(len <= self.n_ctx, "{len} positions in a cache of {}", self.n_ctx);
        if len < self.len {
            // Kept cold rows stay cold, but a block cut short goes back to the hot tier.
            let n_cold = self.n_cold().min(floor_block(len));
            if n_cold < self.n_cold() {
                self.layers.iter_mut().for_each(|l| l.thaw(n_cold, len));
            }
            self.len = len;
        }
        if self.options.is_tiered() {
            let most = floor_block(len).min(self.cold_capacity);
            let least = floor_block(len.saturating_sub(self.options.hot_tokens));
            let to = cold.clamp(least, most).max(self.n_cold());
            if to > self.n_cold() {
                let filled = self.len;
                self.layers.iter_mut().for_each(|l| l.freeze(to, filled));
            }
        }
        self.len = len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    /// A tiered cache's rows read back as f16, against what was stored.
    fn rows_f16(kv: &KvCache, l: usize, n: usize) -> (Vec<u8>, Vec<u8>) {
        let rb = kv.kv_dim() * 2;
        let (mut k, mut v) = (vec![0; n * rb], vec![0; n * rb]);
        kv.layers[l].read(0..n, KvType::F16, &mut k, &mut v);
        (k, v)
    }

    fn f16_bytes(x: &[f32]) -> Vec<u8> {
        x.iter().flat_map(|&x| f32_to_f16(x)).collect()
    }

    /// What a position's row is once cold: its f16 values quantized, dequantized and rounded to f16.
    fn cold_f16(ty: KvType, x: &[f32]) -> Vec<u8> {
        let h = f16_bytes(x);
        let mut q = vec![0; ty.row_bytes(x.len())];
        quantize_f16(ty, &h, &mut q);
        let mut back = vec![0; h.len()];
        dequantize_f16(ty, &q, &mut back);
        back
    }

    #[test]
    fn options_are_checked_and_memory_shrinks() {
        let q8 = KvCacheOptions::tiered(KvType::Q8_0);
        assert!(q8.check(64).is_ok() && KvCacheOptions::default().check(20).is_ok());
        assert_eq!(q8.check(48).unwrap_err().code(), "E_KV_CACHE");
        let odd = KvCacheOptions { hot_tokens: 100, ..q8 };
        assert_eq!(odd.check(64).unwrap_err().code(), "E_KV_CACHE");
        // The default model's shape at 4096 positions: f16 rows of 384 bytes; Q8_0 rows of 6 blocks of 34.
        let (layers, kv_dim, n_ctx) = (30, 192, 4096);
        let f16 = KvCacheOptions::default().bytes(layers, kv_dim, n_ctx);
        assert_eq!(f16, layers * 2 * n_ctx * kv_dim * 2);
        let cold = 4096 - 128; // a multiple of 32
        assert_eq!(q8.bytes(layers, kv_dim, n_ctx), layers * 2 * (cold * 204 + 159 * 384));
        assert_eq!(KvCache::with_options(2, 64, 300, q8).bytes(), q8.bytes(2, 64, 300));
        assert!(f16 as f64 / q8.bytes(layers, kv_dim, n_ctx) as f64 >= 1.8);
        // A context shorter than the hot window has no cold tier.
        assert_eq!(q8.bytes(1, 64, 100), KvCacheOptions::default().bytes(1, 64, 100));
        assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
        assert!("q5_0".parse::<KvType>().is_err());
    }

    /// Decoding position by position moves whole blocks out of the hot window as it fills; every position
    /// reads back as stored (hot) or as its quantized f16 values (cold); rewinding keeps cold rows cold but
    /// a block cut short, which goes back to f16; the views attention gets agree.
    #[test]
    fn tiers_migrate_and_rewind() {
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            let mut rng = Rng::new(ty.id() as u64);
            let (kv_dim, n_ctx, hot) = (64, 400, 64);
            let opts = KvCacheOptions { cold: ty, hot_tokens: hot };
            let mut kv = KvCache::with_options(2, kv_dim, n_ctx, opts);
            let rows: Vec<Vec<f32>> = (0..n_ctx).map(|_| (0..kv_dim).map(|_| rng.normal()).collect()).collect();
            let expect = |kv: &KvCache, n: usize| -> Vec<u8> {
                (0..n)
                    .flat_map(|p| if p < kv.n_cold() { cold_f16(ty, &rows[p]) } else { f16_bytes(&rows[p]) })
                    .collect()
            };
            for (p, row) in rows.iter().enumerate().take(300) {
                kv.make_room(p, 1);
                let neg: Vec<f32> = row.iter().map(|x| -x).collect();
                kv.layers[0].store(p, row, &neg);
                kv.layers[1].store(p, &neg, row);
                let n = p + 1;
                // Between `hot` and `hot + 31` positions are hot; the boundary is a whole block.
                assert_eq!(kv.n_cold(), floor_block(n.saturating_sub(hot)), "{ty:?} at {n}");
                assert!(n - kv.n_cold() <= hot + 31 && kv.n_cold().is_multiple_of(32));
            }
            assert_eq!(kv.n_cold(), 224);
            let (k, v) = rows_f16(&kv, 0, 300);
            assert_eq!(k, expect(&kv, 300), "{ty:?} keys");
            let neg: Vec<Vec<f32>> = rows.iter().map(|r| r.iter().map(|x| -x).collect()).collect();
            let want_v: Vec<u8> =
                (0..300).flat_map(|p| if p < 224 { cold_f16(ty, &neg[p]) } else { f16_bytes(&neg[p]) }).collect();
            assert_eq!(v, want_v, "{ty:?} values");
            let view = kv.layers[1].view();
            assert_eq!(view.n_cold, 224);
            assert!(matches!(
                (ty, view.cold),
                (KvType::Q8_0, ColdRows::Q8_0 { .. }) | (KvType::Q4_0, ColdRows::Q4_0 { .. })
            ));

            // Rewind to 250: the cold positions stay cold (224 is below 250's last whole block).
            kv.make_room(250, 0);
            assert_eq!((kv.len(), kv.n_cold()), (250, 224));
            assert_eq!(rows_f16(&kv, 0, 250).0, expect(&kv, 250));
            // Rewind to 200, inside the cold tier: positions 192..200 go back to f16 (as their cold values).
            kv.make_room(200, 0);
            assert_eq!((kv.len(), kv.n_cold()), (200, 192));
            let want: Vec<u8> = (0..200).flat_map(|p| cold_f16(ty, &rows[p])).collect();
            assert_eq!(rows_f16(&kv, 0, 200).0, want, "{ty:?} after a rewind into the cold tier");
            // Going on from there writes hot rows again, and the window moves as before.
            for (p, row) in rows.iter().enumerate().take(320).skip(200) {
                kv.make_room(p, 1);
                kv.layers[0].store(p, row, row);
            }
            assert_eq!(kv.n_cold(), 256);
            let got = rows_f16(&kv, 0, 320).0;
            let want: Vec<u8> =
                (0..320).flat_map(|p| if p < 256 { cold_f16(ty, &rows[p]) } else { f16_bytes(&rows[p]) }).collect();
            assert_eq!(got, want, "{ty:?} after going on");

            // A batch longer than the window writes its early rows straight to the cold tier, as the same
            // bytes a row moved from the hot tier gets.
            let mut batch = KvCache::with_options(1, kv_dim, n_ctx, opts);
            batch.make_room(0, 320);
            let flat: Vec<f32> = rows[..320].concat();
            batch.layers[0].store(0, &flat, &flat);
            assert_eq!(batch.n_cold(), 256);
            assert_eq!(rows_f16(&batch, 0, 320).0, got);
            let rb = ty.row_bytes(kv_dim);
            let cold = |kv: &KvCache| {
                let mut k = vec![0; 256 * rb];
                kv.layers[0].read(0..256, ty, &mut k, &mut vec![0; 256 * rb]);
                k
            };
            assert_eq!(cold(&batch), cold(&kv), "{ty:?}: cold rows do not depend on the batch");
        }
    }

    /// Rows written in the cold type (a restored page or state) land in the tier of their position; read
    /// back in the cold type, they are the same bytes.
    #[test]
    fn rows_round_trip_in_the_persisted_type() {
        let mut rng = Rng::new(5);
        let (kv_dim, n_ctx) = (32, 200);
        let opts = KvCacheOptions { cold: KvType::Q8_0, hot_tokens: 32 };
        let rb = KvType::Q8_0.row_bytes(kv_dim);
        let mut rows = vec![0u8; 150 * rb];
        for block in rows.chunks_exact_mut(34) {
            rng.fill(&mut block[2..]);
            block[..2].copy_from_slice(&f32_to_f16(rng.sane()));
        }
        // As cold as allowed: 150 positions, 128 cold (the whole blocks), 22 hot.
        let mut kv = KvCache::with_options(1, kv_dim, n_ctx, opts);
        kv.resize(150, usize::MAX);
        assert_eq!(kv.n_cold(), 128);
        kv.layers[0].write(0, KvType::Q8_0, &rows, &rows);
        let mut back = vec![0u8; rows.len()];
        kv.layers[0].read(0..150, KvType::Q8_0, &mut back, &mut vec![0; rows.len()]);
        // Hot rows were dequantized to f16 and quantized again: the same blocks for these values.
        assert_eq!(back[..128 * rb], rows[..128 * rb]);
        let mut requantized = vec![0u8; 22 * rb];
        let mut h = vec![0u8; 22 * kv_dim * 2];
        dequantize_f16(KvType::Q8_0, &rows[128 * rb..], &mut h);
        quantize_f16(KvType::Q8_0, &h, &mut requantized);
        assert_eq!(back[128 * rb..], requantized[..]);
        // As few cold as allowed: all but the hot window's at most 63 positions.
        let mut few = KvCache::with_options(1, kv_dim, n_ctx, opts);
        few.resize(150, 0);
        assert_eq!(few.n_cold(), 96);
    }
}
