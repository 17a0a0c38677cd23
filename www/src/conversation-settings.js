// One conversation's own settings: a system prompt (a preset's, or its own text), a temperature and max tokens, each
// over the global one (settings.js) for that conversation only. They are kept with the conversation (its `settings`,
// holding only the fields set: an empty field means the global setting).

/** Built-in system prompts. */
export const PRESETS = [
  { name: 'Concise', systemPrompt: 'Answer as briefly as the question allows: one or two sentences, no preamble, no repetition of the question.' },
  {
    name: 'Code helper',
    systemPrompt: 'You are a programming assistant. Answer with working code in fenced code blocks marked with their language, then explain it in a few sentences.',
  },
  {
    name: 'Translator',
    systemPrompt: 'You are a translator. Translate the user\'s text into the language they ask for, or into English when they name none. Reply with the translation only.',
  },
];

/** The settings that conversation `c`'s answers use: the global `settings` with the conversation's own over them. */
export const effectiveSettings = (settings, c) => ({ ...settings, ...c.settings });

const NUMBERS = new Set(['temperature', 'maxTokens']);

/** The "This conversation" form: a preset list, the system prompt, temperature and max tokens of the open one. */
export class ConversationSettingsForm {
  /** `form`: its fields are named as the settings (and `preset`); `global`: the global settings (the placeholders);
   * `onChange(conversation)`: its settings changed (to store it). */
  constructor(form, global, onChange) {
    Object.assign(this, { form, global, onChange });
    this.conversation = null;
    const presets = form.elements.preset;
    for (const [i, p] of PRESETS.entries()) presets.append(new Option(p.name, String(i)));
    form.addEventListener('input', (event) => this.#input(event.target));
    form.addEventListener('submit', (e) => e.preventDefault());
  }

  /** Show conversation `c`'s settings (and the global ones as placeholders). */
  show(c) {
    this.conversation = c;
    const own = c.settings ?? {};
    const { elements } = this.form;
    for (const name of ['systemPrompt', ...NUMBERS]) elements[name].value = own[name] ?? '';
    elements.systemPrompt.placeholder = this.global.systemPrompt.trim() || 'Settings\' (empty: the model\'s own)';
    elements.temperature.placeholder = `${this.global.temperature} (Settings')`;
    elements.maxTokens.placeholder = `${this.global.maxTokens} (Settings')`;
    this.#showPreset();
  }

  /** The preset whose prompt the conversation has: none, one of PRESETS, or "custom" (text of its own). */
  #showPreset() {
    const prompt = this.conversation.settings?.systemPrompt ?? '';
    const i = PRESETS.findIndex((p) => p.systemPrompt === prompt);
    this.form.elements.preset.value = prompt === '' ? '' : i >= 0 ? String(i) : 'custom';
  }

  #input(el) {
    const c = this.conversation;
    if (!c) return;
    const own = { ...c.settings };
    if (el.name === 'preset') {
      const preset = PRESETS[Number(el.value)];
      own.systemPrompt = preset?.systemPrompt ?? '';
      this.form.elements.systemPrompt.value = own.systemPrompt;
    } else if (NUMBERS.has(el.name)) {
      if (el.value !== '' && !el.checkValidity()) return;
      own[el.name] = el.value === '' ? undefined : Number(el.value);
    } else if (el.name === 'systemPrompt') own.systemPrompt = el.value;
    else return;
    // Only the fields set are kept: an empty one is the global setting.
    for (const [k, v] of Object.entries(own)) if (v === undefined || v === '') delete own[k];
    if (Object.keys(own).length) c.settings = own;
    else delete c.settings;
    this.#showPreset();
    this.onChange(c);
  }
}
