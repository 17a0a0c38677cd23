// Settings, kept in localStorage. Sampling settings and the answer format apply to the next message; the others at the
// next model load.
import { RECALL_MIN_SCORE } from './recall.js';

const KEY = 'ruvllm-chat-settings';

export const DEFAULTS = {
  systemPrompt: '',
  temperature: 0.7,
  topP: 0.95,
  maxTokens: 512,
  contextSize: 4096,
  threads: 0, // 0: the package's default, one per core (at most 8)
  backend: 'auto',
  theme: 'auto',
  lastModel: null, // the URL of the last model loaded from a URL, reloaded from the cache on the next visit
  // Long-term memory: recall earlier conversations' turns, remember this one's (memory-panel.js). Off by default: on
  // the benchmark it never hurts an answer but rarely helps one (benches/README.md, "Long-term memory").
  memoryOn: false,
  recallMinScore: RECALL_MIN_SCORE, // the least score (cosine, on the embedding model) a turn needs to be recalled
  useAdapter: false, // answer with the model's MicroLoRA, trained by the thumbs on answers (learning-panel.js)
  answerFormat: 'text', // text, json_object or json_schema: the generation's grammar
  jsonSchema: JSON.stringify(
    {
      title: 'Contact card',
      type: 'object',
      properties: {
        name: { type: 'string', maxLength: 60 },
        email: { type: 'string', maxLength: 80 },
        phone: { type: 'string', maxLength: 20 },
        tags: { type: 'array', items: { type: 'string', maxLength: 20 }, maxItems: 3 },
      },
      required: ['name', 'email'],
      additionalProperties: false,
    },
    null,
    2,
  ), // the schema of json_schema, as the form holds it (text: it may not be JSON yet)
};

export function loadSettings() {
  try {
    return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(KEY) ?? '{}') };
  } catch {
    return { ...DEFAULTS };
  }
}

export function saveSettings(settings) {
  localStorage.setItem(KEY, JSON.stringify(settings));
}

const NUMBERS = new Set(['temperature', 'topP', 'maxTokens', 'contextSize', 'threads']);

/** Fill the form from `settings`, and keep `settings` (saved) in step with it. */
export function bindSettingsForm(form, settings, onChange) {
  for (const el of form.elements) if (el.name in settings) el.value = settings[el.name];
  form.addEventListener('input', (event) => {
    const el = event.target;
    if (!(el.name in settings)) return;
    if (NUMBERS.has(el.name)) {
      if (el.value === '' || !el.checkValidity()) return;
      settings[el.name] = Number(el.value);
    } else settings[el.name] = el.value;
    saveSettings(settings);
    onChange?.(el.name);
  });
  form.addEventListener('submit', (e) => e.preventDefault());
}

/** What is wrong with the schema's text `text` (not JSON, or not an object or boolean), or null. */
export function schemaProblem(text) {
  let schema;
  try {
    schema = JSON.parse(text);
  } catch (e) {
    return `The schema is not valid JSON: ${e.message}`;
  }
  if (typeof schema === 'boolean' || (typeof schema === 'object' && schema !== null && !Array.isArray(schema))) return null;
  return 'The schema must be a JSON object ({ … }), or true or false.';
}

/** The generation's `grammar` for the settings' answer format (checked first: `schemaProblem`); null for text. */
export function answerGrammar(settings) {
  if (settings.answerFormat === 'json_object') return { type: 'json_object' };
  if (settings.answerFormat !== 'json_schema') return null;
  return { type: 'json_schema', schema: JSON.parse(settings.jsonSchema) };
}
