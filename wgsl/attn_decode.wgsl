// Decode attention of the new token's queries over the KV cache, split over the sequence: the
// workgroup (head h, chunk c) attends to positions [c * chunk, (c + 1) * chunk) with an online
// softmax and writes its unnormalized output, max and sum, which in_attn.wgsl merges.
// RoPE and the KV store are fused in (prepended: rope.wgsl): each workgroup rotates its query from
// the qkv row; the new token's key and value (rounded to f16, as the cache holds them) are taken
// from the qkv row too, and the last chunk's workgroup of each KV head's first query head stores
// them in the cache for later steps. Nothing else reads the new position from the cache here.
//
// The cache is read 16 bytes (8 f16 values) at a time: scores take one key per invocation, eight
// independent loads per key; values take one 8-value slice of a key per invocation, the keys
// split over GROUPS invocations per slice, which then sum their outputs in workgroup memory.

@group(0) @binding(2) var<uniform> step: Step;

fn qkv_at(i: u32) -> f32 {
    return qkv[i];
}
@group(0) @binding(3) var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> v_cache: array<vec4<u32>>;

const WG: u32 = 128u;
const SLICES: u32 = HEAD_DIM / 8u;    // 16-byte slices of a head's key or value
const ROW: u32 = KV_DIM / 8u;        // slices per cached position
const GROUPS: u32 = WG / SLICES;     // invocations that split the keys when accumulating values
const SCALE: f32 = 1.0 / sqrt(f32(HEAD_DIM));

var<workgroup> qv: array<vec4<f32>, HEAD_DIM / 4u>;
var<workgroup> new_k: array<vec4<u32>, SLICES>; // the new token's key and value, f16 pairs
var<workgroup> new_v: array<vec4<u32>, SLICES>;
var<workgroup> p_sh: array<f32, WG>;
var<workgroup> red: array<f32, WG>;
var<workgroup> o_sh: array<vec4<f32>, 2u * WG>;

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

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let c = wg.y;
    let group_size = N_HEADS / N_KV_HEADS;
    let kvh = h / group_size;
    let pos = step.kv_len - 1u; // the new token
    let row = (step.n - 1u) * QKV;
    let kv_off = kvh * SLICES; // in slices
    if (lid < HEAD_DIM / 4u) {
        let e = 4u * lid;
        let qb = row + h * HEAD_DIM;
        qv[lid] = vec4<f32>(rotated(qb, e, pos), rotated(qb, e + 1u, pos), rotated(qb, e + 2u, pos),
                            rotated(qb, e + 3u, pos));
    } else if (lid >= 32u && lid < 32u + SLICES) {
        let i = lid - 32u;
        new_k[i] = pack8(row + Q_DIM + kvh * HEAD_DIM, 8u * i, pos, true);
    } else if (lid >= 64u && lid < 64u + SLICES) {
        let i = lid - 64u;
        new_v[i] = pack8(row + Q_DIM + KV_DIM + kvh * HEAD_DIM, 8u * i, pos, false);
    }
    workgroupBarrier();
    if (c == step.n_chunks - 1u && h % group_size == 0u && lid < SLICES) {
        k_cache[pos * ROW + kv_off + lid] = new_k[lid];
        v_cache[pos * ROW + kv_off + lid] = new_v[lid];
    }

    let start = c * step.chunk;
    let end = min(start + step.chunk, step.kv_len);
    let slice = lid % SLICES;
    let group = lid / SLICES;
    var m = NEG_BIG;
    var l = 0.0;
    var o0 = vec4<f32>(0.0);
    var o1 = vec4<f32>(0.0);
    for (var k0 = start; k0 < end; k0 += WG) {
        let key = k0 + lid;
        var s = NEG_BIG;
        if (key < end) {
            var qk = 0.0;
            for (var e = 0u; e < SLICES; e++) {
                var kw: vec4<u32>;
                if (key == pos) {
                    kw = new_k[e];
                } else {
                    kw = k_cache[key * ROW + kv_off + e];
                }
                let k = unpack8(kw);
                qk += dot(qv[2u * e], k[0]) + dot(qv[2u * e + 1u], k[1]);
            }
            s = qk * SCALE;
        }
        let m_new = max(m, reduce_max(lid, s));
        let p = exp(s - m_new);
        p_sh[lid] = p;
        let alpha = exp(m - m_new);
        l = l * alpha + reduce_sum(lid, p);
        o0 *= alpha;
        o1 *= alpha;
        let n_keys = min(WG, end - k0);
        for (var j = group; j < n_keys; j += GROUPS) {
            var vw: vec4<u32>;
            if (k0 + j == pos) {
                vw = new_v[slice];
            } else {
                vw = v_cache[(k0 + j) * ROW + kv_off + slice];
            }
            let v = unpack8(vw);
            let pj = p_sh[j];
            o0 += pj * v[0];
            o1 += pj * v[1];
        }
        m = m_new;
        workgroupBarrier();
    }

    o_sh[2u * lid] = o0;
    o_sh[2u * lid + 1u] = o1;
    workgroupBarrier();
    let nc = step.n_chunks;
    let b = (h * nc + c) * (HEAD_DIM + 2u);
    if (lid < HEAD_DIM / 4u) {
        // Output values 4 * lid .. +4: half (lid % 2) of slice lid / 2, summed over the groups.
        var sum = vec4<f32>(0.0);
        for (var g = 0u; g < GROUPS; g++) {
            sum += o_sh[2u * (g * SLICES + lid / 2u) + lid % 2u];
        }
        for (var i = 0u; i < 4u; i++) {
            part[b + 4u * lid + i] = sum[i];
        }
    }
    if (lid == 0u) {
        part[b + HEAD_DIM] = m;
        part[b + HEAD_DIM + 1u] = l;
    }
}
