// The chat demo (www/), built by Vite and served by `vite preview` (COOP/COEP, the default model from the local model
// cache), in headless Chromium: the real model loads with progress, answers the France question at temperature 0
// while the answer streams, stops mid-answer; after a reload the conversation is listed, the model comes from the
// package's model store (OPFS) with no request for it, and continuing the conversation starts from the persisted
// prefix cache; a download cut short or cancelled leaves nothing listed, and a full storage loads the model uncached; a
// dropped GGUF loads and a file that is not one says so; HTML in stored model output shows as text and runs nothing;
// the "Memory & routing" panel routes each message, recalls a related conversation's turns, and keeps the routes added
// in it across a reload; 👎 on an answer trains the model's MicroLoRA one step, "Answer with my adapter" makes the
// next answer its (and says so), its steps come back from IndexedDB after a reload, and a damaged one is an error that
// leaves the chat usable; the "Insights" panel's witness log lists the answers and the thumb after a reload and finds
// the past requests like a text; the answer format JSON Schema (Settings) gives JSON of the schema, shown formatted, a schema
// that is not JSON is not sent, and one the engine cannot make a grammar of is an E_GRAMMAR error; conversations are
// renamed, searched, exported (JSON, Markdown) and imported again (a bad file changes nothing), deleted with an Undo,
// and have settings of their own (a preset's system prompt, max tokens); a code block's Copy button copies it, and TeX
// in an answer is typeset by KaTeX; the page has its icon (no /favicon.ico 404) and SVG thumbs, and the status line a
// short form at phone width; axe-core finds no serious or critical violation; screenshots at phone and desktop width,
// light and dark, go to target/www/.
// Run: node --test tests/browser/www.test.mjs   (after the package's build: scripts/build-wasm.sh, npm run build in npm/)
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { after, before, test } from 'node:test';
import { MODEL_PATH, REPO_DIR, freePort } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';
import { launchChromium } from './chromium.mjs';

const WWW = join(REPO_DIR, 'www');
const SHOTS = join(REPO_DIR, 'target', 'www');
const MODEL_URL = `/models/${basename(MODEL_PATH)}`;

let browser;
let page;
let origin;
const modelRequests = [];
const pageErrors = [];
const notFound = []; // URLs the page asked for and got a 404
const stops = [];

/** Start `vite preview` or the dev server (`vite`) in www/; resolves to its origin once it listens. */
async function startVite(command) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const args = ['node_modules/vite/bin/vite.js', ...(command === 'dev' ? [] : [command]), '--host', '127.0.0.1', '--port', String(port), '--strictPort'];
  const child = spawn(process.execPath, args, { cwd: WWW, env: { ...process.env, RUVLLM_MODEL: MODEL_PATH, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'inherit'] });
  stops.push(async () => {
    if (child.exitCode === null) {
      child.kill();
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });
  await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`vite ${command} did not start: ${out}`)), 60_000);
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes(url)) clearTimeout(timer), resolve();
    });
    child.once('exit', (code) => reject(new Error(`vite ${command} exited with ${code}: ${out}`)));
  });
  return url;
}

before(async () => {
  // scripts/www.sh installs www/'s pinned dependencies when they are missing, then runs `vite build`.
  execFileSync(join(REPO_DIR, 'scripts', 'www.sh'), ['build'], { stdio: 'inherit' });
  mkdirSync(SHOTS, { recursive: true });
  origin = await startVite('preview');
  browser = await launchChromium();
  page = await browser.context.newPage();
  await page.setViewportSize({ width: 1280, height: 800 });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('request', (r) => r.url().endsWith('.gguf') && modelRequests.push(r.url()));
  page.on('response', (r) => r.status() === 404 && notFound.push(r.url()));
  await page.goto(origin);
});

after(async () => {
  await browser?.close();
  for (const stop of stops) await stop();
});

const state = () => page.evaluate(() => document.body.dataset.state);
const counter = (name) => page.evaluate((n) => Number(document.body.dataset[n] ?? 0), name);
const waitCounter = (name, above, timeout = 180_000) =>
  page.waitForFunction(([n, v]) => Number(document.body.dataset[n] ?? 0) > v, [name, above], { timeout });
const waitReady = (timeout = 180_000) => page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout });
const lastAnswer = () => page.locator('article.msg.assistant').last();

/** Wait until the memory panel has opened the router and the memory (the embedding model loads beside the chat model,
 * slowly on a loaded machine); if they do not open, the error says what the panel says. */
async function memoryOpened() {
  await page.waitForFunction(() => document.body.dataset.memoryReady === '1', null, { timeout: 300_000 }).catch(async (e) => {
    throw new Error(`the routes and the memory did not open: "${await page.locator('#mem-status').textContent()}" (${e.message})`);
  });
}

/** Wait until the Insights panel has opened the witness log, on the memory panel's embedding model (memoryOpened). */
async function witnessOpened() {
  await memoryOpened();
  await page.waitForFunction(() => document.body.dataset.witnessReady === '1', null, { timeout: 60_000 }).catch(async (e) => {
    throw new Error(`the witness log did not open: "${await page.locator('#ins-status').textContent()}" (${e.message})`);
  });
}

async function openSettings() {
  if (!(await page.locator('#settings-panel').evaluate((d) => d.open))) await page.getByText('Settings', { exact: true }).click();
}

/** Send `text` with the keyboard (Enter) and wait for the reply and for the prefix cache's pages to be stored. */
async function ask(text, { whileStreaming } = {}) {
  const replies = await counter('replies');
  const persisted = await counter('persisted');
  await page.getByLabel('Message', { exact: true }).fill(text);
  await page.getByLabel('Message', { exact: true }).press('Enter');
  await whileStreaming?.();
  await waitCounter('replies', replies);
  await waitCounter('persisted', persisted);
}

