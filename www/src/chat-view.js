// The conversation on the page: one <article> per message, the assistant's as sanitized Markdown, with their
// actions (copy; edit and resend a question; regenerate the last answer; thumbs up and down, which train the model's
// MicroLoRA; copy on each code block) and what the engine said about each answer (which adapter answered it, speeds).
// An answer asked for as JSON (the answer format in Settings) shows as a JSON code block.
import { renderJson, renderMarkdown } from './markdown.js';
import { rate } from './format.js';
import { icon } from './icons.js';
import { adapterLabel } from './learning-panel.js';

/** A button showing `content` (text or an icon), named `label` when given. */
function button(content, onClick, label) {
  const b = document.createElement('button');
  b.type = 'button';
  b.append(content);
  if (label) b.setAttribute('aria-label', label);
  b.addEventListener('click', onClick);
  return b;
}

const FORMATS = { json_object: 'JSON object', json_schema: 'JSON Schema' };

/** An answer's HTML: JSON (its answer format was one) or Markdown. */
const answerHtml = (m) => (m.meta?.format ? renderJson(m.content) : renderMarkdown(m.content));

/** Show answer `m` in `content`, with a Copy button on each code block (added here, after sanitizing: the sanitizer
 * lets no button through). */
function showAnswer(content, m) {
  content.innerHTML = answerHtml(m);
  for (const pre of content.querySelectorAll('pre')) {
    if (!pre.textContent) continue; // nothing to copy (a JSON answer that failed)
    const copy = button('Copy', () => copyCode(copy, pre.textContent), 'Copy code');
    copy.className = 'copy-code';
    const block = document.createElement('div');
    block.className = 'code-block';
    pre.replaceWith(block);
    block.append(pre, copy);
  }
}

/** Copy a code block's text; its button says how that went for a moment. */
async function copyCode(b, text) {
  const copied = await navigator.clipboard.writeText(text).then(() => true, () => false);
  b.textContent = copied ? 'Copied' : 'Not allowed';
  setTimeout(() => (b.textContent = 'Copy'), CODE_COPIED_SHOWN_MS);
}
const CODE_COPIED_SHOWN_MS = 2000;

/** What the engine said about an answer: the adapter that answered, its format, tokens from memory, speeds, stopped. */
export function metaText(meta) {
  if (!meta) return '';
  const parts = [];
  if ('adapter' in meta) parts.push(adapterLabel(meta.adapter)); // answers of before the Learning panel have none
  if (meta.format) parts.push(FORMATS[meta.format] ?? meta.format);
  if (meta.cachedTokens > 0) parts.push(`${meta.cachedTokens} token${meta.cachedTokens === 1 ? '' : 's'} from memory`);
  if (meta.promptTokens !== undefined) parts.push(`${meta.promptTokens} in prompt, ${meta.completionTokens} generated`);
  if (meta.timings) parts.push(`prefill ${rate(meta.timings.prefillTokensPerSecond)}, decode ${rate(meta.timings.decodeTokensPerSecond)}`);
  if (meta.finishReason === 'length') parts.push('cut at max tokens');
  if (meta.stopped) parts.push('stopped');
  if (meta.error) parts.push(`failed: ${meta.error}`);
  return parts.join(' · ');
}

export class ChatView {
  /**
   * `actions`: { copy(i), edit(i, text), regenerate(i), feedback(message, accepted) }; `busy()`: whether a reply is
   * being generated; `whyNoFeedback()`: why the thumbs are disabled (the tooltip), or null.
   */
  constructor(container, actions, busy, whyNoFeedback) {
    this.container = container;
    this.actions = actions;
    this.busy = busy;
    this.whyNoFeedback = whyNoFeedback;
    this.pending = null;
    this.messages = [];
    // message -> { busy: true } while its training step runs, then { said } (the step's loss and time) for a while.
    // Kept here, not in the message, so that it is never stored and outlives a render.
    this.training = new WeakMap();
    /** What an empty conversation says (main.js: what to do next, with or without a model). */
    this.hint = '';
  }

  render(conversation) {
    this.container.replaceChildren();
    const messages = conversation?.messages ?? [];
    this.messages = messages;
    if (messages.length === 0) {
      const p = document.createElement('p');
      p.className = 'empty';
      p.textContent = this.hint;
      this.container.append(p);
    }
    messages.forEach((m, i) => this.container.append(this.article(m, i, i === messages.length - 1)));
    this.scroll();
  }

