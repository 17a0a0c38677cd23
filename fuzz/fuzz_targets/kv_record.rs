#![no_main]
//! Any bytes as persisted prefix-cache pages (what a store gives back after a restart): refused with a reason,
//! or a page whose tokens, key chain and KV are what the cache then restores. The input is up to three records,
//! each after its length (u32, little-endian), loaded in order after a prompt of the tokens they say they hold,
//! by an f16 cache and by caches of a two-tier cache's cold types.

use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::id::ModelId;
use ruvllm::kv::page::{decode, PageLayout};
use ruvllm::kv::{KvCache, KvCacheOptions, KvType};
use ruvllm::kv::{PrefixCache, PAGE_TOKENS};

const N_LAYERS: usize = 2;

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
    for (kv_type, kv_dim) in [(KvType::F16, 4), (KvType::Q8_0, 32), (KvType::Q4_0, 32)] {
        check(&records, &model, kv_type, kv_dim);
    }
});

fn check(records: &[&[u8]], model: &ModelId, kv_type: KvType, kv_dim: usize) {
    let layout = PageLayout { n_layers: N_LAYERS, kv_dim, page_tokens: PAGE_TOKENS, kv: kv_type };
    let mut prompt = Vec::new();
    for r in records {
        match decode(r, model, &layout) {
            Ok(page) => {
                assert_eq!(page.tokens.len(), PAGE_TOKENS);
                assert_eq!(page.kv.len(), layout.kv_bytes());
                assert_eq!(page.parent.next(&page.tokens), page.key);
                prompt.extend_from_slice(&page.tokens);
            }
            Err(e) => {
                let _ = e.to_string();
                prompt.extend_from_slice(&[0; PAGE_TOKENS]);
            }
        }
    }
    let cache = PrefixCache::new(*model, N_LAYERS, kv_dim, kv_type, 1 << 20);
    let loaded = cache.load(&prompt, records);
    assert!(loaded.tokens <= prompt.len() && loaded.tokens % PAGE_TOKENS == 0);
    let opts = KvCacheOptions { cold: kv_type, hot_tokens: 32 };
    let mut kv = KvCache::with_options(N_LAYERS, kv_dim, prompt.len().max(1), opts);
    assert_eq!(cache.restore(&prompt, 0, &mut kv), loaded.tokens);
}
