//! The recurrent state of a conversation's linear-attention layers (Qwen3.5's gated delta nets), held beside its
//! KV cache: for each such layer the convolution's last inputs and the delta rule's matrices, f32 as llama.cpp keeps
//! them. Unlike keys and values it is not per position: it is the state after the first `len` tokens, and going back
//! to an earlier position means starting again from a state taken there or from the start (`Evaluator`'s
//! checkpoints).

/// Every delta-net layer's state after the first `len` tokens of a conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct RecurrentState {
    /// Per layer: the convolution's state (`conv_len` floats), then the delta rule's.
    layers: Vec<Vec<f32>>,
    conv_len: usize,
    /// The tokens the state has taken in.
    pub len: usize,
}

impl RecurrentState {
    /// The state before any token: zeros, for `n_layers` layers of `conv_len` + `state_len` floats.
    pub fn new(n_layers: usize, conv_len: usize, state_len: usize) -> RecurrentState {
        RecurrentState { layers: vec![vec![0.0; conv_len + state_len]; n_layers], conv_len, len: 0 }
    }

    /// Delta-net layer `i`'s convolution state and delta-rule state.
    pub fn layer_mut(&mut self, i: usize) -> (&mut [f32], &mut [f32]) {
        self.layers[i].split_at_mut(self.conv_len)
    }

    /// Delta-net layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer `i`'s floats as one run: the convolution's state, then the rule's (as the GPU keeps a layer).
    pub fn layer_floats(&self, i: usize) -> &[f32] {
        &self.layers[i]
    }

    /// [`RecurrentState::layer_floats`], to write.
    pub fn layer_floats_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.layers[i]
    }

    /// Back to the state before any token.
    pub fn reset(&mut self) {
        self.layers.iter_mut().for_each(|l| l.fill(0.0));
        self.len = 0;
    }

    /// Bytes of the state.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.len() * 4).sum()
    }

    /// The state as bytes (each layer's floats, little-endian), appended to `out` (a saved state's tail).
    pub fn write_bytes(&self, out: &mut Vec<u8>) {
        out.extend(self.layers.iter().flatten().flat_map(|v| v.to_le_bytes()));
    }

    /// Whether `bytes` (of [`RecurrentState::bytes`]) hold only finite floats.
    pub fn bytes_finite(bytes: &[u8]) -> bool {
        bytes.chunks_exact(4).all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
    }

    /// Take the state from `bytes` (as [`RecurrentState::write_bytes`] wrote a state of this shape), after `len`
    /// tokens.
    pub fn read_bytes(&mut self, bytes: &[u8], len: usize) {
        assert_eq!(bytes.len(), self.bytes(), "a recurrent state of this shape");
        let floats = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        for (v, x) in self.layers.iter_mut().flatten().zip(floats) {
            *v = x;
        }
        self.len = len;
    }

    /// The bytes [`RecurrentState::new`] allocates, saturating (a hostile file's shapes).
    pub fn bytes_for(n_layers: usize, conv_len: usize, state_len: usize) -> usize {
        n_layers.saturating_mul(conv_len.saturating_add(state_len)).saturating_mul(4)
    }
}
