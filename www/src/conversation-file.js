// Conversations as files: JSON, the stored records as they are (store.js) in a versioned envelope, to import again;
// Markdown, to read. An import is checked whole before anything is stored: a file with anything wrong in it is refused
// with what is wrong, and changes nothing.
export const FORMAT = 'ruvllm-chat';
export const VERSION = 1;

/** The JSON file of `conversations`. */
export function conversationsJson(conversations) {
  return JSON.stringify({ format: FORMAT, version: VERSION, exportedAt: new Date().toISOString(), conversations }, null, 2);
}

/** The Markdown file of `conversations`: each a title, its system prompt if it has its own, then its messages. */
export function conversationsMarkdown(conversations) {
  return conversations
    .map((c) => {
      const parts = [`# ${c.title}`];
      if (c.settings?.systemPrompt) parts.push(`*System prompt:* ${c.settings.systemPrompt}`);
      for (const m of c.messages) parts.push(`## ${m.role === 'user' ? 'You' : 'Assistant'}`, m.content);
      return parts.join('\n\n');
    })
    .join('\n\n---\n\n')
    .concat('\n');
}

/** A file name for a conversation: its title in lowercase letters, digits and dashes (at most 40), then `ext`. */
export function fileName(title, ext) {
  const base = title.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-|-$/g, '').slice(0, 40);
  return `${base || 'conversation'}.${ext}`;
}

/** Save `text` as the file `name` (the browser's download). */
export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

// ---- import ----------------------------------------------------------------------------------------------------

const isObject = (x) => typeof x === 'object' && x !== null && !Array.isArray(x);

function check(ok, what) {
  if (!ok) throw new Error(what);
}

/** A stored message: its role and text, and what the page keeps with it (optional objects). */
function checkMessage(m, where) {
  check(isObject(m), `${where} is not an object`);
  check(m.role === 'user' || m.role === 'assistant', `${where} has the role ${JSON.stringify(m.role)} (user or assistant)`);
  check(typeof m.content === 'string', `${where} has no text ("content")`);
  for (const key of ['meta', 'route']) check(m[key] === undefined || isObject(m[key]), `${where}'s "${key}" is not an object`);
  const turnOk = (t) => isObject(t) && typeof t.role === 'string' && typeof t.content === 'string';
  check(m.recalled === undefined || (Array.isArray(m.recalled) && m.recalled.every(turnOk)), `${where}'s recalled turns are not a list of { role, content }`);
}

/** A conversation's own settings (conversation-settings.js): only those fields, each in range. */
function checkSettings(s, where) {
  check(isObject(s), `${where}'s settings are not an object`);
  for (const key of Object.keys(s)) check(['systemPrompt', 'temperature', 'maxTokens'].includes(key), `${where}'s settings have an unknown "${key}"`);
  check(s.systemPrompt === undefined || typeof s.systemPrompt === 'string', `${where}'s system prompt is not text`);
  check(s.temperature === undefined || (Number.isFinite(s.temperature) && s.temperature >= 0 && s.temperature <= 2), `${where}'s temperature is not a number from 0 to 2`);
  check(s.maxTokens === undefined || (Number.isInteger(s.maxTokens) && s.maxTokens >= 1), `${where}'s max tokens is not a whole number of at least 1`);
}

function checkConversation(c, where) {
  check(isObject(c), `${where} is not an object`);
  check(typeof c.id === 'string' && c.id !== '', `${where} has no "id"`);
  check(typeof c.title === 'string', `${where} has no "title"`);
  check(Number.isFinite(c.createdAt) && Number.isFinite(c.updatedAt), `${where} has no "createdAt" and "updatedAt" times`);
  check(Array.isArray(c.messages), `${where} has no "messages" list`);
  c.messages.forEach((m, i) => checkMessage(m, `${where}'s message ${i + 1}`));
  if (c.settings !== undefined) checkSettings(c.settings, where);
}

/** The conversations of a JSON file's `text`; throws an Error that says what is wrong with the file. */
export function parseConversations(text) {
  let data;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw new Error(`the file is not JSON (${e.message})`);
  }
  check(isObject(data) && data.format === FORMAT, `the file is not a conversation export of this page (its "format" is not "${FORMAT}")`);
  check(Number.isInteger(data.version) && data.version >= 1, 'the file has no "version"');
  check(data.version <= VERSION, `the file is of version ${data.version}, newer than this page reads (${VERSION})`);
  check(Array.isArray(data.conversations), 'the file has no "conversations" list');
  data.conversations.forEach((c, i) => checkConversation(c, `conversation ${i + 1}${typeof c?.title === 'string' ? ` (“${c.title}”)` : ''}`));
  const ids = new Set(data.conversations.map((c) => c.id));
  check(ids.size === data.conversations.length, 'two conversations in the file have the same "id"');
  return data.conversations;
}
