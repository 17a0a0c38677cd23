//! The GPU ops, one file per op (the three matrix kernels, which share their pieces, in `mat.rs`;
//! the two prefill norms in `norm.rs`; LoRA adapters, with their per-set upload, in `lora.rs`; Qwen3.5's delta-net
//! convolution and rule in `delta_net.rs`; Gemma 4's per-layer inputs in `per_layer.rs`). Each op's file holds all of it: the kernel variant (the pipeline cache key) and the
//! WGSL pieces its module is made of, the bindings it takes (named [`Slot`]s, whose numbers the
//! `.wgsl` files read from the generated header), its grid, its parameter struct (declared once
//! for Rust and WGSL with [`params::uniform!`]), and the function that builds its dispatch from the
//! buffers it is given. `forward.rs` strings the ops into a forward pass; `session.rs` encodes them.

pub(crate) mod argmax;
pub(crate) mod attn_decode;
pub(crate) mod attn_gate;
pub(crate) mod attn_prefill;
pub(crate) mod delta_net;
pub(crate) mod embed;
pub(crate) mod glu;
pub(crate) mod lora;
pub(crate) mod mat;
pub(crate) mod norm;
pub(crate) mod params;
pub(crate) mod per_layer;
pub(crate) mod rope_store;
pub(crate) mod route;
mod shader;

use std::sync::Arc;

pub(crate) use params::CallParams;
use params::Uniform;
#[cfg(any(test, target_arch = "wasm32"))]
pub(crate) use shader::model_header;
pub(crate) use shader::{shape_header, Shape};

use super::model::GpuModel;
use crate::error::{GpuFault, Result};

/// Bytes between the parameter blocks of consecutive ops (the uniform offset alignment).
pub(crate) const PARAM_SLOT: u64 = 256;

/// The bindings of group 0. A slot means the same in every kernel; the `.wgsl` files name it by
/// its constant in the generated header (`BIND_WEIGHTS`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Slot {
    /// A weight arena (weights.wgsl `W`).
    Weights = 0,
    /// The op's parameter struct.
    Params = 1,
    /// The call's [`CallParams`].
    Call = 2,
    /// The output.
    Out = 3,
    /// A second output, or a matrix op's bias.
    Aux = 4,
    /// Inputs (the KV-cache kernels also write the values at `In2`).
    In0 = 5,
    In1 = 6,
    In2 = 7,
}

impl Slot {
    pub(crate) const ALL: [Slot; 8] =
        [Slot::Weights, Slot::Params, Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1, Slot::In2];

    /// Its constant in the generated header.
    pub(crate) fn wgsl_name(self) -> &'static str {
        match self {
            Slot::Weights => "BIND_WEIGHTS",
            Slot::Params => "BIND_PARAMS",
            Slot::Call => "BIND_CALL",
            Slot::Out => "BIND_OUT",
            Slot::Aux => "BIND_AUX",
            Slot::In0 => "BIND_IN0",
            Slot::In1 => "BIND_IN1",
            Slot::In2 => "BIND_IN2",
        }
    }
}

/// One compiled pipeline: an op's kernel variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Matvec(mat::Matvec),
    Matmul(mat::Matmul),
    SplitReduce(mat::SplitReduce),
    Embed(embed::Embed),
    RopeStore(rope_store::RopeStore),
    AttnDecode(attn_decode::AttnDecode),
    AttnPrefill(attn_prefill::AttnPrefill),
    AttnMerge(attn_prefill::AttnMerge),
    RmsNorm(norm::RmsNorm),
    AddRmsNorm(norm::AddRmsNorm),
    NormAdd(norm::NormAdd),
    HeadNorm(norm::HeadNorm),
    Glu(glu::Glu),
    Argmax(argmax::Argmax),
    Lora(lora::Lora),
    Route(route::Route),
    AttnGate(attn_gate::AttnGate),
    DeltaConv(delta_net::DeltaConv),
    DeltaRule(delta_net::DeltaRule),
    PerLayerIn(per_layer::PerLayerIn),
    PerLayerGate(per_layer::PerLayerGate),
}

