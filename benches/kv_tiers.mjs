// The two-tier KV cache's accuracy and memory: teacher-forced next-token distributions of our f16 cache against
// our two-tier caches (f16 hot window, q8_0 or q4_0 cold tier), and llama.cpp's f16 cache against its own q8_0 and
// q4_0 caches (node-llama-cpp's experimentalKvCacheKeyType / ValueType), on the reference prompts after 1,024 tokens
// of other text; then the KV cache bytes at 4,096 positions. Prints one JSON object (progress on stderr).
// llama.cpp (this build) rotates keys and values by a Hadamard matrix when its cache is quantized (`attn_rot_k`,
// `attn_rot_v` in its log), which spreads outliers over a block; we do not. Its quantized runs go with the rotation
// (its default) and without (LLAMA_ATTN_ROT_DISABLE=1): the latter quantizes what ours does.
//
// Usage: node benches/kv_tiers.mjs [--model M] [--cli target/release/ruvllm] [--threads 2] [--context 1024]
//          [--ours-only | --llama-only]
// Needs the release CLI (cargo build --release -p ruvllm-cli) and, for llama.cpp, benches/setup.sh's npm packages.
//
// Sequences: for each prompt of the reference's logits.json, 1,024 tokens of filler (the reference tokenizer cases'
// plain texts, rotated per prompt, then the CLI bench text twice), then the prompt and llama.cpp's 48-token greedy
// continuation. Scored positions: those from 1,024 on (the distributions that predict the prompt's second token to
// the continuation's last), so each sees at least 1,024 tokens before it; with a 128-position hot window, every
// whole block but the last four or five is cold there. `wide` repeats the measures over every position from 256 on
// (the filler too: a larger sample, at shorter contexts).
//
// Measures, each engine against its own f16 cache at the same positions (top-1 and p1 - p2 "margin" of the f16 run):
// - agree: the share of positions whose top-1 is the f16 run's, where the f16 margin is >= 0.05 (and >= 0.2);
// - |dp|: |p(t) - p_f16(t)| for t the f16 run's top-1 token (p: softmax at temperature 1 over the whole
//   vocabulary), mean, 99th percentile and max. A t outside the other run's top 40 counts with that run's 40th
//   probability (an upper bound of its p; `outside_top40` says how often).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT, log, parseArgs, round } from './lib/common.mjs';

const args = parseArgs({
  model: process.env.RUVLLM_MODEL ?? path.join(os.homedir(), '.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf'),
  cli: path.join(ROOT, 'target/release/ruvllm'),
  threads: '2',
  context: '1024',
  reference: process.env.RUVLLM_REFERENCE_DIR ?? path.join(ROOT, '../shared/reference'),
});
const FILLER = Number(args.context);
const WIDE_FROM = 256;
const TOP_K = 40;
const N_CTX = 2048;

const cli = ([command, ...rest]) =>
  execFileSync(args.cli, [command, '--model', args.model, '--threads', String(args.threads), ...rest], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });

// --- the sequences ---
const reference = JSON.parse(fs.readFileSync(path.join(args.reference, 'logits.json'), 'utf8'));
const cases = JSON.parse(fs.readFileSync(path.join(args.reference, 'tokenizer.json'), 'utf8'));
const plain = cases.filter((c) => !c.parse_special && c.text.trim() && !c.name.startsWith('long_repeated')).map((c) => c.text);
const benchText = fs.readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8');
const tokenize = (text) => JSON.parse(cli(['tokenize', '--', text])).ids;
const sequences = reference.prompts.map((p, i) => {
  const rotated = plain.slice((7 * i) % plain.length).concat(plain.slice(0, (7 * i) % plain.length));
  const filler = tokenize([...rotated, benchText, benchText].join('\n\n'));
  if (filler.length < FILLER) throw new Error(`only ${filler.length} filler tokens`);
  const ids = [...filler.slice(0, FILLER), ...p.prompt_ids, ...p.continuation.ids];
  return { name: p.prompt.slice(0, 32), ids, from: WIDE_FROM };
});
log(`${sequences.length} sequences of ${sequences.map((s) => s.ids.length).join(', ')} tokens; scored from position ${FILLER}`);

// --- scoring: each run gives, per sequence, per scored position, a Map id -> p of its top 40 ---
function ours(kvCold, kvHot) {
  const kv = kvCold === 'f16' ? [] : ['--kv-cold', kvCold, '--kv-hot', String(kvHot)];
  return sequences.map((s) => {
    const out = JSON.parse(cli(['score', '--ids', s.ids.join(','), '--top-k', String(TOP_K), '--ctx', String(N_CTX), ...kv]));
    return out.positions.slice(s.from, s.ids.length - 1).map((top) => new Map(top));
  });
}

