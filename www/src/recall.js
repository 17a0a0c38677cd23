// What the long-term memory and the router decide with, apart from the page: the embedding model they run on, the
// scores calibrated on it (benches/memory_quality.mjs measures them), the routes a router starts with, and how
// recalled turns enter a prompt. No DOM and no package import: the benchmark runs this same module in Node.

/** The embedding model of the memory and the router: all-MiniLM-L6-v2 (384 dimensions, 25 MB in Q8_0), served from
 * the local model cache by the demo's servers (scripts/fetch-embed-model.sh puts it there). A chat model's own
 * pooled states are no good for this: every text scores 0.8-0.9 against every other. */
export const EMBEDDER = { url: '/models/all-MiniLM-L6-v2.Q8_0.gguf', label: 'all-MiniLM-L6-v2 Q8_0' };

/** The least cosine a turn of another conversation needs to be recalled: between the best scores of unrelated
 * requests (at most 0.31 on MiniLM) and of requests that need the earlier conversation (at least 0.51), measured by
 * benches/memory_quality.mjs. */
export const RECALL_MIN_SCORE = 0.4;
/** The most turns recalled for a message. */
export const RECALL_K = 3;
/** A message's route needs this score (routes may set their own): between the best score of messages that take no
 * default route (at most 0.27 on MiniLM) and of those that take one (at least 0.43), measured by
 * benches/memory_quality.mjs on its ten messages. */
export const ROUTE_THRESHOLD = 0.4;
/** The routes a router starts with (and starts with again once all of them are removed). */
export const DEFAULT_ROUTES = [
  { name: 'code', utterances: ['How do I write a function in Python?', 'Fix this JavaScript bug', 'What does this error in my code mean?', 'Explain this SQL query'] },
  { name: 'math', utterances: ['What is 12 times 7?', 'Solve the equation 2x + 3 = 11', 'What is the square root of 144?', 'Calculate 15% of 80'] },
  { name: 'chit-chat', utterances: ['Hello, how are you today?', 'Tell me a joke', "What's your favourite movie?", 'Good morning!'] },
];

/** The most characters of a recalled turn put in the prompt. */
export const RECALLED_CHARS = 300;

export const clip = (text) => (text.length > RECALLED_CHARS ? `${text.slice(0, RECALLED_CHARS - 1)}…` : text);

/** A user message as the model sees it: the turns recalled for it (`m.recalled`), then its text. */
export function modelContent(m) {
  if (m.role !== 'user' || !m.recalled?.length) return m.content;
  const turns = m.recalled.map((t) => `- ${t.role}: ${t.content}`);
  return ['Relevant turns from earlier conversations (most relevant first):', ...turns, '', m.content].join('\n');
}
