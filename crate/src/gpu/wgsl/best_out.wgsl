// Needs: the header (BIND_AUX). no_best.wgsl defines the same function.
// Matvec output stage of OUT_ARGMAX: each workgroup's best row (value, id) for argmax.wgsl.
@group(0) @binding(BIND_AUX) var<storage, read_write> best: array<u32>;

fn put_best(k: u32, v: f32, i: u32) {
    best[2u * k] = bitcast<u32>(v);
    best[2u * k + 1u] = i;
}
