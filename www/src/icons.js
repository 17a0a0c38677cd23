// The page's icons, as inline SVG: they draw the same with any font (an emoji needs an emoji font, and shows as an
// empty box without one). An icon is decoration: the button that holds it carries the accessible name (aria-label).
const SVG = 'http://www.w3.org/2000/svg';

// 24 x 24 outlines, stroked in the text's colour.
const THUMB = 'M7 10 11 3c1.6 0 2.6 1.2 2.3 2.8L12.7 9H19a2 2 0 0 1 2 2.3l-1.2 7.9A2 2 0 0 1 17.8 21H7ZM3 10h4v11H3Z';
const PATHS = {
  good: THUMB,
  bad: THUMB, // the same thumb, upside down (below)
  rename: 'M4 20h4L19 9l-4-4L4 16ZM14 6l4 4',
};

/** An SVG element of icon `name` (good, bad, rename), hidden from assistive technology. */
export function icon(name) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('width', '1em');
  svg.setAttribute('height', '1em');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('focusable', 'false');
  svg.classList.add('icon');
  const path = document.createElementNS(SVG, 'path');
  path.setAttribute('d', PATHS[name]);
  path.setAttribute('fill', 'none');
  path.setAttribute('stroke', 'currentColor');
  path.setAttribute('stroke-width', '2');
  path.setAttribute('stroke-linejoin', 'round');
  path.setAttribute('stroke-linecap', 'round');
  if (name === 'bad') path.setAttribute('transform', 'matrix(1 0 0 -1 0 24)');
  svg.append(path);
  return svg;
}
