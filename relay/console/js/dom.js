// Building the page: elements from parts, text always as text (agent text is never HTML), times
// as ages.

/** An element: `props` are attributes (`class`, `on<event>` listeners, `dataset`), `children`
 * nodes or strings (strings become text nodes, never markup). */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    // Through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    else if (key === 'style') Object.assign(node.style, value);
    else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (key === 'value') node.value = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces a node's children. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** "12 s", "4 min", "3 h", "2 d" between `epoch` (seconds) and now, either way. */
export function ago(epoch, now = Date.now() / 1000) {
  if (epoch == null) return '';
  const s = Math.abs(now - epoch);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

/** When `epoch` (seconds) was, absolute and local: for a `title`. */
export function stamp(epoch) {
  return epoch == null ? '' : new Date(epoch * 1000).toLocaleString();
}

/**
 * An age that stays true: "12 s ago" beside, the absolute time on hover. `ticking()` moves every
 * such element with the clock, so no page redraws itself to keep its ages right.
 */
export function age(epoch, { suffix = ' ago', prefix = '' } = {}) {
  if (epoch == null) return null;
  return el('time', {
    class: 'age',
    datetime: new Date(epoch * 1000).toISOString(),
    title: stamp(epoch),
    dataset: { at: String(epoch), prefix, suffix },
  }, `${prefix}${ago(epoch)}${suffix}`);
}

/** A time running since `epoch`, as a clock ("1:05") that moves like an age. */
export function running(epoch, label = 'running for') {
  if (epoch == null) return null;
  return el('time', {
    class: 'since',
    datetime: new Date(epoch * 1000).toISOString(),
    title: `${label} since ${stamp(epoch)}`,
    dataset: { since: String(epoch) },
  }, clock(Date.now() / 1000 - epoch));
}

/** Moves every age and running clock on the page once a second, from their data attributes. */
export function ticking() {
  setInterval(() => {
    const now = Date.now() / 1000;
    for (const t of document.querySelectorAll('time.age[data-at]')) {
      const text = `${t.dataset.prefix ?? ''}${ago(Number(t.dataset.at), now)}${t.dataset.suffix ?? ''}`;
      if (t.textContent !== text) t.textContent = text;
    }
    for (const t of document.querySelectorAll('time.since[data-since]')) {
      const text = clock(now - Number(t.dataset.since));
      if (t.textContent !== text) t.textContent = text;
    }
  }, 1000);
}

/** What the design record calls cost: tokens priced as the API would, not what a plan bills. */
export const COST_NOTE = 'API-equivalent estimate: these tokens priced at API rates, as the agent reported them; not a bill';

/** A cost in dollars as "≈ $0.012 API-equivalent" (or without the words, `short`), its note on hover. */
export function cost(usd, { short = false } = {}) {
  if (usd == null || !Number.isFinite(Number(usd))) return null;
  const n = Number(usd);
  const digits = n >= 1 ? 2 : 4;
  const text = `≈ $${n.toFixed(digits).replace(/0+$/, '').replace(/\.$/, '.00')}`;
  return el('span', { class: 'cost', title: COST_NOTE }, short ? text : `${text} API-equivalent`);
}

/** A duration in seconds as "1:05" or "2:03:10". */
export function clock(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = String(s % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${r}` : `${m}:${r}`;
}

/** A compact count: 950, 12.4k, 3.1M. */
export function count(n) {
  if (n == null) return '–';
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 1e4 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

/** A sparkline of `values` as an inline SVG (its bars' heights relative to the largest). */
export function sparkline(values, label) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  const w = 4 * values.length;
  svg.setAttribute('viewBox', `0 0 ${w} 20`);
  svg.setAttribute('class', 'spark');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const max = Math.max(1, ...values);
  values.forEach((v, i) => {
    const h = v > 0 ? Math.max(1, (v / max) * 20) : 0;
    const bar = document.createElementNS(ns, 'rect');
    bar.setAttribute('x', String(i * 4));
    bar.setAttribute('y', String(20 - h));
    bar.setAttribute('width', '3');
    bar.setAttribute('height', String(h));
    svg.append(bar);
  });
  return svg;
}

/** Shows that an action failed, and why, near where it was taken. */
export function failure(where, error) {
  const note = el('p', { class: 'error', role: 'alert' }, String(error.message || error));
  where.querySelector(':scope > .error')?.remove();
  where.append(note);
  return note;
}

/** Runs an action from a button, disabling it meanwhile and saying why it failed. */
export async function act(button, where, fn) {
  button.disabled = true;
  where.querySelector(':scope > .error')?.remove();
  try {
    return await fn();
  } catch (e) {
    failure(where, e);
    return undefined;
  } finally {
    button.disabled = false;
  }
}