test('a first visit: the page says what to do, lists chat models only, and the first message loads the default model and is answered', async () => {
  // What to do, before any model is loaded: type; Send is there. (The list is whole once the local server's models
  // are described from their headers.)
  await page.waitForFunction(() => document.body.dataset.modelsListed === '1');
  assert.match(await page.locator('#messages p.empty').textContent(), /^Type a message to start: the first one loads SmolLM2 135M Instruct · Q4_1/);
  assert.equal(await page.getByRole('button', { name: 'Send', exact: true }).isDisabled(), false);
  // The list: chat models, each with its quantization and context (read from its header), no embedding model.
  assert.equal(await page.locator('#model-select').inputValue(), MODEL_URL);
  const options = await page.locator('#model-select option').allTextContents();
  assert.ok(options.every((o) => /· (Q\d\w*|I?Q\d\w*|F16|BF16|F32) · .*\d+k? context/.test(o)) && !options.some((o) => /MiniLM/i.test(o)), options.join(' | '));
  await openSettings();
  await page.getByLabel('Temperature', { exact: true }).fill('0');
  await page.evaluate(() => {
    window.progressSeen = [];
    new MutationObserver(() => window.progressSeen.push(document.getElementById('progress-text').textContent)).observe(
      document.getElementById('progress-text'),
      { childList: true, characterData: true, subtree: true },
    );
  });
  await ask('Name the capital of France.', {
    whileStreaming: () =>
      page.evaluate(() => {
        window.streamed = [];
        new MutationObserver(() => {
          const answers = document.querySelectorAll('article.msg.assistant .content');
          const text = answers[answers.length - 1]?.textContent ?? '';
          if (text && window.streamed.at(-1) !== text) window.streamed.push(text);
        }).observe(document.getElementById('messages'), { childList: true, characterData: true, subtree: true });
      }),
  });
  const seen = await page.evaluate(() => window.progressSeen);
  // One pass: the download streams into the engine as it arrives (and into the package's model store).
  assert.ok(seen.some((t) => /^Downloading [\d.]+ [KMG]?B of 98(?:\.\d)? MB · [\d.]+ [KMG]?B\/s · \d+ s left$/.test(t)), `progress: ${seen.join(' | ')}`);
  // The status line in plain words; the build and SIMD in its tooltip (Chromium has relaxed SIMD). The header names the
  // model by its file.
  assert.match(await page.locator('#engine .long').textContent(), /^Ready · SmolLM2 135M Instruct · on the CPU \(.+\) · 2 threads$/);
  assert.equal(await page.locator('#engine').getAttribute('title'), 'WebAssembly relaxed SIMD, the wasm-mt build');
  assert.match(await page.locator('#model-name').textContent(), /^SmolLM2 135M Instruct · 98(\.\d)? MB$/);
  // The download is kept, whole, by the package's model store.
  await page.locator('#cached li', { hasText: basename(MODEL_PATH) }).waitFor();
  assert.match(await page.locator('#cached li').first().textContent(), /98(\.\d)? MB/);
  // The answer streamed, names Paris, and says its speeds.
  const answer = await lastAnswer().locator('.content').textContent();
  assert.match(answer, /Paris/);
  const streamed = await page.evaluate(() => window.streamed);
  assert.ok(streamed.length >= 2 && streamed[0].length < answer.length, `the answer came at once: ${JSON.stringify(streamed)}`);
  assert.match(await lastAnswer().locator('.meta').textContent(), /in prompt, \d+ generated · prefill [\d.]+ tok\/s, decode [\d.]+ tok\/s/);
  assert.match(await page.locator('#speed .long').textContent(), /^prompt read at [\d.]+ tok\/s · answer at [\d.]+ tok\/s$/);
  assert.match(await page.locator('#context .long').textContent(), /^context: \d+ of 4096 tokens$/);
});

test('Stop (the button, then Esc on a regenerated answer) ends a long answer mid-way', async () => {
  await page.getByRole('button', { name: 'New chat' }).click();
  const midAnswer = async () => {
    await page.waitForFunction(
      () => document.body.dataset.state === 'generating' && document.querySelector('article.msg.assistant:last-of-type .content')?.textContent.length > 40,
      null,
      { timeout: 120_000 },
    );
  };
  await ask('Write a long story about a dragon who learns to fly.', {
    whileStreaming: async () => {
      await midAnswer();
      await page.getByRole('button', { name: 'Stop' }).click();
    },
  });
  assert.match(await lastAnswer().locator('.meta').textContent(), /stopped/);
  assert.ok((await lastAnswer().locator('.content').textContent()).length > 40);
  assert.equal(await page.getByRole('button', { name: 'Send', exact: true }).isDisabled(), false);
  // Regenerate, and stop that one with Esc.
  const replies = await counter('replies');
  await lastAnswer().getByRole('button', { name: 'Regenerate' }).click();
  await midAnswer();
  await page.keyboard.press('Escape');
  await waitCounter('replies', replies);
  assert.match(await lastAnswer().locator('.meta').textContent(), /stopped/);
  assert.equal(await state(), 'ready');
});

test('after a reload: the conversation is listed, the model comes from the package\'s model store, continuing starts from memory', async () => {
  modelRequests.length = 0;
  await page.reload();
  await waitReady(); // the last model loads by itself from the browser's cache
  assert.deepEqual(modelRequests, [], 'the second load requested the model file');
  const prepared = await counter('prepared');
  await page.getByRole('button', { name: 'Name the capital of France.', exact: true }).click();
  assert.match(await lastAnswer().locator('.content').textContent(), /Paris/);
  // Opened, the conversation is made ready from the persisted prefix cache before anything is asked.
  await waitCounter('prepared', prepared);
  const ready = (await page.locator('#memory').textContent()).match(/(\d+) of (\d+) tokens from memory/);
  assert.ok(ready && Number(ready[1]) > 0, `not made ready from memory: ${await page.locator('#memory').textContent()}`);
  assert.equal(await page.getByLabel('Temperature', { exact: true }).inputValue(), '0', 'the settings were not kept');
  await ask('And what is the capital of Germany?');
  const meta = await lastAnswer().locator('.meta').textContent();
  const fromMemory = Number(meta.match(/(\d+) tokens? from memory/)?.[1] ?? 0);
  // The question evaluated only its own tokens: the whole conversation before it was in the model.
  assert.ok(fromMemory >= Number(ready[2]), `${fromMemory} tokens from memory, ${ready[2]} made ready: ${meta}`);
  assert.ok((await lastAnswer().locator('.content').textContent()).length > 0);
});

