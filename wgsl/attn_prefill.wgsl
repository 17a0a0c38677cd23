// Needs: the header (BIND_*, CallParams, the model's shape, WINDOW, BQ, BK, BD), common.wgsl (NEG_BIG), the
// variant's WINDOWED.
// Prefill attention: causal, tiled. A workgroup takes BQ consecutive query tokens of one head and
// walks the cached keys in tiles of BK, sharing each key and value tile in workgroup memory, with
// an online softmax per query row. Invocation (qi, kj) scores query qi against key kj of a tile
// and owns output dimensions kj, kj + BK, ... of query qi (at most 8 per part of BD dimensions,
// BK = 16), kept in separate registers (a dynamically indexed local array can end up in slow local
// memory). Heads wider than 128 (Gemma 3's 256) go through workgroup memory in two parts of BD = 128
// dimensions each: the keys' parts one after the other into the score, then the values' parts.
// Tile rows are padded by one float so that the 16 keys of a score step fall in distinct banks.
// The next tile's keys and values are loaded into registers while the current one is used, so
// global memory latency overlaps the arithmetic.
// The windowed variant (WINDOWED: Gemma 3's sliding-window layers) lets a query at position p see
// keys p + 1 - WINDOW ..= p only, and starts at the tile of the block's first query's window.
// BQ, BK and BD come from the header (BQ * BK invocations; BQ * HEAD_DIM + BK * (BD + 1) +
// 2 * BQ * BK floats of workgroup memory).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> att: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> q_rot: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(BIND_IN2) var<storage, read> v_cache: array<u32>;

const SCALE: f32 = 1.0 / sqrt(f32(HEAD_DIM));
const PARTS: u32 = HEAD_DIM / BD; // parts of a head in workgroup memory: 1, or 2 for HEAD_DIM 256
const DIMS: u32 = BD / BK; // output dimensions per invocation and part
const STRIDE: u32 = BD + 1u; // floats per tile row

var<workgroup> qs: array<f32, BQ * HEAD_DIM>;
var<workgroup> kv: array<f32, BK * STRIDE>;
var<workgroup> s_sh: array<f32, BQ * BK>;
var<workgroup> p_sh: array<f32, BQ * BK>;

// f16 pairs of a tile (BK keys of HEAD_DIM / 2 pairs) each invocation loads.
const PER: u32 = (BK * HEAD_DIM / 2u + BQ * BK - 1u) / (BQ * BK);

// One tile's keys and values for this invocation: pairs lid, lid + BQ * BK, ... of the tile.
struct TileRegs {
    k: array<u32, PER>,
    v: array<u32, PER>,
}

// Keys and values of positions k0 .. k0 + BK of kv head kvh (zeros past the cache).
fn fetch_tile(lid: u32, k0: u32, kvh: u32) -> TileRegs {
    var r: TileRegs;
    for (var n = 0u; n < PER; n++) {
        let i = lid + n * BQ * BK;
        let j = i / (HEAD_DIM / 2u);
        r.k[n] = 0u;
        r.v[n] = 0u;
        if (i < BK * HEAD_DIM / 2u && k0 + j < call.kv_len) {
            let w = (k0 + j) * (KV_DIM / 2u) + kvh * (HEAD_DIM / 2u) + i % (HEAD_DIM / 2u);
            r.k[n] = k_cache[w];
            r.v[n] = v_cache[w];
        }
    }
    return r;
}

// Dimensions part * BD .. (part + 1) * BD of the keys (or values) of fetched tile registers into kv.
fn put_tile(lid: u32, r: TileRegs, values: bool, part: u32) {
    for (var n = 0u; n < PER; n++) {
        let i = lid + n * BQ * BK;
        let e = 2u * (i % (HEAD_DIM / 2u)); // the pair's first dimension
        if (i < BK * HEAD_DIM / 2u && (PARTS == 1u || e / BD == part)) {
            let x = unpack2x16float(select(r.k[n], r.v[n], values));
            let b = (i / (HEAD_DIM / 2u)) * STRIDE + e - part * BD;
            kv[b] = x.x;
            kv[b + 1u] = x.y;
        }
    }
}

