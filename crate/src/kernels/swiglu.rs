//! SwiGLU gate of the feed-forward block: `gate = silu(gate) * up`, in place.

use crate::kernels::exp::exp;

pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}
