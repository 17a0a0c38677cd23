//! The wgpu device: adapter choice, limits and features, and turning wgpu's error reporting
//! (error scopes, the uncaptured-error handler, device loss, failed maps) into typed errors.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::{gpu_error, GpuOptions};
use crate::error::{GpuFault, Result};

/// Workgroup memory the kernels use at most (bytes): WebGPU's default limit.
pub(crate) const NEEDED_WORKGROUP_STORAGE: u32 = 16384;
/// Invocations per workgroup the kernels use at most: WebGPU's default limit.
pub(crate) const NEEDED_INVOCATIONS: u32 = 256;
/// Workgroup memory of the prefill matmul on cooperative matrices (`matmul_coop.wgsl`): above the
/// default, so that kernel is only used where the adapter offers this much.
pub(crate) const COOP_WORKGROUP_STORAGE: u32 = 24576;
/// Workgroup memory of prefill attention on cooperative matrices (`attn_prefill_coop.wgsl`), used where
/// the adapter offers it besides the cooperative matrices themselves.
pub(crate) const COOP_ATTN_WORKGROUP_STORAGE: u32 = 40448;
/// Storage buffers one kernel binds at most.
pub(crate) const NEEDED_STORAGE_BUFFERS: u32 = 6;

/// What the adapter is, for logs and benchmark reports.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub max_storage_binding: u64,
    pub timestamps: bool,
    /// Smallest and largest subgroup size, when the kernels use subgroup operations.
    pub subgroups: Option<(u32, u32)>,
    /// Whether prefill multiplies on cooperative matrices (tensor cores; see `Gpu::coop`).
    pub cooperative_matrix: bool,
}

pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub summary: AdapterSummary,
    /// Bytes one storage binding (and so one weight arena) may hold.
    pub max_binding: u64,
    pub timestamps: bool,
    /// Whether the kernels' reductions use subgroup operations (`ops::shader::Module` picks the variants).
    pub subgroups: bool,
    /// Whether prefill matmuls run on cooperative matrices (`matmul_coop.wgsl`): wgpu's experimental
    /// feature for native Vulkan and Metal, where the adapter multiplies 16x16x16 f16 matrices into
    /// f32 and its subgroups are always 32 wide (the kernel's layout). Browsers have no such feature.
    pub coop: bool,
    /// Whether prefill attention runs on cooperative matrices too (`attn_prefill_coop.wgsl`, for heads of
    /// 64): `coop` and workgroup memory for it.
    pub coop_attention: bool,
    /// Whether shader modules are made without naga's runtime checks (`pipeline`): on Vulkan, whose
    /// robust buffer access keeps reads and writes past a buffer defined. Browsers check regardless.
    pub unchecked_shaders: bool,
    /// Whether a streamed greedy decode submits each next step before its input is read back
    /// (`GpuSession`'s `Speculative`): on hardware adapters, or where `GpuOptions` asks.
    pub speculate: bool,
    /// The first error reported outside an error scope, or the device's loss.
    fault: Arc<Mutex<Option<(GpuFault, String)>>>,
}