async function llamaCpp(kvType, rotation = true) {
  if (rotation) delete process.env.LLAMA_ATTN_ROT_DISABLE;
  else process.env.LLAMA_ATTN_ROT_DISABLE = '1'; // read when the context is made
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({
    gpu: false,
    build: 'never',
    skipDownload: true,
    usePrebuiltBinaries: true,
    existingPrebuiltBinaryMustMatchBuildOptions: false,
    progressLogs: false,
    maxThreads: Number(args.threads),
    logLevel: LlamaLogLevel.error,
  });
  const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: N_CTX,
    batchSize: 512,
    threads: Number(args.threads),
    sequences: 1,
    flashAttention: true, // llama.cpp quantizes the V cache only with flash attention
    experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType,
  });
  const seq = context.getSequence();
  const runs = [];
  for (const s of sequences) {
    await seq.clearHistory();
    const positions = [];
    // Chunks of 32 as the reference's teacher forcing; logits only where they are scored.
    for (let at = 0; at < s.ids.length - 1; at += 32) {
      const chunk = s.ids.slice(at, Math.min(at + 32, s.ids.length - 1)).map((id, j) =>
        at + j >= s.from
          ? [id, { generateNext: { logits: { filter: { tokens: [], includeTop: TOP_K } }, totalLogitWeight: true } }]
          : id,
      );
      const out = await seq.controlledEvaluate(chunk);
      for (let j = 0; j < chunk.length; j++) {
        if (at + j < s.from) continue;
        const next = out[j].next;
        const logits = [...next.logits.entries()];
        const max = logits[0][1];
        positions.push(new Map(logits.map(([id, l]) => [id, Math.exp(l - max) / next.totalLogitWeight])));
      }
    }
    runs.push(positions);
  }
  const info = { kv_type: kvType, flash_attention: context.flashAttention };
  await context.dispose();
  await model.dispose();
  return { runs, info };
}

// --- metrics ---
const sorted = (m) => [...m.entries()].sort((a, b) => b[1] - a[1]);
/** The measures at the positions from 1,024 on, and (`wide`) from 256 on. */
const compare = (base, other) => ({ ...measure(base, other, FILLER), wide: measure(base, other, WIDE_FROM) });
function measure(base, other, from) {
  const stats = { positions: 0, margin_05: 0, agree_05: 0, margin_20: 0, agree_20: 0, dp: [], outside_top40: 0 };
  base.forEach((seq, i) =>
    seq.forEach((b, j) => {
      if (WIDE_FROM + j < from) return;
      const o = other[i][j];
      const [[t, p1], [, p2]] = sorted(b);
      const otherTop = sorted(o)[0][0];
      const margin = p1 - p2;
      stats.positions++;
      if (margin >= 0.05) (stats.margin_05++, (stats.agree_05 += otherTop === t));
      if (margin >= 0.2) (stats.margin_20++, (stats.agree_20 += otherTop === t));
      let p = o.get(t);
      if (p === undefined) (stats.outside_top40++, (p = Math.min(...o.values())));
      stats.dp.push(Math.abs(p - p1));
    }),
  );
  const dp = stats.dp.sort((a, b) => a - b);
  return {
    positions: stats.positions,
    agree_margin_05: round(stats.agree_05 / stats.margin_05, 4),
    positions_margin_05: stats.margin_05,
    agree_margin_20: round(stats.agree_20 / stats.margin_20, 4),
    positions_margin_20: stats.margin_20,
    dp_mean: round(dp.reduce((a, b) => a + b, 0) / dp.length, 4),
    dp_p99: round(dp[Math.floor(0.99 * (dp.length - 1))], 4),
    dp_max: round(dp[dp.length - 1], 4),
    outside_top40: stats.outside_top40,
  };
}

// --- KV bytes at 4,096 positions ---
function kvBytes(kvCold) {
  const kv = kvCold === 'f16' ? [] : ['--kv-cold', kvCold];
  const out = JSON.parse(cli(['bench', '--ctx', '4096', '--prompt-tokens', '16', '--gen-tokens', '1', ...kv]));
  return Math.round(out.kv_cache_mb * 1e6);
}
// llama.cpp's cache: every position in the one type (30 layers x 2 x 4096 x 192 values; 34 bytes per 32 for q8_0,
// 18 for q4_0), from the model's shape.
const llamaKvBytes = (bytesPer32) => 30 * 2 * 4096 * (192 / 32) * bytesPer32;

const result = { model: path.basename(args.model), threads: Number(args.threads), filler_tokens: FILLER, sequences: sequences.map((s) => s.ids.length) };
if (!args['llama-only']) {
  log('ours: f16');
  const f16 = ours('f16');
  result.ours = {};
  for (const [cold, hot] of [['q8_0', 128], ['q4_0', 128], ['q8_0', 0], ['q4_0', 0]]) {
    log(`ours: ${cold} cold, ${hot} hot`);
    result.ours[`${cold}_hot${hot}`] = compare(f16, ours(cold, hot));
  }
}
if (!args['ours-only']) {
  log('llama.cpp: F16');
  const base = await llamaCpp('F16');
  result.llama_cpp = { flash_attention: base.info.flash_attention };
  for (const [t, rotation] of [['Q8_0', true], ['Q4_0', true], ['Q8_0', false], ['Q4_0', false]]) {
    log(`llama.cpp: ${t}${rotation ? '' : ', rotation off'}`);
    const run = await llamaCpp(t, rotation);
    result.llama_cpp[`${t.toLowerCase()}${rotation ? '' : '_no_rotation'}`] = compare(base.runs, run.runs);
  }
}
log('KV bytes at 4096 positions');
result.kv_bytes_4096 = {
  ours_f16: kvBytes('f16'),
  ours_q8_0_hot128: kvBytes('q8_0'),
  ours_q4_0_hot128: kvBytes('q4_0'),
  llama_cpp_f16: llamaKvBytes(64),
  llama_cpp_q8_0: llamaKvBytes(34),
  llama_cpp_q4_0: llamaKvBytes(18),
};
result.kv_ratio_4096 = {
  q8_0_hot128: round(result.kv_bytes_4096.ours_f16 / result.kv_bytes_4096.ours_q8_0_hot128, 3),
  q4_0_hot128: round(result.kv_bytes_4096.ours_f16 / result.kv_bytes_4096.ours_q4_0_hot128, 3),
};
console.log(JSON.stringify(result, null, 1));
