// The chat demo: wires the model loader, the conversation store, the chat view, settings and status together.
import { LLM } from '@ruvector/ruvllm';
import './style.css';
import { ChatView } from './chat-view.js';
import { conversationsJson, conversationsMarkdown, download, fileName, parseConversations } from './conversation-file.js';
import { ConversationSettingsForm, effectiveSettings } from './conversation-settings.js';
import { explain, notCached } from './errors.js';
import { bytes } from './format.js';
import { InsightsPanel } from './insights-panel.js';
import { LearningPanel } from './learning-panel.js';
import { MemoryPanel } from './memory-panel.js';
import { modelContent } from './recall.js';
import { DEFAULT_MODEL, KNOWN_MODELS, cachedModels, deleteCached, isCached, localModels, progressReporter, storageEstimate } from './models.js';
import { answerGrammar, bindSettingsForm, loadSettings, saveSettings, schemaProblem } from './settings.js';
import { onFileDrop, renderCachedModels, renderConversationList, renderModelOptions } from './sidebar.js';
import { deleteConversations, getConversation, listConversations, newConversation, putConversations, saveConversation, titleOf } from './store.js';
import { describeContext, describeMemory, describeSpeed, describeStatus, modelTitle, showStatus } from './status.js';
import { UndoToast } from './undo.js';

const $ = (id) => document.getElementById(id);
const settings = loadSettings();

let llm = null; // the loaded model
let modelFile = null; // its file name
let conversation = newConversation(); // saved once it has a message
let generation = null; // AbortController of the reply being generated
let loading = null; // AbortController of the model being downloaded or loaded
// Counters on <body> for tests and scripts: replies finished (data-replies), prefix-cache flushes done (data-persisted),
// conversations made ready (data-prepared), feedback steps finished or failed (data-feedbacks).
let replies = 0;
let flushes = 0;
let prepared = 0;
let feedbacks = 0;
let conversationTitles = new Map(); // id -> title, of the conversations listed

/** The page's state, for styles and tests: idle, loading, ready, generating. */
function setState(state) {
  document.body.dataset.state = state;
  const generating = state === 'generating';
  // Without a model Send stays on: the first message loads the model chosen (the default one on a first visit).
  $('send').disabled = generating || state === 'loading';
  $('stop').disabled = !generating;
  showStatus($('engine'), describeStatus(state, llm && { info: llm.info(), file: modelFile }));
  showHint();
}

/** What the page says to do next: in an empty conversation and in the message box. */
function showHint() {
  const chosen = $('model-select').selectedOptions[0]?.textContent ?? 'the default model';
  const keep = 'Conversations are kept in this browser, and so is what the model computed for them: continuing one after a reload starts from memory.';
  const [hint, placeholder] = llm
    ? [`Ask something. ${keep}`, 'Message (Enter sends, Shift+Enter: new line, Esc stops)']
    : document.body.dataset.state === 'loading'
      ? [`Loading the model… ${keep}`, 'Message (sent once the model is loaded)']
      : [`Type a message to start: the first one loads ${chosen}, kept in this browser for the next visit. Other models are in the menu (Model). ${keep}`, 'Ask something: the first message loads the model'];
  view.hint = hint;
  $('message').placeholder = placeholder;
  const empty = $('messages').querySelector('p.empty');
  if (empty) empty.textContent = hint;
}

function showError(e) {
  const { title, detail } = explain(e);
  const box = $('error');
  box.replaceChildren();
  const strong = document.createElement('strong');
  strong.textContent = title;
  const p = document.createElement('p');
  p.textContent = detail;
  const close = document.createElement('button');
  close.type = 'button';
  close.textContent = 'Dismiss';
  close.onclick = () => (box.hidden = true);
  box.append(strong, p, close);
  box.dataset.code = e?.code ?? e?.name ?? 'error';
  box.hidden = false;
}

function notice(text) {
  $('notice').textContent = text;
  $('notice').hidden = !text;
}

