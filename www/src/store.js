// Conversations, kept in IndexedDB (database "ruvllm-chat", store "conversations", one record per conversation):
// { id, title, createdAt, updatedAt, messages: [{ role: 'user' | 'assistant', content, meta? }], settings? }
// (settings: the conversation's own, over the global ones: conversation-settings.js). conversation-file.js exports and
// imports these records as they are.
const DB = 'ruvllm-chat';
const STORE = 'conversations';

let dbPromise;
function db() {
  dbPromise ??= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: 'id' });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  return dbPromise;
}

async function run(mode, fn) {
  const d = await db();
  return new Promise((resolve, reject) => {
    const tx = d.transaction(STORE, mode);
    const req = fn(tx.objectStore(STORE));
    tx.oncomplete = () => resolve(req?.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

/** Every conversation, the most recently used first. */
export async function listConversations() {
  const all = (await run('readonly', (s) => s.getAll())) ?? [];
  return all.sort((a, b) => b.updatedAt - a.updatedAt);
}

export const getConversation = (id) => run('readonly', (s) => s.get(id));
export const saveConversation = (c) => run('readwrite', (s) => s.put(structuredClone(c)));
/** Store `conversations` (an import), all or none: one transaction. */
export const putConversations = (conversations) => run('readwrite', (s) => void conversations.forEach((c) => s.put(structuredClone(c))));
/** Delete the conversations of `ids`, all or none. */
export const deleteConversations = (ids) => run('readwrite', (s) => void ids.forEach((id) => s.delete(id)));

export function newConversation() {
  const now = Date.now();
  return { id: crypto.randomUUID(), title: 'New chat', createdAt: now, updatedAt: now, messages: [] };
}

/** A conversation's title: the start of its first message. */
export function titleOf(text) {
  const line = text.trim().split('\n')[0];
  return line.length > 48 ? `${line.slice(0, 47)}…` : line || 'New chat';
}