impl Kernel {
    /// The whole WGSL module (entry point `main`) after the model's `header`, its reductions with
    /// subgroup operations when `subgroups`.
    pub(crate) fn source(self, header: &str, subgroups: bool) -> String {
        let mut m = shader::Module::new(header, subgroups);
        match self {
            Kernel::Matvec(k) => k.source(&mut m),
            Kernel::Matmul(k) => k.source(&mut m),
            Kernel::SplitReduce(k) => k.source(&mut m),
            Kernel::Embed(k) => k.source(&mut m),
            Kernel::RopeStore(k) => k.source(&mut m),
            Kernel::AttnDecode(k) => k.source(&mut m),
            Kernel::AttnPrefill(k) => k.source(&mut m),
            Kernel::AttnMerge(k) => k.source(&mut m),
            Kernel::RmsNorm(k) => k.source(&mut m),
            Kernel::AddRmsNorm(k) => k.source(&mut m),
            Kernel::NormAdd(k) => k.source(&mut m),
            Kernel::HeadNorm(k) => k.source(&mut m),
            Kernel::Glu(k) => k.source(&mut m),
            Kernel::Argmax(k) => k.source(&mut m),
            Kernel::Lora(k) => k.source(&mut m),
            Kernel::Route(k) => k.source(&mut m),
            Kernel::AttnGate(k) => k.source(&mut m),
            Kernel::DeltaConv(k) => k.source(&mut m),
            Kernel::DeltaRule(k) => k.source(&mut m),
            Kernel::PerLayerIn(k) => k.source(&mut m),
            Kernel::PerLayerGate(k) => k.source(&mut m),
        }
        m.finish()
    }

    /// The slots its bind group fills, in order: those the module uses.
    pub(crate) fn bindings(self) -> &'static [Slot] {
        match self {
            Kernel::Matvec(k) => k.bindings(),
            Kernel::Matmul(k) => k.bindings(),
            Kernel::SplitReduce(k) => k.bindings(),
            Kernel::Embed(_) => embed::BINDINGS,
            Kernel::RopeStore(_) => rope_store::BINDINGS,
            Kernel::AttnDecode(_) => attn_decode::BINDINGS,
            Kernel::AttnPrefill(_) => attn_prefill::BINDINGS,
            Kernel::AttnMerge(_) => attn_prefill::MERGE_BINDINGS,
            Kernel::RmsNorm(_) => norm::RMSNORM_BINDINGS,
            Kernel::AddRmsNorm(_) => norm::ADD_RMSNORM_BINDINGS,
            Kernel::NormAdd(_) => norm::NORM_ADD_BINDINGS,
            Kernel::HeadNorm(_) => norm::HEAD_NORM_BINDINGS,
            Kernel::Glu(_) => glu::BINDINGS,
            Kernel::Argmax(_) => argmax::BINDINGS,
            Kernel::Lora(k) => k.bindings(),
            Kernel::Route(_) => route::BINDINGS,
            Kernel::AttnGate(_) => attn_gate::BINDINGS,
            Kernel::DeltaConv(_) => delta_net::CONV_BINDINGS,
            Kernel::DeltaRule(_) => delta_net::RULE_BINDINGS,
            Kernel::PerLayerIn(_) => per_layer::IN_BINDINGS,
            Kernel::PerLayerGate(_) => per_layer::GATE_BINDINGS,
        }
    }
}

/// A count of workgroups along one dimension, given the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    Fixed(u32),
    /// One per `per` tokens of the call.
    Tokens {
        per: u32,
    },
    /// One per decode attention chunk (`CallParams::n_chunks`).
    Chunks,
    /// One per split of prefill attention's keys (`CallParams::n_splits`).
    KeySplits,
    /// One per token where prefill attention splits its keys, else none.
    SplitTokens,
}

/// How many workgroups an op dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid(pub [Count; 3]);