impl Gpu {
    pub async fn new(opts: &GpuOptions) -> Result<Gpu> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| gpu_error(GpuFault::NoAdapter, format!("no WebGPU adapter: {e}")))?;
        let info = adapter.get_info();
        if info.device_type == wgpu::DeviceType::Cpu && !opts.allow_software {
            return Err(gpu_error(
                GpuFault::NoAdapter,
                format!("only a software adapter ({}), slower than the CPU kernels", info.name),
            ));
        }

        let offered = adapter.limits();
        let short = |what: &str, have: u64, need: u64| {
            gpu_error(GpuFault::Limits, format!("{what} is {have}, the kernels need {need}"))
        };
        if offered.max_compute_workgroup_storage_size < NEEDED_WORKGROUP_STORAGE {
            let have = offered.max_compute_workgroup_storage_size as u64;
            return Err(short("max_compute_workgroup_storage_size", have, NEEDED_WORKGROUP_STORAGE as u64));
        }
        if offered.max_compute_invocations_per_workgroup < NEEDED_INVOCATIONS
            || offered.max_compute_workgroup_size_x < NEEDED_INVOCATIONS
        {
            let have = offered.max_compute_invocations_per_workgroup.min(offered.max_compute_workgroup_size_x) as u64;
            return Err(short("max_compute_invocations_per_workgroup", have, NEEDED_INVOCATIONS as u64));
        }
        if offered.max_storage_buffers_per_shader_stage < NEEDED_STORAGE_BUFFERS {
            let have = offered.max_storage_buffers_per_shader_stage as u64;
            return Err(short("max_storage_buffers_per_shader_stage", have, NEEDED_STORAGE_BUFFERS as u64));
        }
        // WebGPU's defaults, with the buffer sizes raised to what the adapter offers (big tensors,
        // KV caches) and capped where the caller asks.
        let mut limits = wgpu::Limits::default().or_worse_values_from(&offered);
        let cap = opts.max_binding_bytes.unwrap_or(u64::MAX);
        limits.max_storage_buffer_binding_size = offered.max_storage_buffer_binding_size.min(cap);
        limits.max_buffer_size = offered.max_buffer_size;
        let max_binding = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size) & !3;

        let timestamps = opts.timestamps && adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        // Subgroup sizes are powers of two from 4 to 128 (WebGPU); the reductions assume no more.
        let subgroups = !opts.no_subgroups
            && adapter.features().contains(wgpu::Features::SUBGROUP)
            && info.subgroup_min_size.is_power_of_two()
            && info.subgroup_min_size >= wgpu::MINIMUM_SUBGROUP_MIN_SIZE
            && info.subgroup_max_size <= wgpu::MAXIMUM_SUBGROUP_MAX_SIZE;
        let coop_features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
        let coop = !opts.no_cooperative_matrix
            && subgroups
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32
            && adapter.features().contains(coop_features)
            && offered.max_compute_workgroup_storage_size >= COOP_WORKGROUP_STORAGE
            && adapter.cooperative_matrix_properties().iter().any(|p| {
                use wgpu::CooperativeScalarType as S;
                (p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type) == (16, 16, 16, S::F16, S::F32)
            });
        let mut features = wgpu::Features::empty();
        features.set(wgpu::Features::TIMESTAMP_QUERY, timestamps);
        features.set(wgpu::Features::SUBGROUP, subgroups);
        features.set(coop_features, coop);
        let coop_attention = coop && offered.max_compute_workgroup_storage_size >= COOP_ATTN_WORKGROUP_STORAGE;
        if coop {
            limits.max_compute_workgroup_storage_size =
                if coop_attention { COOP_ATTN_WORKGROUP_STORAGE } else { COOP_WORKGROUP_STORAGE };
        }
        // SAFETY: wgpu's experimental features are its own unfinished code paths, which it asks a
        // caller to acknowledge; the cooperative matrices are the only one requested, and only
        // where the adapter reports the configuration the kernel uses.
        let experimental_features = if coop {
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("ruvllm"),
                required_features: features,
                required_limits: limits,
                experimental_features,
                ..Default::default()
            })
            .await
            .map_err(|e| gpu_error(GpuFault::Limits, format!("request_device: {e}")))?;

        let fault: Arc<Mutex<Option<(GpuFault, String)>>> = Arc::new(Mutex::new(None));
        let f = fault.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let kind = match e {
                wgpu::Error::OutOfMemory { .. } => GpuFault::OutOfMemory,
                _ => GpuFault::DeviceLost,
            };
            record(&f, kind, e.to_string());
        }));
        let f = fault.clone();
        device.set_device_lost_callback(move |reason, msg| {
            record(&f, GpuFault::DeviceLost, format!("device lost ({reason:?}): {msg}"));
        });

        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info),
            max_storage_binding: max_binding,
            timestamps,
            subgroups: subgroups.then_some((info.subgroup_min_size, info.subgroup_max_size)),
            cooperative_matrix: coop,
        };
        let speculate = info.device_type != wgpu::DeviceType::Cpu || opts.speculate_on_software;
        let unchecked_shaders = info.backend == wgpu::Backend::Vulkan;
        Ok(Gpu {
            device,
            queue,
            summary,
            max_binding,
            timestamps,
            subgroups,
            coop,
            coop_attention,
            unchecked_shaders,
            speculate,
            fault,
        })
    }

    /// The device's first reported fault, if any: once there is one, nothing it computes is trusted.
    pub fn check(&self) -> Result<()> {
        match &*self.fault.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((kind, msg)) => Err(gpu_error(*kind, msg.clone())),
            None => Ok(()),
        }
    }

    /// Run `f` (resource creation) under error scopes: out-of-memory becomes `OutOfMemory`, a
    /// validation error becomes `on_invalid` (a shader error for pipelines, a limit for buffers).
    pub async fn guarded<T>(&self, what: &str, on_invalid: GpuFault, f: impl FnOnce() -> T) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        let invalid = invalid.pop().await;
        let oom = oom.pop().await;
        if let Some(e) = oom {
            return Err(gpu_error(GpuFault::OutOfMemory, format!("{what}: {e}")));
        }
        if let Some(e) = invalid {
            return Err(gpu_error(on_invalid, format!("{what}: {e}")));
        }
        self.check()?;
        Ok(value)
    }

    /// A compute pipeline from a WGSL module (entry point `main`).
    pub async fn pipeline(&self, label: &str, wgsl: String) -> Result<wgpu::ComputePipeline> {
        self.guarded(label, GpuFault::Shader, || {
            let desc =
                wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(wgsl.into()) };
            let module = if self.unchecked_shaders {
                // SAFETY: our kernels index their workgroup and private arrays within bounds and end
                // every loop (the GPU tests run these same modules, on lavapipe and on hardware), and
                // on Vulkan a buffer access out of range stays defined (robustBufferAccess, which wgpu
                // enables). What naga's checks add is a clamp on every array index and a counter in
                // every loop, a large part of prefill's time on hardware (benches/README.md). Integer
                // division keeps its checks (constant divisors fold them away).
                let checks = wgpu::ShaderRuntimeChecks {
                    bounds_checks: false,
                    force_loop_bounding: false,
                    ..wgpu::ShaderRuntimeChecks::checked()
                };
                unsafe { self.device.create_shader_module_trusted(desc, checks) }
            } else {
                self.device.create_shader_module(desc)
            };
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            })
        })
        .await
    }

    /// A buffer of `size` bytes (rounded up to 4), checked against the binding limit.
    pub async fn buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        let size = size.max(4).div_ceil(4) * 4;
        // Checked here: a browser throws (wgpu panics) on sizes past 2^53 instead of reporting an error.
        let max_buffer = self.device.limits().max_buffer_size;
        if size > max_buffer {
            return Err(gpu_error(
                GpuFault::Limits,
                format!("{label} needs {size} bytes; the device allows {max_buffer}"),
            ));
        }
        if usage.contains(wgpu::BufferUsages::STORAGE) && size > self.max_binding {
            return Err(gpu_error(
                GpuFault::Limits,
                format!("{label} needs {size} bytes in one binding; the device allows {}", self.max_binding),
            ));
        }
        self.guarded(label, GpuFault::Limits, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        })
        .await
    }

    /// A storage buffer holding `bytes` (padded to 4).
    pub async fn buffer_with(&self, label: &str, bytes: &[u8], usage: wgpu::BufferUsages) -> Result<wgpu::Buffer> {
        let buf = self.buffer(label, bytes.len() as u64, usage | wgpu::BufferUsages::COPY_DST).await?;
        let whole = bytes.len() / 4 * 4;
        self.queue.write_buffer(&buf, 0, &bytes[..whole]);
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(&buf, whole as u64, &tail);
        }
        Ok(buf)
    }

    /// Wait for submitted work, then map `buf` (MAP_READ) and copy out its first `len` bytes.
    pub async fn read(&self, buf: &wgpu::Buffer, len: u64) -> Result<Vec<u8>> {
        self.read_with(buf, len, <[u8]>::to_vec).await
    }

    /// Wait for submitted work, then map `buf` (MAP_READ) and give its first `len` bytes to `f`.
    pub async fn read_with<T>(&self, buf: &wgpu::Buffer, len: u64, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        self.read_after(None, buf, len, f).await
    }

    /// `read_with`, waiting only for the work up to `submission` (`None`: all of it) where `buf`'s last
    /// use is in it: later submissions keep running.
    pub async fn read_after<T>(
        &self,
        submission: Option<wgpu::SubmissionIndex>,
        buf: &wgpu::Buffer,
        len: u64,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T> {
        let done = Oneshot::new();
        let signal = done.clone();
        buf.map_async(wgpu::MapMode::Read, ..len, move |r| signal.set(r));
        self.device
            .poll(wgpu::PollType::Wait { submission_index: submission, timeout: None })
            .map_err(|e| gpu_error(GpuFault::DeviceLost, format!("waiting for the GPU: {e}")))?;
        let mapped = done.await;
        self.check()?;
        mapped.map_err(|e| gpu_error(GpuFault::DeviceLost, format!("reading back results: {e}")))?;
        let value = buf
            .get_mapped_range(..len)
            .map(|view| f(&view))
            .map_err(|e| gpu_error(GpuFault::DeviceLost, format!("reading back results: {e}")));
        buf.unmap();
        value
    }

    pub fn destroy(&self) {
        self.device.destroy();
    }
}

fn record(fault: &Mutex<Option<(GpuFault, String)>>, kind: GpuFault, msg: String) {
    let mut f = fault.lock().unwrap_or_else(|p| p.into_inner());
    if f.is_none() {
        *f = Some((kind, msg));
    }
}

/// A value set once by a wgpu callback, awaited by the caller.
struct Oneshot<T>(Arc<Mutex<(Option<T>, Option<Waker>)>>);

impl<T> Clone for Oneshot<T> {
    fn clone(&self) -> Self {
        Oneshot(self.0.clone())
    }
}

impl<T> Oneshot<T> {
    fn new() -> Self {
        Oneshot(Arc::new(Mutex::new((None, None))))
    }

    fn set(&self, v: T) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = Some(v);
        if let Some(w) = s.1.take() {
            w.wake();
        }
    }
}

impl<T> Future for Oneshot<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match s.0.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Run a future to completion on this thread. Natively wgpu completes its futures during
/// `device.poll`, which the async functions here call themselves, so this only spins briefly.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}
