// Needs: the header (BIND_WEIGHTS, BIND_PARAMS, BIND_CALL, BIND_OUT, CallParams, RESIDUAL_SCALE), `LoraParams`,
// declared from its Rust struct (ops/lora.rs), a reduce_*.wgsl (team_sum2), an input stage (input_prepare,
// input_load4: in_norm.wgsl, in_plain.wgsl or in_attn.wgsl for the last token's row, in_rows.wgsl for
// every token row), the variant's COLS, MAX_RANK and RESIDUAL (the output is the residual stream, whose
// additions are scaled by RESIDUAL_SCALE). Provides: call, in_row.
// LoRA adapters of one projection group (q/k/v, o, gate/up, down or the output head), added to its
// output after the matrix op: out[t][i] += sum_j Bt[j][i] * (A[j] . x_t) over the op's `rank` rows of
// A (COLS wide) and of Bt (`rows` wide: the group's outputs; each adapter's rows of B transposed, times
// its scale, zero outside its own projection's columns), all uploaded per adapter set.
// Workgroup row y is the token: 0 for an input stage of the last token's row (decode, the last
// token's logits: output row 0), every token of the call with in_rows.wgsl (prefill).
// A workgroup computes all of A . x (team sums, two ranks at a time), then 256 output values, one
// per invocation. Every workgroup of a token computes A . x again: it is `rank` dot products, and
// sharing it would take a second dispatch and a buffer.

@group(0) @binding(BIND_WEIGHTS) var<storage, read> lw: array<f32>;
@group(0) @binding(BIND_PARAMS) var<uniform> lora: LoraParams;
@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> out: array<f32>;

// A . x for this workgroup's token.
var<workgroup> ax: array<f32, MAX_RANK>;
// The token row in_rows.wgsl reads.
var<private> in_row: u32;

// Columns i..i+3 of row r of A.
fn a4(r: u32, i: u32) -> vec4<f32> {
    let o = lora.a_off + r * COLS + i;
    return vec4<f32>(lw[o], lw[o + 1u], lw[o + 2u], lw[o + 3u]);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    in_row = wg.y;
    input_prepare(lid);
    workgroupBarrier(); // in_norm.wgsl's input_prepare ends in a team sum
    for (var r = 0u; r < lora.rank; r += 2u) {
        let r1 = min(r + 1u, lora.rank - 1u); // an odd last rank pairs with itself
        var s = vec2<f32>(0.0);
        for (var i = 4u * lid; i < COLS; i += 1024u) {
            let x = input_load4(i);
            s += vec2<f32>(dot(a4(r, i), x), dot(a4(r1, i), x));
        }
        let sum = team_sum2(lid, s, 256u);
        if (lid == 0u) {
            ax[r] = sum.x;
            ax[r1] = sum.y;
        }
        workgroupBarrier();
    }
    let row = wg.x * 256u + lid;
    if (row < lora.rows) {
        var acc = 0.0;
        for (var r = 0u; r < lora.rank; r++) {
            acc += ax[r] * lw[lora.bt_off + r * lora.rows + row];
        }
        out[wg.y * lora.rows + row] += select(1.0, RESIDUAL_SCALE, RESIDUAL) * acc;
    }
}
