// The Node CLI: the native CLI's flags and JSON output, and the same tokens (target/release/ruvllm, or
// $RUVLLM_NATIVE_CLI: scripts/test.sh passes the test profile's target/debug/ruvllm).
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Tokenizer } from '../dist/node.js';
import { FRANCE, MODEL_PATH, PACKAGE_DIR, REPO_DIR } from './helpers.mjs';

const CLI = join(PACKAGE_DIR, 'dist', 'cli.js');
const NATIVE = process.env.RUVLLM_NATIVE_CLI ?? join(REPO_DIR, 'target', 'release', 'ruvllm');

function wasmCli(...args) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  assert.equal(r.status, 0, `ruvllm ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

function nativeCli(...args) {
  assert.ok(existsSync(NATIVE), `the native CLI is missing: cargo build --release -p ruvllm-cli (or set RUVLLM_NATIVE_CLI)`);
  return execFileSync(NATIVE, args, { encoding: 'utf8' });
}

const both = (...args) => [wasmCli(...args), nativeCli(...args)].map((out) => JSON.parse(out));
const generated = ({ prompt_ids, ids, text, finish_reason }) => ({ prompt_ids, ids, text, finish_reason });

test('generate --json gives the reference ids and the same output as the native CLI', () => {
  const [wasm, native] = both('generate', '--model', MODEL_PATH, '--prompt', FRANCE.prompt, '--temperature', '0', '--json');
  assert.deepEqual(wasm.ids, FRANCE.ids);
  assert.deepEqual(generated(wasm), generated(native));
  assert.deepEqual(Object.keys(wasm), Object.keys(native));
});

/**
 * How far the wasm (simd128) and native (AVX2) engines may differ in a probability: both round their
 * Q4_1 dot products differently, as llama.cpp's own compute paths do (they differ by up to ~0.1 on this
 * model: ../shared/reference/README.md, Caveats).
 */
const NOISE = 0.1;

/** The first index where two id lists differ, or -1. */
const firstDifference = (a, b) => {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return i;
  return -1;
};

/**
 * Greedy outputs may part only where the native engine itself sees a near tie between its two most
 * likely tokens (SIMD kernels round differently), and the wasm engine picked the other one of the two.
 */
function assertSameGreedy(wasm, native) {
  assert.deepEqual(wasm.prompt_ids, native.prompt_ids);
  const i = firstDifference(wasm.ids, native.ids);
  if (i < 0) return;
  const context = [...native.prompt_ids, ...native.ids.slice(0, i)];
  const top = JSON.parse(nativeCli('score', '--model', MODEL_PATH, '--ids', context.join(','), '--top-k', '2')).positions.at(-1);
  const [[a, pa], [b, pb]] = top;
  assert.ok(pa - pb < NOISE && [a, b].includes(wasm.ids[i]), `token ${i}: wasm ${wasm.ids[i]}, native ${native.ids[i]}; native top 2 ${JSON.stringify(top)}`);
  console.log(`greedy outputs part at token ${i} of ${native.ids.length}, a near tie for the native engine: ${JSON.stringify(top)}`);
}

test('generate --chat renders the same prompt as the native CLI and decodes the same, up to near ties', () => {
  const [wasm, native] = both('generate', '--model', MODEL_PATH, '--prompt', 'What is the capital of France?', '--chat', '--temperature', '0', '--max-tokens', '40', '--json');
  assertSameGreedy(wasm, native);
  const [w2, n2] = both('generate', '--model', MODEL_PATH, '--prompt', 'Once upon a time', '--temperature', '0', '--max-tokens', '32', '--json');
  assertSameGreedy(w2, n2);
});

test('sampling flags are accepted as the native CLI takes them, and seeded runs repeat', () => {
  const args = ['generate', '--model', MODEL_PATH, '--prompt', 'Once upon a time', '--temperature', '0.9', '--top-k', '30', '--top-p', '0.9', '--min-p', '0.02', '--repeat-penalty', '1.1', '--seed', '1234', '--max-tokens', '24', '--stop', 'zzz', '--json'];
  const [wasm, native] = both(...args);
  assert.deepEqual(wasm.prompt_ids, native.prompt_ids);
  assert.equal(wasm.ids.length, 24);
  assert.deepEqual(JSON.parse(wasmCli(...args)).ids, wasm.ids);
  assert.equal(wasm.seed, 1234);
  assert.equal(native.seed, 1234);
  // Without --seed each run draws a fresh seed and prints it; given back as --seed, it replays the run.
  const unseeded = args.filter((a, i) => a !== '--seed' && args[i - 1] !== '--seed');
  const [w, n] = both(...unseeded);
  assert.notEqual(w.seed, n.seed);
  assert.deepEqual(JSON.parse(wasmCli(...unseeded, '--seed', String(w.seed))).ids, w.ids);
  assert.deepEqual(JSON.parse(nativeCli(...unseeded, '--seed', String(n.seed))).ids, n.ids);
  const stopped = both('generate', '--model', MODEL_PATH, '--prompt', FRANCE.prompt, '--temperature', '0', '--stop', ' Paris', '--json');
  assert.equal(stopped[0].text, 'The capital of France is');
  assert.deepEqual(generated(stopped[0]), generated(stopped[1]));
});

test('--lora applies a GGUF adapter as the native CLI does; at scale 0 the output is the base model\'s', () => {
  const adapter = join(process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures'), 'lora-smollm2-r8.gguf');
  const args = ['generate', '--model', MODEL_PATH, '--prompt', FRANCE.prompt, '--temperature', '0', '--max-tokens', '8', '--json'];
  const base = JSON.parse(wasmCli(...args));
  assert.deepEqual(JSON.parse(wasmCli(...args, '--lora', `${adapter}:0`)).ids, base.ids);
  const [wasm, native] = both(...args, '--lora', `${adapter}:8`);
  assert.notDeepEqual(wasm.ids, base.ids, 'the adapter changes the answer');
  // The first tokens, past where the answer leaves the base model's (later ones may part at near ties).
  assert.deepEqual(wasm.ids.slice(0, 3), native.ids.slice(0, 3));
  assert.notDeepEqual(wasm.ids.slice(0, 3), base.ids.slice(0, 3));
  const missing = spawnSync(process.execPath, [CLI, ...args, '--lora', '/nonexistent-adapter.gguf'], { encoding: 'utf8' });
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /^error: \/nonexistent-adapter.gguf: .*ENOENT/);
});

test('--json-schema, --grammar and --regex constrain the answer as the native CLI does; a bad one fails before any token', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ruvllm-cli-grammar-'));
  const schema = join(dir, 'city.json');
  writeFileSync(schema, JSON.stringify({
    type: 'object', properties: { city: { type: 'string', maxLength: 20 } }, required: ['city'], additionalProperties: false,
  }));
  const gbnf = join(dir, 'answer.gbnf');
  writeFileSync(gbnf, 'root ::= ("Paris" | "Rome") "."\n');
  const lark = join(dir, 'answer.lark');
  writeFileSync(lark, 'start: "It is " /[A-Z][a-z]+/ "."\n');
  const args = ['generate', '--model', MODEL_PATH, '--prompt', FRANCE.prompt, '--temperature', '0', '--max-tokens', '24', '--json'];
  const [wasm, native] = both(...args, '--json-schema', schema);
  assert.equal(wasm.finish_reason, 'stop');
  assert.equal(typeof JSON.parse(wasm.text).city, 'string');
  assert.deepEqual(generated(wasm), generated(native));
  for (const [flag, value, shape] of [['--grammar', gbnf, /^(Paris|Rome)\.$/], ['--grammar', lark, /^It is [A-Z][a-z]+\.$/], ['--regex', '[0-9]{2}', /^[0-9]{2}$/]]) {
    const [w, n] = both(...args, flag, value);
    assert.match(w.text, shape);
    assert.deepEqual(generated(w), generated(n));
  }
  const broken = join(dir, 'broken.gbnf');
  writeFileSync(broken, 'root ::= missing\n');
  for (const run of [(a) => spawnSync(process.execPath, [CLI, ...a], { encoding: 'utf8' }), (a) => spawnSync(NATIVE, a, { encoding: 'utf8' })]) {
    const r = run([...args, '--grammar', broken]);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /grammar: GBNF: .*missing/);
    assert.equal(r.stdout, '');
    const two = run([...args, '--grammar', gbnf, '--regex', 'x']);
    assert.notEqual(two.status, 0);
    assert.match(two.stderr, /give one of --json-schema, --grammar and --regex/);
  }
  rmSync(dir, { recursive: true });
});

test('generate without --json streams the text to stdout and stats to stderr', () => {
  const r = spawnSync(process.execPath, [CLI, 'generate', '--model', MODEL_PATH, '--prompt', FRANCE.prompt, '--temperature', '0'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${FRANCE.text}\n`);
  assert.match(r.stderr, /prompt tokens, 8 generated; prefill [\d.]+ tok\/s, decode [\d.]+ tok\/s, load \d+ ms/);
});

