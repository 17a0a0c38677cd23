//! Every kernel against the CPU reference, one dispatch at a time, on whatever adapter wgpu finds
//! (Mesa lavapipe on a machine without a GPU; SwiftShader in headless Chromium). Weights are made with
//! the CPU reference quantizers and checked against `dequantize_row` followed by an f64 dot product.
//!
//! The checks are async (a browser cannot block on the GPU) and public but hidden, so that the
//! browser suite (tests/rust/gpu_browser.rs) runs them too; natively the `#[test]`s at the end run
//! each with `block_on`. Both expand one list of checks, `for_each_gpu_check!`.

#[cfg(not(target_arch = "wasm32"))]
use std::sync::OnceLock;

#[cfg(not(target_arch = "wasm32"))]
use super::block_on;
use super::device::Gpu;
use super::ops::argmax::Argmax;
use super::ops::attn_decode::{self, AttnDecode};
use super::ops::attn_gate::AttnGate;
use super::ops::attn_prefill::{self, AttnMerge, AttnPrefill};
use super::ops::delta_net::{self, DeltaConv, DeltaRule};
use super::ops::embed::{Embed, EmbedParams};
use super::ops::glu::{Act, Glu};
use super::ops::lora::{Lora, LoraInput, LoraParams};
use super::ops::mat::{int8_input, Input, MatParams, Matmul, Matvec, OutMode, SplitReduce, Tiles};
use super::ops::norm::{AddRmsNorm, NormAdd, RmsNorm, ScaleParams};
use super::ops::params::Uniform;
use super::ops::per_layer::{PerLayerGate, PerLayerIn, PerLayerParams};
use super::ops::rope_store::{rope_table, RopeStore};
use super::ops::{model_header, CallParams, Kernel, Slot};
use super::GpuOptions;
use crate::error::{Error, GpuFault};
use crate::kernels::attention::{attention, AttentionScratch};
use crate::kernels::delta_net::{causal_conv_silu, delta_rule, DeltaNetShape};
use crate::kernels::gelu::geglu;
use crate::kernels::rmsnorm::{rmsnorm, rmsnorm_in_place};
use crate::kernels::rope::Rope;
use crate::kernels::swiglu::swiglu;
use crate::kv::cache::KvCache;
use crate::model::config::{Arch, Config, Scales};
use crate::quant::act::{f16_to_f32, f32_to_f16};
use crate::quant::{dequantize_row, quantize_row, GgmlType};
use crate::splitmix::SplitMix64;

/// The weight types the GPU reads.
const TYPES: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

fn options() -> GpuOptions {
    GpuOptions { allow_software: true, ..GpuOptions::default() }
}

const NO_ADAPTER: &str =
    "a WebGPU adapter (without a GPU: apt-get install mesa-vulkan-drivers; in Chromium: --enable-unsafe-webgpu)";

thread_local! {
    /// Run the kernels' variant without subgroup operations even where the device has them (the
    /// browser's WebGPU, and adapters without subgroups, always run that one).
    static FALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One device for every check (natively shared by the test threads).
#[cfg(not(target_arch = "wasm32"))]
async fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| block_on(Gpu::new(&options())).expect(NO_ADAPTER))
}

/// One device for every check (the browser runs them one after another on one thread).
#[cfg(target_arch = "wasm32")]
async fn gpu() -> &'static Gpu {
    thread_local!(static GPU: std::cell::Cell<Option<&'static Gpu>> = const { std::cell::Cell::new(None) });
    if let Some(gpu) = GPU.get() {
        return gpu;
    }
    let gpu: &'static Gpu = Box::leak(Box::new(Gpu::new(&options()).await.expect(NO_ADAPTER)));
    GPU.set(Some(gpu));
    gpu
}

/// The smallest subgroup the checks' kernels run with: `None` where they use no subgroup operations
/// (the device has none, or the check runs the variant without).
async fn subgroup_min() -> Option<u32> {
    gpu().await.summary.subgroups.filter(|_| !FALLBACK.get()).map(|(min, _)| min)
}

/// `SplitMix64` with normal and uniform draws: deterministic test data. Not `test_support::Rng`: these
/// checks are also compiled outside `cfg(test)`, for the browser suite (tests/rust/gpu_browser.rs).
struct SplitMix(SplitMix64);

impl SplitMix {
    fn uniform(&mut self) -> f32 {
        self.0.f32()
    }

    fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }

    fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn to_u32(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// f16 pairs of u32 words as f32 values.
fn halves(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2).map(|c| f16_to_f32([c[0], c[1]])).collect()
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| f32_to_f16(x)).collect()
}

enum Data {
    Storage(Vec<u8>),
    Uniform(Vec<u8>),
}

/// A parameter struct as uniform data.
fn uniform<T: Uniform>(p: &T) -> Data {
    Data::Uniform(bytemuck::bytes_of(p).to_vec())
}

/// Dispatch `kernel` once over `grid` with `data` at its bindings; return the bytes of the
/// bindings in `read`, in that order.
async fn run(kernel: Kernel, header: &str, data: Vec<(Slot, Data)>, grid: [u32; 3], read: &[Slot]) -> Vec<Vec<u8>> {
    let gpu = gpu().await;
    let device = &gpu.device;
    let subgroups = gpu.subgroups && !FALLBACK.get();
    let src = kernel.source(header, subgroups);
    let pipeline =
        gpu.pipeline("test kernel", src).await.unwrap_or_else(|e| panic!("{kernel:?} (subgroups {subgroups}): {e}"));
    use wgpu::BufferUsages as U;
    let mut buffers: Vec<(Slot, wgpu::Buffer)> = Vec::new();
    for (binding, d) in data {
        let (bytes, usage) = match d {
            Data::Storage(b) => (b, U::STORAGE | U::COPY_SRC),
            Data::Uniform(b) => (b, U::UNIFORM),
        };
        buffers.push((binding, gpu.buffer_with("test", &bytes, usage).await.unwrap()));
    }
    let entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .map(|(slot, b)| wgpu::BindGroupEntry { binding: *slot as u32, resource: b.as_entire_binding() })
        .collect();
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
    }
    let mut staging = Vec::new();
    for r in read {
        let src = &buffers.iter().find(|(b, _)| b == r).expect("read a bound buffer").1;
        let dst = gpu.buffer("staging", src.size(), U::MAP_READ | U::COPY_DST).await.unwrap();
        enc.copy_buffer_to_buffer(src, 0, &dst, 0, src.size());
        staging.push(dst);
    }
    gpu.queue.submit([enc.finish()]);
    let mut out = Vec::new();
    for s in &staging {
        out.push(gpu.read(s, s.size()).await.unwrap());
    }
    out
}

fn config(head_dim: usize, n_heads: usize, n_kv_heads: usize, rope_dims: usize, neox: bool) -> Config {
    Config {
        arch: Arch::Llama,
        n_layers: 1,
        d_model: n_heads * head_dim,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: 608,
        experts: None,
        vocab_size: 1000,
        context_length: 4096,
        rms_eps: 1e-5,
        rope_base: 10000.0,
        rope_freq_scale: 1.0,
        rope_attn_factor: 1.0,
        rope_orig_context: 4096,
        sliding_window: 0,
        rope_dims,
        rope_neox: neox,
        pooling: None,
        scales: Scales::plain(head_dim),
        layer_shapes: None,
        logit_softcap: None,
        delta_net: None,
        rope_sections: None,
    }
}

fn header() -> String {
    model_header(&config(64, 4, 2, 64, false))
}

fn call(n: usize, pos0: usize) -> Data {
    let s = CallParams { n: n as u32, pos0: pos0 as u32, kv_len: (pos0 + n) as u32, ..CallParams::default() };
    uniform(&s)
}

/// `rows` random rows of `cols` values, quantized to `ty` with the CPU reference quantizer.
fn random_matrix(ty: GgmlType, rows: usize, cols: usize, rng: &mut SplitMix) -> Vec<u8> {
    let rb = ty.row_bytes(cols);
    let mut out = vec![0u8; rows * rb];
    for r in 0..rows {
        let x: Vec<f32> = rng.normals(cols).iter().map(|v| v * 0.5).collect();
        quantize_row(ty, &x, &mut out[r * rb..(r + 1) * rb]);
    }
    out
}

