//! The prefix cache: KV states of token prefixes that any session of a model can start from instead
//! of prefilling them again (a second turn of a chat, another chat with the same system prompt, a
//! regenerated answer).
//!
//! A radix tree (`radix.rs`) maps whole pages of `PAGE_TOKENS` tokens to pages of KV held here:
//! every layer's f16 keys and values for those positions, in the session cache's row layout. A
//! session's cache is one contiguous array per layer, which the attention kernels read directly, so a
//! cached prefix is copied into it (`restore`) and a session's positions are copied out into new pages
//! (`insert`); `benches/` says what the copies cost against the prefill they save. Pages are
//! evicted least recently used first to stay within the byte budget; a page being copied is held by
//! a lock. One cache is shared by every session of a model through a mutex.

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use super::radix::{PageId, RadixTree};
use crate::kv_cache::KvCache;

/// Tokens per page: a match, an insert and an eviction move whole pages.
pub const PAGE_TOKENS: usize = 16;

/// What the cache holds and has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub budget_bytes: usize,
    pub bytes: usize,
    pub pages: usize,
    /// Prompt tokens restored from the cache, over every request.
    pub restored_tokens: u64,
    /// Tokens' KV copied into the cache.
    pub inserted_tokens: u64,
    pub evicted_pages: u64,
}

/// A model's prefix cache (see the module doc). Thread-safe: sessions on several threads share it.
pub struct PrefixCache {
    inner: Mutex<Inner>,
}

struct Inner {
    tree: RadixTree,
    /// Page `id`'s keys and values: per layer, `PAGE_TOKENS` rows of keys then as many of values.
    pages: Vec<Box<[[u8; 2]]>>,
    free: Vec<PageId>,
    n_layers: usize,
    kv_dim: usize,
    budget_pages: usize,
    stats: PrefixCacheStats,
}