test('edit and resend replaces a question and what followed it; Copy copies an answer', async () => {
  const question = page.locator('article.msg.user').last();
  await question.getByRole('button', { name: 'Edit and resend' }).click();
  await question.getByLabel('Edit message').fill('And what is the capital of Italy?');
  const replies = await counter('replies');
  await question.getByRole('button', { name: 'Save and send' }).click();
  await waitCounter('replies', replies);
  assert.equal(await page.locator('article.msg').count(), 4);
  assert.equal(await page.locator('article.msg.user .content').last().textContent(), 'And what is the capital of Italy?');
  const answer = await lastAnswer().locator('.content').textContent();
  assert.match(answer, /Rome/);
  await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  await lastAnswer().getByRole('button', { name: 'Copy answer' }).click();
  await page.locator('#notice', { hasText: 'Copied.' }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), answer.trim());
});

/** On the page: watch answer `index`'s thumbs, recording whether they were ever seen disabled with a progress bar. */
function watchFeedback(index) {
  return page.evaluate((i) => {
    window.trainingSeen = false;
    const box = document.querySelector(`article[data-index="${i}"] .feedback`);
    new MutationObserver(() => {
      if (box.querySelector('progress') && [...box.querySelectorAll('button')].every((b) => b.disabled)) window.trainingSeen = true;
    }).observe(box, { childList: true, subtree: true, attributes: true });
  }, index);
}

test('learning: 👎 trains the MicroLoRA a step; "Answer with my adapter" answers with it; its steps outlive a reload', async () => {
  const learning = page.locator('#learning-panel');
  const stats = learning.locator('#lora-stats');
  const steps = (n) => page.waitForFunction((v) => document.getElementById('lora-stats').dataset.steps === v, String(n), { timeout: 120_000 });
  const NAME = 'smollm2135minstructq41'; // the model's file name in lowercase letters and digits
  // The model's MicroLoRA opened with it: a new one (this browser profile is fresh).
  await steps(0);
  assert.match(await stats.textContent(), new RegExp(`^MicroLoRA ${NAME} \\(0 steps\\) · \\d+ weights \\(rank \\d+, last \\d+ layers\\) · off: the base model answers$`));
  await openSettings();
  await page.getByLabel('Max tokens', { exact: true }).fill('32'); // short answers: this test is about what is done with them
  await page.getByRole('button', { name: 'New chat' }).click();
  await witnessOpened(); // Insights, below
  await ask('Name a colour.');
  const answer = page.locator('article.msg.assistant').first();
  assert.match(await answer.locator('.meta').textContent(), /^base model · /);

  // 👎: one training step, its thumbs disabled with a progress bar meanwhile; then its loss and time, and its count.
  await watchFeedback(1);
  const feedbacks = await counter('feedbacks');
  await answer.getByRole('button', { name: 'Bad answer' }).click();
  await waitCounter('feedbacks', feedbacks);
  assert.equal(await page.evaluate(() => window.trainingSeen), true, 'the thumbs were not disabled with progress');
  assert.match(await answer.locator('.feedback .learned').textContent(), /^Taught as a bad answer: step 1 · loss \d+\.\d{3} · \d+\.\d{2} s$/);
  assert.equal(await answer.getByRole('button', { name: 'Good answer' }).isDisabled(), false);
  assert.equal(await stats.getAttribute('data-steps'), '1');
  assert.equal(await page.locator('#error').isHidden(), true);
  await learning.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, 'www-1280x800-light-learning.png') });

  // With the adapter on, the answer is the MicroLoRA's. The session's keys and values were the base model's, and the
  // prefix cache holds the base model's only: nothing of the conversation comes from memory (the base model's next
  // answer in it would start from its first).
  await learning.getByLabel('Answer with my adapter').check();
  const witnessed = await counter('witnessed');
  await ask('Name another colour.');
  await waitCounter('witnessed', witnessed); // the witness log (Insights) holds the answer and the thumb
  const meta = await lastAnswer().locator('.meta').textContent();
  assert.match(meta, new RegExp(`^MicroLoRA ${NAME} \\(1 step\\) · `));
  assert.doesNotMatch(meta, /from memory/);

  // After a reload: the adapter comes back from IndexedDB with its step, the switch is still on, and the
  // conversation still says which adapter gave each answer and what feedback it had.
  await page.reload();
  await waitReady();
  await steps(1);
  assert.match(await stats.textContent(), new RegExp(`^MicroLoRA ${NAME} \\(1 step\\) · \\d+ weights`));
  assert.equal(await learning.getByLabel('Answer with my adapter').isChecked(), true);
  await page.getByRole('button', { name: 'Name a colour.', exact: true }).click();
  assert.match(await answer.locator('.meta').textContent(), /^base model · /);
  assert.equal(await answer.locator('.feedback .learned').textContent(), 'Taught as a bad answer: step 1');
  assert.match(await lastAnswer().locator('.meta').textContent(), new RegExp(`^MicroLoRA ${NAME} \\(1 step\\) · `));

  // Insights: the witness log came back from IndexedDB with both answers, the first with its thumb down; the past
  // requests most like a text are found.
  await witnessOpened();
  await page.locator('#insights-panel').evaluate((d) => (d.open = true));
  const listed = (id) => page.locator(`#${id} li p.turn`).allTextContents();
  assert.deepEqual((await listed('ins-recent')).slice(0, 2), ['Name another colour.', 'Name a colour.']);
  assert.equal((await listed('ins-low'))[0], 'Name a colour.');
  assert.match(await page.locator('#ins-stats').textContent(), /^\d+ requests recorded · \d+(\.\d)? [KMG]?B in this browser$/);
  await page.getByLabel('Past requests like').fill('Which colour?');
  await page.getByRole('button', { name: 'Find', exact: true }).click();
  await page.locator('#ins-found li p.turn').first().waitFor();
  assert.match((await listed('ins-found'))[0], /^Name (a|another) colour\.$/);

  // A damaged record: an E_ADAPTER error, the base model answers, the thumbs are disabled and say why; "Start a new
  // adapter" replaces it.
  await page.evaluate(async () => {
    const db = await new Promise((resolve, reject) => {
      const req = indexedDB.open('ruvllm-microlora');
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
    await new Promise((resolve, reject) => {
      const tx = db.transaction('pages', 'readwrite');
      const pages = tx.objectStore('pages');
      pages.openCursor().onsuccess = (e) => {
        const cursor = e.target.result;
        if (!cursor) return;
        const { key, bytes } = cursor.value;
        bytes[bytes.length >> 1] ^= 1;
        cursor.update({ key, bytes });
        cursor.continue();
      };
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
    });
    db.close();
  });
  await page.reload();
  await waitReady();
  const error = page.getByRole('alert');
  await error.waitFor({ timeout: 60_000 });
  assert.equal(await error.getAttribute('data-code'), 'E_ADAPTER');
  assert.match(await error.textContent(), /Your adapter for this model could not be read/);
  await ask('Name a fruit.');
  assert.match(await lastAnswer().locator('.meta').textContent(), /^base model · /);
  assert.equal(await lastAnswer().getByRole('button', { name: 'Good answer' }).isDisabled(), true);
  assert.match(await lastAnswer().getByRole('button', { name: 'Good answer' }).getAttribute('title'), /^Your adapter could not be opened/);
  await learning.getByRole('button', { name: 'Start a new adapter' }).click();
  await steps(0);
  assert.equal(await lastAnswer().getByRole('button', { name: 'Good answer' }).isDisabled(), false);

  await learning.getByLabel('Answer with my adapter').uncheck(); // the base model for the tests after this one
  await openSettings();
  await page.getByLabel('Max tokens', { exact: true }).fill('512');
  await page.locator('#error').evaluate((e) => (e.hidden = true));
});