fn dequantized(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Vec<Vec<f32>> {
    let rb = ty.row_bytes(cols);
    (0..rows)
        .map(|r| {
            let mut row = vec![0f32; cols];
            dequantize_row(ty, &bytes[r * rb..(r + 1) * rb], &mut row);
            row
        })
        .collect()
}

/// Put matrices in one weight buffer at 4-aligned offsets with gaps between them; returns the
/// buffer and each matrix's offset.
fn pack(mats: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
    let mut w = vec![0xA5u8; 8];
    let mut offs = Vec::new();
    for m in mats {
        offs.push(w.len() as u64);
        w.extend_from_slice(m);
        w.resize(w.len().div_ceil(4) * 4 + 4, 0x5A);
    }
    (w, offs)
}

/// Dot product in f64, and the sum of |terms| that bounds its rounding error.
fn dot(w: &[f32], x: &[f32]) -> (f64, f64) {
    w.iter().zip(x).fold((0.0, 0.0), |(s, a), (&w, &x)| (s + w as f64 * x as f64, a + (w as f64 * x as f64).abs()))
}

/// The input as a decode matvec of `ty` multiplies it: as it is, or for the types of `matvec_q8.wgsl`
/// each 32 values as int8 times max|x| / 127, rounded as `pack4x8snorm` rounds. (The GPU's division may
/// round a value that lies within an ulp of a half the other way: one such value moves a dot by one
/// step of its block, well within `assert_close`'s tolerance.)
fn matvec_input(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    if !int8_input(ty) {
        return x.to_vec();
    }
    x.chunks(32)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let inv = if amax > 0.0 { 1.0 / amax } else { 0.0 };
            b.iter().map(move |&v| (0.5 + 127.0 * (v * inv).clamp(-1.0, 1.0)).floor() * (amax / 127.0))
        })
        .collect()
}

fn assert_close(what: &str, got: f32, want: f64, scale: f64) {
    assert_within(what, got, want, 3e-5 * scale + 1e-5);
}

fn assert_within(what: &str, got: f32, want: f64, tol: f64) {
    assert!((got as f64 - want).abs() <= tol, "{what}: got {got}, want {want} (tolerance {tol:e})");
}

/// The prefill matmul's variants this device runs: f32, and on cooperative matrices in both shapes
/// where it has them.
async fn matmul_variants() -> Vec<Tiles> {
    if gpu().await.coop && !FALLBACK.get() {
        vec![Tiles::F32, Tiles::Coop, Tiles::CoopWide]
    } else {
        vec![Tiles::F32]
    }
}

/// A matmul variant's result against `dot(w, x)` in f64: exact operands for the f32 kernel; for the
/// cooperative one both rounded to f16, as it multiplies them (the f16 rounding of the GPU's
/// conversion may go toward zero: the tolerance allows for that, and stays far below what a misplaced
/// column or row gives).
fn assert_matmul(what: &str, tiles: Tiles, got: f32, w: &[f32], x: &[f32], offset: f64) {
    if tiles == Tiles::F32 {
        let (want, scale) = dot(w, x);
        return assert_close(what, got, want + offset, scale);
    }
    let h = |v: &[f32]| -> Vec<f32> { v.iter().map(|&a| f16_to_f32(f32_to_f16(a))).collect() };
    let (want, scale) = dot(&h(w), &h(x));
    assert_within(&format!("{what} (f16)"), got, want + offset, 3e-4 * scale + 1e-4);
}

/// Columns for a type: more than one matvec input pass (2048; 8192 for the int8 kernel's types) and an
/// odd number of blocks.
fn test_cols(ty: GgmlType) -> usize {
    if int8_input(ty) {
        256 * 33
    } else if ty.block_size() == 256 {
        256 * 9
    } else {
        32 * 67
    }
}

pub async fn matvec_norm_segments_and_bias_match_cpu_for_every_type() {
    for (i, ty) in TYPES.into_iter().enumerate() {
        let mut rng = SplitMix(SplitMix64(100 + i as u64));
        let cols = test_cols(ty);
        let seg_rows = [13, 9, 15];
        let mats: Vec<Vec<u8>> = seg_rows.iter().map(|&r| random_matrix(ty, r, cols, &mut rng)).collect();
        let (w, offs) = pack(&mats.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let segs: Vec<(u64, usize)> = offs.iter().copied().zip(seg_rows).collect();
        let total: usize = seg_rows.iter().sum();
        let col0 = 3;
        // Two token rows: the matvec reads the last.
        let x = rng.normals(2 * cols);
        let norm_w: Vec<f32> = (0..cols).map(|_| 0.5 + rng.uniform()).collect();
        let bias = rng.normals(col0 + total);
        let out0 = vec![7.0f32; col0 + total + 2];
        let per = [4, 16][i % 2]; // the rows per workgroup of the layers' matvecs and of the output layer
        let cols32 = cols as u32;
        let kernel = Kernel::Matvec(Matvec {
            ty,
            input: Input::Norm,
            mode: OutMode::Store,
            bias: true,
            rows: per,
            cols: cols32,
        });
        let data = vec![
            (Slot::Weights, Data::Storage(w)),
            (Slot::Params, uniform(&MatParams::new(&segs, cols, 0, col0))),
            (Slot::Call, call(2, 0)),
            (Slot::Out, Data::Storage(f32_bytes(&out0))),
            (Slot::Aux, Data::Storage(f32_bytes(&bias))),
            (Slot::In0, Data::Storage(f32_bytes(&x))),
            (Slot::In1, Data::Storage(f32_bytes(&norm_w))),
        ];
        let out = to_f32(&run(kernel, &header(), data, [(total as u32).div_ceil(per), 1, 1], &[Slot::Out]).await[0]);

        let mut xn = vec![0f32; cols];
        rmsnorm(&mut xn, &x[cols..], &norm_w, 1e-5);
        let xn = matvec_input(ty, &xn);
        let rows: Vec<Vec<f32>> = mats.iter().zip(seg_rows).flat_map(|(m, r)| dequantized(ty, m, r, cols)).collect();
        for (r, row) in rows.iter().enumerate() {
            let (want, scale) = dot(row, &xn);
            assert_close(&format!("{} row {r}", ty.name()), out[col0 + r], want + bias[col0 + r] as f64, scale);
        }
        assert_eq!(&out[..col0], &out0[..col0], "{}: columns before the op untouched", ty.name());
        assert_eq!(&out[col0 + total..], &out0[col0 + total..], "{}: columns after the op untouched", ty.name());
    }
}

/// Each type's dequantization in one of the three output modes, in turn (a pipeline compile is most of a check's
/// time on a software adapter): out += W_gate · x (the residual add, plain input), and the gated activations
/// silu(W_gate · norm(x)) * (W_up · norm(x)) and gelu(...) * (...) (Gemma), gate and up rows paired in one dispatch.
pub async fn matvec_residual_add_swiglu_and_geglu_match_cpu_for_every_type() {
    const MODES: [OutMode; 3] = [OutMode::Add, OutMode::Swiglu, OutMode::Geglu];
    for (i, ty) in TYPES.into_iter().enumerate() {
        let mut rng = SplitMix(SplitMix64(200 + i as u64));
        let cols = test_cols(ty);
        let rows = 21;
        let gate = random_matrix(ty, rows, cols, &mut rng);
        let up = random_matrix(ty, rows, cols, &mut rng);
        let (w, offs) = pack(&[&gate, &up]);
        let x = rng.normals(cols);
        let resid = rng.normals(rows);
        let (g_rows, u_rows) = (dequantized(ty, &gate, rows, cols), dequantized(ty, &up, rows, cols));
        let per = [4, 16][i % 2];
        let grid = [(rows as u32).div_ceil(per), 1, 1];
        let cols32 = cols as u32;
        let mode = MODES[i % MODES.len()];
        if mode == OutMode::Add {
            let kernel = Kernel::Matvec(Matvec { ty, input: Input::Plain, mode, bias: false, rows: per, cols: cols32 });
            let data = vec![
                (Slot::Weights, Data::Storage(w)),
                (Slot::Params, uniform(&MatParams::new(&[(offs[0], rows)], cols, 0, 0))),
                (Slot::Call, call(1, 0)),
                (Slot::Out, Data::Storage(f32_bytes(&resid))),
                (Slot::In0, Data::Storage(f32_bytes(&x))),
            ];
            let out = to_f32(&run(kernel, &header(), data, grid, &[Slot::Out]).await[0]);
            for r in 0..rows {
                let (want, scale) = dot(&g_rows[r], &matvec_input(ty, &x));
                assert_close(&format!("{} add row {r}", ty.name()), out[r], want + resid[r] as f64, scale);
            }
            continue;
        }
        let norm_w = vec![1.0f32; cols];
        let kernel = Kernel::Matvec(Matvec { ty, input: Input::Norm, mode, bias: false, rows: per, cols: cols32 });
        let data = vec![
            (Slot::Weights, Data::Storage(w)),
            (Slot::Params, uniform(&MatParams::new(&[(offs[0], rows), (offs[1], rows)], cols, 0, 0))),
            (Slot::Call, call(1, 0)),
            (Slot::Out, Data::Storage(vec![0; rows * 4])),
            (Slot::In0, Data::Storage(f32_bytes(&x))),
            (Slot::In1, Data::Storage(f32_bytes(&norm_w))),
        ];
        let out = to_f32(&run(kernel, &header(), data, grid, &[Slot::Out]).await[0]);
        let mut xn = vec![0f32; cols];
        rmsnorm(&mut xn, &x, &norm_w, 1e-5);
        let xn = matvec_input(ty, &xn);
        for r in 0..rows {
            let (g, gs) = dot(&g_rows[r], &xn);
            let (u, us) = dot(&u_rows[r], &xn);
            let mut h = [g as f32];
            match mode {
                OutMode::Swiglu => swiglu(&mut h, &[u as f32]),
                _ => geglu(&mut h, &[u as f32]),
            }
            let what = format!("{} {mode:?} row {r}", ty.name());
            assert_close(&what, out[r], h[0] as f64, (gs + us) * (1.0 + u.abs()));
        }
    }
}

/// A matmul's output rows, `stride` floats apart, of which the op wrote columns `col0 .. col0 + rows`
/// over what was there before (`out0`).
struct OutRows<'a> {
    out: &'a [f32],
    out0: &'a [f32],
    stride: usize,
    col0: usize,
    rows: usize,
}

