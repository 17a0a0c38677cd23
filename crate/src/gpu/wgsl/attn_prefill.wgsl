// Needs: the header (BIND_*, CallParams, the model's shape, WINDOW, ATTN_SCALE, BQ, BK, Q_TEAM, Q_CHUNKS), common.wgsl
// (NEG_BIG), attn_team_subgroup.wgsl or attn_team_shared.wgsl (team_sum4), attn_tile_f32.wgsl or
// attn_tile_f16.wgsl (put_chunk, key_at, value_at), attn_prefill_parts.wgsl (HD4, part_record, part_stats), the
// variant's WINDOWED.
// Prefill attention: causal, tiled, an online softmax per query. A workgroup takes BQ consecutive query
// tokens of one head and, where the call splits the keys (call.n_splits > 1), one split of them
// (call.split_keys positions, a multiple of BK). Each query is a team of Q_TEAM invocations; a member
// holds Q_CHUNKS four-dimension chunks of the query (in registers, pre-scaled) and of its output: chunks
// lane, lane + Q_TEAM, ..., so the team reads a key's or value's chunks from workgroup memory side by
// side (no bank conflicts) and the teams of a subgroup read the same ones (broadcasts). The workgroup
// walks its keys and values in tiles of BK positions, loaded into workgroup memory as f32 (attn_tile_f32.wgsl), or
// for heads of more than 384 as the cache's f16 pairs (attn_tile_f16.wgsl), unpacked where they are read (the next
// tile's f16 pairs are read into registers while the current one is used). Per four keys a member sums
// its chunks' products, team_sum4 gives the team the four scores, and each member updates the softmax
// state (the same in all of the team) and its own output chunks: no other barrier than the tile loads'.
// Unsplit, it writes the output; split, the unnormalized output and (max, sum) that attn_merge.wgsl
// merges.
// The windowed variant (WINDOWED: Gemma 3's sliding-window layers) lets a query at position p see
// keys p + 1 - WINDOW ..= p only, and starts at the tile of the block's first query's window.
// BQ * Q_TEAM = 256 invocations; 2 * BK * HEAD_DIM values of workgroup memory (12 KiB at most: with
// attn_team_shared.wgsl's 4 KiB, within WebGPU's default 16 KiB).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> att: array<vec4<f32>>;
@group(0) @binding(BIND_AUX) var<storage, read_write> parts: array<vec4<f32>>;
@group(0) @binding(BIND_IN0) var<storage, read> q_rot: array<vec4<f32>>;
@group(0) @binding(BIND_IN1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(BIND_IN2) var<storage, read> v_cache: array<u32>;

const SCALE: f32 = ATTN_SCALE;

// A tile is BK positions of HD4 chunks: at most 512, so each invocation loads chunks lid and lid + 256 of it.

// Chunk i of the keys and of the values of the tile at k0 as f16 pairs (key: xy, value: zw); zeros past
// the tile and the cache.
fn fetch_chunk(i: u32, k0: u32, kvh: u32) -> vec4<u32> {
    let j = i / HD4;
    if (i >= BK * HD4 || k0 + j >= call.kv_len) {
        return vec4<u32>(0u);
    }
    let w = (k0 + j) * (KV_ROW / 2u) + kvh * (HEAD_DIM / 2u) + 2u * (i % HD4);
    return vec4<u32>(k_cache[w], k_cache[w + 1u], v_cache[w], v_cache[w + 1u]);
}

// A member's products of query chunk q with the chunk at e of the tile's keys j .. j + 3 (e: key j's).
fn score4(q: vec4<f32>, e: u32) -> vec4<f32> {
    return vec4<f32>(dot(q, key_at(e)), dot(q, key_at(e + HD4)), dot(q, key_at(e + 2u * HD4)), dot(q, key_at(e + 3u * HD4)));
}

// The weighted sum with weights p of the chunk at e of the tile's values j .. j + 3 (e: value j's).
fn pv4(p: vec4<f32>, e: u32) -> vec4<f32> {
    return p.x * value_at(e) + p.y * value_at(e + HD4) + p.z * value_at(e + 2u * HD4) + p.w * value_at(e + 3u * HD4);
}

// The query chunk c of this member, pre-scaled (zeros for a query past the call's).
fn query_chunk(row: u32, lane: u32, c: u32, valid: bool) -> vec4<f32> {
    if (!valid || c >= Q_CHUNKS) {
        return vec4<f32>(0.0);
    }
    return q_rot[row + lane + c * Q_TEAM] * SCALE;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t0 = wg.x * BQ;
    let h = wg.y;
    let kvh = h / (N_HEADS / N_KV_HEADS);
    let lane = lid % Q_TEAM;
    let t = t0 + lid / Q_TEAM;
    let valid = t < call.n;
    let qpos = call.pos0 + t;
    let row = (t * Q_DIM + h * HEAD_DIM) / 4u; // the query's (and its output's) first chunk

    // The member's chunks in separate registers (a dynamically indexed local array can end up in slow
    // local memory); those past Q_CHUNKS are zeros and never used.
    let q0 = query_chunk(row, lane, 0u, valid);
    let q1 = query_chunk(row, lane, 1u, valid);
    let q2 = query_chunk(row, lane, 2u, valid);
    let q3 = query_chunk(row, lane, 3u, valid);
    let q4 = query_chunk(row, lane, 4u, valid);
    let q5 = query_chunk(row, lane, 5u, valid);
    let q6 = query_chunk(row, lane, 6u, valid);
    let q7 = query_chunk(row, lane, 7u, valid);
    var o0 = vec4<f32>(0.0);
    var o1 = vec4<f32>(0.0);
    var o2 = vec4<f32>(0.0);
    var o3 = vec4<f32>(0.0);
    var o4 = vec4<f32>(0.0);
    var o5 = vec4<f32>(0.0);
    var o6 = vec4<f32>(0.0);
    var o7 = vec4<f32>(0.0);

    // Keys up to the last query of this block (causal), from the tile where the first query's
    // window starts (0 without a window), and of those the ones in this workgroup's split.
    var k_end = call.pos0 + min(t0 + BQ, call.n);
    var k_start = 0u;
    if (WINDOWED) {
        let first = call.pos0 + t0 + 1u;
        k_start = (first - min(first, WINDOW)) / BK * BK;
    }
    k_start = max(k_start, wg.z * call.split_keys);
    k_end = min(k_end, (wg.z + 1u) * call.split_keys);
    var m = NEG_BIG;
    var l = 0.0;
    // The next tile's chunks, read while the current one is used (global memory latency overlaps the
    // arithmetic).
    var next_a = fetch_chunk(lid, k_start, kvh);
    var next_b = fetch_chunk(lid + 256u, k_start, kvh);
    for (var k0 = k_start; k0 < k_end; k0 += BK) {
        workgroupBarrier(); // the last tile is done with
        put_chunk(lid, next_a);
        put_chunk(lid + 256u, next_b);
        workgroupBarrier();
        if (k0 + BK < k_end) {
            next_a = fetch_chunk(lid, k0 + BK, kvh);
            next_b = fetch_chunk(lid + 256u, k0 + BK, kvh);
        }
        for (var j = 0u; j < BK; j += 4u) {
            let e = j * HD4 + lane; // chunk 0 of key j; chunk c is c * Q_TEAM further
            var part = score4(q0, e);
            if (Q_CHUNKS > 1u) { part += score4(q1, e + Q_TEAM); }
            if (Q_CHUNKS > 2u) { part += score4(q2, e + 2u * Q_TEAM); }
            if (Q_CHUNKS > 3u) { part += score4(q3, e + 3u * Q_TEAM); }
            if (Q_CHUNKS > 4u) { part += score4(q4, e + 4u * Q_TEAM); }
            if (Q_CHUNKS > 5u) { part += score4(q5, e + 5u * Q_TEAM); }
            if (Q_CHUNKS > 6u) { part += score4(q6, e + 6u * Q_TEAM); }
            if (Q_CHUNKS > 7u) { part += score4(q7, e + 7u * Q_TEAM); }
            let score = team_sum4(lid, part);
            let kpos = vec4<u32>(k0 + j) + vec4<u32>(0u, 1u, 2u, 3u);
            var seen = vec4<bool>(valid) & (kpos <= vec4<u32>(qpos));
            if (WINDOWED) {
                seen &= kpos + vec4<u32>(WINDOW) > vec4<u32>(qpos);
            }
            // The same for the whole team. A masked key's weight is exp(NEG_BIG - m) = 0: m is a seen
            // key's score once any is seen.
            if (any(seen)) {
                let s = select(vec4<f32>(NEG_BIG), score, seen);
                let m_new = max(m, max(max(s.x, s.y), max(s.z, s.w)));
                let alpha = exp(m - m_new);
                let p = exp(s - vec4<f32>(m_new));
                l = l * alpha + (p.x + p.y) + (p.z + p.w);
                m = m_new;
                o0 = o0 * alpha + pv4(p, e);
                if (Q_CHUNKS > 1u) { o1 = o1 * alpha + pv4(p, e + Q_TEAM); }
                if (Q_CHUNKS > 2u) { o2 = o2 * alpha + pv4(p, e + 2u * Q_TEAM); }
                if (Q_CHUNKS > 3u) { o3 = o3 * alpha + pv4(p, e + 3u * Q_TEAM); }
                if (Q_CHUNKS > 4u) { o4 = o4 * alpha + pv4(p, e + 4u * Q_TEAM); }
                if (Q_CHUNKS > 5u) { o5 = o5 * alpha + pv4(p, e + 5u * Q_TEAM); }
                if (Q_CHUNKS > 6u) { o6 = o6 * alpha + pv4(p, e + 6u * Q_TEAM); }
                if (Q_CHUNKS > 7u) { o7 = o7 * alpha + pv4(p, e + 7u * Q_TEAM); }
            }
        }
    }
    if (!valid) {
        return;
    }
    if (call.n_splits == 1u) {
        let b = row + lane;
        att[b] = o0 / l;
        if (Q_CHUNKS > 1u) { att[b + Q_TEAM] = o1 / l; }
        if (Q_CHUNKS > 2u) { att[b + 2u * Q_TEAM] = o2 / l; }
        if (Q_CHUNKS > 3u) { att[b + 3u * Q_TEAM] = o3 / l; }
        if (Q_CHUNKS > 4u) { att[b + 4u * Q_TEAM] = o4 / l; }
        if (Q_CHUNKS > 5u) { att[b + 5u * Q_TEAM] = o5 / l; }
        if (Q_CHUNKS > 6u) { att[b + 6u * Q_TEAM] = o6 / l; }
        if (Q_CHUNKS > 7u) { att[b + 7u * Q_TEAM] = o7 / l; }
        return;
    }
    // The split's partial (attn_merge.wgsl merges them): the unnormalized output and (max, sum); a
    // split with no key this query sees leaves zeros and (NEG_BIG, 0).
    let rec = part_record(wg.z, t);
    let b = rec + h * HD4 + lane;
    parts[b] = o0;
    if (Q_CHUNKS > 1u) { parts[b + Q_TEAM] = o1; }
    if (Q_CHUNKS > 2u) { parts[b + 2u * Q_TEAM] = o2; }
    if (Q_CHUNKS > 3u) { parts[b + 3u * Q_TEAM] = o3; }
    if (Q_CHUNKS > 4u) { parts[b + 4u * Q_TEAM] = o4; }
    if (Q_CHUNKS > 5u) { parts[b + 5u * Q_TEAM] = o5; }
    if (Q_CHUNKS > 6u) { parts[b + 6u * Q_TEAM] = o6; }
    if (Q_CHUNKS > 7u) { parts[b + 7u * Q_TEAM] = o7; }
    if (lane == 0u) {
        parts[part_stats(rec, h)] = vec4<f32>(m, l, 0.0, 0.0);
    }
}
