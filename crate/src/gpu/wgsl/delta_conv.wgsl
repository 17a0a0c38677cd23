// Needs: the header (BIND_*, CallParams), the variant's CONV_DIM, TAPS and IN_STRIDE.
// Qwen3.5's causal convolution, as kernels/delta_net.rs `causal_conv_silu`: each of the CONV_DIM channels of the
// call's rows of a delta-net layer's projections (`dn_in`, IN_STRIDE floats a token, the convolved channels first)
// convolved over time with its TAPS taps (the layer's `params` begin with them: [CONV_DIM x TAPS], the oldest
// input's tap first), the inputs before the call being the layer's convolution state (the first (TAPS - 1) x
// CONV_DIM floats of its recurrent buffer, oldest first), then SiLU, into `conv` ([n x CONV_DIM]). The state
// becomes the last TAPS - 1 inputs. One invocation per channel, walking the call's tokens in order.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> conv: array<f32>;
@group(0) @binding(BIND_AUX) var<storage, read_write> state: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> dn_in: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> params: array<f32>;

const PAST: u32 = TAPS - 1u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= CONV_DIM) {
        return;
    }
    var w: array<f32, TAPS>;
    for (var j = 0u; j < TAPS; j++) {
        w[j] = params[c * TAPS + j];
    }
    // The window of inputs, oldest first: the past ones, then the token's.
    var win: array<f32, TAPS>;
    for (var j = 0u; j < PAST; j++) {
        win[j] = state[j * CONV_DIM + c];
    }
    for (var t = 0u; t < call.n; t++) {
        win[PAST] = dn_in[t * IN_STRIDE + c];
        // The taps summed in order, as the CPU sums them.
        var sum = 0.0;
        for (var j = 0u; j < TAPS; j++) {
            sum += win[j] * w[j];
        }
        conv[t * CONV_DIM + c] = sum / (1.0 + exp(-sum));
        for (var j = 0u; j < PAST; j++) {
            win[j] = win[j + 1u];
        }
    }
    for (var j = 0u; j < PAST; j++) {
        state[j * CONV_DIM + c] = win[j];
    }
}