impl OutRows<'_> {
    /// The columns outside the op's unchanged; `check(token, row, column, value)` on each of its.
    fn check(&self, name: &str, mut check: impl FnMut(usize, usize, usize, f32)) {
        let OutRows { out, out0, stride, col0, rows } = *self;
        for t in 0..out.len() / stride {
            for c in 0..stride {
                let got = out[t * stride + c];
                if c < col0 || c >= col0 + rows {
                    assert_eq!(got, out0[t * stride + c], "{name}: column {c} is not the op's");
                } else {
                    check(t, c - col0, c, got);
                }
            }
        }
    }
}

/// Each type's tiles in each variant the device offers, stored with the bias or added to the output, the two modes
/// taking the types in turn (a pipeline compile is most of a check's time on a software adapter).
pub async fn matmul_tiles_match_cpu_for_every_type() {
    for tiles in matmul_variants().await {
        for (i, ty) in TYPES.into_iter().enumerate() {
            let mut rng = SplitMix(SplitMix64(300 + i as u64));
            let cols = if ty.block_size() == 256 { 512 } else { 96 };
            let seg_rows = [50, 21, 80]; // 151 rows: several row tiles of either variant
            let n = 70; // several token tiles
            let mats: Vec<Vec<u8>> = seg_rows.iter().map(|&r| random_matrix(ty, r, cols, &mut rng)).collect();
            let (w, offs) = pack(&mats.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let segs: Vec<(u64, usize)> = offs.iter().copied().zip(seg_rows).collect();
            let total = seg_rows.iter().sum::<usize>();
            let (stride, col0) = (total + 5, 2);
            let x = rng.normals(n * cols);
            let bias = rng.normals(col0 + total);
            let rows: Vec<Vec<f32>> =
                mats.iter().zip(seg_rows).flat_map(|(m, r)| dequantized(ty, m, r, cols)).collect();
            let mode = [OutMode::Store, OutMode::Add][i % 2];
            let with_bias = mode == OutMode::Store;
            let kernel = Matmul { ty, mode, bias: with_bias, tiles };
            let out0 = rng.normals(n * stride);
            let mut data = vec![
                (Slot::Weights, Data::Storage(w)),
                (Slot::Params, uniform(&MatParams::new(&segs, cols, stride, col0))),
                (Slot::Call, call(n, 0)),
                (Slot::Out, Data::Storage(f32_bytes(&out0))),
                (Slot::In0, Data::Storage(f32_bytes(&x))),
            ];
            if with_bias {
                data.push((Slot::Aux, Data::Storage(f32_bytes(&bias))));
            }
            let (tm, tn) = tiles.shape();
            let grid = [(total as u32).div_ceil(tm), (n as u32).div_ceil(tn), 1];
            let out = to_f32(&run(Kernel::Matmul(kernel), &header(), data, grid, &[Slot::Out]).await[0]);
            let (name, out) = (ty.name(), OutRows { out: &out, out0: &out0, stride, col0, rows: total });
            out.check(name, |t, r, c, got| {
                let offset = if with_bias { bias[c] } else { out0[t * stride + c] } as f64;
                let what = format!("{name} {mode:?} {tiles:?} token {t} row {r}");
                assert_matmul(&what, tiles, got, &rows[r], &x[t * cols..(t + 1) * cols], offset);
            });
        }
    }
}

pub async fn split_matmul_partials_sum_to_the_product() {
    for tiles in matmul_variants().await {
        for ty in [GgmlType::Q4_1, GgmlType::F32] {
            let mut rng = SplitMix(SplitMix64(350));
            let (rows, cols, n, splits) = (151, 320, 70, 3);
            let k_len = 128; // splits of 128, 128 and 64 columns
            let m = random_matrix(ty, rows, cols, &mut rng);
            let w = dequantized(ty, &m, rows, cols);
            let (stride, col0) = (rows + 3, 1);
            let x = rng.normals(n * cols);
            let bias = rng.normals(col0 + rows);
            let out0 = rng.normals(n * stride);
            let params = MatParams::new(&[(0, rows)], cols, stride, col0).split(k_len, splits);
            let data = vec![
                (Slot::Weights, Data::Storage(m.clone())),
                (Slot::Params, uniform(&params)),
                (Slot::Call, call(n, 0)),
                (Slot::Out, Data::Storage(vec![0; splits * n * rows * 4])),
                (Slot::In0, Data::Storage(f32_bytes(&x))),
            ];
            let partial = Matmul { ty, mode: OutMode::Partial, bias: false, tiles };
            let (tm, tn) = tiles.shape();
            let grid = [(rows as u32).div_ceil(tm), (n as u32).div_ceil(tn), splits as u32];
            let part = run(Kernel::Matmul(partial), &header(), data, grid, &[Slot::Out]).await.remove(0);
            let data = vec![
                (Slot::Params, uniform(&params)),
                (Slot::Call, call(n, 0)),
                (Slot::Out, Data::Storage(f32_bytes(&out0))),
                (Slot::Aux, Data::Storage(f32_bytes(&bias))),
                (Slot::In0, Data::Storage(part)),
            ];
            let reduce = Kernel::SplitReduce(SplitReduce { mode: OutMode::Add, bias: true });
            let grid = [(rows as u32).div_ceil(256), n as u32, 1];
            let out = to_f32(&run(reduce, &header(), data, grid, &[Slot::Out]).await[0]);
            let (name, out) = (ty.name(), OutRows { out: &out, out0: &out0, stride, col0, rows });
            out.check(name, |t, r, c, got| {
                let offset = bias[c] as f64 + out0[t * stride + c] as f64;
                let what = format!("{name} split {tiles:?} token {t} row {r}");
                assert_matmul(&what, tiles, got, &w[r], &x[t * cols..(t + 1) * cols], offset);
            });
        }
    }
}

pub async fn embedding_rows_match_dequantize_for_every_type() {
    for (i, ty) in TYPES.into_iter().enumerate() {
        let mut rng = SplitMix(SplitMix64(400 + i as u64));
        let cols = test_cols(ty);
        let rows = 50;
        let table = random_matrix(ty, rows, cols, &mut rng);
        let (w, offs) = pack(&[&table]);
        // This op holds ids 10..60 of the table; id 3 belongs to another chunk. Its scale, a power of two, scales
        // exactly.
        let tokens = [10u32, 59, 3, 33];
        let scale = 2f32.to_bits();
        let params =
            EmbedParams { offset: offs[0] as u32, row0: 10, row1: 60, cols: cols as u32, scale, ..Default::default() };
        let out0 = vec![9.0f32; tokens.len() * cols];
        let data = vec![
            (Slot::Weights, Data::Storage(w)),
            (Slot::Params, uniform(&params)),
            (Slot::Call, call(tokens.len(), 0)),
            (Slot::Out, Data::Storage(f32_bytes(&out0))),
            (Slot::In0, Data::Storage(u32_bytes(&tokens))),
        ];
        let grid = [(cols as u32 / 8).div_ceil(64), tokens.len() as u32, 1];
        let out = to_f32(&run(Kernel::Embed(Embed { ty }), &header(), data, grid, &[Slot::Out]).await[0]);
        let rows = dequantized(ty, &table, rows, cols);
        for (t, &id) in tokens.iter().enumerate() {
            let got = &out[t * cols..(t + 1) * cols];
            if id < 10 {
                assert!(got.iter().all(|&v| v == 9.0), "{}: id {id} is not this chunk's", ty.name());
            } else {
                let want: Vec<f32> = rows[id as usize - 10].iter().map(|v| v * 2.0).collect();
                assert_eq!(got, &want[..], "{}: token {t} (id {id})", ty.name());
            }
        }
    }
}

pub async fn rope_and_kv_store_match_cpu_normal_and_neox() {
    // Also from a split qkv matmul's partials (two halves: their sum is exact), and with per-pair frequency factors
    // and an attention factor (Llama 3.1+, LongRoPE), which only the angle table carries.
    let cases =
        [(false, 32, 1, false), (true, 32, 1, false), (true, 16, 1, false), (false, 16, 1, true), (true, 32, 2, true)];
    for (neox, rope_dims, splits, factors) in cases {
        let c = config(32, 4, 2, rope_dims, neox);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let rope = Rope::new(c.head_dim, rope_dims, c.rope_base, c.rope_freq_scale, neox);
        let rope = match factors {
            true => rope
                .with_freq_factors(&(0..rope_dims / 2).map(|i| 1.0 + i as f32 * 0.5).collect::<Vec<_>>())
                .with_attn_factor(1.2),
            false => rope,
        };
        let (n, pos0, n_ctx) = (3, 5, 16);
        let mut rng = SplitMix(SplitMix64(500 + rope_dims as u64));
        let qkv = rng.normals(n * (qd + 2 * kvd));
        let input: Vec<f32> = (0..splits).flat_map(|_| qkv.iter().map(|v| v / splits as f32)).collect();
        let data = vec![
            (Slot::Call, call(n, pos0)),
            (Slot::Out, Data::Storage(vec![0; n * qd * 4])),
            (Slot::Aux, Data::Storage(vec![0; n_ctx * kvd * 2])),
            (Slot::In0, Data::Storage(f32_bytes(&input))),
            (Slot::In1, Data::Storage(rope_table(&rope, n_ctx))),
            (Slot::In2, Data::Storage(vec![0; n_ctx * kvd * 2])),
        ];
        let grid = [((qd / 2 + kvd) as u32).div_ceil(64), n as u32, 1];
        let got = run(
            Kernel::RopeStore(RopeStore { splits, own_kv: true }),
            &model_header(&c),
            data,
            grid,
            &[Slot::Out, Slot::Aux, Slot::In2],
        )
        .await;
        let (q_rot, k_cache, v_cache) = (to_f32(&got[0]), halves(&got[1]), halves(&got[2]));
        for t in 0..n {
            let row = &qkv[t * (qd + 2 * kvd)..(t + 1) * (qd + 2 * kvd)];
            let (mut q, mut k) = (row[..qd].to_vec(), row[qd..qd + kvd].to_vec());
            rope.apply(&mut q, pos0 + t);
            rope.apply(&mut k, pos0 + t);
            for (e, (&g, &w)) in q_rot[t * qd..(t + 1) * qd].iter().zip(&q).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "neox {neox} dims {rope_dims}: q[{t}][{e}] {g} vs {w}"
                );
            }
            let pos = pos0 + t;
            for e in 0..kvd {
                let (gk, wk) = (k_cache[pos * kvd + e], f16_to_f32(f32_to_f16(k[e])));
                assert!((gk - wk).abs() <= 1e-3 * (1.0 + wk.abs()), "neox {neox}: k[{t}][{e}] {gk} vs {wk}");
                assert_eq!(v_cache[pos * kvd + e], f16_to_f32(f32_to_f16(row[qd + kvd + e])), "v[{t}][{e}]");
            }
        }
        assert!(k_cache[..pos0 * kvd].iter().all(|&v| v == 0.0), "only positions {pos0}.. are written");
    }
}