function clearMessages() {
  $('error').hidden = true;
  notice('');
}

// ---- theme ----------------------------------------------------------------------------------------------------
function applyTheme() {
  if (settings.theme === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = settings.theme;
}
$('theme').value = settings.theme;
$('theme').onchange = () => {
  settings.theme = $('theme').value;
  saveSettings(settings);
  applyTheme();
};
applyTheme();

// ---- models ---------------------------------------------------------------------------------------------------
/** The known models at once, then with the local server's chat models once their headers are read (the first visit
 * reads each file's header; later ones remember them). */
async function fillModelList() {
  const chosen = () => $('model-select').value || settings.lastModel || DEFAULT_MODEL;
  renderModelOptions($('model-select'), KNOWN_MODELS, chosen());
  renderModelOptions($('model-select'), [...KNOWN_MODELS, ...(await localModels())], chosen());
  document.body.dataset.modelsListed = '1'; // for tests: the list is whole
  showHint();
}

async function refreshCached() {
  const remove = async (url) => {
    await deleteCached(url);
    await refreshCached();
  };
  renderCachedModels($('cached'), $('storage'), await cachedModels(), await storageEstimate(), remove);
}

function showProgress(text, fraction) {
  $('progress-box').hidden = false;
  $('progress-text').textContent = text;
  if (fraction === undefined) $('progress').removeAttribute('value');
  else $('progress').value = fraction;
}

/** Load a model from a URL (kept by the package's model store: read from it, or downloaded into it as it loads) or
 * from a File. */
async function loadModel({ url, file }) {
  generation?.abort();
  loading?.abort();
  const controller = (loading = new AbortController());
  const { signal } = controller;
  learning.close();
  insights.attach(null);
  llm?.dispose();
  llm = null;
  clearMessages();
  setState('loading');
  const label = file ? file.name : decodeURIComponent(new URL(url, location.href).pathname.split('/').pop());
  $('model-name').textContent = `Loading ${label}…`;
  showProgress(file ? `Reading ${file.name}…` : `Connecting to ${new URL(url, location.href).host}…`); // Cancel is there from the start
  try {
    llm = await loadEngine(file ?? url, signal);
    if (signal.aborted) throw signal.reason;
    const info = llm.info();
    $('model-name').textContent = `${modelTitle(label)} · ${bytes(info.fileBytes)}`; // the file's name: GGUF names are often internal
    modelFile = label;
    showLastReply();
    $('progress-box').hidden = true;
    $('model-name').title = label;
    if (url) settings.lastModel = url;
    saveSettings(settings);
    setState('ready');
    prepare();
    learning.open(llm, label); // this model's MicroLoRA, from IndexedDB
    insights.attach(llm); // its requests recorded in the witness log
    if (url) refreshCached();
  } catch (e) {
    llm?.dispose();
    llm = null;
    $('progress-box').hidden = true;
    $('model-name').textContent = 'No model loaded';
    if (signal.aborted) notice('Model load cancelled.');
    else showError(e);
    setState('idle');
  } finally {
    if (loading === controller) loading = null;
  }
}

/** LLM.load with the settings; a URL's file is kept in the package's model store (`cache`), or, where the storage is
 * full, loaded without it, saying so. A WebGPU backend that is not there falls back to the CPU, saying so. */
async function loadEngine(source, signal) {
  const download = typeof source === 'string';
  const options = {
    signal,
    contextSize: settings.contextSize,
    backend: settings.backend,
    ...(settings.threads > 0 ? { threads: settings.threads } : {}),
    // The prefix cache's pages in IndexedDB: a conversation continued after a reload starts from them.
    prefixCache: { store: 'indexeddb', budgetBytes: 128 * 1024 * 1024 },
    ...(download ? { cache: true } : {}),
    onProgress: progressReporter(showProgress, { download }),
  };
  const load = async (opts) => {
    try {
      return await LLM.load(source, opts);
    } catch (e) {
      if (e?.code !== 'E_STORE_FULL' || !opts.cache) throw e;
      const model = await LLM.load(source, { ...opts, cache: false, onProgress: progressReporter(showProgress, { download }) });
      notice(notCached(e));
      return model;
    }
  };
  try {
    return await load(options);
  } catch (e) {
    if (settings.backend !== 'webgpu' || !String(e?.code).startsWith('E_GPU_')) throw e;
    const model = await load({ ...options, backend: 'cpu' });
    notice(`WebGPU could not run the model (${explain(e).title} ${e.message}): it runs on the CPU instead.`);
    return model;
  }
}

$('load').onclick = () => loadModel({ url: $('model-select').value });
$('load-url').onclick = () => {
  const url = $('model-url').value.trim();
  if (url) loadModel({ url });
  else $('model-url').focus();
};
$('model-url').addEventListener('keydown', (e) => e.key === 'Enter' && $('load-url').click());
$('model-file').onchange = () => {
  const file = $('model-file').files[0];
  $('model-file').value = '';
  if (file) loadModel({ file });
};
$('cancel').onclick = () => loading?.abort();

$('open-file').onclick = () => $('model-file').click();

// Drag and drop a .gguf anywhere on the page.
onFileDrop($('drop'), (file) => loadModel({ file }));

// ---- conversations ---------------------------------------------------------------------------------------------
const view = new ChatView(
  $('messages'),
  {
    copy: async (i) => {
      await navigator.clipboard.writeText(conversation.messages[i].content).then(
        () => notice('Copied.'),
        () => notice('The browser did not allow copying.'),
      );
    },
    regenerate: async (i) => {
      if (!llm || generation || !formatReady()) return;
      conversation.messages.splice(i);
      await reply();
    },
    edit: async (i, text) => {
      if (!llm || generation || !text.trim() || !formatReady()) return;
      // A conversation named after its first question takes the new one's name; a renamed one keeps its name.
      const named = i === 0 && conversation.title === titleOf(conversation.messages[0].content);
      conversation.messages.splice(i);
      conversation.messages.push({ role: 'user', content: text.trim() });
      if (named) conversation.title = titleOf(text);
      await reply();
    },
    feedback: giveFeedback,
  },
  () => generation !== null,
  () => learning.why,
);

// A deleted conversation stays stored, hidden from the list, while its Undo is offered (undo.js).
const deleting = new Set();
const undo = new UndoToast($('undo'));

/** The stored conversations less those being deleted, the most recently used first. */
const storedConversations = async () => (await listConversations()).filter((c) => !deleting.has(c.id));

async function refreshConversations() {
  const conversations = await storedConversations();
  conversationTitles = new Map(conversations.map((c) => [c.id, c.title]));
  renderConversationList($('conversations'), conversations, conversation.id, $('conv-search').value, {
    open: openConversation,
    rename: renameConversation,
    remove: (id) => removeConversations([id], `Deleted “${conversationTitles.get(id)}”.`),
  });
}
$('conv-search').addEventListener('input', refreshConversations);

/** Rename conversation `id` (the open one in place: it is saved again after each answer). */
async function renameConversation(id, title) {
  const c = id === conversation.id ? conversation : await getConversation(id);
  if (!c) return;
  c.title = title;
  await saveConversation(c);
  await refreshConversations();
  $('conversations').querySelector(`li[data-id="${CSS.escape(id)}"] .open`)?.focus();
}

/** Delete the conversations `ids`, saying `said` with an Undo: until its few seconds have passed they stay stored
 * (hidden from the list), and so do their turns in the long-term memory. */
function removeConversations(ids, said) {
  if (generation && ids.includes(conversation.id)) return notice('Stop the answer first: it is being written into that conversation.');
  const wasOpen = ids.includes(conversation.id) ? conversation.id : null;
  for (const id of ids) deleting.add(id);
  if (wasOpen) startNew();
  else refreshConversations();
  undo.offer(said, {
    undo: () => {
      for (const id of ids) deleting.delete(id);
      if (wasOpen && !generation && conversation.messages.length === 0) openConversation(wasOpen);
      else refreshConversations();
    },
    commit: async () => {
      await deleteConversations(ids);
      for (const id of ids) {
        deleting.delete(id);
        panel.forget(id); // its turns go from the long-term memory too
      }
    },
  });
}

// Delete all, once confirmed (and undoable as one).
$('delete-all').onclick = async () => {
  const n = (await storedConversations()).length;
  if (n === 0) return notice('There are no conversations to delete.');
  $('delete-all-question').textContent = `Delete all ${n} conversation${n === 1 ? '' : 's'}? You can undo it for a few seconds.`;
  $('delete-all-confirm').hidden = false;
  $('delete-all-no').focus();
};
$('delete-all-no').onclick = () => {
  $('delete-all-confirm').hidden = true;
  $('delete-all').focus();
};
$('delete-all-yes').onclick = async () => {
  $('delete-all-confirm').hidden = true;
  const ids = (await storedConversations()).map((c) => c.id);
  removeConversations(ids, `Deleted all ${ids.length} conversation${ids.length === 1 ? '' : 's'}.`);
};

// ---- conversation files (conversation-file.js): export as JSON or Markdown, import JSON -------------------------
const FILE_TYPES = { json: 'application/json', md: 'text/markdown' };

/** Download `conversations` as `ext` (json or md) in the file `name`. */
function exportConversations(conversations, name, ext) {
  if (conversations.length === 0) return notice('There is nothing to export yet.');
  download(name, ext === 'json' ? conversationsJson(conversations) : conversationsMarkdown(conversations), FILE_TYPES[ext]);
}
for (const ext of ['json', 'md']) {
  $(`export-all-${ext}`).onclick = async () => exportConversations(await storedConversations(), `ruvllm-chat-conversations.${ext}`, ext);
  $(`export-${ext}`).onclick = () => exportConversations(conversation.messages.length ? [conversation] : [], fileName(conversation.title, ext), ext);
}

$('import').onclick = () => $('import-file').click();
$('import-file').onchange = () => {
  const file = $('import-file').files[0];
  $('import-file').value = '';
  if (file) importConversations(file);
};

/** Import a JSON export's conversations: all of them, or none when anything in the file is wrong (the notice says
 * what). One with the id of a stored conversation replaces it: it is the same conversation, exported before. */
async function importConversations(file) {
  let imported;
  try {
    imported = parseConversations(await file.text());
  } catch (e) {
    return notice(`Not imported: ${e.message}. Nothing was changed.`);
  }
  const current = imported.some((c) => c.id === conversation.id);
  if (current && generation) return notice('Not imported: the file has the conversation being answered. Stop the answer first.');
  await undo.settle(); // a deletion still undoable is carried out first, so that it cannot delete what comes in now
  const stored = new Set((await listConversations()).map((c) => c.id));
  try {
    await putConversations(imported);
  } catch (e) {
    return showError(e);
  }
  const replaced = imported.filter((c) => stored.has(c.id)).length;
  notice(`Imported ${imported.length} conversation${imported.length === 1 ? '' : 's'}${replaced ? `; ${replaced} replaced the stored one of the same id` : ''}.`);
  if (current) openConversation(conversation.id);
  else refreshConversations();
}

async function openConversation(id) {
  if (generation) return;
  conversation = (await getConversation(id)) ?? newConversation();
  conversationForm.show(conversation);
  view.render(conversation);
  showLastReply();
  panel.show(lastQuestion());
  refreshConversations();
  closeMenu();
  $('message').focus();
  prepare();
}

/** The conversation `c` (or its messages `list`) as the model sees it: the system prompt (its own, or Settings'),
 * then every message with text (a question with the turns of earlier conversations recalled for it before its text). */
function chatMessages(list = conversation.messages, c = conversation) {
  const messages = [];
  const systemPrompt = effectiveSettings(settings, c).systemPrompt.trim();
  if (systemPrompt) messages.push({ role: 'system', content: systemPrompt });
  for (const m of list) if (m.content) messages.push({ role: m.role, content: modelContent(m) });
  return messages;
}

const lastQuestion = () => conversation.messages.findLast((m) => m.role === 'user') ?? null;

/**
 * Make the open conversation ready while its user reads and types: the model takes what its prefix cache holds of it
 * (from IndexedDB after a reload) and evaluates the rest, generating nothing (`maxTokens: 0`), so the next message
 * evaluates only its own tokens. The model runs one call at a time: a message sent meanwhile waits for this.
 */
async function prepare() {
  const messages = chatMessages();
  showStatus($('memory'), null);
  if (!llm || generation || messages.at(-1)?.role !== 'assistant') return;
  const [model, id] = [llm, conversation.id];
  try {
    // With the adapter the answer will have: the model's keys and values differ with it.
    // Not a request of the user's: the witness log leaves it out.
    const options = { maxTokens: 0, ...learning.options(), witness: false };
    const { usage } = await model.complete(model.tokenizeChat(messages, { addGenerationPrompt: false }), options);
    if (model !== llm || id !== conversation.id) return;
    showStatus($('memory'), describeMemory(usage.cachedTokens, usage.promptTokens));
    document.body.dataset.prepared = String(++prepared);
  } catch {
    // Nothing is lost: the next message evaluates whatever the model lacks.
  }
}

/** The speeds and context use of the conversation's last answer. */
function showLastReply() {
  const meta = conversation.messages.findLast((m) => m.meta?.promptTokens !== undefined)?.meta;
  showStatus($('speed'), describeSpeed(meta));
  const size = llm?.info().contextSize ?? settings.contextSize;
  showStatus($('context'), describeContext(meta ? meta.promptTokens + meta.completionTokens : 0, size));
}

function startNew() {
  if (generation) return;
  conversation = newConversation();
  conversationForm.show(conversation);
  view.render(conversation);
  showLastReply();
  panel.show(null);
  refreshConversations();
  closeMenu();
  $('message').focus();
}
$('new-chat').onclick = startNew;

// ---- this conversation's own settings (conversation-settings.js) ----------------------------------------------
// Stored with the conversation; a new one is stored with its first message.
const conversationForm = new ConversationSettingsForm($('conversation-settings'), settings, (c) => c.messages.length && saveConversation(c));

// ---- answer format (Settings): Text, JSON object or JSON Schema, the chat request's response_format -------------
/** The schema box for JSON Schema only, with what is wrong with its text; whether the answer format can be sent. */
function checkAnswerFormat() {
  const schema = settings.answerFormat === 'json_schema';
  const problem = schema ? schemaProblem(settings.jsonSchema) : null;
  $('s-schema-box').hidden = !schema;
  $('s-schema-error').textContent = problem ?? '';
  $('s-schema').setAttribute('aria-invalid', String(Boolean(problem)));
  return !problem;
}

/** Whether a request can go with the answer format; if not, the form shows why and nothing is sent. */
function formatReady() {
  if (checkAnswerFormat()) return true;
  $('settings-panel').open = true;
  notice('Not sent: the JSON Schema of the answer format (Settings) is not valid. Correct it, or choose Text.');
  $('s-schema').focus();
  return false;
}

// ---- chat -------------------------------------------------------------------------------------------------------
async function send() {
  const text = $('message').value.trim();
  if (!text || generation || loading || !formatReady()) return;
  if (!llm) {
    // The first message loads the model chosen in the list (the default one on a first visit), then is answered.
    await loadModel({ url: $('model-select').value || DEFAULT_MODEL });
    if (!llm || $('message').value.trim() !== text) return; // not loaded (the error says why), or the text changed
  }
  $('message').value = '';
  if (conversation.messages.length === 0) conversation.title = titleOf(text);
  conversation.messages.push({ role: 'user', content: text });
  await reply();
}

/** Generate the assistant's answer to the conversation as it stands, streaming it into the page. */
async function reply() {
  clearMessages();
  showStatus($('memory'), null);
  const question = lastQuestion();
  const answer = { role: 'assistant', content: '', meta: {} };
  conversation.messages.push(answer);
  const index = conversation.messages.length - 1;
  conversation.updatedAt = Date.now();
  await saveConversation(conversation);
  view.render(conversation);
  refreshConversations();
  const controller = (generation = new AbortController());
  setState('generating');
  const model = llm;
  const id = conversation.id;
  let adapter = null;
  try {
    await learning.opening; // the adapter of a model just loaded
    // Which adapter answers is kept with the answer: the MicroLoRA (with its steps then) or the base model.
    adapter = answer.meta.adapter = learning.answeredBy();
    const adapterOptions = learning.options();
    const grammar = answerGrammar(settings); // null: text
    if (grammar) answer.meta.format = grammar.type; // the answer shows as JSON
    view.update(index, answer);
    // A new question is routed and, with the long-term memory on, gets the turns of earlier conversations nearest it
    // (kept with it: a regenerated answer, and the next message, see the same prompt).
    if (question && !('recalled' in question)) await panel.annotate(id, question, controller.signal);
    const messages = chatMessages();
    // The template path (the messages' text kept as text: a message cannot open a system turn), then generate(),
    // whose result has the engine's timings; a JSON answer format is its grammar.
    const onText = (text) => {
      answer.content += text;
      view.update(index, answer);
    };
    const { temperature, maxTokens } = effectiveSettings(settings, conversation); // the conversation's own, or Settings'
    const sampling = { temperature, topP: settings.topP, maxTokens, ...adapterOptions };
    // What the witness log records with the request (insights-panel.js): the conversation, the question as the user
    // wrote it (the prompt goes as token ids) and the route it took.
    const decision = question?.route;
    const witness = { kind: 'chat', query: question?.content ?? '', route: decision?.route ? { label: decision.route, score: decision.score } : null };
    const options = { ...sampling, ...(grammar && { grammar }), session: id, witness };
    const { usage, timings, finishReason, requestId } = await generateAnswer(model, messages, options, controller.signal, onText);
    answer.meta = { adapter, ...(grammar && { format: grammar.type }), cachedTokens: usage.cachedTokens, promptTokens: usage.promptTokens, completionTokens: usage.completionTokens, timings, finishReason, requestId };
    showStatus($('speed'), describeSpeed(answer.meta));
    showStatus($('context'), describeContext(usage.totalTokens, model.info().contextSize));
  } catch (e) {
    if (e?.code === 'E_ABORTED') answer.meta.stopped = true;
    else {
      answer.meta.error = explain(e).title;
      showError(e);
    }
  } finally {
    generation = null;
  }
  conversation.updatedAt = Date.now();
  await saveConversation(conversation);
  view.render(conversation);
  setState(llm ? 'ready' : 'idle');
  const storeError = model === llm ? model.info().prefixCache?.storeError : null;
  if (storeError) notice(`What the model computed for conversations is kept for this visit only: ${storeError.message}`);
  document.body.dataset.replies = String(++replies);
  if (question && model === llm) panel.remember(id, question, answer);
  insights.refresh();
  $('message').focus();
  // The prefix cache writes its pages to IndexedDB in the background; data-persisted says when they are there.
  model.flushPrefixCache?.().then(
    () => (document.body.dataset.persisted = String(++flushes)),
    () => {},
  );
}

/** The answer to `messages`: the model's own chat template, then generate() with `options`. Its usage.cachedTokens
 * is what the chat API reports as usage.prompt_tokens_details.cached_tokens. */
async function generateAnswer(model, messages, options, signal, onText) {
  const it = model.generate(model.tokenizeChat(messages), { ...options, signal });
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
    onText(r.value.text);
  }
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  send();
});
$('message').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
$('stop').onclick = () => generation?.abort();
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape') return;
  if (generation) generation.abort();
  else if (loading) loading.abort();
  else closeMenu();
});

