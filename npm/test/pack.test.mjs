// The published shape: `npm pack`, install the tarball into an empty directory, and use it from a plain
// ESM script, a type-checked TypeScript program, and the `ruvllm` bin, so a broken files/exports list cannot ship.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { FRANCE, MODEL_PATH, PACKAGE_DIR } from './helpers.mjs';

const dir = mkdtempSync(join(tmpdir(), 'ruvllm-pack-'));
const app = join(dir, 'app');
let files;
const run = (cmd, args, options = {}) => execFileSync(cmd, args, { cwd: app, encoding: 'utf8', ...options });

before(() => {
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: PACKAGE_DIR, encoding: 'utf8' }));
  files = packed.files.map((f) => f.path);
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  run('npm', ['install', '--no-audit', '--no-fund', '--offline', join(dir, packed.filename)]);
});
after(() => rmSync(dir, { recursive: true, force: true }));

test('the tarball holds the built package and nothing else', () => {
  for (const f of ['package.json', 'README.md', 'dist/node.js', 'dist/browser.js', 'dist/index.d.ts', 'dist/cli.js', 'dist/bench_prompt.txt', 'wasm/ruvllm.js', 'wasm/ruvllm.d.ts', 'wasm/ruvllm_bg.wasm', 'wasm-mt/ruvllm.js', 'wasm-mt/ruvllm.d.ts', 'wasm-mt/ruvllm_bg.wasm', 'wasm-relaxed/ruvllm.js', 'wasm-relaxed/ruvllm_bg.wasm', 'wasm-mt-relaxed/ruvllm.js', 'wasm-mt-relaxed/ruvllm_bg.wasm', 'wasm-gpu/ruvllm.js', 'wasm-gpu/ruvllm.d.ts', 'wasm-gpu/ruvllm_bg.wasm', 'dist/backend.js', 'dist/worker/entry.js', 'dist/worker/host.js', 'dist/worker/client.js']) {
    assert.ok(files.includes(f), `${f} is missing`);
  }
  assert.deepEqual(files.filter((f) => /^(src|test|examples|node_modules)\//.test(f)), []);
});

test('a 10-line ESM script streams the answer from the installed package', () => {
  writeFileSync(join(app, 'demo.mjs'), `import { LLM } from '@ruvector/ruvllm';

const llm = await LLM.load(process.argv[2]);
const prompt = ${JSON.stringify(FRANCE.prompt)};
for await (const chunk of llm.generate(prompt, { temperature: 0 })) {
  process.stdout.write(chunk.text);
}
process.stdout.write('\\n');
llm.dispose();
`);
  assert.equal(run(process.execPath, ['demo.mjs', MODEL_PATH]), `${FRANCE.text}\n`);
});

test('a TypeScript program type-checks against the installed types and runs', () => {
  writeFileSync(join(app, 'check.ts'), `import { LLM, RuvllmError, StoreFullError, type ChatCompletion, type GenerateResult, type ErrorCode, type ModelCacheOption, type StoredModel } from '@ruvector/ruvllm';

const llm: LLM = await LLM.load(process.argv[2], { cache: false, onProgress: ({ loaded, total, fromCache }) => void (total ?? loaded + fromCache) });
const listModels: (options?: { cache?: ModelCacheOption }) => Promise<StoredModel[]> = LLM.models.list;
const needed = (e: unknown) => (e instanceof StoreFullError ? e.needed : undefined);
void [listModels, needed];
const it = llm.generate(${JSON.stringify(FRANCE.prompt)}, { temperature: 0, maxTokens: 16, stop: ['\\n\\n'] });
const ids: number[] = [];
let r = await it.next();
for (; !r.done; r = await it.next()) ids.push(r.value.id);
const result: GenerateResult = r.value;
const reply: ChatCompletion = await llm.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 });
let code: ErrorCode | undefined;
try {
  llm.generate('x', { maxTokens: -1 });
} catch (e) {
  if (e instanceof RuvllmError) code = e.code;
}
console.log(JSON.stringify({ ids, text: result.text, usage: reply.usage.completion_tokens <= 4, code, arch: llm.info().architecture }));
llm.dispose();
`);
  writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, outDir: 'out',
      lib: ['ES2022'], types: ['node'], typeRoots: [join(PACKAGE_DIR, 'node_modules', '@types')],
    },
    files: ['check.ts'],
  }));
  // Node-only lib (no DOM): the published types must not need the DOM library.
  run(process.execPath, [join(PACKAGE_DIR, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.']);
  const out = JSON.parse(run(process.execPath, ['out/check.js', MODEL_PATH]));
  assert.deepEqual(out, { ids: FRANCE.ids, text: FRANCE.text, usage: true, code: 'E_INVALID_ARGUMENT', arch: 'llama' });
});

test('the exports map gives browsers the browser build and Node the Node build', () => {
  const resolved = run(process.execPath, ['--input-type=module', '-e', "console.log(import.meta.resolve('@ruvector/ruvllm'))"]).trim();
  assert.match(resolved, /node_modules\/@ruvector\/ruvllm\/dist\/node\.js$/);
  assert.match(
    run(process.execPath, ['--input-type=module', '-e', "import('@ruvector/ruvllm').then((m) => console.log(Object.keys(m).sort().join()))"]).trim(),
    /^AbortError,CANNOT_RUN_HERE,FileStore,IndexedDbStore,LLM,LearningLoop,MAX_MODEL_BYTES,MAX_RECORD_BYTES,Memory,MicroLora,RefusedRecords,RemoteError,RemoteLLM,Router,RuvllmError,StoreFullError,Tokenizer,VectorIndex,WitnessLog$/,
  );
  // Bundlers targeting browsers pick "browser" (Node itself lists "node" first, so ask for the browser file directly).
  const pkg = JSON.parse(run(process.execPath, ['-p', "JSON.stringify(require('./node_modules/@ruvector/ruvllm/package.json').exports)"]));
  assert.equal(pkg['.'].browser, './dist/browser.js');
  assert.equal(pkg['.'].types, './dist/index.d.ts');
});

test('the ruvllm bin runs from the installed package', () => {
  const out = JSON.parse(run('npx', ['--no-install', 'ruvllm', 'generate', '--model', MODEL_PATH, '--prompt', FRANCE.prompt, '--temperature', '0', '--json']));
  assert.deepEqual(out.ids, FRANCE.ids);
});