/// A random f16 KV cache of `len` positions, on the CPU and as GPU bytes.
fn random_cache(c: &Config, n_ctx: usize, len: usize, rng: &mut SplitMix) -> (KvCache, Vec<u8>, Vec<u8>) {
    let kvd = c.kv_dim();
    let (k, v) = (rng.normals(len * kvd), rng.normals(len * kvd));
    let mut cache = KvCache::new(c.kv_layers(), c.kv_dim(), n_ctx);
    cache.layers[0].store(0, &k, &v);
    let mut kb = f16_bytes(&k);
    let mut vb = f16_bytes(&v);
    kb.resize(n_ctx * kvd * 2, 0);
    vb.resize(n_ctx * kvd * 2, 0);
    (cache, kb, vb)
}

/// The CPU's attention of queries `q` at `pos0..`, within the model's sliding window when `windowed`.
fn cpu_attention(c: &Config, q: &[f32], cache: &KvCache, pos0: usize, windowed: bool) -> Vec<f32> {
    let window = if windowed { c.sliding_window } else { 0 };
    let shape = crate::kernels::attention::AttentionShape { window, ..c.attention_shape() };
    let n = q.len() / c.q_dim();
    let mut out = vec![0f32; q.len()];
    attention(&shape, q, &cache.layers[0].view(), pos0, &mut out, &mut AttentionScratch::new(&shape, pos0 + n));
    out
}

pub async fn decode_attention_with_rope_and_kv_store_matches_cpu() {
    // NeoX pairs on half of each head: the rotation is fused into the kernel.
    let c = config(64, 4, 2, 32, true);
    // Chunks of one partial block, of the smallest size, and of two blocks (the second partial).
    for chunk in [128, 32, 256] {
        decode_attention_case(&c, 300, chunk, false, true).await;
    }
}

/// Gemma 3's shape: heads of 256, one KV head, and a sliding window that starts inside a chunk, on a chunk's edge,
/// and leaves whole chunks before it unread; and the window's variant where the window covers every position. Gemma
/// 4's global heads of 512 (the widest the kernel takes: the query's rotation takes every invocation, so the same
/// ones pack the new key and value after it), RoPE on a quarter of each; and both of its layers that read another
/// layer's keys and values.
pub async fn decode_attention_of_wide_heads_within_a_window_matches_cpu() {
    let mut c = config(256, 4, 1, 256, true);
    decode_attention_case(&c, 300, 128, false, true).await;
    for (window, kv_len, chunk) in [(512, 300, 128), (40, 300, 128), (64, 192, 32), (100, 300, 32)] {
        c.sliding_window = window;
        decode_attention_case(&c, kv_len, chunk, true, true).await;
    }
    // A layer that reads another's keys and values (Gemma 4's last layers, windowed and global): the new position's
    // from the cache, the qkv row's NaNs unread.
    decode_attention_case(&c, 300, 128, true, false).await;
    let widest = config(512, 2, 1, 128, true);
    decode_attention_case(&widest, 300, 128, false, true).await;
    decode_attention_case(&widest, 300, 128, false, false).await;
}