// ---- feedback: the thumbs on answers train the model's MicroLoRA (learning-panel.js) ---------------------------

/** A thumb on answer `m`: one training step of the MicroLoRA on its text as the answer to the conversation before it
 * (as the model saw it). Its thumbs are disabled and show progress meanwhile, then the step's loss and time for a
 * while; the step count stays with the message. A failure goes to the error box: the chat goes on. */
async function giveFeedback(m, accepted) {
  const conv = conversation;
  const i = conv.messages.indexOf(m);
  if (i < 0 || view.training.get(m)?.busy) return;
  view.setTraining(m, { busy: true });
  insights.score(m.meta?.requestId, accepted);
  let said = null;
  try {
    const { loss, steps, timings } = await learning.feedback(chatMessages(conv.messages.slice(0, i), conv), m.content, accepted);
    const ms = timings.frozenMs + timings.forwardMs + timings.backwardMs + timings.updateMs;
    said = `loss ${loss.toFixed(3)} · ${(ms / 1000).toFixed(2)} s`;
    m.meta = { ...m.meta, feedback: { accepted, steps } };
    await saveConversation(conv);
  } catch (e) {
    showError(e);
  }
  view.setTraining(m, said && { said });
  // The loss and the time are shown briefly; the step count stays.
  if (said) setTimeout(() => view.training.get(m)?.said === said && view.setTraining(m, null), FEEDBACK_SHOWN_MS);
  document.body.dataset.feedbacks = String(++feedbacks);
}
const FEEDBACK_SHOWN_MS = 8000;

