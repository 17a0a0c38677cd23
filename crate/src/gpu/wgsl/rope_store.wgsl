// Needs: the header (BIND_*, CallParams, Q_DIM, KV_DIM, KV_ROW, HEAD_DIM), rope.wgsl (qkv, QKV, rotated; this
// file defines its qkv_at), the variant's SPLITS and OWN_KV.
// RoPE on the new tokens' queries and keys, and the keys and values into the f16 KV cache (prefill;
// decode does this inside attn_decode). One invocation per pair of adjacent
// output values: q pairs, then k pairs, then v pairs. With SPLITS > 1 the qkv rows are the partial
// products of a split qkv matmul ([split][token][QKV]), summed here: the split's reduce step
// folded in. A layer that reads an earlier layer's keys and values (not OWN_KV: Gemma 4's last layers) rotates its
// queries only. The cache's rows are KV_ROW wide: a narrower layer's leave the rest as they are (zeros).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> q_rot: array<f32>;
@group(0) @binding(BIND_AUX) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(BIND_IN2) var<storage, read_write> v_cache: array<u32>;

// In split_reduce.wgsl's order: 0 + the partials in split order (no bias).
fn qkv_at(i: u32) -> f32 {
    var v = 0.0;
    for (var z = 0u; z < SPLITS; z++) {
        v += qkv[z * call.n * QKV + i];
    }
    return v;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let p = gid.x;
    if (t >= call.n || p >= select(Q_DIM / 2u, QKV / 2u, OWN_KV)) {
        return;
    }
    let pos = call.pos0 + t;
    let row = t * QKV;
    if (p < Q_DIM / 2u) {
        let e = 2u * p;
        let base = row + (e / HEAD_DIM) * HEAD_DIM;
        let d = e % HEAD_DIM;
        q_rot[t * Q_DIM + e] = rotated(base, d, pos);
        q_rot[t * Q_DIM + e + 1u] = rotated(base, d + 1u, pos);
    } else if (p < (Q_DIM + KV_DIM) / 2u) {
        let e = 2u * p - Q_DIM;
        let base = row + Q_DIM + (e / HEAD_DIM) * HEAD_DIM;
        let d = e % HEAD_DIM;
        let kv = vec2<f32>(rotated(base, d, pos), rotated(base, d + 1u, pos));
        k_cache[(pos * KV_ROW + e) / 2u] = pack2x16float(kv);
    } else {
        let e = 2u * p - Q_DIM - KV_DIM;
        let b = row + Q_DIM + KV_DIM + e;
        v_cache[(pos * KV_ROW + e) / 2u] = pack2x16float(vec2<f32>(qkv_at(b), qkv_at(b + 1u)));
    }
}