/// Decode attention of a token at `kv_len - 1` in chunks of `chunk` keys against the CPU's; `own_kv`: the layer's
/// key and value come in the qkv row and are stored, else (a layer reading another's: Gemma 4's last layers) they
/// are in the cache already and the row's are not read.
async fn decode_attention_case(c: &Config, kv_len: usize, chunk: usize, windowed: bool, own_kv: bool) {
    let (qd, kvd, hd, heads) = (c.q_dim(), c.kv_dim(), c.head_dim, c.n_heads);
    let n_ctx = 320;
    let n_chunks = kv_len.div_ceil(chunk);
    assert!(n_chunks <= attn_decode::max_chunks(heads));
    let pos = kv_len - 1;
    let mut rng = SplitMix(SplitMix64(600 + chunk as u64));
    // The cache holds positions 0..pos; the new token's q, k, v come unrotated in its qkv row.
    let (mut cache, mut kb, mut vb) = random_cache(c, n_ctx, pos, &mut rng);
    kb[pos * kvd * 2..(pos + 1) * kvd * 2].fill(0xFF); // NaN: must not be read
    vb[pos * kvd * 2..(pos + 1) * kvd * 2].fill(0xFF);
    let mut qkv = rng.normals(qd + 2 * kvd);
    let rope = Rope::new(hd, c.rope_dims, c.rope_base, c.rope_freq_scale, true);
    let (mut q, mut k) = (qkv[..qd].to_vec(), qkv[qd..qd + kvd].to_vec());
    rope.apply(&mut q, pos);
    rope.apply(&mut k, pos);
    let v = qkv[qd + kvd..].to_vec();
    cache.layers[0].store(pos, &k, &v);
    if !own_kv {
        for (e, (k, v)) in k.iter().zip(&v).enumerate() {
            let at = (pos * kvd + e) * 2;
            kb[at..at + 2].copy_from_slice(&f32_to_f16(*k));
            vb[at..at + 2].copy_from_slice(&f32_to_f16(*v));
        }
        qkv[qd..].fill(f32::NAN);
    }
    let want = cpu_attention(c, &q, &cache, pos, windowed);
    if windowed {
        // Positions before the window must not be read.
        let first = (pos + 1).saturating_sub(c.sliding_window);
        kb[..first * kvd * 2].fill(0xFF);
        vb[..first * kvd * 2].fill(0xFF);
    }

    let s = CallParams {
        n: 1,
        pos0: pos as u32,
        kv_len: kv_len as u32,
        chunk: chunk as u32,
        n_chunks: n_chunks as u32,
        ..CallParams::default()
    };
    let data = vec![
        (Slot::Call, uniform(&s)),
        (Slot::Out, Data::Storage(vec![0; attn_decode::partials_len(heads, hd) * 4])),
        (Slot::Aux, Data::Storage(kb)),
        (Slot::In0, Data::Storage(f32_bytes(&qkv))),
        (Slot::In1, Data::Storage(rope_table(&rope, n_ctx))),
        (Slot::In2, Data::Storage(vb)),
    ];
    let header = model_header(c);
    let mut got = run(
        Kernel::AttnDecode(AttnDecode { windowed, own_kv }),
        &header,
        data,
        [heads as u32, n_chunks as u32, 1],
        &[Slot::Out, Slot::Aux, Slot::In2],
    )
    .await;
    let (k_cache, v_cache) = (halves(&got[1]), halves(&got[2]));
    let part = got.remove(0);
    for e in 0..kvd {
        let (gk, wk) = (k_cache[pos * kvd + e], f16_to_f32(f32_to_f16(k[e])));
        assert!((gk - wk).abs() <= 1e-3 * (1.0 + wk.abs()), "stored key {e}: {gk} vs {wk}");
        assert_eq!(v_cache[pos * kvd + e], f16_to_f32(f32_to_f16(v[e])), "stored value {e}");
    }

    // The partials, merged on the CPU (online-softmax merge), give the attention output: outputs
    // [head][chunk][hd], then from heads * max_chunks * hd a (max, sum, -, -) per head and chunk.
    let p = to_f32(&part);
    let stats = heads * attn_decode::max_chunks(heads) * hd;
    for h in 0..heads {
        let m_of = |ch: usize| p[stats + 4 * (h * n_chunks + ch)];
        let l_of = |ch: usize| p[stats + 4 * (h * n_chunks + ch) + 1];
        let m = (0..n_chunks).map(m_of).fold(f32::NEG_INFINITY, f32::max);
        if windowed {
            // A chunk wholly before the window reads nothing: weight 0 in the merge.
            let first = (pos + 1).saturating_sub(c.sliding_window);
            for ch in (0..n_chunks).filter(|ch| (ch + 1) * chunk <= first) {
                assert_eq!((m_of(ch) < -1e38, l_of(ch)), (true, 0.0), "window {}: chunk {ch}", c.sliding_window);
            }
        }
        let l: f32 = (0..n_chunks).map(|ch| l_of(ch) * (m_of(ch) - m).exp()).sum();
        for d in 0..hd {
            let o: f32 =
                (0..n_chunks).map(|ch| p[(h * n_chunks + ch) * hd + d] * (m_of(ch) - m).exp()).sum::<f32>() / l;
            let w = want[h * hd + d];
            let what = format!(
                "head dim {hd}, window {}, chunk {chunk}, own kv {own_kv}",
                c.sliding_window * windowed as usize
            );
            assert!((o - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}: head {h} dim {d}: {o} vs {w}");
        }
    }

    // The matvec attention input stage merges the same partials: through an identity matrix it
    // returns the attention output itself.
    let mut eye = vec![0f32; qd * qd];
    for i in 0..qd {
        eye[i * qd + i] = 1.0;
    }
    let (input, mode, cols) = (Input::Attn, OutMode::Store, qd as u32);
    let kernel = Kernel::Matvec(Matvec { ty: GgmlType::F32, input, mode, bias: false, rows: 4, cols });
    let data = vec![
        (Slot::Weights, Data::Storage(f32_bytes(&eye))),
        (Slot::Params, uniform(&MatParams::new(&[(0, qd)], qd, 0, 0))),
        (Slot::Call, uniform(&s)),
        (Slot::Out, Data::Storage(vec![0; qd * 4])),
        (Slot::In0, Data::Storage(part.clone())),
    ];
    let out = to_f32(&run(kernel, &header, data, [(qd as u32).div_ceil(4), 1, 1], &[Slot::Out]).await[0]);
    for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "head dim {hd}, chunk {chunk}: merged output {i}: {g} vs {w}");
    }
    // And the int8 kernels' stage of it (where the rows are whole K-quant blocks): a Q4_K, a Q5_K and a Q6_K
    // matrix times the merged output, as int8.
    if qd % 256 == 0 {
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
            let rows = 11;
            let w = random_matrix(ty, rows, qd, &mut SplitMix(SplitMix64(qd as u64)));
            let kernel = Kernel::Matvec(Matvec { ty, input, mode, bias: false, rows: 8, cols });
            let data = vec![
                (Slot::Weights, Data::Storage(w.clone())),
                (Slot::Params, uniform(&MatParams::new(&[(0, rows)], qd, 0, 0))),
                (Slot::Call, uniform(&s)),
                (Slot::Out, Data::Storage(vec![0; rows * 4])),
                (Slot::In0, Data::Storage(part.clone())),
            ];
            let out = to_f32(&run(kernel, &header, data, [2, 1, 1], &[Slot::Out]).await[0]);
            let x = matvec_input(ty, &want);
            for (r, row) in dequantized(ty, &w, rows, qd).iter().enumerate() {
                let (want, scale) = dot(row, &x);
                assert_close(&format!("{} of the merged output, row {r}", ty.name()), out[r], want, scale);
            }
        }
    }
}

pub async fn prefill_attention_is_causal_and_matches_cpu() {
    // Heads of 64, 128, 256 (Gemma 3) and 512 (Gemma 4); and sliding windows: narrower than a key tile, starting
    // inside one and on a tile's edge for different queries, and wider than the context.
    let mut gemma = config(256, 4, 1, 256, true);
    // Heads of 16 and 112 have teams of 4 (one and seven chunks a member), of 96 teams of 8 with three.
    let mut cases = vec![(config(64, 4, 2, 64, false), false), (config(128, 2, 1, 128, false), false)];
    cases.extend([16, 112, 96].map(|hd| (config(hd, 2, 1, hd, false), false)));
    cases.push((gemma.clone(), false));
    for window in [5, 16, 64] {
        gemma.sliding_window = window;
        cases.push((gemma.clone(), true));
    }
    let mut narrow = config(64, 4, 2, 64, false);
    narrow.sliding_window = 7;
    cases.push((narrow, true));
    // Gemma 4's global heads of 512: teams of 16, the tile's keys and values kept as f16 pairs.
    let mut widest = config(512, 2, 1, 128, true);
    cases.push((widest.clone(), false));
    widest.sliding_window = 9;
    cases.push((widest, true));
    // On cooperative matrices (heads of 64, where the device has them) also over several tiles of keys.
    let coop = gpu().await.coop_attention && !FALLBACK.get();
    let variants = cases.into_iter().flat_map(|(c, windowed)| {
        let on_coop = coop && c.head_dim == 64;
        [(c.clone(), windowed, false)].into_iter().chain(on_coop.then_some((c, windowed, true)))
    });
    for (c, windowed, on_coop) in variants.collect::<Vec<_>>() {
        let (qd, heads) = (c.q_dim(), c.n_heads);
        let (n, pos0, n_ctx) = if on_coop { (100, 70, 176) } else { (40, 5, 48) };
        let mut rng = SplitMix(SplitMix64(700 + c.head_dim as u64 + c.sliding_window as u64));
        let (cache, kb, vb) = random_cache(&c, n_ctx, pos0 + n, &mut rng);
        let q = rng.normals(n * qd);
        let want = cpu_attention(&c, &q, &cache, pos0, windowed);
        let tile = attn_prefill::Tile::of(c.head_dim);
        let attn = AttnPrefill::new(windowed, c.head_dim, subgroup_min().await, on_coop);
        let kernel = Kernel::AttnPrefill(attn);
        // The keys in one workgroup per query block, and (heads of 64 and the windows: the split's bounds meet
        // the window's) split among the most workgroups the merge takes (some splits past a block's keys or
        // before its window, so with no key to see), their partials merged.
        let most = (pos0 + n).div_ceil(attn_prefill::MAX_KEY_SPLITS).div_ceil(tile.bk) * tile.bk;
        let splits: &[usize] = if c.head_dim == 64 || windowed { &[n_ctx, most] } else { &[n_ctx] };
        for &split_keys in splits {
            let n_splits = (pos0 + n).div_ceil(split_keys);
            let s = CallParams {
                n: n as u32,
                pos0: pos0 as u32,
                kv_len: (pos0 + n) as u32,
                split_keys: split_keys as u32,
                n_splits: n_splits as u32,
                ..CallParams::default()
            };
            let parts_len = n_splits * n * (qd + 4 * heads);
            let data = vec![
                (Slot::Call, uniform(&s)),
                (Slot::Out, Data::Storage(vec![0; n * qd * 4])),
                (Slot::Aux, Data::Storage(vec![0; parts_len * 4])),
                (Slot::In0, Data::Storage(f32_bytes(&q))),
                (Slot::In1, Data::Storage(kb.clone())),
                (Slot::In2, Data::Storage(vb.clone())),
            ];
            let grid = [(n as u32).div_ceil(attn.queries(c.head_dim)), heads as u32, n_splits as u32];
            let got = run(kernel, &model_header(&c), data, grid, &[Slot::Out, Slot::Aux]).await;
            let mut out = to_f32(&got[0]);
            if n_splits > 1 {
                let data = vec![
                    (Slot::Call, uniform(&s)),
                    (Slot::Out, Data::Storage(vec![0; n * qd * 4])),
                    (Slot::In0, Data::Storage(got[1].clone())),
                ];
                let merge = Kernel::AttnMerge(AttnMerge);
                out = to_f32(
                    &run(merge, &model_header(&c), data, [(qd as u32 / 4).div_ceil(64), n as u32, 1], &[Slot::Out])
                        .await[0],
                );
            }
            for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                let what = format!(
                    "head dim {}, window {}, {n_splits} splits, cooperative matrices {on_coop}",
                    c.head_dim,
                    c.sliding_window * windowed as usize
                );
                // In f16: the scaled queries and the weights (the cache is f16 already).
                let tol = if on_coop { 2e-3 } else { 1e-4 };
                assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: output {i}: {g} vs {w}");
            }
        }
    }
}

