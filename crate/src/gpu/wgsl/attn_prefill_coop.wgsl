// Needs: `enable f16; enable wgpu_cooperative_matrix;` (ops/shader.rs puts them first), the header
// (BIND_*, CallParams, the model's shape with HEAD_DIM = 64, WINDOW, ATTN_SCALE), common.wgsl (NEG_BIG),
// attn_prefill_parts.wgsl (HD4, part_record, part_stats), the variant's WINDOWED; subgroups of exactly
// 32 invocations (as matmul_coop.wgsl).
// Prefill attention on cooperative matrices (tensor cores): attn_prefill.wgsl's causal attention with an
// online softmax, its scores and weighted sums as 16x16x16 products of f16 values summing in f32.
//
// A workgroup takes CQ = 32 consecutive queries of one head (and, split, one split of the keys) and walks
// the keys in tiles of CK = 64 positions. Per tile, in four phases between barriers:
//   1. the tile's keys and values (the cache's f16 pairs, read into registers during the last tile) go to
//      workgroup memory as they are;
//   2. scores S = Q K^T: each of the eight subgroups one 16x16 block (16 queries x 16 keys), to ss;
//   3. softmax: eight invocations per query row, eight keys each, take the row's new maximum and sum
//      (subgroup shuffles), write the weights P = exp(s - max) as f16 to qp, and rescale the row's
//      output so far in os by exp(old max - new max);
//   4. O += P V: each subgroup one 16x16 block of the output (16 queries x 16 dimensions), read from
//      and written back to os.
// The output stays in workgroup memory (f32) because a cooperative matrix's rows cannot be scaled one
// by one. Only heads of 64 dimensions: then there are eight blocks of scores and of output for the eight
// subgroups, since cooperative operations must be reached by every subgroup alike (no subgroup may skip
// one). Rows are padded (HP halves, SP, OP floats: 16-byte multiples) so consecutive rows fall in
// other memory banks. 39.5 KiB of workgroup memory (device.rs COOP_ATTN_WORKGROUP_STORAGE).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> att: array<vec4<f32>>;
@group(0) @binding(BIND_AUX) var<storage, read_write> parts: array<vec4<f32>>;
@group(0) @binding(BIND_IN0) var<storage, read> q_rot: array<vec4<f32>>;
@group(0) @binding(BIND_IN1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(BIND_IN2) var<storage, read> v_cache: array<u32>;

const CQ: u32 = 32u;
const CK: u32 = 64u;
const HP: u32 = HEAD_DIM + 8u;
const SP: u32 = CK + 4u;
const OP: u32 = HEAD_DIM + 4u;
// A query row's invocations in phase 3 and the output: the keys and dimensions each one takes.
const ROW_LANES: u32 = 256u / CQ;
const KEYS_PER_LANE: u32 = CK / ROW_LANES;
const DIMS_PER_LANE: u32 = HEAD_DIM / ROW_LANES;
// A tile's keys (or values) in chunks of eight f16 (four words of the cache): two an invocation.
const CHUNKS_PER_ROW: u32 = HEAD_DIM / 8u;

// The queries [query][dimension], pre-scaled, until each subgroup holds its rows of them as matrices;
// then the weights P [query][key] (rows of HP halves either way: heads of 64, tiles of 64 keys).
var<workgroup> qp: array<f16, CQ * HP>;
// The tile's keys [key][dimension], then from VS its values [key][dimension].
var<workgroup> kv: array<f16, 2u * CK * HP>;
const VS: u32 = CK * HP;
var<workgroup> ss: array<f32, CQ * SP>; // [query][key]
var<workgroup> os: array<f32, CQ * OP>; // [query][dimension]

// Chunk i (of CK * CHUNKS_PER_ROW) of the keys and of the values of the tile at k0: four words each;
// zeros past the cache, so that a weight of 0 never meets a stale value.
struct KvChunk {
    k: vec4<u32>,
    v: vec4<u32>,
}

fn fetch(i: u32, k0: u32, kvh: u32) -> KvChunk {
    let j = i / CHUNKS_PER_ROW;
    if (k0 + j >= call.kv_len) {
        return KvChunk(vec4<u32>(0u), vec4<u32>(0u));
    }
    let w = (k0 + j) * (KV_ROW / 2u) + kvh * (HEAD_DIM / 2u) + 4u * (i % CHUNKS_PER_ROW);
    let k = vec4<u32>(k_cache[w], k_cache[w + 1u], k_cache[w + 2u], k_cache[w + 3u]);
    let v = vec4<u32>(v_cache[w], v_cache[w + 1u], v_cache[w + 2u], v_cache[w + 3u]);
    return KvChunk(k, v);
}

// Four words of f16 pairs at `at` of kv.
fn put_halves(at: u32, words: vec4<u32>) {
    let a = vec2<f16>(unpack2x16float(words.x));
    let b = vec2<f16>(unpack2x16float(words.y));
    let c = vec2<f16>(unpack2x16float(words.z));
    let d = vec2<f16>(unpack2x16float(words.w));
    kv[at] = a.x;
    kv[at + 1u] = a.y;
    kv[at + 2u] = b.x;
    kv[at + 3u] = b.y;
    kv[at + 4u] = c.x;
    kv[at + 5u] = c.y;
    kv[at + 6u] = d.x;
    kv[at + 7u] = d.y;
}

fn put(i: u32, c: KvChunk) {
    let at = (i / CHUNKS_PER_ROW) * HP + 8u * (i % CHUNKS_PER_ROW);
    put_halves(at, c.k);
    put_halves(VS + at, c.v);
}

// Whether the query at qpos (`valid`: within the call) sees the key at kpos: at or before it, before
// k_end (the split's end), and inside the window.
fn sees(valid: bool, qpos: u32, kpos: u32, k_end: u32) -> bool {
    var seen = valid && kpos <= qpos && kpos < k_end;
    if (WINDOWED) {
        seen = seen && kpos + WINDOW > qpos;
    }
    return seen;
}

// The largest and the sum of v over the ROW_LANES consecutive invocations of a query row.
fn row_max(v: f32) -> f32 {
    var m = v;
    for (var o = 1u; o < ROW_LANES; o <<= 1u) {
        m = max(m, subgroupShuffleXor(m, o));
    }
    return m;
}

fn row_sum(v: f32) -> f32 {
    var s = v;
    for (var o = 1u; o < ROW_LANES; o <<= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t0 = wg.x * CQ;
    let h = wg.y;
    let kvh = h / (N_HEADS / N_KV_HEADS);
    // Phase 3 and the output: query row r, its keys and dimensions from part * KEYS_PER_LANE and
    // part * DIMS_PER_LANE.
    let r = lid / ROW_LANES;
    let part = lid % ROW_LANES;
    let t = t0 + r;
    let valid = t < call.n;
    let qpos = call.pos0 + t;
    // Phases 2 and 4: subgroup sg's block of scores (queries qb.., keys kb..) and of output (queries
    // qb.., dimensions db..).
    let sg = lid / 32u;
    let qb = (sg / 4u) * 16u;
    let kb = (sg % 4u) * 16u;
    let db = (sg % 4u) * 16u;

    // The row's part of the query, pre-scaled and as f16, saturated as matmul_coop.wgsl's values (zeros
    // for a query past the call's), and of the output so far.
    let d0 = part * DIMS_PER_LANE;
    for (var d = 0u; d < DIMS_PER_LANE; d += 4u) {
        var q = vec4<f32>(0.0);
        if (valid) {
            q = q_rot[(t * Q_DIM + h * HEAD_DIM + d0 + d) / 4u] * ATTN_SCALE;
        }
        let q16 = vec4<f16>(clamp(q, vec4<f32>(-65504.0), vec4<f32>(65504.0)));
        let at = r * HP + d0 + d;
        qp[at] = q16.x;
        qp[at + 1u] = q16.y;
        qp[at + 2u] = q16.z;
        qp[at + 3u] = q16.w;
        let o = r * OP + d0 + d;
        os[o] = 0.0;
        os[o + 1u] = 0.0;
        os[o + 2u] = 0.0;
        os[o + 3u] = 0.0;
    }

    // Keys up to the block's last query (causal), from the first query's window (0 without one), of
    // this workgroup's split.
    var k_end = call.pos0 + min(t0 + CQ, call.n);
    var k_start = 0u;
    if (WINDOWED) {
        let first = call.pos0 + t0 + 1u;
        k_start = first - min(first, WINDOW);
    }
    let split_start = wg.z * call.split_keys;
    k_start = max(k_start, split_start);
    k_end = min(k_end, split_start + call.split_keys);

    // The subgroup's 16 queries as four 16x16 matrices (dimensions 0-15, ..., 48-63).
    workgroupBarrier();
    let qa0 = coopLoadT<coop_mat16x16<f16, A>>(&qp[qb * HP], HP);
    let qa1 = coopLoadT<coop_mat16x16<f16, A>>(&qp[qb * HP + 16u], HP);
    let qa2 = coopLoadT<coop_mat16x16<f16, A>>(&qp[qb * HP + 32u], HP);
    let qa3 = coopLoadT<coop_mat16x16<f16, A>>(&qp[qb * HP + 48u], HP);

    var m = NEG_BIG;
    var l = 0.0;
    var next_a = fetch(lid, k_start, kvh);
    var next_b = fetch(lid + 256u, k_start, kvh);
    for (var k0 = k_start; k0 < k_end; k0 += CK) {
        // 1. The tile, once the last one's phase 4 is done with kv and qp (and, the first time,
        // every subgroup has its queries from qp).
        workgroupBarrier();
        put(lid, next_a);
        put(lid + 256u, next_b);
        workgroupBarrier();
        if (k0 + CK < k_end) {
            next_a = fetch(lid, k0 + CK, kvh);
            next_b = fetch(lid + 256u, k0 + CK, kvh);
        }

        // 2. Scores.
        var s = coop_mat16x16<f32, C>();
        s = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&kv[kb * HP], HP), s);
        s = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&kv[kb * HP + 16u], HP), s);
        s = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&kv[kb * HP + 32u], HP), s);
        s = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&kv[kb * HP + 48u], HP), s);
        coopStoreT(s, &ss[qb * SP + kb], SP);
        workgroupBarrier();

        // 3. Softmax. A key is seen by a query at or after it, inside the split (and the window); a
        // row that sees none of the tile keeps its state (its weights are zeros).
        let j0 = part * KEYS_PER_LANE;
        var tile_max = NEG_BIG;
        for (var j = 0u; j < KEYS_PER_LANE; j++) {
            if (sees(valid, qpos, k0 + j0 + j, k_end)) {
                tile_max = max(tile_max, ss[r * SP + j0 + j]);
            }
        }
        let m_new = max(m, row_max(tile_max));
        let alpha = exp(m - m_new);
        var sum = 0.0;
        for (var j = 0u; j < KEYS_PER_LANE; j++) {
            var p = 0.0;
            if (sees(valid, qpos, k0 + j0 + j, k_end)) {
                p = exp(ss[r * SP + j0 + j] - m_new);
            }
            sum += p;
            qp[r * HP + j0 + j] = f16(p);
        }
        l = l * alpha + row_sum(sum);
        m = m_new;
        for (var d = 0u; d < DIMS_PER_LANE; d++) {
            os[r * OP + d0 + d] *= alpha;
        }
        workgroupBarrier();

        // 4. Output.
        var o = coopLoadT<coop_mat16x16<f32, C>>(&os[qb * OP + db], OP);
        for (var kk = 0u; kk < CK; kk += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&qp[qb * HP + kk], HP);
            let b = coopLoadT<coop_mat16x16<f16, B>>(&kv[VS + kk * HP + db], HP);
            o = coopMultiplyAdd(a, b, o);
        }
        coopStoreT(o, &os[qb * OP + db], OP);
    }
    workgroupBarrier();
    if (!valid) {
        return;
    }
    // Unsplit, the output; split, the unnormalized output and (max, sum) for attn_merge.wgsl (a split
    // with no key this query sees leaves zeros and (NEG_BIG, 0)).
    let o = r * OP + d0;
    let v0 = vec4<f32>(os[o], os[o + 1u], os[o + 2u], os[o + 3u]);
    let v1 = vec4<f32>(os[o + 4u], os[o + 5u], os[o + 6u], os[o + 7u]);
    if (call.n_splits == 1u) {
        let b = (t * Q_DIM + h * HEAD_DIM + d0) / 4u;
        att[b] = v0 / l;
        att[b + 1u] = v1 / l;
        return;
    }
    let b = part_record(wg.z, t) + h * HD4 + d0 / 4u;
    parts[b] = v0;
    parts[b + 1u] = v1;
    if (part == 0u) {
        parts[part_stats(part_record(wg.z, t), h)] = vec4<f32>(m, l, 0.0, 0.0);
    }
}
