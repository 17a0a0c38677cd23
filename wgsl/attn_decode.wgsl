// Decode attention of the new token's queries over the KV cache, split over the sequence: the
// workgroup (head h, chunk c) attends to positions [c * chunk, (c + 1) * chunk) with an online
// softmax and writes its unnormalized output, max and sum, which in_attn.wgsl merges.
// RoPE and the KV store are fused in (prepended: rope.wgsl): each workgroup rotates its query from
// the qkv row; the new token's key and value (rounded to f16, as the cache holds them) are taken
// from the qkv row too, and the last chunk's workgroup of each KV head's first query head stores
// them in the cache for later steps. Nothing else reads the new position from the cache here.

@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(7) var<storage, read_write> v_cache: array<u32>;

const WG: u32 = 128u;
const PAIRS: u32 = HEAD_DIM / 2u;
const GROUPS: u32 = WG / PAIRS; // invocations that split the keys when accumulating values
const SCALE: f32 = 1.0 / sqrt(f32(HEAD_DIM));

var<workgroup> qv: array<f32, HEAD_DIM>;
var<workgroup> new_k: array<u32, PAIRS>; // the new token's key and value, f16 pairs
var<workgroup> new_v: array<u32, PAIRS>;
var<workgroup> p_sh: array<f32, WG>;
var<workgroup> red: array<f32, WG>;
var<workgroup> o_sh: array<vec2<f32>, WG>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let c = wg.y;
    let group_size = N_HEADS / N_KV_HEADS;
    let kvh = h / group_size;
    let pos = step.kv_len - 1u; // the new token
    let row = (step.n - 1u) * QKV;
    let kv_off = kvh * PAIRS; // in u32 pairs
    for (var i = lid; i < PAIRS; i += WG) {
        qv[2u * i] = rotated(row + h * HEAD_DIM, 2u * i, pos);
        qv[2u * i + 1u] = rotated(row + h * HEAD_DIM, 2u * i + 1u, pos);
        let kb = row + Q_DIM + kvh * HEAD_DIM;
        new_k[i] = pack2x16float(vec2<f32>(rotated(kb, 2u * i, pos), rotated(kb, 2u * i + 1u, pos)));
        let vb = row + Q_DIM + KV_DIM + kvh * HEAD_DIM + 2u * i;
        new_v[i] = pack2x16float(vec2<f32>(qkv[vb], qkv[vb + 1u]));
    }
    workgroupBarrier();
    if (c == step.n_chunks - 1u && h % group_size == 0u) {
        for (var i = lid; i < PAIRS; i += WG) {
            k_cache[pos * (KV_DIM / 2u) + kv_off + i] = new_k[i];
            v_cache[pos * (KV_DIM / 2u) + kv_off + i] = new_v[i];
        }
    }

    let start = c * step.chunk;
    let end = min(start + step.chunk, step.kv_len);
    let pair = lid % PAIRS;
    let group = lid / PAIRS;
    var m = NEG_BIG;
    var l = 0.0;
    var o = vec2<f32>(0.0);
    for (var k0 = start; k0 < end; k0 += WG) {
        let key = k0 + lid;
        var s = NEG_BIG;
        if (key < end) {
            let kb = key * (KV_DIM / 2u) + kv_off;
            var dot = 0.0;
            for (var e = 0u; e < PAIRS; e++) {
                var kw: u32;
                if (key == pos) {
                    kw = new_k[e];
                } else {
                    kw = k_cache[kb + e];
                }
                let k = unpack2x16float(kw);
                dot += qv[2u * e] * k.x + qv[2u * e + 1u] * k.y;
            }
            s = dot * SCALE;
        }
        let m_new = max(m, reduce_max(lid, s));
        let p = exp(s - m_new);
        p_sh[lid] = p;
        let alpha = exp(m - m_new);
        l = l * alpha + reduce_sum(lid, p);
        o *= alpha;
        if (group < GROUPS) {
            let n_keys = min(WG, end - k0);
            for (var j = group; j < n_keys; j += GROUPS) {
                var vw: u32;
                if (k0 + j == pos) {
                    vw = new_v[pair];
                } else {
                    vw = v_cache[(k0 + j) * (KV_DIM / 2u) + kv_off + pair];
                }
                o += p_sh[j] * unpack2x16float(vw);
            }
        }
        m = m_new;
        workgroupBarrier();
    }

    o_sh[lid] = o;
    workgroupBarrier();
    let nc = step.n_chunks;
    let b = (h * nc + c) * (HEAD_DIM + 2u);
    if (lid < PAIRS) {
        var sum = vec2<f32>(0.0);
        for (var g = 0u; g < GROUPS; g++) {
            sum += o_sh[g * PAIRS + lid];
        }
        part[b + 2u * lid] = sum.x;
        part[b + 2u * lid + 1u] = sum.y;
    }
    if (lid == 0u) {
        part[b + HEAD_DIM] = m;
        part[b + HEAD_DIM + 1u] = l;
    }
}