  article(m, i, last) {
    const el = document.createElement('article');
    el.className = `msg ${m.role}`;
    el.dataset.index = String(i);
    const who = document.createElement('h3');
    who.className = 'who';
    who.textContent = m.role === 'user' ? 'You' : 'Assistant';
    const content = document.createElement('div');
    content.className = 'content';
    this.fill(content, m);
    const meta = document.createElement('p');
    meta.className = 'meta';
    meta.textContent = metaText(m.meta);
    const actions = document.createElement('div');
    actions.className = 'actions';
    actions.append(button('Copy', () => this.actions.copy(i), `Copy ${m.role === 'user' ? 'question' : 'answer'}`));
    if (m.role === 'user') actions.append(button('Edit', () => this.startEdit(el, m, i), 'Edit and resend'));
    if (m.role === 'assistant' && last) actions.append(button('Regenerate', () => this.actions.regenerate(i)));
    // Feedback on a whole answer only: an empty or failed one teaches nothing (a stopped one may still be judged).
    if (m.role === 'assistant' && m.content && !m.meta?.error) actions.append(this.feedbackBox(m));
    el.append(who, content, meta, actions);
    return el;
  }

  /** The thumbs up and down of answer `m`, and what the last of them did. */
  feedbackBox(m) {
    const box = document.createElement('span');
    box.className = 'feedback';
    const up = button(icon('good'), () => this.actions.feedback(m, true), 'Good answer');
    const down = button(icon('bad'), () => this.actions.feedback(m, false), 'Bad answer');
    const said = document.createElement('span');
    said.className = 'learned';
    box.append(up, down, said);
    this.fillFeedback(box, m);
    return box;
  }

  /** Draw `box` (a feedbackBox) for `m` as it is now: buttons disabled while its step runs or when feedback cannot be
   * given (the tooltip says why), the step's progress, its result. Updated in place, so a focused thumb keeps focus. */
  fillFeedback(box, m) {
    const state = this.training.get(m);
    const generating = this.busy() && m === this.messages.at(-1); // the answer being streamed
    const why = this.whyNoFeedback() ?? (generating ? 'Wait for the answer to finish.' : null);
    const [up, down, said] = box.children;
    for (const [b, title] of [[up, 'Good answer: teach it to your adapter (one training step)'], [down, 'Bad answer: train your adapter away from it (one step)']]) {
      b.disabled = Boolean(state?.busy || why);
      b.title = why ?? title;
    }
    box.title = why ?? '';
    box.setAttribute('aria-busy', String(Boolean(state?.busy)));
    said.replaceChildren();
    if (state?.busy) {
      const progress = document.createElement('progress'); // indeterminate: a step has no parts to count
      progress.setAttribute('aria-label', 'Training step');
      said.append(progress, ' Learning…');
      return;
    }
    const given = m.meta?.feedback;
    const parts = [];
    if (given) parts.push(`Taught as a ${given.accepted ? 'good' : 'bad'} answer: step ${given.steps}`);
    if (state?.said) parts.push(state.said);
    said.textContent = parts.join(' · ');
  }

  /** `m`'s training state (see `training`; null: none), drawn at once. */
  setTraining(m, state) {
    if (state) this.training.set(m, state);
    else this.training.delete(m);
    this.refreshFeedback(m);
  }

  /** Draw the thumbs again: of message `m`, or of every answer. */
  refreshFeedback(m) {
    this.messages.forEach((msg, i) => {
      if (m && msg !== m) return;
      const box = this.container.querySelector(`article[data-index="${i}"] .feedback`);
      if (box) this.fillFeedback(box, msg);
    });
  }

  fill(content, m) {
    if (m.role === 'assistant') {
      content.classList.add('markdown');
      showAnswer(content, m);
    } else content.textContent = m.content;
  }

  /** Edit a question in place; "Save and send" drops the answers after it and asks again. */
  startEdit(el, m, i) {
    if (this.busy()) return;
    const content = el.querySelector('.content');
    const box = document.createElement('textarea');
    box.value = m.content;
    box.rows = Math.min(10, m.content.split('\n').length + 1);
    box.setAttribute('aria-label', 'Edit message');
    const save = button('Save and send', () => this.actions.edit(i, box.value));
    const cancel = button('Cancel', () => {
      content.replaceChildren();
      this.fill(content, m);
    });
    box.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        save.click();
      } else if (e.key === 'Escape') cancel.click();
    });
    const wrap = document.createElement('div');
    wrap.className = 'edit';
    wrap.append(box, save, cancel);
    content.replaceChildren(wrap);
    box.focus();
  }

  /** Show the streaming answer at index `i`, at most once per frame. */
  update(i, m) {
    this.pending = { i, m };
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.flush();
    });
  }

  flush() {
    if (!this.pending) return;
    const { i, m } = this.pending;
    this.pending = null;
    const el = this.container.querySelector(`article[data-index="${i}"]`);
    if (!el) return;
    showAnswer(el.querySelector('.content'), m);
    el.querySelector('.meta').textContent = metaText(m.meta);
    this.scroll();
  }

  scroll() {
    this.container.scrollTop = this.container.scrollHeight;
  }
}