test('tokenize matches the native CLI, with and without --special; it reads the header alone', async () => {
  // The model's header without a byte of its weights: tokenize needs no more (generate refuses it).
  const dir = mkdtempSync(join(tmpdir(), 'ruvllm-cli-header-'));
  const header = join(dir, 'header-only.gguf');
  const tokenizer = await Tokenizer.load(MODEL_PATH);
  const { headerBytes } = tokenizer.info();
  tokenizer.dispose();
  writeFileSync(header, readFileSync(MODEL_PATH).subarray(0, headerBytes));
  try {
    for (const special of [[], ['--special']]) {
      const [wasm, native] = both('tokenize', '--model', MODEL_PATH, ...special, '<|im_start|>user', 'Hello,', 'wörld! 12345');
      assert.deepEqual(wasm, native);
      assert.ok(wasm.ids.length > 5);
      assert.deepEqual(both('tokenize', '--model', header, ...special, '<|im_start|>user', 'Hello,', 'wörld! 12345'), [wasm, native]);
    }
    const refused = spawnSync(process.execPath, [CLI, 'generate', '--model', header, '--prompt', 'Hi', '--max-tokens', '1'], { encoding: 'utf8' });
    assert.equal(refused.status, 1);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test('score gives the native CLI top tokens and probabilities within the kernels\' rounding noise', () => {
  const ids = [...JSON.parse(wasmCli('tokenize', '--model', MODEL_PATH, '--special', FRANCE.prompt)).ids, ...FRANCE.ids.slice(0, -1)];
  const [wasm, native] = both('score', '--model', MODEL_PATH, '--ids', ids.join(','), '--top-k', '3');
  assert.equal(wasm.positions.length, ids.length);
  for (const [i, top] of native.positions.entries()) {
    const [[id, p], [, p2]] = top;
    if (p - p2 > NOISE) assert.equal(wasm.positions[i][0][0], id, `position ${i}`);
    assert.ok(Math.abs(wasm.positions[i][0][1] - p) < NOISE, `position ${i}: ${wasm.positions[i][0][1]} vs ${p}`);
  }
});

test('bench prints the native JSON fields for the wasm engine', () => {
  const [wasm, native] = both('bench', '--model', MODEL_PATH, '--prompt-tokens', '16', '--gen-tokens', '4', '--threads', '1');
  assert.deepEqual(Object.keys(wasm), Object.keys(native));
  assert.equal(wasm.engine, 'ruvllm-wasm');
  assert.equal(wasm.backend, 'cpu');
  assert.equal(wasm.threads, 1);
  assert.equal(native.threads, 1);
  assert.equal(wasm.prompt_tokens, 16);
  assert.equal(wasm.gen_tokens, 5);
  for (const k of ['load_ms', 'prefill_tok_s', 'decode_tok_s', 'peak_rss_mb', 'model_mb', 'kv_cache_mb']) assert.ok(wasm[k] > 0, k);
});

test('chat keeps the conversation across turns (reusing the KV cache) until /reset', async () => {
  const child = spawn(process.execPath, [CLI, 'chat', '--model', MODEL_PATH, '--temperature', '0', '--max-tokens', '24', '--json'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const lines = (async function* () {
    let buf = '';
    for await (const data of child.stdout) {
      buf += data;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/^(> )+/, '');
        buf = buf.slice(nl + 1);
        if (line.trim()) yield JSON.parse(line);
      }
    }
  })();
  const ask = async (text) => {
    child.stdin.write(`${text}\n`);
    return (await lines.next()).value;
  };
  try {
    const first = await ask('What is the capital of France?');
    assert.ok(first.ids.length > 0);
    const second = await ask('And what is the capital of Germany?');
    assert.ok(second.prompt_tokens > first.prompt_tokens + first.ids.length, 'the second prompt holds the first turn');
    assert.ok(second.cached_tokens >= first.prompt_tokens, 'the first turn was not evaluated again');
    child.stdin.write('/reset\n');
    const again = await ask('What is the capital of France?');
    assert.equal(again.prompt_tokens, first.prompt_tokens);
    assert.equal(again.text, first.text);
    const exited = new Promise((resolve) => child.on('exit', resolve));
    child.stdin.end();
    for await (const extra of lines) assert.fail(`unexpected output ${JSON.stringify(extra)}`);
    assert.equal(await exited, 0, stderr);
  } finally {
    child.kill();
  }
});

test('usage errors exit 2, other errors exit 1 with a message', () => {
  const run = (...args) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, RUVLLM_MODEL: '' } });
  for (const [args, status, message] of [
    [[], 2, /usage: ruvllm/],
    [['generate', '--model'], 2, /--model needs a value/],
    [['frobnicate', '--model', MODEL_PATH], 2, /unknown command 'frobnicate'/],
    [['generate', '--prompt', 'x'], 1, /--model is required/],
    [['generate', '--model', MODEL_PATH], 2, /--prompt is required/],
    [['score', '--model', MODEL_PATH], 2, /--ids is required/],
    [['generate', '--model', MODEL_PATH, '--prompt', 'x', '--max-tokens', 'lots'], 1, /--max-tokens: 'lots' is not a valid number/],
    [['generate', '--model', MODEL_PATH, '--prompt', 'x', '--max-tokens', '-1'], 1, /maxTokens must be an integer >= 0/],
    [['generate', '--model', '/nonexistent.gguf', '--prompt', 'x'], 1, /\/nonexistent.gguf: .*ENOENT|no such file/],
    [['generate', '--model', PACKAGE_DIR + '/package.json', '--prompt', 'x'], 1, /invalid GGUF: bad magic/],
    [['score', '--model', MODEL_PATH, '--ids', '1,x'], 1, /bad token id 'x'/],
    [['generate', '--model', MODEL_PATH, '--prompt', 'x', '--backend', 'webgpu'], 1, /WebGPU is not available here/],
    [['generate', '--model', MODEL_PATH, '--prompt', 'x', '--backend', 'tpu'], 1, /backend 'tpu' is not one of auto, webgpu, cpu/],
  ]) {
    const r = run(...args);
    assert.equal(r.status, status, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  const help = run('--help');
  assert.equal(help.status, 0);
  assert.match(help.stdout, /ruvllm chat \[--system TEXT\]/);
});

test('-- ends the options: the text after it is tokenized even if it begins with -, as natively', () => {
  const [wasm, native] = both('tokenize', '--model', MODEL_PATH, '--', '-5 apples');
  assert.deepEqual(wasm, native);
  assert.ok(wasm.ids.length > 1);
  // A single dash never starts an option, so the same text without `--` gives the same ids.
  assert.deepEqual(JSON.parse(wasmCli('tokenize', '--model', MODEL_PATH, '-5 apples')), wasm);
  assert.deepEqual(JSON.parse(wasmCli('tokenize', `--model=${MODEL_PATH}`, '-5', '--', 'apples')), wasm, 'positionals join with spaces');
  // After `--`, what looks like an option (even --help) is text.
  const [w2, n2] = both('tokenize', '--model', MODEL_PATH, '--', '--special', '-h');
  assert.deepEqual(w2, n2);
  assert.deepEqual(w2, JSON.parse(wasmCli('tokenize', '--model', MODEL_PATH, '--', '--special -h')));
});

/** Run the Node CLI (without $RUVLLM_MODEL) and the native one, if built, on `args`. */
function bothRaw(...args) {
  const env = { ...process.env, RUVLLM_MODEL: '' };
  const wasm = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env });
  assert.ok(existsSync(NATIVE), `the native CLI is missing: cargo build --release -p ruvllm-cli (or set RUVLLM_NATIVE_CLI)`);
  const native = spawnSync(NATIVE, args, { encoding: 'utf8', env });
  return [wasm, native];
}

