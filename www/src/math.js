// TeX math in the model's output, typeset by KaTeX: $…$ and \(…\) in a line, $$…$$ and \[…\] as a block. A marked
// extension, so math is found where Markdown has text (never in code). The HTML that KaTeX makes goes through the same
// sanitizer as the rest of the answer (markdown.js); KaTeX itself runs untrusted: no \href, \url or \includegraphics
// (trust: false), and TeX it cannot parse shows as its source in the theme's error colour, instead of throwing.
import katex from 'katex';
import 'katex/dist/katex.min.css';

const OPTIONS = { throwOnError: false, errorColor: 'var(--error)', trust: false, strict: 'ignore', output: 'htmlAndMathml' };

function typeset(tex, displayMode) {
  try {
    return katex.renderToString(tex, { ...OPTIONS, displayMode });
  } catch {
    // Not a parse error (those render as the source): the source, as text.
    return `<code>${tex.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)}</code>`;
  }
}

// A $ opens math only before a non-space, and closes it only after a non-space and before no digit, so prices
// ("$5 and $10") stay text. Display math may span lines; inline math may not.
const INLINE = [
  [/^\$\$([^$]+?)\$\$/, true],
  [/^\\\[([\s\S]+?)\\\]/, true],
  [/^\\\(([\s\S]+?)\\\)/, false],
  [/^\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)/, false],
];
const BLOCK = [/^ {0,3}\$\$([\s\S]+?)\$\$[ \t]*(?:\n+|$)/, /^ {0,3}\\\[([\s\S]+?)\\\][ \t]*(?:\n+|$)/];

const math = (raw, tex, display) => ({ type: 'math', raw, text: tex.trim(), display });

/** The marked extension (`marked.use(mathExtension)`). */
export const mathExtension = {
  extensions: [
    {
      name: 'mathBlock',
      level: 'block',
      start: (src) => src.match(/^ {0,3}(?:\$\$|\\\[)/m)?.index,
      tokenizer(src) {
        for (const re of BLOCK) {
          const m = re.exec(src);
          if (m) return math(m[0], m[1], true);
        }
      },
    },
    {
      name: 'mathInline',
      level: 'inline',
      start: (src) => {
        const i = src.search(/\$|\\[([]/);
        return i < 0 ? undefined : i;
      },
      tokenizer(src) {
        for (const [re, display] of INLINE) {
          const m = re.exec(src);
          if (m) return math(m[0], m[1], display);
        }
      },
    },
    { name: 'math', renderer: ({ text, display }) => typeset(text, display) },
  ],
};
