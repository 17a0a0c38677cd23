// The threaded build's worker start-up. wasm-bindgen-rayon's glue imports `startWorkers` from its own
// `workerHelpers.no-bundler.js`; scripts/build-wasm.sh puts this file in that one's place (the contract is
// the same: `startWorkers(module, memory, builder)`, and the file itself is each worker's script). It
// differs where the package meets bundlers and failures:
// - A worker starts from this file's own URL when that URL is on the page's origin, and from a blob: copy
//   only otherwise (a CDN). A bundler's dev server (Vite) rewrites this file's imports into absolute paths,
//   which a blob: URL cannot resolve.
// - A worker that cannot start (its script fails to load, it throws, or it never answers) rejects the start
//   with its reason instead of leaving it waiting forever; the workers already started are terminated.
// - Bundled into a worker's own script (Vite's default for workers), it says so at once instead of starting
//   threads that cannot run.

/** Generous: a worker only instantiates the already compiled module and imports the glue. */
const READY_TIMEOUT_MS = 60_000;

const INIT = 'wasm_bindgen_worker_init';
const READY = 'wasm_bindgen_worker_ready';
const FAILED = 'ruvllm_worker_failed';

// In a worker: wait for the init message (this file also runs as a module on the page, where other
// messages may arrive), instantiate the shared module and join the pool.
if (typeof WorkerGlobalScope !== 'undefined' || typeof window === 'undefined') {
  const onInit = async ({ data }) => {
    if (data?.type !== INIT) return;
    self.removeEventListener('message', onInit);
    try {
      const pkg = await import(/* @vite-ignore */ /* webpackIgnore: true */ data.mainJS);
      await pkg.default({ module_or_path: data.module, memory: data.memory });
      postMessage({ type: READY });
      pkg.wbg_rayon_start_worker(data.receiver);
    } catch (e) {
      postMessage({ type: FAILED, message: String(e?.message ?? e) });
    }
  };
  self.addEventListener('message', onInit);
}

// Kept in a module variable: Firefox collects workers that share a wasm memory unless they are referenced.
let workers = [];

export async function startWorkers(module, memory, builder) {
  const count = builder.numThreads();
  if (count === 0) throw new Error('num_threads must be > 0');
  const init = { type: INIT, module, memory, receiver: builder.receiver(), mainJS: builder.mainJS() };
  const url = await scriptUrl();
  const starting = [];
  try {
    await Promise.all(
      Array.from({ length: count }, () => {
        const worker = new Worker(url, { type: 'module' });
        starting.push(worker);
        const ready = whenReady(worker);
        worker.postMessage(init);
        return ready;
      }),
    );
  } catch (e) {
    for (const worker of starting) worker.terminate();
    throw e;
  } finally {
    if (url.startsWith('blob:')) URL.revokeObjectURL(url);
  }
  workers = starting;
  builder.build();
}

async function scriptUrl() {
  const here = import.meta.url;
  // In a worker whose own script is this module's URL, a bundler put this file inside that script (Vite builds
  // workers as one 'iife' file by default): started from it, a thread would run that script, not this file.
  if (typeof WorkerGlobalScope !== 'undefined' && here === self.location.href) {
    throw new Error(
      "the bundler built these thread helpers into the engine worker's own script (Vite's default worker.format, 'iife'): " +
        "set worker: { format: 'es' } in vite.config to run the threaded build in the engine worker",
    );
  }
  if (typeof location !== 'undefined' && new URL(here).origin === location.origin) return here;
  if (here.startsWith('file:') && typeof location !== 'undefined' && location.protocol !== 'file:') {
    throw new Error(
      `this module's import.meta.url is a build-time path (${here}): the bundler replaced import.meta.url ` +
        '(webpack does by default), and the workers need the URL the page loads this module from',
    );
  }
  const script = await fetch(here).then((r) => r.blob());
  return URL.createObjectURL(script);
}

function whenReady(worker) {
  return new Promise((resolve, reject) => {
    const done = (error) => {
      clearTimeout(timer);
      worker.removeEventListener('message', onMessage);
      worker.removeEventListener('error', onError);
      if (error) reject(new Error(`a wasm thread's worker failed to start: ${error}`));
      else resolve();
    };
    const onMessage = ({ data }) => {
      if (data?.type === READY) done();
      else if (data?.type === FAILED) done(data.message);
    };
    // A module worker whose script or imports cannot load gets an error event without a message.
    const onError = (e) => done(e?.message || 'its script or one of its imports could not be loaded');
    const timer = setTimeout(() => done(`no answer within ${READY_TIMEOUT_MS / 1000} s`), READY_TIMEOUT_MS);
    worker.addEventListener('message', onMessage);
    worker.addEventListener('error', onError);
  });
}
