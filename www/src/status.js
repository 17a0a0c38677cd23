// The status line: which engine runs and why, and the last reply's speed and context use.
import { rate } from './format.js';

/** "CPU (WebAssembly SIMD128), 2 threads" and the reasons: the WebGPU adapter, a fallback, one thread. */
export function describeEngine(info) {
  const parts = [];
  if (info.backend === 'webgpu') parts.push(`WebGPU: ${info.gpuAdapter ?? 'adapter'}`);
  else {
    let why = '';
    if (info.fallback) why = ` (WebGPU not used: ${info.fallback.message})`;
    else if (info.requestedBackend === 'cpu') why = ' (chosen in Settings)';
    else if (!('gpu' in navigator)) why = ' (this browser has no WebGPU)';
    else if (info.gpuAdapter) why = ` (the WebGPU adapter ${info.gpuAdapter} is a software one, slower than the CPU)`;
    else why = ' (no usable WebGPU adapter)';
    parts.push(`CPU, WebAssembly${info.simd128 ? ' SIMD128' : ''}${why}`);
  }
  let threads = `${info.threads} thread${info.threads === 1 ? '' : 's'} (${info.build})`;
  if (info.threadFallback) threads += `: one thread because ${info.threadFallback.message}`;
  parts.push(threads);
  return parts.join(' · ');
}

export function describeSpeed(meta) {
  if (!meta?.timings) return '';
  return `prefill ${rate(meta.timings.prefillTokensPerSecond)} · decode ${rate(meta.timings.decodeTokensPerSecond)}`;
}

export function describeContext(used, size) {
  return size ? `context ${used} / ${size} tokens` : '';
}