test('a dropped GGUF file loads', async () => {
  const loaded = page.waitForFunction(() => document.getElementById('model-name').title === 'dropped.gguf' && document.body.dataset.state === 'ready', null, { timeout: 180_000 });
  await page.evaluate(async (url) => {
    const file = new File([await (await fetch(url)).blob()], 'dropped.gguf');
    const data = new DataTransfer();
    data.items.add(file);
    document.getElementById('messages').dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
  }, MODEL_URL);
  await loaded;
  assert.match(await page.locator('#model-name').textContent(), /98(\.\d)? MB/);
});

test('a picked file that is not a GGUF shows what is wrong', async () => {
  await page.locator('#model-file').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('These are my notes, not a model.\n'.repeat(100)) });
  const error = page.getByRole('alert');
  await error.waitFor();
  assert.equal(await error.getAttribute('data-code'), 'E_GGUF');
  assert.match(await error.textContent(), /not a GGUF model file/);
  assert.equal(await state(), 'idle');
});

/** A GGUF header with no tensors, of architecture `arch`. */
function ggufHeader(arch) {
  const u32 = (n) => Buffer.from(new Uint32Array([n]).buffer);
  const u64 = (n) => Buffer.from(new BigUint64Array([BigInt(n)]).buffer);
  const str = (s) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
  return Buffer.concat([Buffer.from('GGUF'), u32(3), u64(0), u64(1), str('general.architecture'), u32(8), str(arch)]);
}

/** The alert's code and text after `action`. */
async function alertAfter(action) {
  await page.locator('#error').evaluate((e) => (e.hidden = true));
  await action();
  const error = page.getByRole('alert');
  await error.waitFor();
  return { code: await error.getAttribute('data-code'), text: await error.textContent() };
}

test('a model of an architecture the engine does not run says so', async () => {
  const { code, text } = await alertAfter(() => page.locator('#model-file').setInputFiles({ name: 'mamba.gguf', mimeType: 'application/octet-stream', buffer: ggufHeader('mamba') }));
  assert.equal(code, 'E_UNSUPPORTED_ARCH', text);
  assert.match(text, /architecture is not supported.*mamba/);
});

test('WebGPU asked for where there is none: the model runs on the CPU, and the page says so', async () => {
  await openSettings();
  await page.getByLabel('Backend').selectOption('webgpu');
  await page.getByRole('button', { name: 'Load', exact: true }).click();
  await waitReady();
  assert.match(await page.locator('#notice').textContent(), /WebGPU could not run the model \(This browser offers no WebGPU\..*\): it runs on the CPU instead/);
  assert.match(await page.locator('#engine .long').textContent(), /^Ready · .+ · on the CPU/);
  await page.getByLabel('Backend').selectOption('auto');
});

test('a download that breaks off (from a server with no validator to resume with) is an error and leaves nothing in the store', async () => {
  // A real server that closes the connection after 4,096 bytes (the engine's worker fetches it: a page's route
  // would not see that request).
  const cut = await serve({ files: { '/cut.gguf': MODEL_PATH }, validators: false, cut: () => 4096, headers: { 'access-control-allow-origin': '*' } });
  try {
    const { code, text } = await alertAfter(async () => {
      await page.getByLabel('GGUF URL (a CORS-enabled host)').fill(`${cut.origin}/cut.gguf`);
      await page.getByRole('button', { name: 'Load URL' }).click();
    });
    assert.equal(code, 'E_FETCH', text);
    assert.match(text, /broke off/);
    assert.equal(await page.locator('#cached li', { hasText: 'cut.gguf' }).count(), 0); // the list is LLM.models.list()
  } finally {
    await cut.close();
  }
});