pub async fn norms_and_gated_activations_match_cpu() {
    let c = config(64, 4, 2, 64, false);
    let (d, ff, n) = (c.d_model, c.ffn_dim, 3);
    let mut rng = SplitMix(SplitMix64(800));
    let x = rng.normals(n * d);
    let w: Vec<f32> = (0..d).map(|_| rng.normal()).collect();
    let data = vec![
        (Slot::Out, Data::Storage(vec![0; n * d * 4])),
        (Slot::In0, Data::Storage(f32_bytes(&x))),
        (Slot::In1, Data::Storage(f32_bytes(&w))),
    ];
    let out = to_f32(&run(Kernel::RmsNorm(RmsNorm), &header(), data, [n as u32, 1, 1], &[Slot::Out]).await[0]);
    let mut want = vec![0f32; n * d];
    rmsnorm(&mut want, &x, &w, c.rms_eps);
    for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "rmsnorm {i}: {g} vs {w}");
    }

    // The residual add of a split matmul's partials (two halves of r: their sum is exact) folded in.
    let r = rng.normals(n * d);
    let parts: Vec<f32> = r.iter().chain(&r).map(|v| v / 2.0).collect();
    let data = vec![
        (Slot::Call, call(n, 0)),
        (Slot::Out, Data::Storage(vec![0; n * d * 4])),
        (Slot::Aux, Data::Storage(f32_bytes(&x))),
        (Slot::In0, Data::Storage(f32_bytes(&parts))),
        (Slot::In1, Data::Storage(f32_bytes(&w))),
    ];
    let got =
        run(Kernel::AddRmsNorm(AddRmsNorm { splits: 2 }), &header(), data, [n as u32, 1, 1], &[Slot::Out, Slot::Aux])
            .await;
    let (out, sum) = (to_f32(&got[0]), to_f32(&got[1]));
    let want_sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
    assert_eq!(sum, want_sum, "add_rmsnorm residual");
    rmsnorm(&mut want, &want_sum, &w, c.rms_eps);
    for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "add_rmsnorm {i}: {g} vs {w}");
    }

    // Gemma's post-norm added to the residual: of stored rows, and of a split matmul's partials, then the residual
    // scaled (Gemma 4's layer output scale).
    let y = rng.normals(n * d);
    let y_parts: Vec<f32> = y.iter().chain(&y).map(|v| v / 2.0).collect();
    let mut normed = y.clone();
    rmsnorm_in_place(&mut normed, &w, c.rms_eps);
    for (splits, input, scale) in [(1, &y, 1.0f32), (2, &y_parts, 0.75)] {
        let want: Vec<f32> = x.iter().zip(&normed).map(|(a, b)| (a + b) * scale).collect();
        let params = ScaleParams { scale: scale.to_bits(), ..Default::default() };
        let data = vec![
            (Slot::Params, uniform(&params)),
            (Slot::Call, call(n, 0)),
            (Slot::Out, Data::Storage(f32_bytes(&x))),
            (Slot::In0, Data::Storage(f32_bytes(input))),
            (Slot::In1, Data::Storage(f32_bytes(&w))),
        ];
        let out =
            to_f32(&run(Kernel::NormAdd(NormAdd { splits }), &header(), data, [n as u32, 1, 1], &[Slot::Out]).await[0]);
        for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "norm_add ({splits} splits) {i}: {g} vs {w}");
        }
    }

    let gu = rng.normals(n * 2 * ff);
    // Plain gate/up rows, and the same rows as two split partials (gu - e and e) to be summed.
    let e = rng.normals(n * 2 * ff);
    let parts: Vec<f32> = gu.iter().zip(&e).map(|(a, b)| a - b).chain(e.iter().copied()).collect();
    for act in [Act::Silu, Act::Gelu] {
        for (splits, input) in [(1, &gu), (2, &parts)] {
            let data = vec![
                (Slot::Call, call(n, 0)),
                (Slot::Out, Data::Storage(vec![0; n * ff * 4])),
                (Slot::In0, Data::Storage(f32_bytes(input))),
            ];
            let grid = [(ff as u32).div_ceil(256), n as u32, 1];
            let out = to_f32(&run(Kernel::Glu(Glu { splits, act }), &header(), data, grid, &[Slot::Out]).await[0]);
            for t in 0..n {
                let mut g = gu[t * 2 * ff..t * 2 * ff + ff].to_vec();
                let u = &gu[t * 2 * ff + ff..(t + 1) * 2 * ff];
                match act {
                    Act::Silu => swiglu(&mut g, u),
                    Act::Gelu => geglu(&mut g, u),
                }
                for (r, (&a, &b)) in out[t * ff..(t + 1) * ff].iter().zip(&g).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                        "{act:?} ({splits} splits) token {t} row {r}: {a} vs {b}"
                    );
                }
            }
        }
    }
    // GELU's tanh saturates far from 0 without NaN: gelu(x) is x, or 0, there.
    let big = [30.0f32, -30.0, 1e4, -1e4, 0.0, 5.0];
    let mut gu_big = big.to_vec();
    gu_big.resize(ff, 0.0);
    gu_big.extend(std::iter::repeat_n(1.0, ff));
    let data = vec![
        (Slot::Call, call(1, 0)),
        (Slot::Out, Data::Storage(vec![0; ff * 4])),
        (Slot::In0, Data::Storage(f32_bytes(&gu_big))),
    ];
    let grid = [(ff as u32).div_ceil(256), 1, 1];
    let out =
        to_f32(&run(Kernel::Glu(Glu { splits: 1, act: Act::Gelu }), &header(), data, grid, &[Slot::Out]).await[0]);
    let mut want = big.to_vec();
    geglu(&mut want, &[1.0; 6]);
    for (i, (&a, &b)) in out.iter().zip(&want).enumerate() {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "gelu of {}: {a} vs {b}", big[i]);
    }
}

/// Qwen3.5's delta-net kernels against `kernels::delta_net` and the rest of the CPU's block: the convolution (its
/// output and the state it leaves) and the rule with its output's norm and gate (the output and the state), from a
/// state that is not zeros, over a call of several tokens, then one more (decode), then more tokens than a head has
/// dimensions (the rule's invocations each take several tokens' norms); and the prefill attention gate.
pub async fn delta_net_and_attention_gate_match_cpu() {
    let shape = DeltaNetShape { k_heads: 2, v_heads: 4, head_dim: 32, conv_kernel: 4 };
    let c = config(64, 4, 2, 64, false);
    let (cd, vd, vh, stride) = (shape.conv_dim(), shape.value_dim(), shape.v_heads, delta_net::in_stride(&shape));
    let mut rng = SplitMix(SplitMix64(900));
    let weight = rng.normals(cd * shape.conv_kernel).iter().map(|w| w * 0.5).collect::<Vec<f32>>();
    let dt_bias: Vec<f32> = (0..vh).map(|_| -1.5 * rng.uniform()).collect();
    let a: Vec<f32> = (0..vh).map(|_| -0.3 - 1.2 * rng.uniform()).collect();
    let norm: Vec<f32> = (0..shape.head_dim).map(|_| 1.0 + 0.2 * rng.normal()).collect();
    let params = [&weight[..], &dt_bias, &a, &norm].concat();
    let mut conv_state = rng.normals(shape.conv_state_len());
    let mut rule_state: Vec<f32> = rng.normals(shape.state_len()).iter().map(|v| v * 0.1).collect();
    let mut gpu_state = f32_bytes(&[&conv_state[..], &rule_state].concat());
    for n in [5, 1, 70] {
        let rows = rng.normals(n * stride);
        // The CPU: model::forward's delta_net_block after its projections.
        let mut conv: Vec<f32> = rows.chunks_exact(stride).flat_map(|r| r[..cd].to_vec()).collect();
        let mut scratch = vec![0f32; shape.conv_inputs_len(n)];
        causal_conv_silu(&shape, &mut conv, &weight, &mut conv_state, &mut scratch);
        let (mut g, mut beta) = (vec![0f32; n * vh], vec![0f32; n * vh]);
        for t in 0..n {
            for h in 0..vh {
                let x = rows[t * stride + cd + vd + h] + dt_bias[h];
                g[t * vh + h] = if x > 20.0 { x } else { (1.0 + x.exp()).ln() } * a[h];
                beta[t * vh + h] = 1.0 / (1.0 + (-rows[t * stride + cd + vd + vh + h]).exp());
            }
        }
        // The rule L2-norms the queries and keys in place: it takes a copy, `conv` stays the convolution's output.
        let mut out = vec![0f32; n * vd];
        delta_rule(&shape, &mut conv.clone(), &g, &beta, &mut rule_state, &mut out, c.rms_eps);
        rmsnorm_in_place(&mut out, &norm, c.rms_eps);
        let mut want: Vec<f32> = rows.chunks_exact(stride).flat_map(|r| r[cd..cd + vd].to_vec()).collect();
        swiglu(&mut want, &out);

        let data = vec![
            (Slot::Call, call(n, 0)),
            (Slot::Out, Data::Storage(vec![0; n * cd * 4])),
            (Slot::Aux, Data::Storage(gpu_state.clone())),
            (Slot::In0, Data::Storage(f32_bytes(&rows))),
            (Slot::In1, Data::Storage(f32_bytes(&params))),
        ];
        let kernel = Kernel::DeltaConv(DeltaConv::of(&shape));
        let got = run(kernel, &header(), data, [cd.div_ceil(256) as u32, 1, 1], &[Slot::Out, Slot::Aux]).await;
        let (got_conv, state) = (to_f32(&got[0]), got[1].clone());
        for (i, (&g, &w)) in got_conv.iter().zip(&conv).enumerate() {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{n} tokens: the convolution's output {i}: {g} vs {w}");
        }
        assert_eq!(to_f32(&state)[..shape.conv_state_len()], conv_state[..], "{n} tokens: the convolution's state");

        let data = vec![
            (Slot::Call, call(n, 0)),
            (Slot::Out, Data::Storage(vec![0; n * vd * 4])),
            (Slot::Aux, Data::Storage(state)),
            (Slot::In0, Data::Storage(f32_bytes(&got_conv))),
            (Slot::In1, Data::Storage(f32_bytes(&rows))),
            (Slot::In2, Data::Storage(f32_bytes(&params))),
        ];
        let kernel = Kernel::DeltaRule(DeltaRule::of(&shape));
        let got = run(kernel, &header(), data, [vh as u32, 1, 1], &[Slot::Out, Slot::Aux]).await;
        for (i, (&g, &w)) in to_f32(&got[0]).iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 2e-4 * (1.0 + w.abs()), "{n} tokens: delta-net output {i}: {g} vs {w}");
        }
        let state = to_f32(&got[1]);
        for (i, (&g, &w)) in state[shape.conv_state_len()..].iter().zip(&rule_state).enumerate() {
            assert!((g - w).abs() <= 2e-4 * (1.0 + w.abs()), "{n} tokens: the rule's state {i}: {g} vs {w}");
        }
        gpu_state = got[1].clone();
    }

    // The prefill attention gate: each value times the sigmoid of its gate.
    let (qd, n) = (c.q_dim(), 3);
    let (att, gate) = (rng.normals(n * qd), rng.normals(n * qd));
    let data = vec![
        (Slot::Call, call(n, 0)),
        (Slot::Out, Data::Storage(f32_bytes(&att))),
        (Slot::In0, Data::Storage(f32_bytes(&gate))),
    ];
    let got = to_f32(&run(Kernel::AttnGate(AttnGate), &header(), data, [1, n as u32, 1], &[Slot::Out]).await[0]);
    for (i, ((&g, &x), &z)) in got.iter().zip(&att).zip(&gate).enumerate() {
        let w = x / (1.0 + (-z).exp());
        assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "attention gate {i}: {g} vs {w}");
    }
}

