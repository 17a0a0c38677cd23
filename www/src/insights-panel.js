// The "Insights" panel: the witness log (the package's WitnessLog) of the chat requests made in this browser, on the
// memory panel's embedding model, kept in IndexedDB ("ruvllm-witness-minilm"): the recent requests, the slowest, those
// with a thumb down, and the past requests nearest a text; the whole log exported as JSON Lines. The package records
// each answer after it is given (llm.witness), in the background; a thumb on an answer is its score.
import { WitnessLog } from '@ruvector/ruvllm';
import { explain } from './errors.js';
import { bytes } from './format.js';

const WITNESS_DB = 'ruvllm-witness-minilm';
/** How many requests each list shows. */
const SHOWN = 5;

const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
const clip = (text, n = 80) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

export class InsightsPanel {
  /** `titleOf(id)`: a conversation's title, if it is there (the log's sessions are conversation ids). */
  constructor({ titleOf }) {
    this.titleOf = titleOf;
    this.log = null;
    this.model = null;
    this.writes = 0; // data-witnessed on <body>: times the log was written and shown again
    const $ = (id) => document.getElementById(id);
    this.el = { status: $('ins-status'), stats: $('ins-stats'), recent: $('ins-recent'), slow: $('ins-slow'), low: $('ins-low'), search: $('ins-search'), query: $('ins-query'), found: $('ins-found'), export: $('ins-export') };
    this.el.search.addEventListener('submit', (e) => {
      e.preventDefault();
      this.find(this.el.query.value.trim());
    });
    this.el.export.onclick = () => this.download();
    this.render();
  }

  /** Open the log on `embedder` (the memory panel's, once it is loaded). Never rejects: a failure is said here, and
   * the chat goes on unrecorded. */
  async open(embedder) {
    try {
      this.log = await WitnessLog.open({ embedder, store: 'indexeddb', database: WITNESS_DB });
    } catch (e) {
      this.el.status.textContent = `Requests are not recorded: ${explain(e).title} ${e?.message ?? e}`;
      return;
    }
    this.attach(this.model);
    this.render();
    document.body.dataset.witnessReady = '1';
  }

  /** The chat model now loaded (null: none): its requests are recorded from now on. */
  attach(llm) {
    this.model = llm;
    if (llm && this.log) llm.witness = this.log;
  }

  /** After an answer or a score: once the log has written it, the lists again. */
  async refresh() {
    if (!this.log) return;
    try {
      await this.log.flush();
    } catch (e) {
      this.el.status.textContent = `Kept for this visit only: ${e?.message ?? e}`;
    }
    this.render();
    document.body.dataset.witnessed = String(++this.writes);
  }

  /** A thumb on the answer of request `requestId`: its score, 1 or -1. */
  score(requestId, accepted) {
    if (!this.log || !requestId) return;
    this.log.score(requestId, accepted ? 1 : -1);
    this.refresh();
  }

  render() {
    const log = this.log;
    this.el.search.hidden = this.el.export.hidden = !log;
    if (!log) {
      for (const list of [this.el.recent, this.el.slow, this.el.low]) list.replaceChildren();
      this.el.stats.textContent = 'Opens with the embedding model of Memory & routing.';
      return;
    }
    const entries = log.entries();
    const info = log.info();
    this.el.stats.textContent = `${entries.length} request${entries.length === 1 ? '' : 's'} recorded · ${bytes(info.bytes)} in this browser`;
    this.#show(this.el.recent, entries.slice(-SHOWN).reverse());
    this.#show(this.el.slow, [...entries].sort((a, b) => b.latencyMs.total - a.latencyMs.total).slice(0, SHOWN));
    this.#show(this.el.low, entries.filter((e) => e.quality !== null && e.quality < 0).slice(-SHOWN).reverse());
  }

  /** The past requests nearest `text`. */
  async find(text) {
    if (!this.log || !text) return;
    try {
      const hits = await this.log.search(text, { k: SHOWN });
      this.#show(this.el.found, hits, (h) => ` · similarity ${h.score.toFixed(2)}`);
    } catch (e) {
      this.el.status.textContent = `The search failed: ${e?.message ?? e}`;
    }
  }

  /** The whole log as a JSON Lines file. */
  download() {
    if (!this.log) return;
    const url = URL.createObjectURL(new Blob([this.log.export()], { type: 'application/x-ndjson' }));
    const a = Object.assign(document.createElement('a'), { href: url, download: 'ruvllm-witness.jsonl' });
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  /** `entries` as items of `list`: when, which conversation, the request, time and tokens, how it ended, its score. */
  #show(list, entries, extra = () => '') {
    list.replaceChildren(
      ...(entries.length === 0
        ? [Object.assign(document.createElement('li'), { className: 'hint', textContent: 'None yet.' })]
        : entries.map((e) => {
            const li = document.createElement('li');
            const query = Object.assign(document.createElement('p'), { className: 'turn', textContent: clip(e.query) });
            const ended = e.error ?? e.finishReason ?? '';
            const scored = e.quality === null ? '' : e.quality < 0 ? ' · 👎' : ' · 👍';
            const title = e.session ? this.titleOf(e.session) : undefined;
            const about = `${clock(e.time)}${title ? ` · ${clip(title, 30)}` : ''} · ${(e.latencyMs.total / 1000).toFixed(1)} s · ${e.tokens.generated} tokens · ${ended}${scored}${extra(e)}`;
            li.append(query, Object.assign(document.createElement('p'), { className: 'hint', textContent: about }));
            return li;
          })),
    );
  }
}