// Output dimension d of query qi over the value tile: sum over keys j of p[qi][j] * v[j][d]
// (four independent partial sums: BK is a multiple of 4).
fn pv(qi: u32, d: u32) -> f32 {
    var acc = vec4<f32>(0.0);
    for (var j = 0u; j < BK; j += 4u) {
        let p = vec4<f32>(p_sh[qi * BK + j], p_sh[qi * BK + j + 1u], p_sh[qi * BK + j + 2u], p_sh[qi * BK + j + 3u]);
        let v = vec4<f32>(kv[j * STRIDE + d], kv[(j + 1u) * STRIDE + d], kv[(j + 2u) * STRIDE + d],
                          kv[(j + 3u) * STRIDE + d]);
        acc += p * v;
    }
    return (acc.x + acc.y) + (acc.z + acc.w);
}

@compute @workgroup_size(BQ * BK)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t0 = wg.x * BQ;
    let h = wg.y;
    let kvh = h / (N_HEADS / N_KV_HEADS);
    let qi = lid / BK;
    let kj = lid % BK;
    let t = t0 + qi;
    let valid = t < call.n;
    let qpos = call.pos0 + t;

    for (var i = lid; i < BQ * HEAD_DIM; i += BQ * BK) {
        let tt = t0 + i / HEAD_DIM;
        var q = 0.0;
        if (tt < call.n) {
            q = q_rot[tt * Q_DIM + h * HEAD_DIM + i % HEAD_DIM];
        }
        qs[i] = q;
    }

    // Keys up to the last query of this block (causal), from the tile where the first query's
    // window starts (0 without a window).
    let k_end = call.pos0 + min(t0 + BQ, call.n);
    var k_start = 0u;
    if (WINDOWED) {
        let first = call.pos0 + t0 + 1u;
        k_start = (first - min(first, WINDOW)) / BK * BK;
    }
    var m = NEG_BIG;
    var l = 0.0;
    var o0 = 0.0;
    var o1 = 0.0;
    var o2 = 0.0;
    var o3 = 0.0;
    var o4 = 0.0;
    var o5 = 0.0;
    var o6 = 0.0;
    var o7 = 0.0;
    // The second part's dimensions (PARTS == 2).
    var o8 = 0.0;
    var o9 = 0.0;
    var o10 = 0.0;
    var o11 = 0.0;
    var o12 = 0.0;
    var o13 = 0.0;
    var o14 = 0.0;
    var o15 = 0.0;
    var next = fetch_tile(lid, k_start, kvh);
    for (var k0 = k_start; k0 < k_end; k0 += BK) {
        let cur = next;
        workgroupBarrier();
        put_tile(lid, cur, false, 0u);
        workgroupBarrier();
        if (k0 + BK < k_end) {
            next = fetch_tile(lid, k0 + BK, kvh);
        }
        // A masked score stays NEG_BIG: a row whose keys so far are all masked gets weights
        // exp(0) = 1 for them, which the first seen key's alpha = exp(NEG_BIG - m) = 0 wipes out (its
        // own position is always seen).
        let seen = valid && k0 + kj <= qpos && (!WINDOWED || k0 + kj + WINDOW > qpos);
        // Four independent partial sums (BD is a multiple of 16).
        var qk = vec4<f32>(0.0);
        if (seen) {
            for (var d = 0u; d < BD; d += 4u) {
                let q = vec4<f32>(qs[qi * HEAD_DIM + d], qs[qi * HEAD_DIM + d + 1u], qs[qi * HEAD_DIM + d + 2u],
                                  qs[qi * HEAD_DIM + d + 3u]);
                let b = kj * STRIDE + d;
                qk += q * vec4<f32>(kv[b], kv[b + 1u], kv[b + 2u], kv[b + 3u]);
            }
        }
        if (PARTS > 1u) {
            workgroupBarrier();
            put_tile(lid, cur, false, 1u);
            workgroupBarrier();
            if (seen) {
                for (var d = 0u; d < BD; d += 4u) {
                    let a = qi * HEAD_DIM + BD + d;
                    let q = vec4<f32>(qs[a], qs[a + 1u], qs[a + 2u], qs[a + 3u]);
                    let b = kj * STRIDE + d;
                    qk += q * vec4<f32>(kv[b], kv[b + 1u], kv[b + 2u], kv[b + 3u]);
                }
            }
        }
        var s = NEG_BIG;
        if (seen) {
            s = ((qk.x + qk.y) + (qk.z + qk.w)) * SCALE;
        }
        s_sh[lid] = s;
        workgroupBarrier();
        var tile_max = NEG_BIG;
        for (var j = 0u; j < BK; j++) {
            tile_max = max(tile_max, s_sh[qi * BK + j]);
        }
        let m_new = max(m, tile_max);
        p_sh[lid] = exp(s - m_new);
        let alpha = exp(m - m_new);
        m = m_new;
        workgroupBarrier();
        var p_sum = 0.0;
        for (var j = 0u; j < BK; j++) {
            p_sum += p_sh[qi * BK + j];
        }
        l = l * alpha + p_sum;
        put_tile(lid, cur, true, 0u);
        workgroupBarrier();
        o0 = o0 * alpha + pv(qi, kj);
        if (DIMS > 1u) { o1 = o1 * alpha + pv(qi, kj + BK); }
        if (DIMS > 2u) { o2 = o2 * alpha + pv(qi, kj + 2u * BK); }
        if (DIMS > 3u) { o3 = o3 * alpha + pv(qi, kj + 3u * BK); }
        if (DIMS > 4u) { o4 = o4 * alpha + pv(qi, kj + 4u * BK); }
        if (DIMS > 5u) { o5 = o5 * alpha + pv(qi, kj + 5u * BK); }
        if (DIMS > 6u) { o6 = o6 * alpha + pv(qi, kj + 6u * BK); }
        if (DIMS > 7u) { o7 = o7 * alpha + pv(qi, kj + 7u * BK); }
        if (PARTS > 1u) {
            workgroupBarrier();
            put_tile(lid, cur, true, 1u);
            workgroupBarrier();
            o8 = o8 * alpha + pv(qi, kj);
            if (DIMS > 1u) { o9 = o9 * alpha + pv(qi, kj + BK); }
            if (DIMS > 2u) { o10 = o10 * alpha + pv(qi, kj + 2u * BK); }
            if (DIMS > 3u) { o11 = o11 * alpha + pv(qi, kj + 3u * BK); }
            if (DIMS > 4u) { o12 = o12 * alpha + pv(qi, kj + 4u * BK); }
            if (DIMS > 5u) { o13 = o13 * alpha + pv(qi, kj + 5u * BK); }
            if (DIMS > 6u) { o14 = o14 * alpha + pv(qi, kj + 6u * BK); }
            if (DIMS > 7u) { o15 = o15 * alpha + pv(qi, kj + 7u * BK); }
        }
    }
    if (valid) {
        let b = t * Q_DIM + h * HEAD_DIM + kj;
        att[b] = o0 / l;
        if (DIMS > 1u) { att[b + BK] = o1 / l; }
        if (DIMS > 2u) { att[b + 2u * BK] = o2 / l; }
        if (DIMS > 3u) { att[b + 3u * BK] = o3 / l; }
        if (DIMS > 4u) { att[b + 4u * BK] = o4 / l; }
        if (DIMS > 5u) { att[b + 5u * BK] = o5 / l; }
        if (DIMS > 6u) { att[b + 6u * BK] = o6 / l; }
        if (DIMS > 7u) { att[b + 7u * BK] = o7 / l; }
        if (PARTS > 1u) {
            let b1 = b + BD;
            att[b1] = o8 / l;
            if (DIMS > 1u) { att[b1 + BK] = o9 / l; }
            if (DIMS > 2u) { att[b1 + 2u * BK] = o10 / l; }
            if (DIMS > 3u) { att[b1 + 3u * BK] = o11 / l; }
            if (DIMS > 4u) { att[b1 + 4u * BK] = o12 / l; }
            if (DIMS > 5u) { att[b1 + 5u * BK] = o13 / l; }
            if (DIMS > 6u) { att[b1 + 6u * BK] = o14 / l; }
            if (DIMS > 7u) { att[b1 + 7u * BK] = o15 / l; }
        }
    }
}
