// The model's output as Markdown. It is untrusted: raw HTML in it is shown as text (never parsed), and the HTML that
// marked produces is sanitized by DOMPurify before it reaches the page, so no script or event handler from it runs.
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/common';
import { Marked } from 'marked';

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
});

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

/** Sanitized HTML for a message's Markdown text (complete, or still streaming). */
export function renderMarkdown(text) {
  const html = marked.parse(text, { async: false });
  return DOMPurify.sanitize(html, { USE_PROFILES: { html: true }, FORBID_TAGS: ['style', 'form', 'input', 'button'] });
}
