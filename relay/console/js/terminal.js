// A terminal in a sandbox: xterm.js (vendor/xterm/, loaded on first use) on the relay's
// WebSocket `GET /api/sandboxes/{ref}/terminal`, opened with a one-use ticket (a browser's
// WebSocket cannot send the token's header). Binary frames are the terminal's bytes both ways;
// text frames are JSON: our `{"resize"}`, the relay's `{"exit"}`, `{"closed"}` or `{"error"}`.

import { call } from './api.js';
import { el, fill } from './dom.js';

const VENDOR = '/console/vendor/xterm';
let loaded;

/** Loads xterm.js, its fit addon and its CSS once: files of this origin, as the page's CSP asks. */
function loadXterm() {
  const script = (src) => new Promise((resolve, reject) => {
    document.head.append(el('script', { src, onload: resolve, onerror: () => reject(new Error(`cannot load ${src}`)) }));
  });
  loaded ??= (async () => {
    document.head.append(el('link', { rel: 'stylesheet', href: `${VENDOR}/xterm.css` }));
    await script(`${VENDOR}/xterm.js`);
    await script(`${VENDOR}/fit.js`);
  })();
  return loaded;
}

/** The terminal panel of a sandbox's page: an "Open terminal" button, then the terminal. */
export function terminalPanel(sandbox) {
  const box = el('section', { class: 'panel terminal-panel', 'aria-label': 'terminal' });
  const status = el('p', { class: 'muted small terminal-status', role: 'status' });
  const screen = el('div', { class: 'terminal-screen' });
  const open = el('button', { type: 'button', class: 'open-terminal' }, 'Open terminal');
  const close = el('button', { type: 'button', class: 'close-terminal', hidden: true }, 'Close');
  fill(box, el('h2', {}, 'Terminal'), el('div', { class: 'actions' }, open, close), status, screen);
  let session = null;

  const say = (text, state) => {
    status.textContent = text;
    box.dataset.state = state;
  };

  open.addEventListener('click', async () => {
    open.disabled = true;
    try {
      await loadXterm();
      session = await connect(sandbox, screen, say, () => {
        open.disabled = false;
        open.hidden = false;
        close.hidden = true;
      });
      open.hidden = true;
      close.hidden = false;
    } catch (e) {
      say(`Cannot open the terminal: ${e.message}`, 'failed');
      open.disabled = false;
    }
  });
  close.addEventListener('click', () => session?.stop());
  return { node: box, stop: () => session?.stop() };
}

/** Opens the socket and wires xterm to it; `ended` is called once it is over. */
async function connect(sandbox, screen, say, ended) {
  const path = `/api/sandboxes/${encodeURIComponent(sandbox.id)}/terminal`;
  screen.replaceChildren();
  // Through the CSSOM: the page's CSP refuses style attributes and inline styles.
  Object.assign(screen.style, { height: '24em', background: '#000' });
  const term = new window.Terminal({ screenReaderMode: true, cursorBlink: true, convertEol: false });
  const fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(screen);
  fit.fit();
  const { ticket } = await call('POST', '/api/tickets', { path });
  const query = new URLSearchParams({ ticket, cols: String(term.cols), rows: String(term.rows) });
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${scheme}//${location.host}${path}?${query}`);
  ws.binaryType = 'arraybuffer';
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let over = false;
  const finish = (text, state) => {
    if (over) return;
    over = true;
    say(text, state);
    term.write(`\r\n\x1b[2m[${text}]\x1b[0m\r\n`);
    window.removeEventListener('resize', refit);
    ended();
  };
  const refit = () => fit.fit();
  window.addEventListener('resize', refit);
  say('Connecting…', 'connecting');
  ws.onopen = () => {
    say(`Connected to ${sandbox.name}`, 'open');
    term.focus();
  };
  ws.onmessage = (m) => {
    if (typeof m.data !== 'string') {
      term.write(decoder.decode(new Uint8Array(m.data), { stream: true }));
      return;
    }
    let msg;
    try {
      msg = JSON.parse(m.data);
    } catch {
      return;
    }
    if (msg.exit !== undefined) finish(`exited with code ${msg.exit}`, 'exited');
    else if (msg.closed !== undefined) finish(`closed: ${msg.closed}${msg.message ? ` (${msg.message})` : ''}`, 'closed');
    else if (msg.error !== undefined) say(msg.error, 'open');
  };
  ws.onclose = () => finish('disconnected', 'closed');
  term.onData((data) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
  });
  term.onResize(({ cols, rows }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { cols, rows } }));
  });
  return {
    stop: () => {
      if (ws.readyState <= WebSocket.OPEN) ws.close();
      finish('closed', 'closed');
    },
  };
}
