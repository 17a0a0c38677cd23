#![no_main]
//! Any bytes as persisted prefix-cache pages (what a store gives back after a restart): refused with a reason,
//! or a page whose tokens, key chain and KV are what the cache then restores. The input is up to three records,
//! each after its length (u32, little-endian), loaded in order after a prompt of the tokens they say they hold.

use libfuzzer_sys::fuzz_target;
use ruvllm::kv_cache::KvCache;
use ruvllm::memory::record::{decode, ModelId, PageLayout};
use ruvllm::memory::{PrefixCache, PAGE_TOKENS};

const N_LAYERS: usize = 2;
const KV_DIM: usize = 4;

fuzz_target!(|data: &[u8]| {
    let mut records = Vec::new();
    let mut rest = data;
    while records.len() < 3 && rest.len() >= 4 {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let body = &rest[4..];
        let take = len.min(body.len());
        records.push(&body[..take]);
        rest = &body[take..];
    }
    let model = ModelId([0; 32]);
    let layout = PageLayout { n_layers: N_LAYERS, kv_dim: KV_DIM, page_tokens: PAGE_TOKENS };
    let mut prompt = Vec::new();
    for r in &records {
        match decode(r, &model, &layout) {
            Ok(page) => {
                assert_eq!(page.tokens.len(), PAGE_TOKENS);
                assert_eq!(page.kv.len(), layout.values());
                assert_eq!(page.parent.next(&page.tokens), page.key);
                prompt.extend_from_slice(&page.tokens);
            }
            Err(e) => {
                let _ = e.to_string();
                prompt.extend_from_slice(&[0; PAGE_TOKENS]);
            }
        }
    }
    let cache = PrefixCache::new(model, N_LAYERS, KV_DIM, 1 << 20);
    let loaded = cache.load(&prompt, &records);
    assert!(loaded.tokens <= prompt.len() && loaded.tokens % PAGE_TOKENS == 0);
    let mut kv = KvCache::new(N_LAYERS, KV_DIM, prompt.len().max(1));
    assert_eq!(cache.restore(&prompt, 0, &mut kv), loaded.tokens);
});
