// The "Learning" panel: the model's MicroLoRA (the package's `llm.microLora()`), a small LoRA adapter of the model's
// last layers that the engine trains in this browser, one gradient step per thumb on an answer (👍 teaches the answer,
// 👎 moves away from it). It is kept in IndexedDB ("ruvllm-microlora") under a name made from the model's file name,
// so each model has its own and it comes back after a reload. With "Answer with my adapter" on, each request passes it
// as `adapters: [{ id }]`; off, the base model answers (and the prefix cache of the base model's pages, kept across
// reloads, starts conversations from memory). Only the CPU engine trains it: on WebGPU the thumbs are disabled.
import { LLM } from '@ruvector/ruvllm';
import { explain } from './errors.js';

const NO_MODEL = 'Load a model to train its adapter.';

/** The MicroLoRA's name for a model: its file name without .gguf, in lowercase letters and digits, at most 48. */
export function adapterName(label) {
  const name = String(label).replace(/\.gguf$/i, '').toLowerCase().replace(/[^0-9a-z]/g, '').slice(0, 48);
  return name || 'default';
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** Which adapter answered a message: "MicroLoRA <name> (N steps)", or "base model" for none. */
export function adapterLabel(adapter) {
  return adapter ? `MicroLoRA ${adapter.name} (${plural(adapter.steps, 'step')})` : 'base model';
}

export class LearningPanel {
  /** `settings` (its `useAdapter`, saved with `saveSettings()`); `showError(e)`: the page's error box; `onChange()`:
   * whether feedback can be given changed (the thumbs are drawn again). */
  constructor({ settings, saveSettings, showError, onChange }) {
    Object.assign(this, { settings, saveSettings, showError, onChange });
    this.model = null; // the LLM the adapter belongs to
    this.name = null;
    this.lora = null;
    this.why = NO_MODEL; // why no feedback can be given (the thumbs' tooltip); null when it can
    this.opening = Promise.resolve();
    this.unconsolidated = 0; // steps since the last consolidation
    const $ = (id) => document.getElementById(id);
    this.el = { use: $('lora-use'), stats: $('lora-stats'), status: $('lora-status'), reset: $('lora-reset') };
    this.el.use.checked = settings.useAdapter;
    this.el.use.onchange = () => {
      settings.useAdapter = this.el.use.checked;
      saveSettings(settings);
      this.render();
    };
    this.el.reset.onclick = () => this.reset();
    // The slow loop: when the page is hidden (another tab, a locked phone, the page closing), the steps of this visit
    // are folded into the weights that later steps are held toward, so new feedback does not undo what they taught.
    document.addEventListener('visibilitychange', () => document.hidden && this.consolidate());
    this.render();
  }

  /** Open `llm`'s MicroLoRA, the one kept under the name made from `label` or a new one (never rejects: a failure is
   * said in the error box, and the chat goes on with the base model). */
  open(llm, label) {
    this.model = llm;
    this.name = adapterName(label);
    this.opening = this.#open(llm);
    return this.opening;
  }

  async #open(llm) {
    this.lora = null;
    this.unconsolidated = 0;
    this.el.reset.hidden = true;
    this.say('Opening your adapter…');
    let lora = null;
    try {
      lora = await llm.microLora({ store: 'indexeddb', name: this.name });
    } catch (e) {
      if (this.model === llm) this.fail(e);
      return;
    }
    if (this.model !== llm) return;
    this.lora = lora;
    this.say(null);
  }

  /** Say why there is no adapter: the thumbs' tooltip, the panel, and (unless only WebGPU is why) the error box. */
  fail(e) {
    if (e?.code === 'E_GPU_UNSUPPORTED') {
      this.say('Learning from feedback runs on the CPU engine only, and this model runs on WebGPU: choose CPU as the backend in Settings and load the model again.');
      // The error box only for someone who asked for their adapter: on WebGPU the others lose nothing.
      if (this.settings.useAdapter) this.showError(e);
      return;
    }
    this.say(`Your adapter could not be opened (${explain(e).title}): the base model answers.`);
    this.showError(e);
    // A damaged record, or one of another model with the same file name, stays in the store until it is replaced.
    this.el.reset.hidden = e?.code !== 'E_ADAPTER';
  }

  /** The model is going away (its adapter with it). */
  close() {
    this.model = this.lora = null;
    this.el.reset.hidden = true;
    this.say(NO_MODEL);
  }

  /** Set why feedback cannot be given (null: it can), and draw the panel and the thumbs again. */
  say(why) {
    this.why = why;
    this.el.status.textContent = why ?? '';
    this.render();
    this.onChange?.();
  }

  // ---- the send path -------------------------------------------------------------------------------------------

  /** Whether the next request answers with the adapter: the switch is on and the adapter open. */
  active() {
    return Boolean(this.settings.useAdapter && this.lora);
  }

  /** The request's options for the adapter: `{ adapters: [{ id }] }` when it is active, else none. */
  options() {
    return this.active() ? { adapters: [{ id: this.lora.id }] } : {};
  }

  /** Which adapter answers the next request, for the message: { name, steps }, or null for the base model. */
  answeredBy() {
    return this.active() ? { name: this.name, steps: this.lora.info().steps } : null;
  }

  // ---- feedback ------------------------------------------------------------------------------------------------

  /** One training step on `response` as the answer to `messages`: learn it (`accepted`) or move away from it.
   * Resolves to the step's { loss, tokens, steps, timings }; an error (E_STORE_FULL: trained but not stored) rejects. */
  async feedback(messages, response, accepted) {
    const lora = this.lora;
    if (!lora) throw new Error(this.why ?? NO_MODEL);
    try {
      const result = await lora.feedback({ messages, response, accepted });
      this.unconsolidated++;
      return result;
    } finally {
      if (this.lora === lora) this.render(); // the steps, even when only storing it failed
    }
  }

  /** Fold the steps since the last consolidation in (see the constructor); said in the panel. */
  async consolidate() {
    const lora = this.lora;
    if (!lora || this.unconsolidated === 0) return;
    this.unconsolidated = 0;
    try {
      const n = await lora.consolidate();
      if (this.lora === lora) this.el.status.textContent = `Consolidated ${plural(n, 'step')}: later feedback is held toward what they taught.`;
    } catch (e) {
      if (this.lora === lora) this.el.status.textContent = `Not consolidated: ${explain(e).title} ${e?.message ?? e}`;
    }
  }

  /** Delete the stored adapter that could not be opened, then start a new one. */
  async reset() {
    const llm = this.model;
    if (!llm) return;
    this.el.reset.hidden = true;
    try {
      await LLM.removeMicroLora({ store: 'indexeddb', name: this.name });
    } catch (e) {
      this.say(`The stored adapter could not be deleted: ${e?.message ?? e}`);
      return;
    }
    if (this.model === llm) await this.open(llm, this.name);
  }

  render() {
    const info = this.lora?.info();
    const stats = this.el.stats;
    stats.textContent = info
      ? `${adapterLabel({ name: this.name, steps: info.steps })} · ${info.params} weights (rank ${info.rank}, last ${info.layers} layers)` +
        (this.settings.useAdapter ? '' : ' · off: the base model answers')
      : '';
    if (info) stats.dataset.steps = String(info.steps);
    else delete stats.dataset.steps;
  }
}