test('--help anywhere prints the command\'s own usage and exits 0, as natively', () => {
  for (const args of [['generate', '--help'], ['generate', '-h'], ['generate', '--model', MODEL_PATH, '--temperature', '0', '--help'], ['generate', '--lora', 'x', '-h'], ['help', 'generate']]) {
    const [wasm, native] = bothRaw(...args);
    assert.equal(wasm.status, 0, `${args.join(' ')}: ${wasm.stderr}`);
    assert.equal(native.status, 0, `${args.join(' ')} (native): ${native.stderr}`);
    assert.match(wasm.stdout, /^usage: ruvllm generate --prompt TEXT \[--chat\] \[--max-tokens N\]/);
    assert.match(wasm.stdout, /\[--stop S\]\.\.\./);
    assert.match(wasm.stdout, /\[--model M\]/);
    assert.doesNotMatch(wasm.stdout, /ruvllm (score|tokenize|chat)/, 'only generate\'s usage');
    // The commands' synopses are the native CLI's (the notes below them differ: each engine's defaults).
    const synopsis = (out) => out.slice(0, out.indexOf('\n--model defaults'));
    assert.equal(synopsis(wasm.stdout), synopsis(native.stdout));
  }
  const chat = bothRaw('chat', '--help')[0];
  assert.equal(chat.status, 0, chat.stderr);
  assert.match(chat.stdout, /^usage: ruvllm chat \[--system TEXT\]/);
  const all = bothRaw('--help')[0];
  for (const cmd of ['tokenize', 'generate', 'chat', 'score', 'bench', 'serve']) assert.match(all.stdout, new RegExp(`\\n  ruvllm ${cmd} `));
});

