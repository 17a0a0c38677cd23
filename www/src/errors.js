// What a person can do about an error: the package's typed errors (RuvllmError.code) and the browser's own.
import { bytes } from './format.js';

/** { title, detail } for an error of the package (`e.code`), of the browser's storage (QuotaExceededError) or any other. */
export function explain(e) {
  const detail = e?.message ?? String(e);
  switch (e?.code ?? e?.name) {
    case 'E_GGUF':
      return { title: 'This is not a GGUF model file, or it is damaged or cut short.', detail: `Pick a .gguf file (llama.cpp's format). ${detail}` };
    case 'E_UNSUPPORTED_ARCH':
      return { title: 'This model\'s architecture is not supported.', detail: `ruvllm runs llama-family models (Llama, SmolLM2, Mistral) and Qwen2. ${detail}` };
    case 'E_UNSUPPORTED_TENSOR_TYPE':
      return { title: 'This model uses a quantization ruvllm does not run.', detail: `Try a Q4_0, Q4_1, Q8_0 or K-quant file. ${detail}` };
    case 'E_MODEL_TOO_LARGE':
    case 'E_OUT_OF_MEMORY':
      return {
        title: 'The model does not fit in the browser\'s WebAssembly memory (4 GiB at most).',
        detail: `Choose a smaller or more quantized model, or a smaller context size in Settings. ${detail}`,
      };
    case 'E_FETCH':
      return { title: 'The model could not be downloaded.', detail: `Check the URL; a model on another site must be served with CORS headers. ${detail}` };
    case 'E_INTEGRITY':
      return { title: 'The downloaded file is not the one expected (its SHA-256 differs).', detail: `Nothing of it was kept. ${detail}` };
    case 'E_GPU_NO_ADAPTER':
      return { title: 'This browser offers no WebGPU.', detail: `Choose Auto or CPU as the backend in Settings. ${detail}` };
    case 'E_GPU_UNSUPPORTED':
      // Said of the MicroLoRA (the model itself runs on WebGPU) as of a model the GPU cannot run.
      if (/LoRA/.test(detail)) return { title: 'Learning from feedback (MicroLoRA) runs on the CPU engine only.', detail: `Choose CPU as the backend in Settings and load the model again; meanwhile the base model answers. ${detail}` };
    // falls through
    case 'E_GPU_LIMITS':
    case 'E_GPU_SHADER':
    case 'E_GPU_OUT_OF_MEMORY':
    case 'E_GPU_DEVICE_LOST':
      return { title: 'The GPU could not run this model.', detail: `Choose Auto or CPU as the backend in Settings. ${detail}` };
    case 'E_CONTEXT_OVERFLOW':
      return { title: 'The conversation no longer fits in the context window.', detail: `Start a new chat, or raise the context size in Settings and load the model again. ${detail}` };
    case 'E_CHAT_TEMPLATE':
      return { title: 'This model has no usable chat template.', detail };
    case 'E_GRAMMAR':
      return { title: 'The engine could not make a grammar of the answer format\'s schema.', detail: `Correct the JSON Schema in Settings (Answer format), or choose Text. ${detail}` };
    case 'E_ENGINE_CRASHED':
      return { title: 'The engine crashed (a bug in ruvllm). Load the model again.', detail };
    case 'E_INVALID_ARGUMENT':
      return /thread/i.test(detail)
        ? { title: 'The thread count changed: reload the page to use it.', detail }
        : { title: 'A setting is out of range.', detail };
    case 'E_ADAPTER':
      return { title: 'Your adapter for this model could not be read: it is damaged, or of another model.', detail: `The base model answers. "Start a new adapter" in the Learning panel replaces it. ${detail}` };
    case 'E_STORE_FULL':
      return { title: 'The browser\'s storage for this site is full.', detail: `What could not be stored (your adapter's last step) is kept for this visit only. Delete cached models to make room. ${detail}` };
    case 'E_STORE':
      return { title: 'The browser\'s storage refused to keep this.', detail };
    case 'QuotaExceededError':
      return { title: 'The browser\'s storage for this site is full.', detail: `Delete cached models to make room. ${detail}` };
    default:
      return { title: 'Something went wrong.', detail: e?.code ? `${e.code}: ${detail}` : detail };
  }
}

/** Said when a model could not be kept in the browser's storage (the package's `E_STORE_FULL`, with the bytes it
 * needed): it runs all the same, from memory. */
export function notCached(e) {
  return `Storage full: the model (${bytes(e?.needed)}) runs but is not cached in this browser; delete cached models to make room. (${e?.message ?? e})`;
}
