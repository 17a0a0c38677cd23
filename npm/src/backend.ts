// Which engine a load uses: a CPU build or the WebGPU build (npm/wasm-gpu/), from the
// `backend` option first, then from what this JavaScript environment offers.
import { RuvllmError, invalid } from './errors.js';

/** Where forward passes run: `auto` = the GPU when a usable one exists, else the CPU. */
export type Backend = 'auto' | 'webgpu' | 'cpu';

/** Why a load that asked for the GPU runs on the CPU (`info().fallback`). */
export interface BackendFallback {
  code: string;
  message: string;
}

/** The build to load: the WebGPU one, or the CPU one (with the reason when the GPU was asked for). */
export type BackendChoice = { build: 'gpu' } | { build: 'cpu'; fallback: BackendFallback | null };

/** The minimal part of the WebGPU API (`navigator.gpu`) the choice looks at. */
interface GpuLike {
  requestAdapter(): Promise<{ info?: { isFallbackAdapter?: boolean }; isFallbackAdapter?: boolean } | null>;
}

export function checkBackend(backend: unknown): Backend {
  if (backend === 'gpu') return 'webgpu'; // as the native CLI
  if (backend === 'auto' || backend === 'webgpu' || backend === 'cpu') return backend;
  throw invalid(`backend must be one of auto, webgpu, cpu, got ${String(backend)}`);
}

/**
 * Choose the build for `backend`. `cpu` is the CPU build. `webgpu` and `auto` take the WebGPU build when
 * `navigator.gpu` offers an adapter; without one, `auto` takes the CPU build and `webgpu` fails with
 * E_GPU_NO_ADAPTER. `auto` also takes the CPU build when the adapter is a software one (SwiftShader), slower
 * than the CPU engine, unless `allowSoftware`. (Faults after this point, limits, shaders, memory, a lost
 * device, are the engine's: under `auto` it finishes on the CPU itself.)
 */
export async function chooseBackend(backend: Backend, allowSoftware = false, gpu: GpuLike | undefined = navigatorGpu()): Promise<BackendChoice> {
  if (backend === 'cpu') return { build: 'cpu', fallback: null };
  let why: string | undefined;
  if (!gpu) {
    why = 'WebGPU is not available here (no navigator.gpu; in Node, see the README for the npm `webgpu` package)';
  } else {
    try {
      const adapter = await gpu.requestAdapter();
      if (!adapter) {
        why = 'WebGPU is not available here: navigator.gpu offers no adapter';
      } else if (backend === 'auto' && !allowSoftware && (adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter)) {
        why = 'only a software adapter, slower than the CPU engine';
      }
    } catch (e) {
      why = `WebGPU is not available here: requestAdapter failed: ${(e as Error)?.message ?? String(e)}`;
    }
  }
  if (why === undefined) return { build: 'gpu' };
  if (backend === 'webgpu') throw new RuvllmError('E_GPU_NO_ADAPTER', why);
  return { build: 'cpu', fallback: { code: 'E_GPU_NO_ADAPTER', message: why } };
}

function navigatorGpu(): GpuLike | undefined {
  const nav = (globalThis as { navigator?: { gpu?: GpuLike } }).navigator;
  return nav?.gpu ?? undefined;
}