/// The LoRA op adds `Bᵀᵀ·(A·x)` (the scale is in `Bᵀ`) to the output, for the last row through the
/// matvec input stages (plain, and RMS-normed: the decode projections) and for every row (prefill), at
/// offsets into the adapter buffer; an odd rank, a row longer than one pass of the workgroup, output rows
/// past one workgroup. (The attention-merge input stage is the matvec's, checked there and in the models.)
pub async fn lora_adds_its_adapters_to_the_output() {
    let (cols, rows, rank, n) = (1096, 300, 5, 3);
    let mut rng = SplitMix(SplitMix64(900));
    let x = rng.normals(n * cols);
    let norm_w: Vec<f32> = (0..cols).map(|_| 0.5 + rng.uniform()).collect();
    let (a, bt) = (rng.normals(rank * cols), rng.normals(rank * rows));
    // A and Bᵀ after a gap, as in a buffer holding other groups' matrices before them.
    let gap = 12;
    let weights: Vec<f32> = vec![9.0; gap].into_iter().chain(a.iter().copied()).chain(bt.iter().copied()).collect();
    let params = LoraParams { a_off: gap as u32, bt_off: (gap + a.len()) as u32, rank: rank as u32, rows: rows as u32 };
    let out0 = rng.normals(n * rows);
    for input in [LoraInput::Plain, LoraInput::Norm, LoraInput::Rows] {
        let mut data = vec![(Slot::Weights, Data::Storage(f32_bytes(&weights))), (Slot::Params, uniform(&params))];
        if input != LoraInput::Rows {
            data.push((Slot::Call, call(n, 0)));
        }
        data.extend([(Slot::Out, Data::Storage(f32_bytes(&out0))), (Slot::In0, Data::Storage(f32_bytes(&x)))]);
        if input == LoraInput::Norm {
            data.push((Slot::In1, Data::Storage(f32_bytes(&norm_w))));
        }
        let tokens = if input == LoraInput::Rows { n } else { 1 };
        let kernel = Kernel::Lora(Lora { input, cols: cols as u32, residual: false });
        let grid = [(rows as u32).div_ceil(256), tokens as u32, 1];
        let out = to_f32(&run(kernel, &header(), data, grid, &[Slot::Out]).await[0]);
        for t in 0..tokens {
            // Rows: token t's row; the last-row stages read the last token's row and write output row 0.
            let row = if input == LoraInput::Rows { t } else { n - 1 };
            let mut xt = x[row * cols..(row + 1) * cols].to_vec();
            if input == LoraInput::Norm {
                let raw = xt.clone();
                rmsnorm(&mut xt, &raw, &norm_w, 1e-5);
            }
            let ax: Vec<(f64, f64)> = a.chunks_exact(cols).map(|a| dot(a, &xt)).collect();
            for i in 0..rows {
                let (mut want, mut scale) = (out0[t * rows + i] as f64, out0[t * rows + i].abs() as f64);
                for (j, &(u, u_scale)) in ax.iter().enumerate() {
                    let b = bt[j * rows + i] as f64;
                    want += u * b;
                    scale += u_scale * b.abs();
                }
                assert_close(&format!("{input:?} token {t} row {i}"), out[t * rows + i], want, scale);
            }
        }
        // Rows of tokens the op does not write are untouched.
        assert_eq!(out[tokens * rows..], out0[tokens * rows..], "{input:?}: other tokens' rows");
    }
}

/// Gemma 4's per-layer inputs (`per_layer_in`: each layer's slice of the embeddings' projection scaled, RMS-normed,
/// added to the per-layer embedding, scaled; as `model::forward::per_layer_inputs`) and a layer's gate on its input
/// (`per_layer_gate`: GELU of the gate times the layer's slice), against the CPU's kernels.
pub async fn per_layer_inputs_and_gate_match_cpu() {
    let c = config(64, 4, 2, 64, false);
    let (n, width, n_layers) = (3, 32, 3);
    let all = width * n_layers;
    let mut rng = SplitMix(SplitMix64(1200));
    let proj = rng.normals(n * all);
    let embd = rng.normals(n * all);
    let norm: Vec<f32> = (0..width).map(|_| 1.0 + 0.2 * rng.normal()).collect();
    let p = PerLayerParams::new(width, n_layers, c.d_model);
    let data = vec![
        (Slot::Params, uniform(&p)),
        (Slot::Out, Data::Storage(f32_bytes(&embd))),
        (Slot::In0, Data::Storage(f32_bytes(&proj))),
        (Slot::In1, Data::Storage(f32_bytes(&norm))),
    ];
    let grid = [n_layers as u32, n as u32, 1];
    let inputs = to_f32(&run(Kernel::PerLayerIn(PerLayerIn), &header(), data, grid, &[Slot::Out]).await[0]);
    let (proj_scale, sum_scale) = (f32::from_bits(p.proj_scale), f32::from_bits(p.sum_scale));
    for (i, (row, e)) in proj.chunks(width).zip(embd.chunks(width)).enumerate() {
        let mut want: Vec<f32> = row.iter().map(|v| v * proj_scale).collect();
        rmsnorm_in_place(&mut want, &norm, c.rms_eps);
        for (j, (w, e)) in want.iter_mut().zip(e).enumerate() {
            *w = (*w + e) * sum_scale;
            let got = inputs[i * width + j];
            assert!((got - *w).abs() <= 1e-5 * (1.0 + w.abs()), "per_layer_in slice {i} value {j}: {got} vs {w}");
        }
    }

    let gate = rng.normals(n * width);
    let layer = 1;
    let params = PerLayerParams { layer: layer as u32, ..p };
    let data = vec![
        (Slot::Params, uniform(&params)),
        (Slot::Call, call(n, 0)),
        (Slot::Out, Data::Storage(f32_bytes(&gate))),
        (Slot::In0, Data::Storage(f32_bytes(&inputs))),
    ];
    let grid = [(width as u32).div_ceil(256), n as u32, 1];
    let out = to_f32(&run(Kernel::PerLayerGate(PerLayerGate), &header(), data, grid, &[Slot::Out]).await[0]);
    for t in 0..n {
        let mut want = gate[t * width..(t + 1) * width].to_vec();
        geglu(&mut want, &inputs[t * all + layer * width..][..width]);
        for (j, (&got, &w)) in out[t * width..(t + 1) * width].iter().zip(&want).enumerate() {
            assert!((got - w).abs() <= 1e-4 * (1.0 + w.abs()), "per_layer_gate token {t} value {j}: {got} vs {w}");
        }
    }
}

