// The "Memory & routing" panel: the package's semantic router (Router) and long-term memory (Memory), both on an
// embedding model of their own (recall.js's EMBEDDER, loaded in the background when the page opens, whatever chat
// model runs), both kept in IndexedDB ("ruvllm-router-minilm", "ruvllm-memory-minilm").
// - Each message sent is routed; the decision is shown and kept with the message. Routes are only shown: nothing acts
//   on them.
// - With the memory on (off by default), the turns of other conversations whose score clears the threshold are
//   recalled and put before the message's text in the prompt, and kept with the message: the prompt of a conversation
//   stays the same from one message to the next, so the prefix cache still starts each one from what it computed for
//   the conversation. (The memory's augment() adds them to the system message instead, which would change the start
//   of the prompt at every message.) After the answer, the question and the answer are remembered.
// - Nothing here delays an answer: a message is routed and its recall found while it is typed (`draft`), and a
//   message sent before the embedding model is ready goes without.
import { IndexedDbStore, LLM, Memory, Router } from '@ruvector/ruvllm';
import { explain } from './errors.js';
import { bytes } from './format.js';
import { DEFAULT_ROUTES, EMBEDDER, RECALL_K, ROUTE_THRESHOLD, clip } from './recall.js';

const ROUTER_DB = 'ruvllm-router-minilm';
const MEMORY_DB = 'ruvllm-memory-minilm';
/** How long typing must pause before the draft is routed and recalled for. */
const DRAFT_PAUSE_MS = 250;


const score = (x) => (Number.isFinite(x) ? x.toFixed(2) : '–');

function item(text, className) {
  const li = document.createElement('li');
  li.textContent = text;
  if (className) li.className = className;
  return li;
}

