// The engine worker's side (what entry.ts serves): it loads `LLM`s in the worker, each under a handle, and answers the
// page's calls on them (protocol.ts). A generation streams over the port its call brought; `cancel` on that port, or a
// `cancel` request for a call, aborts it through its own AbortController, as a signal in the page would. Each answer
// carries the model's `info()`, the page's snapshot of it. The page holds the model's text side itself, from the
// GGUF header the load answers with (collected as the model's bytes stream in: the source is read once). The
// MicroLoRAs the page opens live here, by id; each answer on one carries its info and GGUF export, from which the
// page's `MicroLora` answers `info` and `exportGguf`.
import { invalid } from '../errors.js';
import { loadWithHeader, type LLM } from '../llm.js';
import type { MicroLora } from '../microlora.js';
import type { ModelInfo } from '../types.js';
import { toWire, type Reply, type Request, type StreamMessage } from './protocol.js';

/** What the worker's global scope is to us. */
interface Scope {
  onmessage: ((event: MessageEvent<Request>) => void) | null;
  postMessage(message: Reply, transfer?: Transferable[]): void;
}

export function serve(scope: Scope): void {
  const models = new Map<number, LLM>();
  const calls = new Map<number, AbortController>();
  /** Each model's MicroLoRAs the page opened, by id. */
  const microLoras = new WeakMap<LLM, Map<number, MicroLora>>();
  let next = 1;
  const snapshot = (llm: LLM | undefined): ModelInfo | null => {
    try {
      return llm ? llm.info() : null;
    } catch {
      return null; // disposed or crashed: the call's own answer says so
    }
  };
  const model = (handle: number): LLM => {
    const llm = models.get(handle);
    if (!llm) throw invalid(`no model ${handle} in this worker`);
    return llm;
  };

  async function answer(id: number, handle: number | undefined, run: (signal: AbortSignal) => Promise<{ value: unknown; transfer?: Transferable[] }>) {
    const controller = new AbortController();
    calls.set(id, controller);
    try {
      const { value, transfer = [] } = await run(controller.signal);
      scope.postMessage({ op: 'done', id, value, info: snapshot(models.get(handle ?? (value as { handle?: number })?.handle ?? -1)) }, transfer);
    } catch (e) {
      scope.postMessage({ op: 'failed', id, error: toWire(e), info: snapshot(handle === undefined ? undefined : models.get(handle)) });
    } finally {
      calls.delete(id);
    }
  }

  scope.onmessage = ({ data: req }) => {
    switch (req.op) {
      case 'load':
        void answer(req.id, undefined, async (signal) => {
          const options = { ...req.options, signal, onProgress: (progress: unknown) => scope.postMessage({ op: 'progress', id: req.id, progress }) };
          const { llm, header } = await loadWithHeader(req.source as Parameters<typeof loadWithHeader>[0], options);
          const handle = next++;
          models.set(handle, llm);
          return { value: { handle, header }, transfer: [header.buffer] };
        });
        return;
      case 'call':
        void answer(req.id, req.handle, async (signal) => {
          const llm = model(req.handle);
          const args = [...req.args];
          // The methods that take options take the call's signal in them; the state's bytes go back transferred.
          if (['score', 'embedWithUsage', 'loadAdapter'].includes(req.method)) args[1] = { ...(args[1] as object), signal };
          const value = await (llm[req.method] as (...a: unknown[]) => unknown).apply(llm, args);
          return { value, transfer: value instanceof Uint8Array ? [value.buffer] : [] };
        });
        return;
      case 'microLora':
        void answer(req.id, req.handle, async (signal) => {
          const llm = model(req.handle);
          const loras = microLoras.get(llm) ?? new Map<number, MicroLora>();
          microLoras.set(llm, loras);
          let lora: MicroLora | undefined;
          let value: unknown;
          if (req.method === 'open') {
            lora = await llm.microLora(req.args[0] as Parameters<LLM['microLora']>[0]);
            loras.set(lora.id, lora);
            value = { id: lora.id, name: lora.name };
          } else {
            lora = loras.get(req.lora ?? -1);
            if (!lora) throw invalid(`no MicroLoRA ${req.lora} in this worker`);
            // feedback takes the call's signal in its argument.
            if (req.method === 'feedback') value = await lora.feedback({ ...(req.args[0] as Parameters<MicroLora['feedback']>[0]), signal });
            else if (req.method !== 'state') value = await (lora[req.method] as (...a: unknown[]) => unknown).apply(lora, req.args);
          }
          // The state the page answers info() and exportGguf() from; the export's bytes are transferred.
          const gguf = lora.exportGguf();
          return { value: { value, state: { info: lora.info(), gguf } }, transfer: [gguf.buffer] };
        });
        return;
      case 'generate': {
        const { port } = req;
        const controller = new AbortController();
        port.onmessage = () => controller.abort(); // the only message the page sends on it: cancel
        const send = (m: StreamMessage) => port.postMessage(m);
        void (async () => {
          let llm: LLM | undefined;
          try {
            llm = model(req.handle);
            const it = llm.generate(req.prompt instanceof Uint32Array ? Array.from(req.prompt) : req.prompt, { ...req.options, signal: controller.signal });
            for (;;) {
              const r = await it.next();
              if (r.done) {
                send({ result: r.value, info: llm.info() });
                break;
              }
              send({ chunk: r.value });
            }
          } catch (e) {
            send({ error: toWire(e), info: snapshot(llm) });
          } finally {
            port.close();
          }
        })();
        return;
      }
      case 'cancel':
        calls.get(req.id)?.abort();
        return;
      case 'dispose':
        models.get(req.handle)?.dispose();
        models.delete(req.handle);
        return;
    }
  };
  scope.postMessage({ op: 'ready' });
}
