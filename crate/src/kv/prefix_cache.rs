//! The prefix cache: KV states of token prefixes that any session of a model can start from instead
//! of prefilling them again (a second turn of a chat, another chat with the same system prompt, a
//! regenerated answer).
//!
//! A radix tree (`radix.rs`) maps whole pages of `PAGE_TOKENS` tokens to pages of KV held here:
//! every layer's keys and values for those positions, in the session cache's row layout and its
//! persisted type (f16, or a two-tier cache's cold type: then a page takes that much less memory, and
//! so does its record). A session's cache is one contiguous array per layer and tier, which the
//! attention kernels read directly, so a cached prefix is copied into it (`restore`, as a forward pass
//! writes those positions: into the tier each is in) and a session's positions are copied out into new
//! pages (`insert`, a hot row quantized as it would be on leaving the hot window); `benches/` says what the copies cost against the prefill they save. Pages are
//! evicted least recently used first to stay within the byte budget; a page being copied is held by
//! a lock. One cache is shared by every session of a model through a mutex.
//!
//! Persistence is the caller's (the npm package's stores): with `set_persistent(true)` the cache lists
//! the pages it inserts, `take_unsaved` hands them over as records (`record.rs`), `missing` names the
//! stored pages a prompt could use next, and `load` takes them back, checked, into memory.

use std::ops::Range;
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use super::page::{self, PageKey, PageLayout, RecordError};
use super::radix::{PageId, RadixTree};
use crate::gguf::id::ModelId;
use crate::kv::cache::{KvCache, KvType};

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
    /// Tokens' KV read back from a store.
    pub loaded_tokens: u64,
}

/// What [`PrefixCache::load`] did with the records it was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Leading tokens of the prompt the cache now holds in memory.
    pub tokens: usize,
    /// Records refused (by index in the call), with why: the caller deletes them from its store.
    pub refused: Vec<(usize, RecordError)>,
}

/// A model's prefix cache (see the module doc). Thread-safe: sessions on several threads share it.
pub struct PrefixCache {
    inner: Mutex<Inner>,
}

struct Inner {
    tree: RadixTree,
    /// Page `id`'s keys and values: per layer, `PAGE_TOKENS` rows of keys then as many of values, as `kv`.
    pages: Vec<Box<[u8]>>,
    /// Page `id`'s name and tokens while the tree holds it (`None` while free).
    names: Vec<Option<PageName>>,
    free: Vec<PageId>,
    model: ModelId,
    n_layers: usize,
    kv_dim: usize,
    kv: KvType,
    budget_pages: usize,
    stats: PrefixCacheStats,
    /// Whether a store keeps pages: then `unsaved` lists the pages inserted since `take_unsaved`.
    persistent: bool,
    unsaved: Vec<PageId>,
}

/// Where a page sits in the chain of keys, and its tokens (what its record needs besides the KV).
#[derive(Clone, Copy)]
struct PageName {
    key: PageKey,
    parent: PageKey,
    tokens: [u32; PAGE_TOKENS],
}

