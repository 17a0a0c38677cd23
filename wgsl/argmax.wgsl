// Greedy sampling on the GPU: the id of the largest logit of one row (the lowest id on ties, NaN
// never wins). It becomes the next step's input token and is kept in ids[step.slot], so greedy
// decoding reads back 4 bytes per token, not the logits.

@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(5) var<storage, read> logits: array<f32>;

const WG: u32 = 256u;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

// Whether (v, i) beats (bv, bi).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

// Logit i of the row, or NEG_BIG past its end.
fn logit(base: u32, i: u32) -> f32 {
    if (i < VOCAB) {
        return logits[base + i];
    }
    return NEG_BIG;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
    let base = step.logit_row * VOCAB;
    var bv = NEG_BIG;
    var bi = 0xFFFFFFFFu;
    // Eight independent loads per round, in flight together (one round trip each, not eight);
    // ids rise within and across rounds, so the first of equal values is kept.
    for (var i0 = lid; i0 < VOCAB; i0 += 8u * WG) {
        var v: array<f32, 8>;
        v[0] = logit(base, i0);
        v[1] = logit(base, i0 + WG);
        v[2] = logit(base, i0 + 2u * WG);
        v[3] = logit(base, i0 + 3u * WG);
        v[4] = logit(base, i0 + 4u * WG);
        v[5] = logit(base, i0 + 5u * WG);
        v[6] = logit(base, i0 + 6u * WG);
        v[7] = logit(base, i0 + 7u * WG);
        for (var k = 0u; k < 8u; k++) {
            let i = i0 + k * WG;
            if (i < VOCAB && better(v[k], i, bv, bi)) {
                bv = v[k];
                bi = i;
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
        ids[step.slot] = id;
        tokens[0] = id;
    }
}
