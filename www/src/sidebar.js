// The sidebar's lists (conversations, models, cached models) and the page-wide drop zone for a .gguf file.
import { bytes } from './format.js';

function button(text, label, onClick, className) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  if (label) b.setAttribute('aria-label', label);
  if (className) b.className = className;
  b.onclick = onClick;
  return b;
}

/** The conversations, the current one marked; `open(id)` and `remove(id)` act on one. */
export function renderConversationList(list, conversations, currentId, { open, remove }) {
  list.replaceChildren();
  for (const c of conversations) {
    const li = document.createElement('li');
    if (c.id === currentId) li.setAttribute('aria-current', 'true');
    li.append(button(c.title, null, () => open(c.id), 'open'), button('×', `Delete conversation ${c.title}`, () => remove(c.id), 'delete'));
    list.append(li);
  }
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
