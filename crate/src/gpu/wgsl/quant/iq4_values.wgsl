// Needs: nothing. Shared by iq4_nl.wgsl and iq4_xs.wgsl.
// ggml's kvalues_iq4nl: the value of each 4-bit IQ4 quant before its scale. A private variable,
// not a const: a const array indexed at run time is not portable across WGSL backends.
var<private> IQ4_VALUES: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// The table values of four quants.
fn iq4_values4(q: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(IQ4_VALUES[q.x], IQ4_VALUES[q.y], IQ4_VALUES[q.z], IQ4_VALUES[q.w]);
}
