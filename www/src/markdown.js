// The model's output as Markdown, with TeX math (math.js). It is untrusted: raw HTML in it is shown as text (never
// parsed), and the HTML that marked and KaTeX produce is sanitized by DOMPurify before it reaches the page, so no script
// or event handler from it runs.
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/common';
import { Marked } from 'marked';
import { mathExtension } from './math.js';

const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    // Raw HTML, block or inline: its text, escaped.
    html: ({ text }) => escapeHtml(text),
    code({ text, lang }) {
      const language = lang && hljs.getLanguage(lang) ? lang : null;
      const html = language ? hljs.highlight(text, { language, ignoreIllegals: true }).value : escapeHtml(text);
      return `<pre><code class="hljs${language ? ` language-${escapeHtml(language)}` : ''}">${html}</code></pre>\n`;
    },
  },
}).use(mathExtension);

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

// HTML, and the SVG and MathML that KaTeX makes (its MathML's <semantics> and <annotation>, the TeX source that screen
// readers may read, are not in DOMPurify's MathML profile; <annotation-xml>, which could hold HTML, stays out).
const sanitize = (html) =>
  DOMPurify.sanitize(html, {
    USE_PROFILES: { html: true, svg: true, mathMl: true },
    ADD_TAGS: ['semantics', 'annotation'],
    FORBID_TAGS: ['style', 'form', 'input', 'button'],
  });

/** Sanitized HTML for a message's Markdown text (complete, or still streaming). */
export function renderMarkdown(text) {
  return sanitize(marked.parse(text, { async: false }));
}

/** Sanitized HTML for the text of an answer asked for as JSON: a highlighted code block, pretty-printed when the text
 * parses (the raw text while it streams, or when it was cut short). */
export function renderJson(text) {
  let shown = text;
  try {
    shown = JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    // not (yet) JSON: shown as it is
  }
  return sanitize(`<pre><code class="hljs language-json">${hljs.highlight(shown, { language: 'json', ignoreIllegals: true }).value}</code></pre>`);
}
