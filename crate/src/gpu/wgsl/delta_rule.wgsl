// Needs: the header (BIND_*, CallParams, EPS), the variant's K_HEADS, V_HEADS, DN_HEAD_DIM, CONV_DIM, TAPS and
// IN_STRIDE.
// Qwen3.5's gated delta rule and its output's gated norm, as kernels/delta_net.rs `delta_rule` and the rest of
// model/forward.rs `delta_net_block`: per token and value head h (reading key head h % K_HEADS), with the
// convolution's queries and keys L2-normed, the decay g = softplus(alpha + dt_bias) * a and the write strength
// beta = sigmoid(beta_in) from the projections: S *= e^g; d = (v - S^T k) * beta; S += k (x) d;
// o = S^T q / sqrt(HD); then out = RMSNorm(o) * norm * silu(z). `dn_in` holds each token's projections
// (IN_STRIDE floats: the convolved channels, z [V_HEADS x HD], alpha [V_HEADS], beta [V_HEADS]); `conv` the
// convolution's output ([n x CONV_DIM]: queries, keys, values); the layer's `params` its convolution taps, then
// dt_bias, a and norm. The state (after the convolution's in the layer's recurrent buffer) is, per head, HD rows
// over the key index: row j is column j of S. One workgroup per value head, invocation j holding row j in
// registers, walking the call's tokens in order.

@group(0) @binding(BIND_CALL) var<uniform> call: CallParams;
@group(0) @binding(BIND_OUT) var<storage, read_write> out: array<f32>;
@group(0) @binding(BIND_AUX) var<storage, read_write> state: array<f32>;
@group(0) @binding(BIND_IN0) var<storage, read> conv: array<f32>;
@group(0) @binding(BIND_IN1) var<storage, read> dn_in: array<f32>;
@group(0) @binding(BIND_IN2) var<storage, read> params: array<f32>;

const HD: u32 = DN_HEAD_DIM;
const KEY_DIM: u32 = K_HEADS * HD;
const VALUE_DIM: u32 = V_HEADS * HD;
// Where the rule's state starts in the recurrent buffer, after the convolution's.
const RULE0: u32 = (TAPS - 1u) * CONV_DIM;
// The params after the convolution's taps.
const DT_BIAS0: u32 = CONV_DIM * TAPS;
const A0: u32 = DT_BIAS0 + V_HEADS;
const NORM0: u32 = A0 + V_HEADS;

// The token's normed query (first HD) and key.
var<workgroup> qk: array<f32, 2u * HD>;
var<workgroup> sums: array<vec2<f32>, HD>;

// The sums over the head of each invocation's pair, in order of j (every invocation adds them up).
fn head_sum2(j: u32, v: vec2<f32>) -> vec2<f32> {
    sums[j] = v;
    workgroupBarrier();
    var s = vec2<f32>(0.0);
    for (var i = 0u; i < HD; i++) {
        s += sums[i];
    }
    workgroupBarrier();
    return s;
}

// L2 norm as ggml's build_gdn_l2_norm: an RMSNorm with eps / n, times 1 / sqrt(n).
fn l2_scale(ss: f32) -> f32 {
    let n = f32(HD);
    return (1.0 / sqrt(ss / n + EPS / n)) * (1.0 / sqrt(n));
}

@compute @workgroup_size(HD)
fn main(@builtin(local_invocation_index) j: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let kh = h % K_HEADS;
    let row0 = RULE0 + (h * HD + j) * HD;
    var s: array<f32, HD>;
    for (var i = 0u; i < HD; i++) {
        s[i] = state[row0 + i];
    }
    let dt_bias = params[DT_BIAS0 + h];
    let a = params[A0 + h];
    let norm_w = params[NORM0 + j];
    let out_scale = 1.0 / sqrt(f32(HD));
    for (var t = 0u; t < call.n; t++) {
        let c = t * CONV_DIM;
        let q = conv[c + kh * HD + j];
        let k = conv[c + KEY_DIM + kh * HD + j];
        let v = conv[c + 2u * KEY_DIM + h * HD + j];
        let ss = head_sum2(j, vec2<f32>(q * q, k * k));
        qk[j] = q * l2_scale(ss.x);
        qk[HD + j] = k * l2_scale(ss.y);
        workgroupBarrier();
        let p = t * IN_STRIDE + CONV_DIM + VALUE_DIM;
        // ggml's softplus: x past 20 is its own.
        let x = dn_in[p + h] + dt_bias;
        let g = select(log(1.0 + exp(x)), x, x > 20.0) * a;
        let beta = 1.0 / (1.0 + exp(-dn_in[p + V_HEADS + h]));
        let decay = exp(g);
        var sk = 0.0;
        for (var i = 0u; i < HD; i++) {
            s[i] *= decay;
            sk += s[i] * qk[HD + i];
        }
        let d = (v - sk) * beta;
        var o = 0.0;
        for (var i = 0u; i < HD; i++) {
            s[i] += qk[HD + i] * d;
            o += s[i] * qk[i];
        }
        o *= out_scale;
        // The head's output RMS-normed, then gated by silu(z). The sum's barriers also keep the next token's
        // query and key from overwriting these before every invocation has read them.
        let oo = head_sum2(j, vec2<f32>(o * o, 0.0)).x;
        let normed = (o * (1.0 / sqrt(oo / f32(HD) + EPS))) * norm_w;
        let z = dn_in[t * IN_STRIDE + CONV_DIM + h * HD + j];
        out[t * VALUE_DIM + h * HD + j] = z / (1.0 + exp(-z)) * normed;
    }
    for (var i = 0u; i < HD; i++) {
        state[row0 + i] = s[i];
    }
}
