// Needs: the header (BIND_*, CallParams, EPS), the variant's K_HEADS, V_HEADS, DN_HEAD_DIM (a power of two),
// CONV_DIM, TAPS and IN_STRIDE, and team_sum2 (reduce_*.wgsl).
// Qwen3.5's gated delta rule and its output's gated norm, as kernels/delta_net.rs `delta_rule` and the rest of
// model/forward.rs `delta_net_block`: per token and value head h (reading key head h % K_HEADS), with the
// convolution's queries and keys L2-normed, the decay g = softplus(alpha + dt_bias) * a and the write strength
// beta = sigmoid(beta_in) from the projections: S *= e^g; d = (v - S^T k) * beta; S += k (x) d;
// o = S^T q / sqrt(HD); then out = RMSNorm(o) * norm * silu(z). `dn_in` holds each token's projections
// (IN_STRIDE floats: the convolved channels, z [V_HEADS x HD], alpha [V_HEADS], beta [V_HEADS]); `conv` the
// convolution's output ([n x CONV_DIM]: queries, keys, values); the layer's `params` its convolution taps, then
// dt_bias, a and norm. The state (after the convolution's in the layer's recurrent buffer) is, per head, HD rows
// over the key index: row j is column j of S. One workgroup per value head, invocation j holding row j in
// registers. The tokens' steps are in order, and the head's sums that do not depend on the state are taken out of
// that walk: first the queries' and keys' L2 norms, kept in the head's own part of `out` (written over later); then
// each step takes only the token's query and key into workgroup memory (two barriers) and writes its output
// unnormed; last, every token's output is RMS-normed and gated. Those sums go an invocation a token over a prompt,
// and over the workgroup (team_sum2) for a decode step's one token.

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

// A decode step's one token takes its sums over the workgroup; a call of several tokens an invocation a token, so
// that a token's output does not depend on how many others its call holds (a replayed prompt gives the same bits).
const FEW_TOKENS: u32 = 2u;

// The token's normed query (first HD) and key.
var<workgroup> qk: array<f32, 2u * HD>;

// L2 norm as ggml's build_gdn_l2_norm: an RMSNorm with eps / n, times 1 / sqrt(n).
fn l2_scale(ss: f32) -> f32 {
    let n = f32(HD);
    return (1.0 / sqrt(ss / n + EPS / n)) * (1.0 / sqrt(n));
}

@compute @workgroup_size(HD)
fn main(@builtin(local_invocation_index) j: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let kh = h % K_HEADS;
    // Token t's part of `out` for this head.
    let head_out = h * HD;
    if (call.n < FEW_TOKENS) {
        for (var t = 0u; t < call.n; t++) {
            let c = t * CONV_DIM;
            let q = conv[c + kh * HD + j];
            let k = conv[c + KEY_DIM + kh * HD + j];
            let ss = team_sum2(j, vec2<f32>(q * q, k * k), HD);
            if (j == 0u) {
                out[t * VALUE_DIM + head_out] = l2_scale(ss.x);
                out[t * VALUE_DIM + head_out + 1u] = l2_scale(ss.y);
            }
            workgroupBarrier();
        }
    } else {
        for (var t = j; t < call.n; t += HD) {
            let c = t * CONV_DIM;
            var qq = 0.0;
            var kk = 0.0;
            for (var i = 0u; i < HD; i++) {
                let q = conv[c + kh * HD + i];
                let k = conv[c + KEY_DIM + kh * HD + i];
                qq += q * q;
                kk += k * k;
            }
            out[t * VALUE_DIM + head_out] = l2_scale(qq);
            out[t * VALUE_DIM + head_out + 1u] = l2_scale(kk);
        }
    }
    storageBarrier();
    workgroupBarrier();

    let row0 = RULE0 + (h * HD + j) * HD;
    var s: array<f32, HD>;
    for (var i = 0u; i < HD; i++) {
        s[i] = state[row0 + i];
    }
    let dt_bias = params[DT_BIAS0 + h];
    let a = params[A0 + h];
    let out_scale = 1.0 / sqrt(f32(HD));
    for (var t = 0u; t < call.n; t++) {
        let c = t * CONV_DIM;
        let o0 = t * VALUE_DIM + head_out;
        qk[j] = conv[c + kh * HD + j] * out[o0];
        qk[HD + j] = conv[c + KEY_DIM + kh * HD + j] * out[o0 + 1u];
        let v = conv[c + 2u * KEY_DIM + h * HD + j];
        let p = t * IN_STRIDE + CONV_DIM + VALUE_DIM;
        // ggml's softplus: x past 20 is its own.
        let x = dn_in[p + h] + dt_bias;
        let g = select(log(1.0 + exp(x)), x, x > 20.0) * a;
        let beta = 1.0 / (1.0 + exp(-dn_in[p + V_HEADS + h]));
        let decay = exp(g);
        // Every invocation has read the token's scales (then written over below) and written its query and key.
        workgroupBarrier();
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
        out[o0 + j] = o * out_scale;
        // Every invocation has read this token's query and key before the next's overwrite them.
        workgroupBarrier();
    }
    for (var i = 0u; i < HD; i++) {
        state[row0 + i] = s[i];
    }
    storageBarrier();
    workgroupBarrier();

    // Each token's output RMS-normed, times the norm's weights, gated by silu(z).
    if (call.n < FEW_TOKENS) {
        for (var t = 0u; t < call.n; t++) {
            let o0 = t * VALUE_DIM + head_out;
            let o = out[o0 + j];
            let oo = team_sum2(j, vec2<f32>(o * o, 0.0), HD).x;
            let z = dn_in[t * IN_STRIDE + CONV_DIM + h * HD + j];
            out[o0 + j] = z / (1.0 + exp(-z)) * (o * (1.0 / sqrt(oo / f32(HD) + EPS)) * params[NORM0 + j]);
            workgroupBarrier();
        }
    } else {
        for (var t = j; t < call.n; t += HD) {
            let o0 = t * VALUE_DIM + head_out;
            var oo = 0.0;
            for (var i = 0u; i < HD; i++) {
                oo += out[o0 + i] * out[o0 + i];
            }
            let scale = 1.0 / sqrt(oo / f32(HD) + EPS);
            let z0 = t * IN_STRIDE + CONV_DIM + h * HD;
            for (var i = 0u; i < HD; i++) {
                let z = dn_in[z0 + i];
                out[o0 + i] = z / (1.0 + exp(-z)) * (out[o0 + i] * scale * params[NORM0 + i]);
            }
        }
    }
}
