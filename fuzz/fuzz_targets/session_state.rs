#![no_main]
//! Any bytes as a saved conversation (`Session::save_state`'s format, what a caller hands back to
//! `restore_state`): refused with a reason, or tokens and keys and values that fit the context.

use libfuzzer_sys::fuzz_target;
use ruvllm::kv_cache::KvCache;
use ruvllm::memory::record::ModelId;
use ruvllm::memory::state::decode_into;

fuzz_target!(|data: &[u8]| {
    let mut kv = KvCache::new(2, 4, 32);
    if let Ok(tokens) = decode_into(data, &ModelId([0; 32]), &mut kv) {
        assert!(tokens.len() <= kv.n_ctx);
    }
});
