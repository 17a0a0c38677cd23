// Needs: the header (BIND_*, CallParams, the model's shape, WINDOW, ATTN_SCALE), common.wgsl (NEG_BIG), rope.wgsl (qkv,
// QKV, rotated; this file defines its qkv_at), attn_partials.wgsl (HD4, ATTN_STATS), the variant's WINDOWED and OWN_KV.
// Decode attention of the new token's queries over the KV cache, split over the sequence: the
// workgroup (head h, chunk c) attends to positions [c * chunk, (c + 1) * chunk) with an online
// softmax and writes its unnormalized output, max and sum (attn_partials.wgsl), which in_attn.wgsl
// merges. A windowed layer's variant (WINDOWED: Gemma 3's sliding-window layers) attends only to the
// last WINDOW positions: a chunk starts no earlier than the window, and a chunk wholly before it
// reads nothing and leaves max NEG_BIG, sum 0 (weight 0 in the merge). RoPE and the KV store are
// fused in: each workgroup rotates its query from the qkv row; the new token's key and value
// (rounded to f16, as the cache holds them) are taken from the qkv row too, and the last chunk's
// workgroup of each KV head's first query head stores them in the cache for later steps. Nothing else reads the new position from the cache here.
// A layer that reads an earlier layer's keys and values (not OWN_KV: Gemma 4's last layers) has no key or value of
// its own: it reads the new position from the cache, where that layer stored it in an earlier dispatch.
//
// The cache is read 16 bytes (8 f16 values) at a time, WG keys per block: scores take one key per
// invocation, its loads in flight together, into workgroup memory; values take one 8-value
// slice of a key per invocation, the block's keys dealt to GROUPS groups of invocations. Each
// group keeps its own running max and sum (no workgroup-wide reduction per block: two barriers
// per block) and loads its KEYS values of a block together; the groups merge at the end.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> part: array<vec4<f32>>;
@group(0) @binding(BIND_AUX) var<storage, read_write> k_cache: array<vec4<u32>>;
@group(0) @binding(BIND_IN2) var<storage, read_write> v_cache: array<vec4<u32>>;

// rope.wgsl's input: the qkv row as it is.
fn qkv_at(i: u32) -> f32 {
    return qkv[i];
}

const WG: u32 = 128u;
const SLICES: u32 = HEAD_DIM / 8u;    // 16-byte slices of a head's key or value
const ROW: u32 = KV_ROW / 8u;        // slices per cached position
const GROUPS: u32 = WG / SLICES;     // groups of invocations that split a block's keys for values
const KEYS: u32 = (WG + GROUPS - 1u) / GROUPS; // keys per group and block
const SCALE: f32 = ATTN_SCALE;
// The invocations that pack the new key and value, after the HD4 that rotate the query, where the workgroup has
// that many (HEAD_DIM <= 256); else (SPREAD false) the first SLICES pack both after the query.
const K_AT: u32 = max(32u, HD4);
const V_AT: u32 = K_AT + max(32u, SLICES);
const SPREAD: bool = V_AT + SLICES <= WG;

var<workgroup> qv: array<vec4<f32>, HEAD_DIM / 4u>;
var<workgroup> new_k: array<vec4<u32>, SLICES>; // the new token's key and value, f16 pairs
var<workgroup> new_v: array<vec4<u32>, SLICES>;
var<workgroup> s_sh: array<f32, WG>;
var<workgroup> o_sh: array<vec4<f32>, 2u * WG>;
var<workgroup> ml_sh: array<vec2<f32>, GROUPS>;
var<private> kv_head: u32;

// Eight f16 values (one 16-byte slice) as two vec4s.
fn unpack8(w: vec4<u32>) -> array<vec4<f32>, 2> {
    let a = unpack2x16float(w.x);
    let b = unpack2x16float(w.y);
    let c = unpack2x16float(w.z);
    let d = unpack2x16float(w.w);
    return array<vec4<f32>, 2>(vec4<f32>(a, b), vec4<f32>(c, d));
}