test('a model too large for wasm memory is refused before its download', async () => {
  const url = `${origin}/models/huge.gguf`;
  await page.route(url, (route) => route.fulfill({ status: 200, headers: { 'content-type': 'application/octet-stream', 'content-length': String(5 * 1024 ** 3) }, body: Buffer.alloc(64) }));
  const { code, text } = await alertAfter(async () => {
    await page.getByLabel('GGUF URL (a CORS-enabled host)').fill(url);
    await page.getByRole('button', { name: 'Load URL' }).click();
  });
  assert.equal(code, 'E_MODEL_TOO_LARGE', text);
  assert.match(text, /does not fit in the browser's WebAssembly memory/);
});

test('Cancel stops a download, and nothing is cached', async () => {
  const url = `${origin}/models/slow.gguf`;
  let pending;
  await page.route(url, (route) => void (pending = route)); // the server never answers
  await page.getByLabel('GGUF URL (a CORS-enabled host)').fill(url);
  await page.getByRole('button', { name: 'Load URL' }).click();
  await page.getByRole('button', { name: 'Cancel' }).click();
  await page.locator('#notice', { hasText: 'Model load cancelled.' }).waitFor();
  assert.equal(await state(), 'idle');
  assert.equal(await page.locator('#progress-box').isHidden(), true);
  assert.equal(await page.locator('#cached li', { hasText: 'slow.gguf' }).count(), 0);
  await pending?.abort();
});

/** The page's stored conversation `id` (IndexedDB "ruvllm-chat"), or `record` stored as it (then `undefined`). */
function storedConversation(id, record) {
  return page.evaluate(
    async ([id, record]) => {
      const db = await new Promise((resolve, reject) => {
        const req = indexedDB.open('ruvllm-chat', 1);
        req.onsuccess = () => resolve(req.result);
        req.onerror = () => reject(req.error);
      });
      try {
        return await new Promise((resolve, reject) => {
          const tx = db.transaction('conversations', record ? 'readwrite' : 'readonly');
          const req = record ? tx.objectStore('conversations').put(record) : tx.objectStore('conversations').get(id);
          tx.oncomplete = () => resolve(record ? undefined : req.result);
          tx.onerror = () => reject(tx.error);
        });
      } finally {
        db.close();
      }
    },
    [id, record ?? null],
  );
}

/** A stored conversation of one question and the answer `content` (model output of an earlier visit). */
const storedAnswer = (id, title, content) => {
  const now = Date.now();
  return storedConversation(id, { id, title, createdAt: now, updatedAt: now, messages: [{ role: 'user', content: title }, { role: 'assistant', content, meta: {} }] });
};

test('HTML in the model\'s output shows as text and runs nothing (the stored conversation is rendered again)', async () => {
  // Model output from an earlier visit, as the page stored it: raw HTML, a javascript: link, and Markdown.
  const output = [
    'Here you go: <img src=x onerror="window.pwned = 1"> and <script>window.pwned = 2</script>',
    '',
    '<iframe src="javascript:window.parent.pwned = 3"></iframe>',
    '',
    '[click](javascript:window.pwned=4) **bold**',
    '',
    '```js',
    'const answer = 42; // code',
    '```',
  ].join('\n');
  await storedAnswer('xss', 'Show me HTML', output);
  await page.reload();
  await page.getByRole('button', { name: 'Show me HTML', exact: true }).click();
  const content = lastAnswer().locator('.content');
  await content.waitFor();
  await page.waitForTimeout(500);
  const text = await content.textContent();
  assert.ok(text.includes('<img src=x onerror="window.pwned = 1">'), text);
  assert.ok(text.includes('<script>window.pwned = 2</script>'), text);
  assert.equal(await content.locator('img, script, iframe, [onerror], a[href^="javascript"]').count(), 0);
  assert.equal(await content.locator('strong').textContent(), 'bold');
  assert.ok((await content.locator('pre code.hljs.language-js span').count()) > 0, 'no highlighted code');
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  await page.screenshot({ path: join(SHOTS, 'www-1280x800-light-markdown.png') });
  await waitReady(); // the model of the last visit, from the browser's cache
});

test('memory & routing: a message is routed, another conversation recalls it; routes added in the panel outlive a reload', async () => {
  const panel = page.locator('#memory-panel');
  const routes = panel.locator('#mem-routes');
  // The router (with its default routes) and the memory open on the embedding model, loaded when the page opened.
  await memoryOpened();
  await routes.locator('li[data-route="code"]').waitFor();
  // Long-term memory is off by default: on, a message recalls earlier turns that score high enough.
  assert.equal(await panel.getByLabel('Use long-term memory').isChecked(), false);
  await panel.getByLabel('Use long-term memory').check();
  await openSettings();
  await page.getByLabel('Max tokens', { exact: true }).fill('48'); // short answers: this test is about what comes before and after them
  await page.getByRole('button', { name: 'New chat' }).click();
  // The panel says what it did once the change is stored in IndexedDB.
  const said = (text) => panel.locator('#mem-status', { hasText: text }).waitFor({ timeout: 120_000 });
  await panel.getByLabel('Route name').fill('gardening');
  await panel.getByLabel('Example utterances').fill('What are good plants for a balcony garden?\nHow often should I water tomatoes?\nWhen do I plant tulip bulbs?');
  await panel.getByRole('button', { name: 'Add route' }).click();
  await said('Route gardening: 3 utterances added.');
  assert.match(await routes.locator('li[data-route="gardening"]').textContent(), /^gardening · 3 utterances · threshold [\d.]+/);

  // A message that is one of the route's utterances takes it; the other routes are the runners-up.
  await ask('What are good plants for a balcony garden?');
  const decision = panel.locator('#mem-decision');
  assert.equal(await decision.getAttribute('data-route'), 'gardening');
  assert.match(await decision.textContent(), /Route: gardening · score [\d.]+Runners-up: .+ [\d.]+/);
  assert.match(await panel.locator('#mem-recalled').textContent(), /None for this message/);

  // Another conversation on the same topic: the first one's turns are recalled for it (and given to the model).
  await page.getByRole('button', { name: 'New chat' }).click();
  await ask('What are good plants for a small balcony garden?');
  const recalled = panel.locator('#mem-recalled li', { hasText: 'from “What are good plants for a balcony garden?”' });
  assert.ok((await recalled.count()) >= 1, `nothing recalled: ${await panel.locator('#mem-recalled').textContent()}`);
  assert.match(await recalled.first().textContent(), /^(You|Assistant) · score [\d.]+ \(at least 0\.40\) · from “.+”.+/);
  assert.match(await panel.locator('#mem-stats').textContent(), /Remembered: \d+ turns from \d+ conversations? · [\d.]+ [KM]?B of 16.8 MB/);

  // A correction: the message routed takes the route chosen (the text box starts with it).
  assert.equal(await panel.getByLabel('Correction: this text').inputValue(), 'What are good plants for a small balcony garden?');
  await panel.getByLabel('takes the route').selectOption('gardening');
  await panel.getByRole('button', { name: 'Teach' }).click();
  await said('Route gardening learned');
  assert.match(await routes.locator('li[data-route="gardening"]').textContent(), /^gardening · 4 utterances/);

  // Forgetting this conversation's turns leaves the other's.
  await panel.getByRole('button', { name: 'Forget this conversation\'s turns' }).click();
  await said('Forgot');
  assert.match(await panel.locator('#mem-status').textContent(), /^Forgot [1-9]\d* turns? of this conversation\.$/);
  const left = Number(await panel.locator('#mem-stats').getAttribute('data-turns'));
  assert.ok(left > 0, 'the first conversation\'s turns went too');

  // After a reload the routes are the same (the one added and corrected too), and the conversation shows its decision.
  await page.reload();
  await waitReady();
  await memoryOpened();
  assert.equal(await routes.locator('li[data-route="gardening"]').count(), 1, `the routes after a reload: ${await routes.textContent()}`);
  assert.match(await routes.locator('li[data-route="gardening"]').textContent(), /^gardening · 4 utterances/);
  for (const name of ['code', 'math', 'chit-chat']) assert.equal(await routes.locator(`li[data-route="${name}"]`).count(), 1, name);
  await page.getByRole('button', { name: 'What are good plants for a small balcony garden?', exact: true }).click();
  await panel.locator('#mem-decision[data-route="gardening"]').waitFor();
  assert.ok((await recalled.count()) >= 1);
  assert.equal(await panel.locator('#mem-stats').getAttribute('data-turns'), String(left));
  await openSettings();
  await page.getByLabel('Max tokens', { exact: true }).fill('512');
});

test('answer format: JSON Schema gives JSON of the schema, formatted; a schema not JSON is not sent; a bad one is E_GRAMMAR', async () => {
  await openSettings();
  const schemaBox = page.getByRole('textbox', { name: /^JSON Schema/ });
  assert.equal(await schemaBox.isHidden(), true, 'the schema box shows for Text');
  await page.getByLabel('Answer format').selectOption('json_schema');
  assert.ok(JSON.parse(await schemaBox.inputValue()).required.length > 0, 'no example schema');
  await page.getByRole('button', { name: 'New chat' }).click();

  // Text that is not JSON: the form says so and nothing is sent.
  await schemaBox.fill('{"type": "object",');
  assert.match(await page.locator('#s-schema-error').textContent(), /^The schema is not valid JSON/);
  assert.equal(await schemaBox.getAttribute('aria-invalid'), 'true');
  await page.getByLabel('Message', { exact: true }).fill('Where is the Eiffel Tower?');
  await page.getByLabel('Message', { exact: true }).press('Enter');
  await page.locator('#notice', { hasText: 'Not sent' }).waitFor();
  assert.equal(await page.locator('article.msg').count(), 0);

  // A schema: the answer is JSON of it (the request's response_format), shown pretty-printed in a JSON code block.
  const schema = {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 30 }, country: { type: 'string', maxLength: 30 } },
    required: ['city', 'country'],
    additionalProperties: false,
  };
  await schemaBox.fill(JSON.stringify(schema, null, 2));
  assert.equal(await page.locator('#s-schema-error').textContent(), '');
  assert.equal(await page.evaluate(() => JSON.parse(localStorage.getItem('ruvllm-chat-settings')).answerFormat), 'json_schema');
  await ask('Where is the Eiffel Tower? Give its city and country.');
  const shown = await lastAnswer().locator('.content pre code.language-json').textContent();
  const answer = JSON.parse(shown);
  assert.deepEqual(Object.keys(answer).sort(), ['city', 'country'], shown);
  assert.ok(typeof answer.city === 'string' && typeof answer.country === 'string', shown);
  assert.equal(shown, JSON.stringify(answer, null, 2));
  assert.match(await lastAnswer().locator('.meta').textContent(), /^base model · JSON Schema · .*\d+ in prompt, \d+ generated/);
  await schemaBox.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, 'www-1280x800-light-json.png') });

  // A schema the engine cannot make a grammar of: its error, with the engine's message, and no answer.
  await schemaBox.fill('{"type": "objekt"}');
  const { code, text } = await alertAfter(() => ask('Where is the Louvre?'));
  assert.equal(code, 'E_GRAMMAR', text);
  assert.match(text, /could not make a grammar of the answer format's schema.*objekt/);
  assert.equal(await lastAnswer().locator('.content').textContent(), '');
  assert.match(await lastAnswer().locator('.meta').textContent(), /failed: /);

  await page.getByLabel('Answer format').selectOption('text'); // text for the tests after this one
  assert.equal(await schemaBox.isHidden(), true);
  await page.locator('#error').evaluate((e) => (e.hidden = true));
});

