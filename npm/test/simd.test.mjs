// The relaxed-SIMD builds (npm/wasm-relaxed, npm/wasm-mt-relaxed): run with `simd: 'relaxed'` where the runtime validates
// relaxed SIMD (not by default for now: see builds.ts's chooseSimd), the plain builds by default and with
// `simd: 'simd128'`; every build gives the reference answer to the raw France prompt. Node 20 (this
// repository's CI) has relaxed SIMD only behind `--experimental-wasm-relaxed-simd`: this process runs without it (the
// runtime without relaxed SIMD) and a child with it (the runtime with); Node 22+ has it on, and the child runs as is.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, PACKAGE_DIR, rejectsWith } from './helpers.mjs';

/** What `builds.ts` probes: a function using `i16x8.relaxed_dot_i8x16_i7x16_s`. */
const PROBE = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0, 0x0a, 0x0f, 1, 0x0d, 0,
  0x41, 1, 0xfd, 0x0f, 0x41, 2, 0xfd, 0x0f, 0xfd, 0x92, 2, 0x0b]);
const here = WebAssembly.validate(PROBE);

/** Loads with 1 and 2 threads and each `simd` option in a child Node, printing what each ran and its greedy ids. */
function inChild(flags) {
  const script = `import { LLM } from '@ruvector/ruvllm';
const out = [];
for (const simd of [undefined, 'relaxed', 'simd128']) {
  for (const threads of [2, 1]) {
    const llm = await LLM.load(${JSON.stringify(MODEL_PATH)}, { threads, simd });
    const { build, relaxedSimd } = llm.info();
    const r = await llm.complete(${JSON.stringify(FRANCE.prompt)}, { temperature: 0 });
    out.push({ simd: simd ?? 'auto', build, relaxedSimd, ids: r.ids });
    llm.dispose();
  }
}
console.log(JSON.stringify(out));`;
  const args = [...flags, '--input-type=module', '-e', script];
  return JSON.parse(execFileSync(process.execPath, args, { cwd: PACKAGE_DIR, encoding: 'utf8', timeout: 240_000 }));
}

test('with relaxed SIMD, both CPU builds run their relaxed form when asked, their plain one by default and with simd128, all with the reference answer', () => {
  const runs = inChild(here ? [] : ['--experimental-wasm-relaxed-simd']);
  assert.deepEqual(runs.map(({ ids: _, ...r }) => r), [
    { simd: 'auto', build: 'wasm-mt', relaxedSimd: false },
    { simd: 'auto', build: 'wasm', relaxedSimd: false },
    { simd: 'relaxed', build: 'wasm-mt', relaxedSimd: true },
    { simd: 'relaxed', build: 'wasm', relaxedSimd: true },
    { simd: 'simd128', build: 'wasm-mt', relaxedSimd: false },
    { simd: 'simd128', build: 'wasm', relaxedSimd: false },
  ]);
  for (const r of runs) assert.deepEqual(r.ids, FRANCE.ids, `${r.simd} ${r.build}`);
});

test('without relaxed SIMD the plain builds run, and simd: relaxed is E_UNSUPPORTED', { skip: here && 'this Node has relaxed SIMD on' }, async () => {
  const llm = await LLM.load(MODEL_PATH, { threads: 1 });
  try {
    assert.deepEqual([llm.info().build, llm.info().relaxedSimd], ['wasm', false]);
    assert.deepEqual((await llm.complete(FRANCE.prompt, { temperature: 0 })).ids, FRANCE.ids);
  } finally {
    llm.dispose();
  }
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 1, simd: 'relaxed' }), 'E_UNSUPPORTED');
});

test('simd takes auto, relaxed or simd128', async () => {
  await rejectsWith(LLM.load(MODEL_PATH, { simd: 'avx2' }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { simd: true }), 'E_INVALID_ARGUMENT');
});
