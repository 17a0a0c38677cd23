// Needs: the header (BIND_*, CallParams, VOCAB), common.wgsl (NEG_BIG, better), the variant's PER.
// Greedy sampling on the GPU: the id of the largest logit of one row (the lowest id on ties, NaN
// never wins). It becomes the next step's input token and is kept in ids[call.slot], so greedy
// decoding reads back 4 bytes per token, not the logits. The candidates are the row's logits
// (PER = 1) or, after the output layer's matvec (OUT_ARGMAX), the best (value, id) of each of its
// workgroups of PER rows: 8 times fewer to scan.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> ids: array<u32>;
@group(0) @binding(BIND_AUX) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(BIND_IN0) var<storage, read> src: array<u32>; // f32 logits, or (f32 value, id) pairs

const WG: u32 = 256u;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

const N_CAND: u32 = (VOCAB + PER - 1u) / PER;

// Candidate k as (f32 bits of the value, id); past the end one that never wins.
fn cand(base: u32, k: u32) -> vec2<u32> {
    if (k >= N_CAND) {
        return vec2<u32>(bitcast<u32>(NEG_BIG), 0xFFFFFFFFu);
    }
    if (PER == 1u) {
        return vec2<u32>(src[base + k], k);
    }
    return vec2<u32>(src[2u * k], src[2u * k + 1u]);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    let base = call.logit_row * VOCAB;
    var bv = NEG_BIG;
    var bi = 0xFFFFFFFFu;
    // Eight independent loads per round, in flight together (one round trip each, not eight);
    // ids rise within and across rounds, so the first of equal values is kept.
    for (var i0 = lid; i0 < N_CAND; i0 += 8u * WG) {
        var c: array<vec2<u32>, 8>;
        c[0] = cand(base, i0);
        c[1] = cand(base, i0 + WG);
        c[2] = cand(base, i0 + 2u * WG);
        c[3] = cand(base, i0 + 3u * WG);
        c[4] = cand(base, i0 + 4u * WG);
        c[5] = cand(base, i0 + 5u * WG);
        c[6] = cand(base, i0 + 6u * WG);
        c[7] = cand(base, i0 + 7u * WG);
        for (var k = 0u; k < 8u; k++) {
            let v = bitcast<f32>(c[k].x);
            if (better(v, c[k].y, bv, bi)) {
                bv = v;
                bi = c[k].y;
            }
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s && better(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid])) {
            best_v[lid] = best_v[lid + s];
            best_i[lid] = best_i[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        // Every logit NaN or -inf: token 0, as the CPU sampler picks.
        let id = select(best_i[0], 0u, best_i[0] >= VOCAB);
        ids[call.slot] = id;
        tokens[0] = id;
    }
}