// ---- the conversation tools (sidebar, "This conversation"), answers' code and math, icons, the status line --------

const conversationList = () => page.locator('#conversations');
const listed = (title) => conversationList().getByRole('button', { name: title, exact: true });

/** Open the conversation listed as `title`; resolves once it is open (the list marks it). */
async function openListed(title) {
  await listed(title).click();
  await page.waitForFunction((t) => document.querySelector('#conversations li[aria-current] .open')?.textContent === t, title);
}

/** The titles listed once the search `query` has been typed (the list is drawn again from the store). */
async function search(query) {
  await page.getByLabel('Search conversations').fill(query);
  await page.waitForFunction((q) => document.getElementById('conversations').dataset.query === q, query);
  return conversationList().locator('.open').allTextContents();
}

/** The text of the file that `button`'s click downloads. */
async function downloaded(button) {
  const [file] = await Promise.all([page.waitForEvent('download'), button.click()]);
  return { name: file.suggestedFilename(), text: readFileSync(await file.path(), 'utf8') };
}

/** Open the <details> `selector` (a sidebar panel) when it is closed. */
async function openPanel(selector) {
  if (!(await page.locator(selector).evaluate((d) => d.open))) await page.locator(`${selector} > summary`).click();
}

test('conversations: rename one; the search finds conversations by title and by message text', async () => {
  await conversationList().getByRole('button', { name: 'Rename conversation Name a colour.' }).click();
  const box = page.getByLabel('New title of Name a colour.');
  await box.fill('Colour quiz');
  await box.press('Enter');
  await listed('Colour quiz').waitFor();
  assert.equal(await listed('Name a colour.').count(), 0);
  assert.deepEqual(await search('QUIZ'), ['Colour quiz']);
  assert.deepEqual(await search('ITALY'), ['Name the capital of France.']); // in a question of that one only
  assert.deepEqual(await search('no such words'), []);
  assert.equal(await conversationList().textContent(), 'No conversation has “no such words”.');
  assert.ok((await search('')).length > 3);
});

