// Needs: the header (BIND_CALL, BIND_OUT, CallParams), mat_params.wgsl.
// Declarations shared by matvec.wgsl, matmul.wgsl and split_reduce.wgsl: the call's parameters and
// the output.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> out: array<f32>;