test('a wrong command line exits 2 with a message naming what is wrong, as natively', () => {
  for (const [args, message] of [
    [['score', '--model', MODEL_PATH, '--ids', '1,2', '--lora', 'x.gguf'], "error: unknown option --lora for 'score'"],
    [['tokenize', '--model', MODEL_PATH, '--json', 'x'], "error: unknown option --json for 'tokenize'"],
    [['generate', '--model', MODEL_PATH, '--prompt', 'x', '--max-tokens'], 'error: --max-tokens needs a value'],
    [['generate', '--model', MODEL_PATH, '--prompt', 'x', '--json=yes'], 'error: --json takes no value'],
    [['tokenize', '--model', MODEL_PATH], 'error: missing TEXT'],
    [['tokenize', '--model', MODEL_PATH, '--'], 'error: missing TEXT'],
    [['generate', '--model', MODEL_PATH], 'error: --prompt is required'],
    [['bench', '--model', MODEL_PATH, '128'], "error: unexpected argument '128': 'bench' takes none"],
    [['frobnicate'], "error: unknown command 'frobnicate' (ruvllm --help lists them)"],
  ]) {
    const [wasm, native] = bothRaw(...args);
    for (const [r, cli] of [[wasm, 'node'], [native, 'native']]) {
      assert.equal(r.status, 2, `${cli} ${args.join(' ')}: ${r.stderr}`);
      assert.equal(r.stderr.split('\n')[0], message, `${cli} ${args.join(' ')}`);
      assert.equal(r.stdout, '');
    }
    assert.equal(wasm.stderr, native.stderr, 'the same message and usage line');
  }
  const chat = bothRaw('chat', '--model', MODEL_PATH, '--prompt', 'x')[0];
  assert.equal(chat.status, 2);
  assert.match(chat.stderr, /unknown option --prompt for 'chat'/);
});