impl Grid {
    pub(crate) fn fixed(x: u32, y: u32, z: u32) -> Grid {
        Grid([Count::Fixed(x), Count::Fixed(y), Count::Fixed(z)])
    }

    /// `x` by one row per token.
    pub(crate) fn per_token(x: u32) -> Grid {
        Grid([Count::Fixed(x), Count::Tokens { per: 1 }, Count::Fixed(1)])
    }

    /// One workgroup per token.
    pub(crate) fn tokens() -> Grid {
        Grid([Count::Tokens { per: 1 }, Count::Fixed(1), Count::Fixed(1)])
    }

    pub(crate) fn workgroups(&self, call: &CallParams) -> [u32; 3] {
        self.0.map(|c| match c {
            Count::Fixed(n) => n,
            Count::Tokens { per } => call.n.div_ceil(per),
            Count::Chunks => call.n_chunks,
            Count::KeySplits => call.n_splits,
            Count::SplitTokens => {
                if call.n_splits > 1 {
                    call.n
                } else {
                    0
                }
            }
        })
    }
}

/// One dispatch of a forward pass, built once.
pub(crate) struct Op {
    pub label: &'static str,
    pub kernel: Kernel,
    pub pipeline: Arc<wgpu::ComputePipeline>,
    pub bind: wgpu::BindGroup,
    pub grid: Grid,
}

/// Builds ops: their pipelines from the model's cache, one bind group each, and their parameter
/// blocks (collected, to be written to the params buffer once all ops are built).
pub(crate) struct OpBuilder<'a> {
    pub m: &'a GpuModel,
    /// The shape of the layer whose ops are being built (the model's outside the layers): the header of their
    /// kernels, and their widths.
    pub shape: Shape,
    /// The call's parameters, a uniform every op reads.
    pub call: &'a wgpu::Buffer,
    params_buffer: &'a wgpu::Buffer,
    params: Vec<u8>,
}

impl<'a> OpBuilder<'a> {
    pub(crate) fn new(m: &'a GpuModel, call: &'a wgpu::Buffer, params_buffer: &'a wgpu::Buffer) -> Self {
        OpBuilder { m, shape: Shape::model(&m.model.config), call, params_buffer, params: Vec::new() }
    }

    /// A parameter block in its own slot of the params buffer.
    pub(crate) fn params<T: Uniform>(&mut self, p: &T) -> wgpu::BindingResource<'a> {
        let bytes = bytemuck::bytes_of(p);
        let offset = self.params.len() as u64;
        self.params.extend_from_slice(bytes);
        self.params.resize((offset + PARAM_SLOT) as usize, 0);
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: self.params_buffer,
            offset,
            size: std::num::NonZeroU64::new(bytes.len() as u64),
        })
    }

    /// The op of `kernel` with `entries` in its bind group: exactly the slots of
    /// [`Kernel::bindings`], in that order.
    pub(crate) async fn op(
        &self,
        label: &'static str,
        kernel: Kernel,
        grid: Grid,
        entries: Vec<(Slot, wgpu::BindingResource<'_>)>,
    ) -> Result<Op> {
        let wanted = kernel.bindings();
        let given: Vec<Slot> = entries.iter().map(|(s, _)| *s).collect();
        assert_eq!(given, wanted, "{label}: the bindings of {kernel:?}");
        let pipeline = self.m.pipeline(kernel, self.shape).await?;
        let entries: Vec<wgpu::BindGroupEntry> = entries
            .into_iter()
            .map(|(slot, resource)| wgpu::BindGroupEntry { binding: slot as u32, resource })
            .collect();
        let layout = pipeline.get_bind_group_layout(0);
        let device = &self.m.gpu.device;
        let bind = self
            .m
            .gpu
            .guarded(label, GpuFault::Shader, || {
                device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(label),
                    layout: &layout,
                    entries: &entries,
                })
            })
            .await?;
        Ok(Op { label, kernel, pipeline, bind, grid })
    }

    /// The parameter blocks of every op built, for the params buffer.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.params
    }
}