pub async fn argmax_picks_the_lowest_id_of_the_largest_logit_and_skips_nan() {
    let vocab = config(64, 4, 2, 64, false).vocab_size;
    let mut rng = SplitMix(SplitMix64(900));
    let mut logits = rng.normals(3 * vocab);
    // Row 1: a tie between ids 300 and 700, NaN elsewhere.
    logits[vocab + 700] = 9.0;
    logits[vocab + 300] = 9.0;
    logits[vocab + 5] = f32::NAN;
    logits[vocab + 999] = f32::NAN;
    // Row 2: nothing but NaN and -inf.
    for (i, v) in logits[2 * vocab..].iter_mut().enumerate() {
        *v = if i % 2 == 0 { f32::NAN } else { f32::NEG_INFINITY };
    }
    for (row, want) in [(1u32, 300u32), (2, 0)] {
        let s = CallParams { n: 1, logit_row: row, slot: 3, ..CallParams::default() };
        let data = vec![
            (Slot::Call, uniform(&s)),
            (Slot::Out, Data::Storage(vec![0xFF; 8 * 4])),
            (Slot::Aux, Data::Storage(vec![0xFF; 4 * 4])),
            (Slot::In0, Data::Storage(f32_bytes(&logits))),
        ];
        let got = run(Kernel::Argmax(Argmax { per: 1 }), &header(), data, [1, 1, 1], &[Slot::Out, Slot::Aux]).await;
        let (ids, tokens) = (to_u32(&got[0]), to_u32(&got[1]));
        assert_eq!(ids[3], want, "row {row}: the id lands in its slot");
        assert_eq!(tokens[0], want, "row {row}: and becomes the next input token");
        assert_eq!(ids[2], u32::MAX, "other slots untouched");

        // The same row as the output of a matvec that leaves its workgroups' best rows: an F32
        // matrix whose column 0 holds the logits, times a one-hot input.
        let cols = 64;
        let row_logits = &logits[row as usize * vocab..(row as usize + 1) * vocab];
        let w: Vec<f32> =
            row_logits.iter().flat_map(|&l| (0..cols).map(move |c| if c == 0 { l } else { 0.0 })).collect();
        let mut x = vec![0f32; cols];
        x[0] = 1.0;
        let per = 16; // the output layer's rows per workgroup
        let groups = vocab.div_ceil(per as usize);
        let data = vec![
            (Slot::Weights, Data::Storage(f32_bytes(&w))),
            (Slot::Params, uniform(&MatParams::new(&[(0, vocab)], cols, vocab, 0))),
            (Slot::Call, call(1, 0)),
            (Slot::Out, Data::Storage(vec![0; vocab * 4])),
            (Slot::Aux, Data::Storage(vec![0; groups * 8])),
            (Slot::In0, Data::Storage(f32_bytes(&x))),
        ];
        let matvec = Kernel::Matvec(Matvec {
            ty: GgmlType::F32,
            input: Input::Plain,
            mode: OutMode::Argmax,
            bias: false,
            rows: per,
            cols: cols as u32,
        });
        let mut got = run(matvec, &header(), data, [groups as u32, 1, 1], &[Slot::Out, Slot::Aux]).await;
        let best = got.remove(1);
        for (i, (g, &l)) in to_f32(&got[0]).iter().zip(row_logits).enumerate() {
            assert!(g.to_bits() == l.to_bits() || (g.is_nan() && l.is_nan()), "row {row} logit {i}: {g} vs {l}");
        }
        let s = CallParams { n: 1, slot: 3, ..CallParams::default() };
        let data = vec![
            (Slot::Call, uniform(&s)),
            (Slot::Out, Data::Storage(vec![0xFF; 8 * 4])),
            (Slot::Aux, Data::Storage(vec![0xFF; 4 * 4])),
            (Slot::In0, Data::Storage(best)),
        ];
        let got = run(Kernel::Argmax(Argmax { per }), &header(), data, [1, 1, 1], &[Slot::Out, Slot::Aux]).await;
        let (ids, tokens) = (to_u32(&got[0]), to_u32(&got[1]));
        assert_eq!((ids[3], tokens[0]), (want, want), "row {row} from the matvec's best rows");
    }
}

pub async fn shader_and_buffer_failures_are_typed_errors() {
    let gpu = gpu().await;
    let e = gpu
        .guarded("broken", GpuFault::Shader, || {
            gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl("fn main( {".into()),
            })
        })
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Gpu { kind: GpuFault::Shader, .. }), "{e}");

    let too_big = gpu.max_binding + 4;
    let e = gpu.buffer("too big", too_big, wgpu::BufferUsages::STORAGE).await.unwrap_err();
    assert!(matches!(e, Error::Gpu { kind: GpuFault::Limits, .. }), "{e}");
    let e = gpu.buffer("past max_buffer_size", u64::MAX / 2, wgpu::BufferUsages::COPY_DST).await.unwrap_err();
    assert!(matches!(e, Error::Gpu { kind: GpuFault::Limits | GpuFault::OutOfMemory, .. }), "{e}");
    // The device still works after errors caught in scopes.
    gpu.check().unwrap();
}

/// Calls `$callback!(check, ...)` with the name of every check: the one list that the native tests
/// (below) and the browser suite (tests/rust/gpu_browser.rs) both expand.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_gpu_check {
    ($callback:ident) => {
        $callback!(
            matvec_norm_segments_and_bias_match_cpu_for_every_type,
            matvec_residual_add_swiglu_and_geglu_match_cpu_for_every_type,
            matmul_tiles_match_cpu_for_every_type,
            split_matmul_partials_sum_to_the_product,
            embedding_rows_match_dequantize_for_every_type,
            rope_and_kv_store_match_cpu_normal_and_neox,
            decode_attention_with_rope_and_kv_store_matches_cpu,
            decode_attention_of_wide_heads_within_a_window_matches_cpu,
            prefill_attention_is_causal_and_matches_cpu,
            norms_and_gated_activations_match_cpu,
            delta_net_and_attention_gate_match_cpu,
            per_layer_inputs_and_gate_match_cpu,
            argmax_picks_the_lowest_id_of_the_largest_logit_and_skips_nan,
            lora_adds_its_adapters_to_the_output,
            shader_and_buffer_failures_are_typed_errors,
        );
    };
}

/// The cooperative-matrix matmul runs only where wgpu offers cooperative matrices (native Vulkan or
/// Metal on a GPU; not lavapipe here, not browsers), so every variant of its module is also put
/// through wgpu's shader compiler without a device: parsed, validated and written as SPIR-V.
#[cfg(all(test, not(target_arch = "wasm32")))]
#[test]
fn coop_matmul_modules_compile_for_every_type_mode_and_tile() {
    use wgpu::naga;
    for ty in TYPES {
        for mode in [OutMode::Store, OutMode::Add, OutMode::Partial] {
            for (bias, tiles) in
                [(false, Tiles::Coop), (false, Tiles::CoopWide), (true, Tiles::Coop), (true, Tiles::CoopWide)]
            {
                let kernel = Kernel::Matmul(Matmul { ty, mode, bias, tiles });
                let src = kernel.source(&header(), true);
                let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{kernel:?}: {e}"));
                let flags = naga::valid::ValidationFlags::all();
                let info = naga::valid::Validator::new(flags, naga::valid::Capabilities::all())
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{kernel:?}: {e:?}"));
                let options = naga::back::spv::Options::default();
                naga::back::spv::write_vec(&module, &info, &options, None)
                    .unwrap_or_else(|e| panic!("{kernel:?}: {e}"));
            }
        }
    }
}

/// The same for prefill attention on cooperative matrices, with and without a sliding window.
#[cfg(all(test, not(target_arch = "wasm32")))]
#[test]
fn coop_attention_modules_compile() {
    use wgpu::naga;
    for windowed in [false, true] {
        let mut c = config(64, 4, 2, 64, false);
        c.sliding_window = 7 * windowed as usize;
        let kernel = Kernel::AttnPrefill(AttnPrefill::new(windowed, 64, Some(32), true));
        let src = kernel.source(&model_header(&c), true);
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{kernel:?}: {e}"));
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{kernel:?}: {e:?}"));
        naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
            .unwrap_or_else(|e| panic!("{kernel:?}: {e}"));
    }
}

/// The checks as native tests: each in the kernels' preferred variant (with subgroup operations
/// where the device has them), and in the variant without.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod native {
    macro_rules! native {
        ($($name:ident),* $(,)?) => {$(
            #[test]
            fn $name() {
                super::super::block_on(super::super::$name());
            }
        )*};
    }

    mod preferred {
        crate::for_each_gpu_check!(native);
    }

    mod without_subgroups {
        macro_rules! without_subgroups {
            ($($name:ident),* $(,)?) => {$(
                #[test]
                fn $name() {
                    super::super::FALLBACK.set(true);
                    super::super::block_on(super::super::$name());
                }
            )*};
        }

        crate::for_each_gpu_check!(without_subgroups);
    }
}