export class MemoryPanel {
  /**
   * `settings` (its `memoryOn` and `recallMinScore`, saved with `saveSettings()`); `titleOf(id)`: a conversation's
   * title, if it is there; `currentId()`: the open conversation's id.
   */
  constructor({ settings, saveSettings, titleOf, currentId }) {
    Object.assign(this, { settings, saveSettings, titleOf, currentId });
    this.embedder = null; // the embedding model the router and the memory run on
    this.router = null;
    this.memory = null;
    this.opening = Promise.resolve();
    this.remembering = Promise.resolve();
    /** The last draft routed and recalled for: { text, done: Promise<{ decision, recalled }> }. */
    this.drafted = null;
    this.draftTimer = 0;
    this.saves = 0; // data-vectors-saved on <body>: router or memory changes written to IndexedDB
    const $ = (id) => document.getElementById(id);
    this.el = {
      status: $('mem-status'),
      reset: $('mem-reset'),
      decision: $('mem-decision'),
      recalled: $('mem-recalled'),
      routes: $('mem-routes'),
      routeForm: $('route-form'),
      teachForm: $('teach-form'),
      teachText: $('teach-text'),
      teachRoute: $('teach-route'),
      use: $('mem-use'),
      minScore: $('mem-min-score'),
      stats: $('mem-stats'),
      forget: $('mem-forget'),
    };
    this.el.use.checked = settings.memoryOn;
    this.el.minScore.value = String(settings.recallMinScore);
    this.el.use.onchange = () => {
      settings.memoryOn = this.el.use.checked;
      saveSettings(settings);
      this.drafted = null;
      this.renderStats();
    };
    this.el.minScore.oninput = () => {
      if (this.el.minScore.value === '' || !this.el.minScore.checkValidity()) return;
      settings.recallMinScore = Number(this.el.minScore.value);
      saveSettings(settings);
      this.drafted = null;
    };
    this.el.routeForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.addRoute();
    });
    this.el.teachForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.teach();
    });
    this.el.forget.onclick = () => this.forget(this.currentId(), true);
    this.el.reset.onclick = () => this.reset();
    this.render();
    this.show(null);
  }

  /** Load the embedding model (kept by the package's model store) and open the router and the memory on it, in the
   * background (never rejects: a failure is said in the panel, and messages go without routes or recall). */
  start() {
    this.opening = this.#start();
    return this.opening;
  }

  async #start() {
    this.status(`Loading the embedding model (${EMBEDDER.label}) for routes and memory…`);
    try {
      const load = (cache) => LLM.load(EMBEDDER.url, { cache, backend: 'cpu' });
      // A storage too full to keep it: it runs all the same, read again at the next visit.
      this.embedder = await load(true).catch((e) => (e?.code === 'E_STORE_FULL' ? load(false) : Promise.reject(e)));
    } catch (e) {
      this.status(`Routing and memory are off: the embedding model (${EMBEDDER.label}) could not be loaded: ${explain(e).title} ${e?.message ?? e}`);
      this.render();
      return;
    }
    await this.#open();
  }

  async #open() {
    const embedder = this.embedder;
    let router = null;
    let memory = null;
    try {
      router = await Router.open({ embedder, store: 'indexeddb', database: ROUTER_DB, threshold: ROUTE_THRESHOLD });
      if (router.routes().length === 0) {
        for (const r of DEFAULT_ROUTES) await router.addRoute(r);
      }
      memory = await Memory.open({ embedder, store: 'indexeddb', database: MEMORY_DB, k: RECALL_K, minScore: this.settings.recallMinScore });
    } catch (e) {
      await router?.close().catch(() => {});
      this.fail(e);
      return;
    }
    this.router = router;
    this.memory = memory;
    this.el.reset.hidden = true;
    this.status('');
    this.render();
    this.save(router);
    document.body.dataset.memoryReady = '1';
  }

  /** Say why the router and the memory are not there; stores of another model's embeddings can be reset. */
  fail(e) {
    if (e?.code === 'E_INDEX') {
      this.status(`The routes and the memory kept in this browser were made with another model's embeddings (${e.message}). Reset them: that deletes them.`);
      this.el.reset.hidden = false;
    } else this.status(`Routing and memory are off: ${explain(e).title} ${e?.message ?? e}`);
    this.render();
  }

  /** Clear both databases, then open them again. */
  async reset() {
    if (!this.embedder) return;
    this.el.reset.hidden = true;
    this.status('Resetting the routes and the memory…');
    await this.#closeStores();
    try {
      await Promise.all(
        [ROUTER_DB, MEMORY_DB].map(async (name) => {
          const store = new IndexedDbStore(name);
          await store.clear();
          store.close();
        }),
      );
    } catch (e) {
      this.status(`The routes and the memory could not be reset: ${e?.message ?? e}`);
      return;
    }
    this.opening = this.#open();
    await this.opening;
  }

  async #closeStores() {
    const { router, memory } = this;
    this.router = this.memory = null;
    this.drafted = null;
    this.render();
    await Promise.all([router?.close(), memory?.close()]).catch(() => {});
  }

  status(text) {
    this.el.status.textContent = text;
  }

  /** Wait for `what`'s writes to IndexedDB, then count them on <body> (data-vectors-saved); whether they were. */
  async save(what) {
    try {
      await what.flush();
      document.body.dataset.vectorsSaved = String(++this.saves);
      return true;
    } catch (e) {
      this.status(`Kept for this visit only: ${e?.message ?? e}`);
      return false;
    }
  }

  // ---- the send path -------------------------------------------------------------------------------------------

  /** The message box's text changed: once typing pauses, route it and find its recall, so that sending it finds
   * them done. */
  draft(text) {
    clearTimeout(this.draftTimer);
    const t = text.trim();
    if (!t || !this.router) return;
    this.draftTimer = setTimeout(() => this.#decide(t), DRAFT_PAUSE_MS);
  }

  /** The route and the recall for `text` (in conversation `id`), computed once per text and settings. */
  #decide(text, id = this.currentId()) {
    if (this.drafted?.text === text && this.drafted.id === id) return this.drafted.done;
    const { router, memory } = this;
    const recallOn = this.settings.memoryOn;
    const minScore = this.settings.recallMinScore;
    const done = (async () => {
      await this.remembering;
      const [decision, recalled] = await Promise.all([
        router?.route(text).then(
          ({ route, score, candidates }) => ({ route, score, candidates }),
          (e) => (this.status(`The message could not be routed: ${e?.message ?? e}`), undefined),
        ),
        recallOn && memory
          ? memory.recall(text, { k: RECALL_K, minScore, exceptConversation: id }).then(
              (turns) => turns.map((t) => ({ conversation: t.conversation, role: t.role, content: clip(t.content), score: t.score, minScore })),
              (e) => (this.status(`Nothing could be recalled: ${e?.message ?? e}`), []),
            )
          : [],
      ]);
      return { decision, recalled };
    })();
    this.drafted = { text, id, done };
    return done;
  }

  /**
   * Before the answer to `question` (a user message of conversation `id`): its route, and the turns of other
   * conversations that clear the threshold when the memory is on, as found while it was typed (or now: an embedding
   * of a few milliseconds). Both are kept with the message (`route`, `recalled`) and shown. Before the embedding
   * model is ready the message goes without them; only an abort (`signal`) rejects.
   */
  async annotate(id, question, signal) {
    let decision;
    let recalled = [];
    if (this.router) {
      const decided = this.#decide(question.content, id);
      const aborted = new Promise((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason), { once: true }));
      ({ decision, recalled } = await Promise.race([decided, aborted]));
    }
    if (decision) question.route = decision;
    question.recalled = recalled; // from now on the message is as the model sees it, at every later message
    this.show(question);
  }

  /** After the answer: remember the question, and the answer when it is whole (not stopped, not failed). */
  remember(id, question, answer) {
    const memory = this.memory;
    if (!memory || !this.settings.memoryOn) return;
    const turns = [{ role: 'user', content: question.content }];
    if (answer.content.trim() && !answer.meta?.stopped && !answer.meta?.error) turns.push({ role: 'assistant', content: answer.content });
    this.remembering = this.remembering.then(async () => {
      try {
        await memory.remember(id, turns);
      } catch (e) {
        if (this.memory === memory) this.status(`Not remembered: ${e?.message ?? e}`);
        return;
      }
      this.renderStats();
      await this.save(memory);
    });
  }

  /** Forget conversation `id`'s turns (a deleted conversation's, or the open one's with `say`). */
  async forget(id, say = false) {
    const memory = this.memory;
    if (!memory || !id) return;
    await this.remembering;
    const n = memory.forget(id);
    this.renderStats();
    if ((await this.save(memory)) && say) this.status(`Forgot ${n} turn${n === 1 ? '' : 's'} of this conversation.`);
  }

  // ---- routes --------------------------------------------------------------------------------------------------

  /** The "Add a route" form: a new route, or more utterances for one (its threshold set as given). */
  async addRoute() {
    const form = this.el.routeForm;
    const name = form.elements.name.value.trim();
    const utterances = form.elements.utterances.value.split('\n').map((u) => u.trim()).filter(Boolean);
    const threshold = form.elements.threshold.value === '' ? undefined : Number(form.elements.threshold.value);
    if (!this.router || !name || utterances.length === 0) return;
    await this.#busy(form, async (router) => {
      await router.addRoute({ name, utterances, threshold });
      form.reset();
      return `Route ${name}: ${utterances.length} utterance${utterances.length === 1 ? '' : 's'} added.`;
    });
  }

  /** The correction form: this text takes that route. */
  async teach() {
    const form = this.el.teachForm;
    const text = this.el.teachText.value.trim();
    const route = this.el.teachRoute.value;
    if (!this.router || !text || !route) return;
    await this.#busy(form, async (router) => {
      await router.add(text, route);
      this.el.teachText.value = '';
      return `Route ${route} learned “${clip(text)}”.`;
    });
  }

  async removeRoute(name) {
    if (!this.router) return;
    const n = this.router.removeRoute(name);
    this.renderRoutes();
    if (await this.save(this.router)) this.status(`Route ${name} removed (${n} utterance${n === 1 ? '' : 's'}).`);
  }

  /** Run `fn(router)` with `form`'s buttons disabled (the embeddings wait for the answer being generated, if any);
   * what it returns is said once the change is stored. */
  async #busy(form, fn) {
    const router = this.router;
    const buttons = [...form.querySelectorAll('button')];
    buttons.forEach((b) => (b.disabled = true));
    try {
      const said = await fn(router);
      this.renderRoutes();
      if (await this.save(router)) this.status(said);
    } catch (e) {
      this.status(`${explain(e).title} ${e?.message ?? e}`);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  }

  // ---- rendering -----------------------------------------------------------------------------------------------

  render() {
    const ready = this.router !== null;
    for (const form of [this.el.routeForm, this.el.teachForm]) form.querySelectorAll('button').forEach((b) => (b.disabled = !ready));
    this.el.forget.disabled = !this.memory;
    this.renderRoutes();
    this.renderStats();
  }

  renderRoutes() {
    const list = this.el.routes;
    const select = this.el.teachRoute;
    const chosen = select.value;
    list.replaceChildren();
    select.replaceChildren();
    const routes = this.router?.routes() ?? [];
    for (const r of routes) {
      const li = document.createElement('li');
      li.dataset.route = r.name;
      const text = document.createElement('span');
      text.textContent = `${r.name} · ${r.utterances} utterance${r.utterances === 1 ? '' : 's'} · threshold ${r.threshold === null ? 'none' : score(r.threshold)}`;
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = '×';
      remove.setAttribute('aria-label', `Remove route ${r.name}`);
      remove.onclick = () => this.removeRoute(r.name);
      li.append(text, remove);
      list.append(li);
      select.append(new Option(r.name, r.name));
    }
    if (routes.length === 0) list.append(item(this.router ? 'None: add one below.' : 'Listed once the embedding model is loaded.', 'hint'));
    if (routes.some((r) => r.name === chosen)) select.value = chosen;
  }

  renderStats() {
    const info = this.memory?.info();
    if (!info) {
      this.el.stats.textContent = '';
      return;
    }
    const turns = `${info.turns} turn${info.turns === 1 ? '' : 's'} from ${info.conversations} conversation${info.conversations === 1 ? '' : 's'}`;
    const budget = info.budgetBytes ? ` of ${bytes(info.budgetBytes)}` : '';
    this.el.stats.textContent = `Remembered: ${turns} · ${bytes(info.bytes)}${budget}${this.settings.memoryOn ? '' : ' · off: nothing is recalled or remembered'}`;
    this.el.stats.dataset.turns = String(info.turns);
  }

  /** The routing decision and the turns recalled for `question` (a user message; null: none yet). */
  show(question) {
    const box = this.el.decision;
    box.replaceChildren();
    const decision = question?.route;
    if (!decision) {
      const p = document.createElement('p');
      p.className = 'hint';
      p.textContent = question ? 'This message was not routed.' : 'No message routed yet.';
      box.append(p);
      delete box.dataset.route;
    } else {
      const p = document.createElement('p');
      const strong = document.createElement('strong');
      strong.textContent = `Route: ${decision.route ?? 'none'}`;
      p.append(strong, decision.route ? ` · score ${score(decision.score)}` : ` (none reached its threshold)`);
      const others = decision.candidates.filter((c) => c.route !== decision.route);
      const runners = document.createElement('p');
      runners.className = 'hint';
      runners.textContent = others.length ? `Runners-up: ${others.map((c) => `${c.route} ${score(c.score)}`).join(', ')}` : 'No runners-up.';
      box.append(p, runners);
      box.dataset.route = decision.route ?? '';
      // The correction form starts from the message routed.
      if (!this.el.teachText.value || this.el.teachText.dataset.auto === this.el.teachText.value) {
        this.el.teachText.value = this.el.teachText.dataset.auto = question.content;
      }
    }
    const list = this.el.recalled;
    list.replaceChildren();
    for (const t of question?.recalled ?? []) {
      const li = document.createElement('li');
      const from = document.createElement('p');
      from.className = 'hint';
      const title = this.titleOf(t.conversation);
      // Why it was recalled: its score cleared the threshold the message was sent with.
      const why = t.minScore === undefined ? '' : ` (at least ${score(t.minScore)})`;
      from.textContent = `${t.role === 'user' ? 'You' : 'Assistant'} · score ${score(t.score)}${why} · from ${title ? `“${title}”` : 'a deleted conversation'}`;
      const content = document.createElement('p');
      content.className = 'turn';
      content.textContent = t.content;
      li.append(from, content);
      list.append(li);
    }
    if (!question?.recalled?.length) {
      const none = !question || !('recalled' in question) ? 'Nothing yet.' : this.settings.memoryOn ? 'None for this message: no earlier turn scored high enough.' : 'None: long-term memory is off.';
      list.append(item(none, 'hint'));
    }
  }
}