test('conversations: exported as JSON and Markdown; deleted, then imported: back with its messages; a bad file changes nothing', async () => {
  await openListed('Colour quiz');
  const messages = await page.locator('article.msg .content').allTextContents();
  await openPanel('#conversation-panel');
  const json = await downloaded(page.getByRole('button', { name: 'Export as JSON' }));
  assert.equal(json.name, 'colour-quiz.json');
  const file = JSON.parse(json.text);
  assert.equal(file.format, 'ruvllm-chat');
  assert.equal(file.version, 1);
  assert.equal(file.conversations.length, 1);
  const [exported] = file.conversations;
  assert.equal(exported.title, 'Colour quiz');
  assert.equal(exported.messages.length, messages.length);
  assert.equal(exported.messages[0].content, 'Name a colour.');
  const md = await downloaded(page.getByRole('button', { name: 'Export as Markdown' }));
  assert.ok(md.text.startsWith('# Colour quiz\n\n## You\n\nName a colour.\n\n## Assistant\n\n'), md.text);
  assert.ok(md.text.includes(exported.messages[1].content), md.text);
  await openPanel('.conv-tools');
  const all = await downloaded(page.getByRole('button', { name: 'Export all as Markdown' }));
  assert.ok(all.text.includes('# Name the capital of France.') && all.text.includes('# Colour quiz'), all.text);

  const count = await conversationList().locator('li').count();
  await conversationList().getByRole('button', { name: 'Delete conversation Colour quiz' }).click();
  await listed('Colour quiz').waitFor({ state: 'detached' });
  const importFile = (name, text) => page.locator('#import-file').setInputFiles({ name, mimeType: 'application/json', buffer: Buffer.from(text) });
  await importFile('colour-quiz.json', json.text);
  await page.locator('#notice', { hasText: 'Imported 1 conversation.' }).waitFor();
  await openListed('Colour quiz');
  assert.deepEqual(await page.locator('article.msg .content').allTextContents(), messages);
  assert.deepEqual(await storedConversation(exported.id), exported);

  // Files with something wrong in them: said, and nothing changes.
  const bad = { ...file, conversations: [exported, { ...exported, id: 'other', title: 'Bad', messages: [{ role: 'robot', content: 'hi' }] }] };
  await importFile('bad.json', JSON.stringify(bad));
  await page.locator('#notice', { hasText: 'Not imported: conversation 2 (“Bad”)\'s message 1 has the role "robot" (user or assistant). Nothing was changed.' }).waitFor();
  await importFile('notes.json', 'These are notes.');
  await page.locator('#notice', { hasText: /^Not imported: the file is not JSON/ }).waitFor();
  await importFile('newer.json', JSON.stringify({ ...file, version: 2 }));
  await page.locator('#notice', { hasText: 'Not imported: the file is of version 2, newer than this page reads (1).' }).waitFor();
  assert.equal(await conversationList().locator('li').count(), count);
  assert.equal(await storedConversation('other'), undefined);
});

test('delete has an Undo: the conversation stays stored until its few seconds pass (or the next deletion)', async () => {
  const undo = page.locator('#undo');
  await conversationList().getByRole('button', { name: 'Delete conversation Show me HTML' }).click();
  await listed('Show me HTML').waitFor({ state: 'detached' });
  assert.equal(await undo.locator('.text').textContent(), 'Deleted “Show me HTML”.');
  assert.equal((await storedConversation('xss'))?.title, 'Show me HTML', 'deleted before the Undo went');
  await undo.getByRole('button', { name: 'Undo' }).click();
  await listed('Show me HTML').waitFor();
  assert.equal(await undo.isHidden(), true);

  // Deleted for good once the next deletion comes (or its time passes); that one is undone.
  await conversationList().getByRole('button', { name: 'Delete conversation Show me HTML' }).click();
  const plants = 'What are good plants for a balcony garden?';
  await conversationList().getByRole('button', { name: `Delete conversation ${plants}` }).click();
  for (let tries = 0; (await storedConversation('xss')) !== undefined; tries++) {
    assert.ok(tries < 50, 'still stored after the next deletion');
    await page.waitForTimeout(100);
  }
  await undo.getByRole('button', { name: 'Undo' }).click();
  await listed(plants).waitFor();
  assert.equal(await listed('Show me HTML').count(), 0);

  // Delete all, once confirmed; undone as one.
  const count = await conversationList().locator('li').count();
  await openPanel('.conv-tools');
  await page.getByRole('button', { name: 'Delete all…' }).click();
  await page.locator('#delete-all-question', { hasText: `Delete all ${count} conversations? You can undo it for a few seconds.` }).waitFor();
  await page.getByRole('button', { name: 'Delete all', exact: true }).click();
  await page.waitForFunction(() => document.getElementById('conversations').children.length === 0);
  assert.equal(await undo.locator('.text').textContent(), `Deleted all ${count} conversations.`);
  await undo.getByRole('button', { name: 'Undo' }).click();
  await page.waitForFunction((n) => document.getElementById('conversations').children.length === n, count);
});

test('this conversation\'s own settings: a preset\'s system prompt and max tokens, kept with it', async () => {
  await page.getByRole('button', { name: 'New chat' }).click();
  await openPanel('#conversation-panel');
  const panel = page.locator('#conversation-panel');
  await panel.getByLabel('Preset').selectOption({ label: 'Concise' });
  assert.match(await panel.getByLabel('Its system prompt').inputValue(), /^Answer as briefly as/);
  await panel.getByLabel('Its max tokens').fill('8');
  assert.equal(await panel.getByLabel('Its temperature').getAttribute('placeholder'), '0 (Settings\')');
  await ask('Write a poem about the sea.');
  assert.match(await lastAnswer().locator('.meta').textContent(), / 8 generated · .*cut at max tokens/);
  const id = await page.locator('#conversations li[aria-current]').getAttribute('data-id');
  const { settings } = await storedConversation(id);
  assert.deepEqual(Object.keys(settings).sort(), ['maxTokens', 'systemPrompt']);
  assert.equal(settings.maxTokens, 8);
  // Another conversation has its own (none: the placeholders say Settings'), and this one's come back with it.
  await openListed('Name the capital of France.');
  assert.equal(await panel.getByLabel('Its max tokens').inputValue(), '');
  assert.equal(await panel.getByLabel('Preset').inputValue(), '');
  await openListed('Write a poem about the sea.');
  assert.equal(await panel.getByLabel('Its max tokens').inputValue(), '8');
  assert.equal(await panel.locator('#c-preset option:checked').textContent(), 'Concise');
  await panel.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, 'www-1280x800-light-conversation.png') });
  await panel.locator('summary').click(); // closed again
});

