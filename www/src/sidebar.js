// The sidebar's lists (conversations, with their search and rename; models, cached models) and the page-wide drop
// zone for a .gguf file.
import { bytes } from './format.js';
import { icon } from './icons.js';

/** A button showing `content` (text or an icon), named `label` when given. */
function button(content, label, onClick, className) {
  const b = document.createElement('button');
  b.type = 'button';
  b.append(content);
  if (label) b.setAttribute('aria-label', label);
  if (className) b.className = className;
  b.onclick = onClick;
  return b;
}

/** Whether conversation `c` is found by the search `query`: each of its words is in the title or in a message. */
function matchesSearch(c, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return true;
  const text = [c.title, ...c.messages.map((m) => m.content)].join('\n').toLowerCase();
  return words.every((w) => text.includes(w));
}

/** The conversations that `query` finds, the current one marked; `open(id)`, `rename(id, title)` and `remove(id)` act
 * on one. */
export function renderConversationList(list, conversations, currentId, query, { open, rename, remove }) {
  list.replaceChildren();
  for (const c of conversations.filter((c) => matchesSearch(c, query))) {
    const li = document.createElement('li');
    li.dataset.id = c.id;
    if (c.id === currentId) li.setAttribute('aria-current', 'true');
    const title = button(c.title, null, () => open(c.id), 'open');
    const edit = button(icon('rename'), `Rename conversation ${c.title}`, () => startRename(title, c, rename), 'rename');
    li.append(title, edit, button('×', `Delete conversation ${c.title}`, () => remove(c.id), 'delete'));
    list.append(li);
  }
  if (list.children.length === 0 && query.trim()) {
    const li = document.createElement('li');
    li.className = 'hint';
    li.textContent = `No conversation has “${query.trim()}”.`;
    list.append(li);
  }
  list.dataset.query = query; // what the list shows, for tests
}

/** Rename `c` in place: its title button becomes a text box; Enter (or leaving it) renames, Esc cancels. */
function startRename(title, c, rename) {
  const box = document.createElement('input');
  box.value = c.title;
  box.maxLength = 120;
  box.className = 'title-box';
  box.setAttribute('aria-label', `New title of ${c.title}`);
  let done = false;
  const end = (keep) => {
    if (done) return;
    done = true;
    const text = box.value.trim();
    box.replaceWith(title);
    if (keep && text && text !== c.title) rename(c.id, text);
    else title.focus();
  };
  box.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') end(true);
    else if (e.key === 'Escape') {
      e.stopPropagation(); // the page's Esc closes the menu
      end(false);
    }
  });
  box.addEventListener('blur', () => end(true));
  title.replaceWith(box);
  box.select();
}

/** The model list: `models` ({ url, label }) without duplicates, `selected` chosen when it is there. */
export function renderModelOptions(select, models, selected) {
  const seen = new Set();
  select.replaceChildren();
  for (const m of models) {
    if (seen.has(m.url)) continue;
    seen.add(m.url);
    select.append(new Option(m.label, m.url));
  }
  if (selected && seen.has(selected)) select.value = selected;
}

/** The model files kept in the browser ({ url, name, bytes, total, complete }; a download cut short is kept in part
 * and resumes at the next load) with a Delete button each, and the storage used. */
export function renderCachedModels(list, storage, models, { usage, quota }, remove) {
  list.replaceChildren();
  for (const m of models) {
    const li = document.createElement('li');
    const name = document.createElement('span');
    name.textContent = `${m.name} · ${bytes(m.bytes)}${m.complete ? '' : ` of ${bytes(m.total)} (download cut short)`}`;
    name.title = m.url;
    li.append(name, button('Delete', `Delete cached ${m.name}`, () => remove(m.url)));
    list.append(li);
  }
  if (models.length === 0) list.innerHTML = '<li class="hint">None yet: a downloaded model is kept here.</li>';
  storage.textContent = quota ? `Storage: ${bytes(usage)} used of ${bytes(quota)} this browser gives the site.` : '';
}

/** A file dropped anywhere on the page goes to `onFile`; `overlay` shows while one is dragged over it. */
export function onFileDrop(overlay, onFile) {
  let depth = 0;
  window.addEventListener('dragenter', (e) => {
    if (!e.dataTransfer?.types.includes('Files')) return;
    depth++;
    overlay.hidden = false;
  });
  window.addEventListener('dragleave', () => {
    depth = Math.max(0, depth - 1);
    if (depth === 0) overlay.hidden = true;
  });
  window.addEventListener('dragover', (e) => e.preventDefault());
  window.addEventListener('drop', (e) => {
    e.preventDefault();
    depth = 0;
    overlay.hidden = true;
    const file = e.dataTransfer?.files[0];
    if (file) onFile(file);
  });
}