impl PrefixCache {
    /// A cache for `model`'s KV of `n_layers` layers of `kv_dim` wide rows stored as `kv` (the sessions'
    /// persisted type), holding at most `budget_bytes`.
    pub fn new(model: ModelId, n_layers: usize, kv_dim: usize, kv: KvType, budget_bytes: usize) -> PrefixCache {
        let mut inner = Inner {
            tree: RadixTree::new(PAGE_TOKENS),
            pages: Vec::new(),
            names: Vec::new(),
            free: Vec::new(),
            model,
            n_layers,
            kv_dim,
            kv,
            budget_pages: 0,
            stats: PrefixCacheStats::default(),
            persistent: false,
            unsaved: Vec::new(),
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

    /// Bytes of one page's record in a store (`page::encode`).
    pub fn record_bytes(&self) -> usize {
        self.lock().layout().record_bytes().unwrap_or(usize::MAX)
    }

    /// How pages store keys and values.
    pub fn kv_type(&self) -> KvType {
        self.lock().kv
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
        c.names = Vec::new();
        c.free = Vec::new();
        c.unsaved = Vec::new();
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
    /// the session's cache already shares with them; how many leading tokens `kv` now holds. The
    /// rows written start at the page holding position `held`, so `kv` may be a window from there.
    pub fn restore(&self, tokens: &[u32], held: usize, kv: &mut KvCache) -> usize {
        let mut c = self.lock();
        let m = c.tree.match_prefix(tokens);
        if m.tokens <= held {
            return held;
        }
        // Pages from the one holding position `held` on: the rows before it are the session's own.
        let first = held / PAGE_TOKENS;
        kv.make_room(first * PAGE_TOKENS, m.tokens - first * PAGE_TOKENS);
        for (i, &page) in m.pages.iter().enumerate().skip(first) {
            c.copy_in(page, i * PAGE_TOKENS, kv);
        }
        c.stats.restored_tokens += (m.tokens - held) as u64;
        m.tokens
    }

    /// Copy the KV of `tokens` (held in `kv` at positions `0..tokens.len()`, or from the start of
    /// a window that begins with the first page not cached: see `uncached`) into the cache: its
    /// whole pages that are not cached yet, as far as the budget allows.
    pub fn insert(&self, tokens: &[u32], kv: &KvCache) {
        let mut c = self.lock();
        let full = tokens.len() / PAGE_TOKENS;
        let m = c.tree.match_prefix(&tokens[..full * PAGE_TOKENS]);
        let have = m.pages.len();
        // A window lacks the rows before it: the pages up to it must be cached (they may have been
        // evicted since the caller asked).
        if have == full || have * PAGE_TOKENS < kv.positions().start {
            return;
        }
        // The matched path stays while pages are evicted to make room for the new ones.
        c.tree.lock(m.node);
        let mut pages = m.pages.clone();
        let mut parent = c.key_after(&m.pages);
        for i in have..full {
            let Some(page) = c.alloc() else { break };
            c.copy_out(page, i * PAGE_TOKENS, kv);
            parent = c.name(page, parent, &tokens[i * PAGE_TOKENS..(i + 1) * PAGE_TOKENS]);
            if c.persistent {
                c.unsaved.push(page);
            }
            pages.push(page);
        }
        c.tree.unlock(m.node);
        let added = pages.len() - have;
        let inserted = c.tree.insert(&tokens[..pages.len() * PAGE_TOKENS], &pages);
        debug_assert_eq!(inserted.unused, m.pages, "the locked path was matched again");
        c.stats.inserted_tokens += (added * PAGE_TOKENS) as u64;
    }

    /// The positions of the whole pages of `tokens` the cache does not hold: the rows `insert` would
    /// copy (none when the budget holds no page). A caller whose KV is elsewhere (the GPU) copies only
    /// these to the host.
    pub fn uncached(&self, tokens: &[u32]) -> Range<usize> {
        let mut c = self.lock();
        let full = tokens.len() / PAGE_TOKENS * PAGE_TOKENS;
        if c.budget_pages == 0 {
            return full..full;
        }
        let m = c.tree.match_prefix(&tokens[..full]);
        m.pages.len() * PAGE_TOKENS..full
    }
}

impl PrefixCache {
    /// Whether a store keeps this cache's pages (`take_unsaved` then lists the new ones).
    pub fn set_persistent(&self, on: bool) {
        let mut c = self.lock();
        c.persistent = on;
        c.unsaved.clear();
    }

    /// The pages inserted since the last call, as records to store under their keys.
    pub fn take_unsaved(&self) -> Vec<(PageKey, Vec<u8>)> {
        let mut c = self.lock();
        let mut ids = std::mem::take(&mut c.unsaved);
        ids.sort_unstable();
        ids.dedup();
        let layout = c.layout();
        ids.into_iter()
            .filter_map(|id| {
                let name = c.names[id as usize]?; // evicted before it was saved
                Some((name.key, page::encode(&c.model, &layout, &name.parent, &name.tokens, &c.pages[id as usize])))
            })
            .collect()
    }

    /// The keys of every whole page of `tokens`, from the first: the records a store may hold of them. A
    /// store that drops records least recently used first marks a conversation's path with these, so that a
    /// page shared by many conversations (a system prompt) is not dropped before the pages that follow it.
    pub fn keys(&self, tokens: &[u32]) -> Vec<PageKey> {
        let mut key = {
            let c = self.lock();
            PageKey::root(&c.model, c.kv)
        };
        tokens
            .chunks_exact(PAGE_TOKENS)
            .map(|page| {
                key = key.next(page);
                key
            })
            .collect()
    }

    /// The keys of the whole pages of `tokens` after those in memory: the stored pages that could
    /// extend the match, in order. A caller reads them (up to the first it lacks) and passes them to `load`.
    pub fn missing(&self, tokens: &[u32]) -> Vec<PageKey> {
        let mut c = self.lock();
        let m = c.tree.match_prefix(tokens);
        let mut key = c.key_after(&m.pages);
        tokens[m.tokens..]
            .chunks_exact(PAGE_TOKENS)
            .map(|page| {
                key = key.next(page);
                key
            })
            .collect()
    }

    /// Take `records` (what a store holds under the first keys `missing(tokens)` gave, in order) into
    /// memory after the pages of `tokens` held already. Each is checked (format, checksum, model, and
    /// that it is the next page of `tokens`); the first refused one ends the load.
    pub fn load(&self, tokens: &[u32], records: &[&[u8]]) -> Loaded {
        let mut c = self.lock();
        let layout = c.layout();
        let m = c.tree.match_prefix(tokens);
        c.tree.lock(m.node);
        let mut pages = m.pages.clone();
        let mut parent = c.key_after(&m.pages);
        let mut refused = Vec::new();
        for (i, bytes) in records.iter().enumerate() {
            let at = pages.len() * PAGE_TOKENS;
            let Some(want) = tokens.get(at..at + PAGE_TOKENS) else { break };
            let r = match page::decode(bytes, &c.model, &layout) {
                Ok(r) if r.parent == parent && r.tokens == want => r,
                Ok(_) => {
                    refused.push((i, RecordError::Key));
                    break;
                }
                Err(e) => {
                    refused.push((i, e));
                    break;
                }
            };
            let Some(page) = c.alloc() else { break };
            c.pages[page as usize].copy_from_slice(&r.kv);
            parent = c.name(page, parent, want);
            pages.push(page);
        }
        c.tree.unlock(m.node);
        let added = pages.len() - m.pages.len();
        c.tree.insert(&tokens[..pages.len() * PAGE_TOKENS], &pages);
        c.stats.loaded_tokens += (added * PAGE_TOKENS) as u64;
        Loaded { tokens: pages.len() * PAGE_TOKENS, refused }
    }
}

impl Inner {
    fn layout(&self) -> PageLayout {
        PageLayout { n_layers: self.n_layers, kv_dim: self.kv_dim, page_tokens: PAGE_TOKENS, kv: self.kv }
    }

    /// The key of the page after `pages` (a matched path from the root).
    fn key_after(&self, pages: &[PageId]) -> PageKey {
        match pages.last() {
            Some(&p) => self.names[p as usize].expect("a page in the tree has a name").key,
            None => PageKey::root(&self.model, self.kv),
        }
    }

    /// Name `page` as the page of `tokens` after `parent`; its key.
    fn name(&mut self, page: PageId, parent: PageKey, tokens: &[u32]) -> PageKey {
        let key = parent.next(tokens);
        let tokens = tokens.try_into().expect("a whole page of tokens");
        self.names[page as usize] = Some(PageName { key, parent, tokens });
        key
    }

    /// Take back pages the tree evicted.
    fn release(&mut self, freed: Vec<PageId>) {
        self.stats.evicted_pages += freed.len() as u64;
        for &p in &freed {
            self.names[p as usize] = None;
        }
        self.free.extend(freed);
    }

    fn stats(&self) -> PrefixCacheStats {
        PrefixCacheStats {
            bytes: self.tree.page_count() * self.page_bytes(),
            pages: self.tree.page_count(),
            ..self.stats
        }
    }

    fn page_bytes(&self) -> usize {
        self.layout().kv_bytes()
    }

    fn set_budget(&mut self, bytes: usize) {
        self.stats.budget_bytes = bytes;
        self.budget_pages = bytes / self.page_bytes().max(1);
        let over = self.tree.page_count().saturating_sub(self.budget_pages);
        if over > 0 {
            let freed = self.tree.evict(over);
            self.release(freed);
        }
        // Free pages beyond the budget are given back to the allocator.
        while self.pages.len() > self.budget_pages {
            let Some(pos) = self.free.iter().position(|&p| p as usize == self.pages.len() - 1) else { break };
            self.free.swap_remove(pos);
            self.pages.pop();
            self.names.pop();
        }
    }

    /// A page to fill: a free one, a new one within the budget, or the least recently used one
    /// evicted. `None` when every page is held.
    fn alloc(&mut self) -> Option<PageId> {
        if let Some(page) = self.free.pop() {
            return Some(page);
        }
        if self.pages.len() < self.budget_pages {
            // Allocated fallibly: where memory runs out (wasm32), the cache stops growing instead of trapping
            // (so not `vec![0; len]`).
            let len = self.page_bytes();
            #[allow(clippy::slow_vector_initialization)]
            let mut page = Vec::new();
            if page.try_reserve_exact(len).is_ok()
                && self.pages.try_reserve(1).is_ok()
                && self.names.try_reserve(1).is_ok()
            {
                page.resize(len, 0);
                self.pages.push(page.into_boxed_slice());
                self.names.push(None);
                return Some((self.pages.len() - 1) as PageId);
            }
        }
        let freed = self.tree.evict(1);
        self.release(freed);
        self.free.pop()
    }

    /// Bytes of layer `l`'s rows in a page: (keys, values).
    fn span(&self, l: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let rows = PAGE_TOKENS * self.kv.row_bytes(self.kv_dim);
        let k = 2 * l * rows;
        (k..k + rows, k + rows..k + 2 * rows)
    }

    fn copy_in(&self, page: PageId, pos: usize, kv: &mut KvCache) {
        debug_assert_eq!(kv.options().persisted(), self.kv, "the model's sessions and its prefix cache agree");
        let data = &self.pages[page as usize];
        for (l, layer) in kv.layers.iter_mut().enumerate() {
            let (k, v) = self.span(l);
            layer.write(pos, self.kv, &data[k], &data[v]);
        }
    }

    fn copy_out(&mut self, page: PageId, pos: usize, kv: &KvCache) {
        debug_assert_eq!(kv.options().persisted(), self.kv, "the model's sessions and its prefix cache agree");
        let spans: Vec<_> = (0..self.n_layers).map(|l| self.span(l)).collect();
        let data = &mut self.pages[page as usize];
        for (layer, (k, v)) in kv.layers.iter().zip(spans) {
            let (keys, values) = data.split_at_mut(v.start);
            layer.read(pos..pos + PAGE_TOKENS, self.kv, &mut keys[k], &mut values[..v.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::cache::KvCacheOptions;
    use crate::test_support::{test, Rng};

    /// A cache of `opts`' format holding `n_ctx` positions of random rows, written as one batch.
    fn filled_as(opts: KvCacheOptions, n_layers: usize, kv_dim: usize, n_ctx: usize, rng: &mut Rng) -> KvCache {
        let mut kv = KvCache::with_options(n_layers, kv_dim, n_ctx, opts);
        kv.make_room(0, n_ctx);
        for layer in &mut kv.layers {
            let rows: Vec<f32> = (0..2 * n_ctx * kv_dim).map(|_| rng.uniform(-3.0, 3.0)).collect();
            let (k, v) = rows.split_at(n_ctx * kv_dim);
            layer.store(0, k, v);
        }
        kv
    }

    fn filled(n_layers: usize, kv_dim: usize, n_ctx: usize, rng: &mut Rng) -> KvCache {
        filled_as(KvCacheOptions::default(), n_layers, kv_dim, n_ctx, rng)
    }

    /// Every layer's rows `0..n`, in the cache's persisted type.
    fn rows(kv: &KvCache, n: usize) -> Vec<u8> {
        let (ty, rb) = (kv.options().persisted(), kv.options().persisted().row_bytes(kv.kv_dim()));
        let mut out = Vec::new();
        for layer in &kv.layers {
            let (mut k, mut v) = (vec![0; n * rb], vec![0; n * rb]);
            layer.read(0..n, ty, &mut k, &mut v);
            out.extend(k.into_iter().chain(v));
        }
        out
    }

    #[test]
    fn a_restored_prefix_holds_the_rows_that_were_inserted() {
        let mut rng = Rng::new(7);
        let (n_layers, kv_dim) = (3, 8);
        let cache = PrefixCache::new(ModelId::default(), n_layers, kv_dim, KvType::F16, 1 << 20);
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

    /// A window of positions (the host's copy of part of a GPU's cache) restores and inserts as the
    /// whole cache does; `uncached` names the positions an insert would copy.
    #[test]
    fn windows_restore_and_insert_the_positions_they_hold() {
        let mut rng = Rng::new(13);
        let (n_layers, kv_dim) = (2, 4);
        let cache = PrefixCache::new(ModelId::default(), n_layers, kv_dim, KvType::F16, 1 << 20);
        let tokens: Vec<u32> = (0..90).collect();
        let whole = filled(n_layers, kv_dim, 96, &mut rng);
        assert_eq!(cache.uncached(&tokens), 0..80);
        cache.insert(&tokens[..40], &whole);
        assert_eq!(cache.uncached(&tokens), 32..80);

        // The rest, from a window holding only the positions not cached.
        let mut window = KvCache::window(n_layers, kv_dim, 32..80);
        for (w, l) in window.layers.iter_mut().zip(&whole.layers) {
            let (k, v) = w.rows_mut(32..80);
            k.copy_from_slice(l.rows(32..80).0);
            v.copy_from_slice(l.rows(32..80).1);
        }
        cache.insert(&tokens, &window);
        assert_eq!(cache.uncached(&tokens), 80..80);
        assert_eq!(cache.stats().inserted_tokens, 80);

        // Restored into a window from the page holding position `held` (40: page 2, from 32) on.
        let mut out = KvCache::window(n_layers, kv_dim, 32..90);
        assert_eq!(cache.restore(&tokens, 40, &mut out), 80);
        for (o, w) in out.layers.iter().zip(&whole.layers) {
            assert_eq!(o.rows(32..80), w.rows(32..80));
        }

        // A window that starts past what the cache holds (its pages evicted since) inserts nothing.
        cache.clear();
        cache.insert(&tokens, &window);
        assert_eq!((cache.stats().pages, cache.uncached(&tokens)), (0, 0..80));
        // Nothing is uncached when the budget holds no page.
        cache.set_budget(0);
        assert!(cache.uncached(&tokens).is_empty());
    }

    #[test]
    fn pages_taken_as_records_load_into_another_cache_checked() {
        let mut rng = Rng::new(11);
        let (n_layers, kv_dim) = (2, 4);
        let model = ModelId([5; 32]);
        let a = PrefixCache::new(model, n_layers, kv_dim, KvType::F16, 1 << 20);
        a.set_persistent(true);
        let tokens: Vec<u32> = (0..50).collect();
        let kv = filled(n_layers, kv_dim, 64, &mut rng);
        a.insert(&tokens, &kv);
        let saved = a.take_unsaved();
        assert_eq!(saved.len(), 3);
        assert!(a.take_unsaved().is_empty(), "taken once");
        let store: std::collections::HashMap<PageKey, Vec<u8>> = saved.into_iter().collect();

        // A new cache of the same model (a restart) asks for the pages of a prompt and reads them back.
        let b = PrefixCache::new(model, n_layers, kv_dim, KvType::F16, 1 << 20);
        let prompt: Vec<u32> = (0..40).chain(900..920).collect();
        let keys = b.missing(&prompt);
        assert_eq!(keys.len(), 3);
        assert_eq!(b.keys(&prompt), keys, "nothing in memory: every page is missing");
        // The stored pages' keys, from any cache of the model: the prompt shares its first two pages with them.
        let all = b.keys(&tokens);
        assert!(all.len() == 3 && all.iter().all(|k| store.contains_key(k)) && all[..2] == keys[..2]);
        let found: Vec<&[u8]> = keys.iter().map_while(|k| store.get(k).map(Vec::as_slice)).collect();
        assert_eq!(found.len(), 2, "the third page of the prompt differs from the stored one");
        assert_eq!(b.load(&prompt, &found), Loaded { tokens: 32, refused: vec![] });
        let mut out = KvCache::new(n_layers, kv_dim, 64);
        assert_eq!(b.restore(&prompt, 0, &mut out), 32);
        assert_eq!(rows(&out, 32), rows(&kv, 32));
        assert!(b.missing(&prompt).len() == 1 && b.stats().loaded_tokens == 32);

        // A damaged record, another model's, or the wrong page is refused, and nothing after it is loaded.
        let c = PrefixCache::new(model, n_layers, kv_dim, KvType::F16, 1 << 20);
        let mut damaged = found[1].to_vec();
        damaged[200] ^= 1;
        let loaded = c.load(&prompt, &[found[0], &damaged]);
        assert_eq!((loaded.tokens, loaded.refused), (16, vec![(1, RecordError::Checksum)]));
        let other = PrefixCache::new(ModelId([6; 32]), n_layers, kv_dim, KvType::F16, 1 << 20);
        assert_eq!(other.load(&prompt, &found).refused, vec![(0, RecordError::Foreign)]);
        let d = PrefixCache::new(model, n_layers, kv_dim, KvType::F16, 1 << 20);
        assert_eq!(d.load(&prompt, &[found[1]]).refused, vec![(0, RecordError::Key)]);
    }

    #[test]
    fn the_budget_holds_and_least_recently_used_pages_go_first() {
        let mut rng = Rng::new(9);
        let (n_layers, kv_dim) = (2, 4);
        let page = n_layers * 2 * PAGE_TOKENS * kv_dim * 2;
        let cache = PrefixCache::new(ModelId::default(), n_layers, kv_dim, KvType::F16, 5 * page);
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

    /// A two-tier cache's pages are its cold type: a page takes that much less memory and its records are
    /// smaller. A restored prefix holds the inserted rows (each position in its tier: cold rows as they
    /// were, the hot window's as their cold values in f16), and a cache of another KV type refuses the
    /// records.
    #[test]
    fn tiered_pages_round_trip_in_the_cold_type() {
        for cold in [KvType::Q8_0, KvType::Q4_0] {
            let mut rng = Rng::new(cold.id() as u64 + 20);
            let (n_layers, kv_dim) = (2, 64);
            let opts = KvCacheOptions { cold, hot_tokens: 32 };
            let model = ModelId([5; 32]);
            let a = PrefixCache::new(model, n_layers, kv_dim, cold, 1 << 20);
            let f16 = PrefixCache::new(model, n_layers, kv_dim, KvType::F16, 1 << 20);
            assert!(a.page_bytes() * 3 < f16.page_bytes() * 2, "{cold:?}");
            a.set_persistent(true);
            let tokens: Vec<u32> = (0..100).collect();
            let kv = filled_as(opts, n_layers, kv_dim, 100, &mut rng);
            assert_eq!(kv.n_cold(), 64);
            a.insert(&tokens, &kv);
            assert_eq!(a.stats().bytes, 6 * a.page_bytes());

            // Restored into a fresh session: 96 positions, 64 of them cold (the rules of writing 96 positions).
            let mut out = KvCache::with_options(n_layers, kv_dim, 200, opts);
            assert_eq!(a.restore(&tokens, 0, &mut out), 96);
            assert_eq!((out.len(), out.n_cold()), (96, 64));
            assert_eq!(rows(&out, 96), rows(&kv, 96), "{cold:?}");
            // A session that holds a prefix takes the rest from the page holding its end on.
            let mut partial = KvCache::with_options(n_layers, kv_dim, 200, opts);
            assert_eq!(a.restore(&tokens[..40], 0, &mut partial), 32);
            assert_eq!(a.restore(&tokens, 32, &mut partial), 96);
            assert_eq!(rows(&partial, 96), rows(&kv, 96), "{cold:?}");

            // Records: the same rows in another process; refused by a cache of another KV type.
            let saved = a.take_unsaved();
            assert_eq!(saved.len(), 6);
            let records: Vec<&[u8]> = saved.iter().map(|(_, r)| r.as_slice()).collect();
            let b = PrefixCache::new(model, n_layers, kv_dim, cold, 1 << 20);
            assert_eq!(b.missing(&tokens), saved.iter().map(|(k, _)| *k).collect::<Vec<_>>());
            assert_eq!(b.load(&tokens, &records), Loaded { tokens: 96, refused: vec![] });
            let mut again = KvCache::with_options(n_layers, kv_dim, 200, opts);
            assert_eq!(b.restore(&tokens, 0, &mut again), 96);
            assert_eq!(rows(&again, 96), rows(&kv, 96));
            assert_ne!(f16.missing(&tokens)[0], saved[0].0, "another KV type's pages have other keys");
            assert_eq!(f16.load(&tokens, &records).refused, vec![(0, RecordError::Foreign)]);
            let other = if cold == KvType::Q8_0 { KvType::Q4_0 } else { KvType::Q8_0 };
            let c = PrefixCache::new(model, n_layers, kv_dim, other, 1 << 20);
            assert_eq!(c.load(&tokens, &records).refused, vec![(0, RecordError::Foreign)]);
        }
    }
}