// Values first .. first + 8 of the head at qkv[head] (rotated for keys), as 4 f16 pairs.
fn pack8(head: u32, first: u32, pos: u32, rotate: bool) -> vec4<u32> {
    var w: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) {
        let e = first + 2u * i;
        if (rotate) {
            w[i] = pack2x16float(vec2<f32>(rotated(head, e, pos), rotated(head, e + 1u, pos)));
        } else {
            w[i] = pack2x16float(vec2<f32>(qkv[head + e], qkv[head + e + 1u]));
        }
    }
    return vec4<u32>(w[0], w[1], w[2], w[3]);
}

// The query's dot product with slice e of the key at position `key` (0 for e past the head: the
// load clamped). The new position takes the new key (select: its cache row is being written).
fn q_dot(key: u32, e: u32, pos: u32) -> f32 {
    let ec = min(e, SLICES - 1u);
    let k = unpack8(select(k_cache[key * ROW + kv_head * SLICES + ec], new_k[ec], OWN_KV && key == pos));
    return select(0.0, dot(qv[2u * ec], k[0]) + dot(qv[2u * ec + 1u], k[1]), e < SLICES);
}

struct Weighted {
    lo: vec4<f32>,
    hi: vec4<f32>,
    p: f32,
}

// Slice `slice` of the value of key k0 + j (j: its index in the block) times its softmax numerator
// p = exp(score - m); zero for keys outside the block or past the end, and for invocations past the
// last whole group (the load clamped to a cached key). The new position takes the new value.
fn weighted(k0: u32, j: u32, end: u32, pos: u32, slice: u32, m: f32, group: u32) -> Weighted {
    let jc = min(j, WG - 1u);
    let key = min(k0 + jc, end - 1u);
    let v = unpack8(select(v_cache[key * ROW + kv_head * SLICES + slice], new_v[slice], OWN_KV && key == pos));
    let p = select(0.0, exp(s_sh[jc] - m), j < WG && k0 + j < end && group < GROUPS);
    return Weighted(v[0] * p, v[1] * p, p);
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let c = wg.y;
    let group_size = N_HEADS / N_KV_HEADS;
    let kvh = h / group_size;
    kv_head = kvh;
    let pos = call.kv_len - 1u; // the new token
    let row = (call.n - 1u) * QKV;
    let kv_off = kvh * SLICES; // in slices
    let k_head = row + Q_DIM + kvh * HEAD_DIM;
    let v_head = row + Q_DIM + KV_DIM + kvh * HEAD_DIM;
    if (lid < HD4) {
        let e = 4u * lid;
        let qb = row + h * HEAD_DIM;
        qv[lid] = vec4<f32>(rotated(qb, e, pos), rotated(qb, e + 1u, pos), rotated(qb, e + 2u, pos),
                            rotated(qb, e + 3u, pos));
    } else if (SPREAD && OWN_KV && lid >= K_AT && lid < K_AT + SLICES) {
        new_k[lid - K_AT] = pack8(k_head, 8u * (lid - K_AT), pos, true);
    } else if (SPREAD && OWN_KV && lid >= V_AT && lid < V_AT + SLICES) {
        new_v[lid - V_AT] = pack8(v_head, 8u * (lid - V_AT), pos, false);
    }
    if (!SPREAD && OWN_KV && lid < SLICES) {
        new_k[lid] = pack8(k_head, 8u * lid, pos, true);
        new_v[lid] = pack8(v_head, 8u * lid, pos, false);
    }
    workgroupBarrier();
    if (OWN_KV && c == call.n_chunks - 1u && h % group_size == 0u && lid < SLICES) {
        k_cache[pos * ROW + kv_off + lid] = new_k[lid];
        v_cache[pos * ROW + kv_off + lid] = new_v[lid];
    }

    let end = min(c * call.chunk + call.chunk, call.kv_len);
    var start = c * call.chunk;
    if (WINDOWED) {
        start = max(start, pos + 1u - min(pos + 1u, WINDOW));
    }
    let slice = lid % SLICES;
    let group = lid / SLICES;
    var m = NEG_BIG;
    var l = 0.0;
    var o0 = vec4<f32>(0.0);
    var o1 = vec4<f32>(0.0);
    for (var k0 = start; k0 < end; k0 += WG) {
        // Scores, eight slices at a time in straight-line code. Keys past the end read the last
        // key (in bounds) and score NEG_BIG.
        let key = min(k0 + lid, end - 1u);
        var qk = 0.0;
        for (var e = 0u; e < SLICES; e += 8u) {
            qk += ((q_dot(key, e, pos) + q_dot(key, e + 1u, pos)) + (q_dot(key, e + 2u, pos) + q_dot(key, e + 3u, pos)))
                + ((q_dot(key, e + 4u, pos) + q_dot(key, e + 5u, pos)) + (q_dot(key, e + 6u, pos) + q_dot(key, e + 7u, pos)));
        }
        s_sh[lid] = select(NEG_BIG, qk * SCALE, k0 + lid < end);
        workgroupBarrier();
        // This group's keys group, group + GROUPS, ... of the block: their running max from the
        // scores in workgroup memory, then their values eight keys at a time in straight-line
        // code, the loads in flight together.
        var m_new = m;
        for (var i = 0u; i < KEYS; i++) {
            m_new = max(m_new, s_sh[min(group + i * GROUPS, WG - 1u)]);
        }
        let alpha = exp(m - m_new);
        o0 *= alpha;
        o1 *= alpha;
        l *= alpha;
        for (var i = 0u; i < KEYS; i += 8u) {
            let j = group + i * GROUPS;
            let w0 = weighted(k0, j, end, pos, slice, m_new, group);
            let w1 = weighted(k0, j + GROUPS, end, pos, slice, m_new, group);
            let w2 = weighted(k0, j + 2u * GROUPS, end, pos, slice, m_new, group);
            let w3 = weighted(k0, j + 3u * GROUPS, end, pos, slice, m_new, group);
            let w4 = weighted(k0, j + 4u * GROUPS, end, pos, slice, m_new, group);
            let w5 = weighted(k0, j + 5u * GROUPS, end, pos, slice, m_new, group);
            let w6 = weighted(k0, j + 6u * GROUPS, end, pos, slice, m_new, group);
            let w7 = weighted(k0, j + 7u * GROUPS, end, pos, slice, m_new, group);
            o0 += ((w0.lo + w1.lo) + (w2.lo + w3.lo)) + ((w4.lo + w5.lo) + (w6.lo + w7.lo));
            o1 += ((w0.hi + w1.hi) + (w2.hi + w3.hi)) + ((w4.hi + w5.hi) + (w6.hi + w7.hi));
            l += ((w0.p + w1.p) + (w2.p + w3.p)) + ((w4.p + w5.p) + (w6.p + w7.p));
        }
        m = m_new;
        workgroupBarrier(); // s_sh is the next block's
    }

    // Merge the groups: output values 4 * lid .. +4 are half (lid % 2) of slice lid / 2.
    o_sh[2u * lid] = o0;
    o_sh[2u * lid + 1u] = o1;
    if (slice == 0u && group < GROUPS) {
        ml_sh[group] = vec2<f32>(m, l);
    }
    workgroupBarrier();
    if (lid < HD4) {
        var mm = NEG_BIG;
        for (var g = 0u; g < GROUPS; g++) {
            mm = max(mm, ml_sh[g].x);
        }
        var sum = vec4<f32>(0.0);
        var ll = 0.0;
        for (var g = 0u; g < GROUPS; g++) {
            let w = exp(ml_sh[g].x - mm);
            sum += o_sh[2u * (g * SLICES + lid / 2u) + lid % 2u] * w;
            ll += ml_sh[g].y * w;
        }
        let nc = call.n_chunks;
        part[(h * nc + c) * HD4 + lid] = sum;
        if (lid == 0u) {
            part[ATTN_STATS + h * nc + c] = vec4<f32>(mm, ll, 0.0, 0.0);
        }
    }
}