impl PrefixCache {
    /// A cache for KV of `n_layers` layers of `kv_dim` wide rows, holding at most `budget_bytes`.
    pub fn new(n_layers: usize, kv_dim: usize, budget_bytes: usize) -> PrefixCache {
        let mut inner = Inner {
            tree: RadixTree::new(PAGE_TOKENS),
            pages: Vec::new(),
            free: Vec::new(),
            n_layers,
            kv_dim,
            budget_pages: 0,
            stats: PrefixCacheStats::default(),
        };
        inner.set_budget(budget_bytes);
        PrefixCache { inner: Mutex::new(inner) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while copying leaves at worst a page with stale rows that no tree node points to.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes of one page.
    pub fn page_bytes(&self) -> usize {
        self.lock().page_bytes()
    }

    /// Hold at most `bytes` from now on, evicting what is over.
    pub fn set_budget(&self, bytes: usize) {
        self.lock().set_budget(bytes);
    }

    /// Forget everything (the budget stays).
    pub fn clear(&self) {
        let mut c = self.lock();
        let budget = c.stats.budget_bytes;
        c.tree = RadixTree::new(PAGE_TOKENS);
        c.pages = Vec::new();
        c.free = Vec::new();
        c.stats = PrefixCacheStats { budget_bytes: budget, ..PrefixCacheStats::default() };
    }

    pub fn stats(&self) -> PrefixCacheStats {
        self.lock().stats()
    }

    /// The stats if no session is using the cache at this moment: for a caller that must not block (a
    /// browser page's main thread cannot wait on a lock).
    pub fn try_stats(&self) -> Option<PrefixCacheStats> {
        match self.inner.try_lock() {
            Ok(c) => Some(c.stats()),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner().stats()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Copy the longest cached prefix of `tokens` into `kv` if it is longer than the `held` tokens
    /// the session's cache already shares with them; how many leading tokens `kv` now holds.
    pub fn restore(&self, tokens: &[u32], held: usize, kv: &mut KvCache) -> usize {
        let mut c = self.lock();
        let m = c.tree.match_prefix(tokens);
        if m.tokens <= held {
            return held;
        }
        // Pages from the one holding position `held` on: the rows before it are the session's own.
        for (i, &page) in m.pages.iter().enumerate().skip(held / PAGE_TOKENS) {
            c.copy_in(page, i * PAGE_TOKENS, kv);
        }
        c.stats.restored_tokens += (m.tokens - held) as u64;
        m.tokens
    }

    /// Copy the KV of `tokens` (held in `kv` at positions `0..tokens.len()`) into the cache: its
    /// whole pages that are not cached yet, as far as the budget allows.
    pub fn insert(&self, tokens: &[u32], kv: &KvCache) {
        let mut c = self.lock();
        let full = tokens.len() / PAGE_TOKENS;
        let m = c.tree.match_prefix(&tokens[..full * PAGE_TOKENS]);
        let have = m.pages.len();
        if have == full {
            return;
        }
        // The matched path stays while pages are evicted to make room for the new ones.
        c.tree.lock(m.node);
        let mut pages = m.pages.clone();
        for i in have..full {
            let Some(page) = c.alloc() else { break };
            c.copy_out(page, i * PAGE_TOKENS, kv);
            pages.push(page);
        }
        c.tree.unlock(m.node);
        let added = pages.len() - have;
        let inserted = c.tree.insert(&tokens[..pages.len() * PAGE_TOKENS], &pages);
        debug_assert_eq!(inserted.unused, m.pages, "the locked path was matched again");
        c.stats.inserted_tokens += (added * PAGE_TOKENS) as u64;
    }
}

impl Inner {
    fn stats(&self) -> PrefixCacheStats {
        PrefixCacheStats {
            bytes: self.tree.page_count() * self.page_bytes(),
            pages: self.tree.page_count(),
            ..self.stats
        }
    }

    fn page_bytes(&self) -> usize {
        self.n_layers * 2 * PAGE_TOKENS * self.kv_dim * 2
    }

    fn set_budget(&mut self, bytes: usize) {
        self.stats.budget_bytes = bytes;
        self.budget_pages = bytes / self.page_bytes().max(1);
        let over = self.tree.page_count().saturating_sub(self.budget_pages);
        if over > 0 {
            let freed = self.tree.evict(over);
            self.stats.evicted_pages += freed.len() as u64;
            self.free.extend(freed);
        }
        // Free pages beyond the budget are given back to the allocator.
        while self.pages.len() > self.budget_pages {
            let Some(pos) = self.free.iter().position(|&p| p as usize == self.pages.len() - 1) else { break };
            self.free.swap_remove(pos);
            self.pages.pop();
        }
    }

    /// A page to fill: a free one, a new one within the budget, or the least recently used one
    /// evicted. `None` when every page is held.
    fn alloc(&mut self) -> Option<PageId> {
        if let Some(page) = self.free.pop() {
            return Some(page);
        }
        if self.pages.len() < self.budget_pages {
            // Allocated fallibly: where memory runs out (wasm32), the cache stops growing instead of trapping.
            let len = self.n_layers * 2 * PAGE_TOKENS * self.kv_dim;
            let mut page = Vec::new();
            if page.try_reserve_exact(len).is_ok() && self.pages.try_reserve(1).is_ok() {
                page.resize(len, [0u8; 2]);
                self.pages.push(page.into_boxed_slice());
                return Some((self.pages.len() - 1) as PageId);
            }
        }
        let freed = self.tree.evict(1);
        self.stats.evicted_pages += freed.len() as u64;
        self.free.extend(freed);
        self.free.pop()
    }

    /// Rows `pos..pos + PAGE_TOKENS` of layer `l` in a page: (keys, values).
    fn span(&self, l: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let rows = PAGE_TOKENS * self.kv_dim;
        let k = 2 * l * rows;
        (k..k + rows, k + rows..k + 2 * rows)
    }

    fn copy_in(&self, page: PageId, pos: usize, kv: &mut KvCache) {
        let data = &self.pages[page as usize];
        for (l, layer) in kv.layers.iter_mut().enumerate() {
            let (k, v) = self.span(l);
            let (keys, values) = layer.rows_mut(pos..pos + PAGE_TOKENS);
            keys.copy_from_slice(&data[k]);
            values.copy_from_slice(&data[v]);
        }
    }

    fn copy_out(&mut self, page: PageId, pos: usize, kv: &KvCache) {
        let rows = PAGE_TOKENS * self.kv_dim;
        let spans: Vec<_> = (0..self.n_layers).map(|l| self.span(l)).collect();
        let data = &mut self.pages[page as usize];
        for (layer, (k, v)) in kv.layers.iter().zip(spans) {
            let from = pos * self.kv_dim..pos * self.kv_dim + rows;
            data[k].copy_from_slice(&layer.keys()[from.clone()]);
            data[v].copy_from_slice(&layer.values()[from]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    fn filled(n_layers: usize, kv_dim: usize, n_ctx: usize, rng: &mut Rng) -> KvCache {
        let mut kv = KvCache::new(n_layers, kv_dim, n_ctx);
        for layer in &mut kv.layers {
            let (k, v) = layer.rows_mut(0..n_ctx);
            for x in k.iter_mut().chain(v.iter_mut()) {
                *x = (rng.next_u64() as u16).to_le_bytes();
            }
        }
        kv
    }

    fn rows(kv: &KvCache, n: usize) -> Vec<[u8; 2]> {
        let kv_dim = kv.layers[0].keys().len() / kv.n_ctx;
        kv.layers.iter().flat_map(|l| [&l.keys()[..n * kv_dim], &l.values()[..n * kv_dim]]).flatten().copied().collect()
    }

    #[test]
    fn a_restored_prefix_holds_the_rows_that_were_inserted() {
        let mut rng = Rng::new(7);
        let (n_layers, kv_dim) = (3, 8);
        let cache = PrefixCache::new(n_layers, kv_dim, 1 << 20);
        let tokens: Vec<u32> = (0..70).collect();
        let a = filled(n_layers, kv_dim, 80, &mut rng);
        cache.insert(&tokens, &a);
        // Whole pages only: 64 of 70 tokens.
        assert_eq!(cache.stats().inserted_tokens, 64);
        let mut b = filled(n_layers, kv_dim, 80, &mut rng);
        // A prompt that goes on differently after 40 tokens gets the two pages before it.
        let other: Vec<u32> = (0..40).chain(1000..1030).collect();
        assert_eq!(cache.restore(&other, 0, &mut b), 32);
        assert_eq!(rows(&b, 32), rows(&a, 32));
        // Nothing is copied when the session already holds as much.
        let mut c = filled(n_layers, kv_dim, 80, &mut rng);
        let before = rows(&c, 80);
        assert_eq!(cache.restore(&tokens, 64, &mut c), 64);
        assert_eq!(rows(&c, 80), before);
        assert_eq!(cache.stats().restored_tokens, 32);
    }

    #[test]
    fn the_budget_holds_and_least_recently_used_pages_go_first() {
        let mut rng = Rng::new(9);
        let (n_layers, kv_dim) = (2, 4);
        let page = n_layers * 2 * PAGE_TOKENS * kv_dim * 2;
        let cache = PrefixCache::new(n_layers, kv_dim, 5 * page);
        let kv = filled(n_layers, kv_dim, 64, &mut rng);
        let a: Vec<u32> = (0..48).collect(); // 3 pages
        let b: Vec<u32> = (100..148).collect(); // 3 pages
        cache.insert(&a, &kv);
        cache.insert(&b, &kv);
        let s = cache.stats();
        assert_eq!((s.pages, s.evicted_pages), (5, 1));
        assert!(s.bytes <= s.budget_bytes);
        // `a` was used least recently: its last page went.
        let mut out = KvCache::new(n_layers, kv_dim, 64);
        assert_eq!(cache.restore(&a, 0, &mut out), 32);
        assert_eq!(cache.restore(&b, 0, &mut out), 48);
        // A smaller budget evicts at once; clear forgets everything.
        cache.set_budget(2 * page);
        assert_eq!(cache.stats().pages, 2);
        assert_eq!(cache.restore(&b, 0, &mut out), 32, "b was used last");
        cache.clear();
        assert_eq!((cache.stats().pages, cache.restore(&b, 0, &mut out)), (0, 0));
    }
}