// ---- layout (phone width: the sidebar is a drawer) ------------------------------------------------------------
function closeMenu() {
  $('sidebar').classList.remove('open');
  $('menu').setAttribute('aria-expanded', 'false');
}
$('menu').onclick = () => {
  const open = $('sidebar').classList.toggle('open');
  $('menu').setAttribute('aria-expanded', String(open));
};

// ---- memory & routing (memory-panel.js): on an embedding model of their own, loaded in the background ------------
const panel = new MemoryPanel({ settings, saveSettings, titleOf: (id) => conversationTitles.get(id), currentId: () => conversation.id });
panel.start();

// ---- insights (insights-panel.js): the witness log of this browser's requests, on the same embedding model --------
const insights = new InsightsPanel({ titleOf: (id) => conversationTitles.get(id) });
panel.opening.then(() => panel.embedder && insights.open(panel.embedder));
// The message is routed and its recall found while it is typed.
$('message').addEventListener('input', () => panel.draft($('message').value));

// ---- learning (learning-panel.js) -------------------------------------------------------------------------------
const learning = new LearningPanel({ settings, saveSettings, showError, onChange: () => view.refreshFeedback() });

// ---- start -------------------------------------------------------------------------------------------------------
bindSettingsForm($('settings'), settings, (name) => {
  if (['answerFormat', 'jsonSchema'].includes(name)) checkAnswerFormat();
  else conversationForm.show(conversation); // Settings' values are the placeholders of the conversation's own
});
checkAnswerFormat();
setState('idle');
conversationForm.show(conversation);
view.render(conversation);
$('model-select').onchange = showHint;
await Promise.all([fillModelList(), refreshConversations(), refreshCached()]);
if (!crossOriginIsolated) notice('This page is not cross-origin isolated, so the model runs on one thread (slower).');
// The last model loaded from a URL comes back from the package's model store, with no download.
if (settings.lastModel && (await isCached(settings.lastModel))) loadModel({ url: settings.lastModel });
else if (!settings.lastModel) $('model-select').value = DEFAULT_MODEL;
