// Needs: the header (BIND_*, CallParams, the model's shape, BQ, BK), common.wgsl (NEG_BIG).
// Prefill attention: causal, tiled. A workgroup takes BQ consecutive query tokens of one head and
// walks the cached keys in tiles of BK, sharing each key and value tile in workgroup memory, with
// an online softmax per query row. Invocation (qi, kj) scores query qi against key kj of a tile
// and owns output dimensions kj, kj + BK, ... of query qi (at most 8: HEAD_DIM <= 128, BK = 16),
// kept in separate registers (a dynamically indexed local array can end up in slow local memory).
// Tile rows are padded by one float so that the 16 keys of a score step fall in distinct banks.
// The next tile's keys and values are loaded into registers while the current one is used, so
// global memory latency overlaps the arithmetic.
// BQ and BK come from the header (BQ * BK invocations; BQ * HEAD_DIM + BK * (HEAD_DIM + 1) +
// 2 * BQ * BK floats of workgroup memory).

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> att: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> q_rot: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(BIND_IN2) var<storage, read> v_cache: array<u32>;

const SCALE: f32 = 1.0 / sqrt(f32(HEAD_DIM));
const DIMS: u32 = HEAD_DIM / BK; // output dimensions per invocation
const STRIDE: u32 = HEAD_DIM + 1u; // floats per tile row

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

// The keys (or values) of fetched tile registers into kv.
fn put_tile(lid: u32, r: TileRegs, values: bool) {
    for (var n = 0u; n < PER; n++) {
        let i = lid + n * BQ * BK;
        if (i < BK * HEAD_DIM / 2u) {
            let x = unpack2x16float(select(r.k[n], r.v[n], values));
            let b = (i / (HEAD_DIM / 2u)) * STRIDE + 2u * (i % (HEAD_DIM / 2u));
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

    // Keys up to the last query of this block (causal).
    let k_end = call.pos0 + min(t0 + BQ, call.n);
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
    var next = fetch_tile(lid, 0u, kvh);
    for (var k0 = 0u; k0 < k_end; k0 += BK) {
        let cur = next;
        workgroupBarrier();
        put_tile(lid, cur, false);
        workgroupBarrier();
        if (k0 + BK < k_end) {
            next = fetch_tile(lid, k0 + BK, kvh);
        }
        var s = NEG_BIG;
        if (valid && k0 + kj <= qpos) {
            // Four independent partial sums (HEAD_DIM is a multiple of 16).
            var qk = vec4<f32>(0.0);
            for (var d = 0u; d < HEAD_DIM; d += 4u) {
                let q = vec4<f32>(qs[qi * HEAD_DIM + d], qs[qi * HEAD_DIM + d + 1u], qs[qi * HEAD_DIM + d + 2u],
                                  qs[qi * HEAD_DIM + d + 3u]);
                let b = kj * STRIDE + d;
                qk += q * vec4<f32>(kv[b], kv[b + 1u], kv[b + 2u], kv[b + 3u]);
            }
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
        put_tile(lid, cur, true);
        workgroupBarrier();
        o0 = o0 * alpha + pv(qi, kj);
        if (DIMS > 1u) { o1 = o1 * alpha + pv(qi, kj + BK); }
        if (DIMS > 2u) { o2 = o2 * alpha + pv(qi, kj + 2u * BK); }
        if (DIMS > 3u) { o3 = o3 * alpha + pv(qi, kj + 3u * BK); }
        if (DIMS > 4u) { o4 = o4 * alpha + pv(qi, kj + 4u * BK); }
        if (DIMS > 5u) { o5 = o5 * alpha + pv(qi, kj + 5u * BK); }
        if (DIMS > 6u) { o6 = o6 * alpha + pv(qi, kj + 6u * BK); }
        if (DIMS > 7u) { o7 = o7 * alpha + pv(qi, kj + 7u * BK); }
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
    }
}
