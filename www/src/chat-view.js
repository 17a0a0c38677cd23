// The conversation on the page: one <article> per message, the assistant's as sanitized Markdown, with their
// actions (copy; edit and resend a question; regenerate the last answer) and what the engine said about each answer.
import { renderMarkdown } from './markdown.js';
import { rate } from './format.js';

function button(text, onClick, label) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  if (label) b.setAttribute('aria-label', label);
  b.addEventListener('click', onClick);
  return b;
}

/** What the engine said about an answer: tokens from memory, speeds, stopped. */
export function metaText(meta) {
  if (!meta) return '';
  const parts = [];
  if (meta.cachedTokens > 0) parts.push(`${meta.cachedTokens} token${meta.cachedTokens === 1 ? '' : 's'} from memory`);
  if (meta.promptTokens !== undefined) parts.push(`${meta.promptTokens} in prompt, ${meta.completionTokens} generated`);
  if (meta.timings) parts.push(`prefill ${rate(meta.timings.prefillTokensPerSecond)}, decode ${rate(meta.timings.decodeTokensPerSecond)}`);
  if (meta.finishReason === 'length') parts.push('cut at max tokens');
  if (meta.stopped) parts.push('stopped');
  if (meta.error) parts.push(`failed: ${meta.error}`);
  return parts.join(' · ');
}

export class ChatView {
  /** `actions`: { copy(i), edit(i, text), regenerate(i) }; `busy()`: whether a reply is being generated. */
  constructor(container, actions, busy) {
    this.container = container;
    this.actions = actions;
    this.busy = busy;
    this.pending = null;
  }

  render(conversation) {
    this.container.replaceChildren();
    const messages = conversation?.messages ?? [];
    if (messages.length === 0) {
      const p = document.createElement('p');
      p.className = 'empty';
      p.textContent = 'Ask something. Conversations are kept in this browser, and so is what the model computed for them: continuing one after a reload starts from memory.';
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
    el.append(who, content, meta, actions);
    return el;
  }

  fill(content, m) {
    if (m.role === 'assistant') {
      content.classList.add('markdown');
      content.innerHTML = renderMarkdown(m.content);
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
    el.querySelector('.content').innerHTML = renderMarkdown(m.content);
    el.querySelector('.meta').textContent = metaText(m.meta);
    this.scroll();
  }

  scroll() {
    this.container.scrollTop = this.container.scrollHeight;
  }
}
