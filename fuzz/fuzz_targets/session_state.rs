#![no_main]
//! Any bytes as a saved conversation (`Session::save_state`'s format, what a caller hands back to
//! `restore_state`): refused with a reason, or tokens and keys and values that fit the context. The same
//! bytes go to an f16 cache, to two-tier caches of each cold type, and to a cache with a recurrent state (Qwen3.5's
//! delta-net layers), whose floats follow the rows.

use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::id::ModelId;
use ruvllm::kv::state::decode_into;
use ruvllm::kv::recurrent::RecurrentState;
use ruvllm::kv::{KvCache, KvCacheOptions, KvType};

/// The vocabulary the states are checked against: a saved token beyond it is refused.
const VOCAB: usize = 1000;

fuzz_target!(|data: &[u8]| {
    let caches = [
        KvCache::new(2, 4, 32),
        KvCache::with_options(2, 32, 64, KvCacheOptions { cold: KvType::Q8_0, hot_tokens: 32 }),
        KvCache::with_options(2, 32, 64, KvCacheOptions { cold: KvType::Q4_0, hot_tokens: 0 }),
        {
            let mut kv = KvCache::new(1, 4, 32);
            kv.recurrent = Some(RecurrentState::new(2, 3, 4));
            kv
        },
    ];
    for mut kv in caches {
        if let Ok(tokens) = decode_into(data, &ModelId([0; 32]), VOCAB, &mut kv) {
            assert!(tokens.len() <= kv.n_ctx && kv.len() == tokens.len() && kv.n_cold() <= kv.len());
            assert!(tokens.iter().all(|&t| (t as usize) < VOCAB));
            assert!(kv.recurrent.as_ref().is_none_or(|r| r.len == tokens.len()));
        }
    }
});
