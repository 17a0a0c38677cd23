// The relaxed-SIMD builds (npm/wasm-relaxed, npm/wasm-mt-relaxed): chosen by default where the runtime validates relaxed
// SIMD, the plain builds elsewhere and with `simd: 'simd128'`; every build gives the reference answer, and a relaxed build the
// plain build's distributions to the last bit. Node 20 (this
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

/** The chat API's France prompt (the template's system prompt included): a near tie at its first token (llama.cpp: "L"
 * 0.147, "The" 0.134, and it answers "L'Étoile, …"), so a difference in the float sums shows in the answer. */
const CHAT = [{ role: 'user', content: 'What is the capital of France?' }];

/** Loads with 2 and 1 threads and each `simd` option in a child Node, printing what each ran, its greedy ids for the
 * raw France prompt and the chat one, and every position's distribution over the chat prompt and its answer. */
function inChild(flags) {
  const script = `import { LLM } from '@ruvector/ruvllm';
const out = [];
for (const simd of [undefined, 'simd128']) {
  for (const threads of [2, 1]) {
    const llm = await LLM.load(${JSON.stringify(MODEL_PATH)}, { threads, simd });
    const { build, relaxedSimd } = llm.info();
    const r = await llm.complete(${JSON.stringify(FRANCE.prompt)}, { temperature: 0 });
    const text = llm.applyChatTemplate(${JSON.stringify(CHAT)}, { addGenerationPrompt: true });
    const chat = await llm.complete(text, { temperature: 0, maxTokens: 12 });
    const prompt = llm.tokenize(text, { special: true });
    const scores = await llm.score([...prompt, ...chat.ids]);
    out.push({ simd: simd ?? 'auto', build, relaxedSimd, ids: r.ids, chat: chat.text, scores });
    llm.dispose();
  }
}
console.log(JSON.stringify(out));`;
  const args = [...flags, '--input-type=module', '-e', script];
  return JSON.parse(execFileSync(process.execPath, args, { cwd: PACKAGE_DIR, encoding: 'utf8', timeout: 240_000, maxBuffer: 64 << 20 }));
}

test('with relaxed SIMD, both CPU builds run their relaxed form by default and simd128 their plain one, with the same bits', () => {
  const runs = inChild(here ? [] : ['--experimental-wasm-relaxed-simd']);
  assert.deepEqual(runs.map(({ simd, build, relaxedSimd }) => ({ simd, build, relaxedSimd })), [
    { simd: 'auto', build: 'wasm-mt', relaxedSimd: true },
    { simd: 'auto', build: 'wasm', relaxedSimd: true },
    { simd: 'simd128', build: 'wasm-mt', relaxedSimd: false },
    { simd: 'simd128', build: 'wasm', relaxedSimd: false },
  ]);
  for (const r of runs) assert.deepEqual(r.ids, FRANCE.ids, `${r.simd} ${r.build}`);
  for (const [relaxed, plain] of [[runs[0], runs[2]], [runs[1], runs[3]]]) {
    assert.equal(relaxed.chat, plain.chat, relaxed.build);
    // Every probability of every position, to the last bit (JSON keeps a double exactly).
    assert.deepEqual(relaxed.scores, plain.scores, `${relaxed.build}: the relaxed build's distributions are the plain build's`);
  }
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