test('answers: a code block\'s Copy button copies its code; TeX ($x^2$, $$…$$) is typeset by KaTeX, prices stay text', async () => {
  const output = ['The area is $x^2$, and $$\\int_0^1 x\\,dx = \\frac{1}{2}$$', '', 'It costs $5 and $10.', '', '```python', 'print("hi")', '```'].join('\n');
  await storedAnswer('math', 'Math and code', output);
  assert.deepEqual(await search('Math and code'), ['Math and code']); // the list is read again from the store
  await openListed('Math and code');
  await search('');
  const content = lastAnswer().locator('.content');
  assert.equal(await content.locator('.katex-mathml annotation').first().textContent(), 'x^2');
  assert.equal(await content.locator('.katex-display').count(), 1);
  assert.equal(await content.locator('.katex-error').count(), 0);
  assert.ok((await content.textContent()).includes('It costs $5 and $10.'));
  await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const copy = content.getByRole('button', { name: 'Copy code' });
  await copy.click();
  await page.waitForFunction(() => document.querySelector('.copy-code')?.textContent === 'Copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'print("hi")');
  await page.screenshot({ path: join(SHOTS, 'www-1280x800-light-math.png') });
});

test('icons: the page\'s own (no /favicon.ico 404) and SVG thumbs; the status line is short at phone width', async () => {
  const icon = await page.evaluate(async () => {
    const res = await fetch(document.querySelector('link[rel="icon"]').href);
    return { status: res.status, type: res.headers.get('content-type') };
  });
  assert.deepEqual(icon, { status: 200, type: 'image/svg+xml' });
  assert.deepEqual(notFound.filter((url) => new URL(url).pathname === '/favicon.ico'), []);
  await page.getByRole('button', { name: 'Name the capital of France.', exact: true }).click();
  await page.waitForFunction(() => document.querySelector('#conversations li[aria-current] .open')?.textContent === 'Name the capital of France.');
  const thumb = lastAnswer().getByRole('button', { name: 'Good answer' });
  assert.equal((await thumb.textContent()).trim(), ''); // no emoji: an SVG
  assert.equal(await thumb.locator('svg').count(), 1);
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await page.locator('#engine').innerText(), 'Ready · SmolLM2 135M · 2 threads');
  await page.setViewportSize({ width: 1280, height: 800 });
});

test('axe-core: no serious or critical violations; screenshots at 390x844 and 1280x800, light and dark', async () => {
  await page.getByRole('button', { name: 'Name the capital of France.', exact: true }).click();
  await page.addScriptTag({ path: join(WWW, 'node_modules', 'axe-core', 'axe.min.js') });
  const found = [];
  for (const [width, height] of [[1280, 800], [390, 844]]) {
    for (const scheme of ['light', 'dark']) {
      await page.setViewportSize({ width, height });
      await page.emulateMedia({ colorScheme: scheme });
      await page.screenshot({ path: join(SHOTS, `www-${width}x${height}-${scheme}.png`) });
      const violations = await page.evaluate(async () => (await window.axe.run(document)).violations);
      for (const v of violations) {
        if (v.impact === 'serious' || v.impact === 'critical') found.push(`${width}x${height} ${scheme}: ${v.id} (${v.impact}): ${v.nodes.map((n) => n.target).join(', ')}`);
      }
    }
  }
  // The phone layout's drawer, open.
  await page.getByRole('button', { name: 'Menu' }).click();
  await page.screenshot({ path: join(SHOTS, 'www-390x844-dark-menu.png') });
  assert.deepEqual(found, []);
  assert.deepEqual(pageErrors, [], 'uncaught errors in the page');
});

test('storage full: said plainly, and the model runs uncached', async () => {
  // A fresh browser whose quota for the demo's origin is 64 KiB: Chromium applies the override to an origin whose
  // storage it has not opened yet and enforces it on writes (the engine's worker writes the model's first part and
  // is refused).
  const small = await launchChromium();
  try {
    const full = small.context.pages()[0] ?? (await small.context.newPage());
    const cdp = await small.context.newCDPSession(full);
    await cdp.send('Storage.overrideQuotaForOrigin', { origin: `${origin}/`, quotaSize: 64 * 1024 });
    await full.goto(origin);
    await full.getByRole('button', { name: 'Load', exact: true }).click();
    await full.locator('#notice', { hasText: 'Storage full' }).waitFor({ timeout: 180_000 });
    assert.match(await full.locator('#notice').textContent(), /Storage full: the model \(98(\.\d)? MB\) runs but is not cached in this browser/);
    await full.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 180_000 });
    assert.match(await full.locator('#cached').textContent(), /None yet/);
  } finally {
    await small.close();
  }
});

test('a static host without COOP/COEP: the coi service worker makes the page cross-origin isolated', async () => {
  const dist = join(WWW, 'dist');
  const plain = await serve({ root: dist, files: { '/': join(dist, 'index.html') } });
  stops.push(plain.close);
  const other = await browser.context.newPage();
  await other.goto(`${plain.origin}/`);
  await other.waitForFunction(() => window.crossOriginIsolated === true, null, { timeout: 60_000 });
  await other.close();
});

test('the dev server (vite) serves the same page, cross-origin isolated: the model loads and answers', async () => {
  const dev = await browser.context.newPage();
  dev.on('pageerror', (e) => pageErrors.push(`dev: ${e}`));
  await dev.goto(await startVite('dev'));
  assert.equal(await dev.evaluate(() => crossOriginIsolated), true);
  await dev.getByText('Settings', { exact: true }).click();
  await dev.getByLabel('Temperature', { exact: true }).fill('0');
  await dev.getByRole('button', { name: 'Load', exact: true }).click();
  await dev.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 180_000 });
  assert.match(await dev.locator('#engine .long').textContent(), / · 2 threads$/);
  assert.match(await dev.locator('#engine').getAttribute('title'), /the wasm-mt build/);
  await dev.getByLabel('Message', { exact: true }).fill('Name the capital of France.');
  await dev.getByRole('button', { name: 'Send', exact: true }).click();
  await dev.waitForFunction(() => Number(document.body.dataset.replies ?? 0) > 0, null, { timeout: 180_000 });
  assert.match(await dev.locator('article.msg.assistant .content').last().textContent(), /Paris/);
  await dev.close();
  assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
});
