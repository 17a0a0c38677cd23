// Prefill attention: causal, tiled. A workgroup takes BQ consecutive query tokens of one head and
// walks the cached keys in tiles of BK, sharing each key and value tile in workgroup memory, with
// an online softmax per query row. Invocation (qi, kj) scores query qi against key kj of a tile
// and owns output dimensions kj, kj + BK, ... of query qi. BQ and BK come from the header
// (BQ * BK invocations; BQ * HEAD_DIM + BK * HEAD_DIM floats of workgroup memory).

@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read_write> att: array<f32>;
@group(0) @binding(5) var<storage, read> q_rot: array<f32>;
@group(0) @binding(6) var<storage, read> k_cache: array<u32>;
@group(0) @binding(7) var<storage, read> v_cache: array<u32>;

const SCALE: f32 = 1.0 / sqrt(f32(HEAD_DIM));
const DIMS: u32 = HEAD_DIM / BK; // output dimensions per invocation

var<workgroup> qs: array<f32, BQ * HEAD_DIM>;
var<workgroup> kv: array<f32, BK * HEAD_DIM>;
var<workgroup> s_sh: array<f32, BQ * BK>;

// Keys (or values) of positions k0 .. k0 + BK of kv head kvh into kv (zeros past the cache).
fn load_tile(lid: u32, k0: u32, kvh: u32, values: bool) {
    for (var i = lid; i < BK * HEAD_DIM / 2u; i += BQ * BK) {
        let j = i / (HEAD_DIM / 2u);
        let e = i % (HEAD_DIM / 2u);
        var x = vec2<f32>(0.0);
        if (k0 + j < step.kv_len) {
            let w = (k0 + j) * (KV_DIM / 2u) + kvh * (HEAD_DIM / 2u) + e;
            if (values) {
                x = unpack2x16float(v_cache[w]);
            } else {
                x = unpack2x16float(k_cache[w]);
            }
        }
        kv[j * HEAD_DIM + 2u * e] = x.x;
        kv[j * HEAD_DIM + 2u * e + 1u] = x.y;
    }
}

@compute @workgroup_size(BQ * BK)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t0 = wg.x * BQ;
    let h = wg.y;
    let kvh = h / (N_HEADS / N_KV_HEADS);
    let qi = lid / BK;
    let kj = lid % BK;
    let t = t0 + qi;
    let valid = t < step.n;
    let qpos = step.pos0 + t;

    for (var i = lid; i < BQ * HEAD_DIM; i += BQ * BK) {
        let tt = t0 + i / HEAD_DIM;
        var q = 0.0;
        if (tt < step.n) {
            q = q_rot[tt * Q_DIM + h * HEAD_DIM + i % HEAD_DIM];
        }
        qs[i] = q;
    }

    // Keys up to the last query of this block (causal).
    let k_end = step.pos0 + min(t0 + BQ, step.n);
    var m = NEG_BIG;
    var l = 0.0;
    var o: array<f32, DIMS>;
    for (var e = 0u; e < DIMS; e++) {
        o[e] = 0.0;
    }
    for (var k0 = 0u; k0 < k_end; k0 += BK) {
        workgroupBarrier();
        load_tile(lid, k0, kvh, false);
        workgroupBarrier();
        var s = NEG_BIG;
        if (valid && k0 + kj <= qpos) {
            var dot = 0.0;
            for (var d = 0u; d < HEAD_DIM; d++) {
                dot += qs[qi * HEAD_DIM + d] * kv[kj * HEAD_DIM + d];
            }
            s = dot * SCALE;
        }
        s_sh[lid] = s;
        workgroupBarrier();
        var tile_max = NEG_BIG;
        for (var j = 0u; j < BK; j++) {
            tile_max = max(tile_max, s_sh[qi * BK + j]);
        }
        let m_new = max(m, tile_max);
        var p: array<f32, BK>;
        var p_sum = 0.0;
        for (var j = 0u; j < BK; j++) {
            p[j] = exp(s_sh[qi * BK + j] - m_new);
            p_sum += p[j];
        }
        let alpha = exp(m - m_new);
        l = l * alpha + p_sum;
        m = m_new;
        workgroupBarrier();
        load_tile(lid, k0, kvh, true);
        workgroupBarrier();
        for (var e = 0u; e < DIMS; e++) {
            var acc = o[e] * alpha;
            for (var j = 0u; j < BK; j++) {
                acc += p[j] * kv[j * HEAD_DIM + kj + BK * e];
            }
            o[e] = acc;
        }
    }
    if (valid) {
        for (var e = 0u; e < DIMS; e++) {
            att[t * Q_DIM + h * HEAD_DIM + kj + BK * e] = o[e] / l;
        }
    }
}
