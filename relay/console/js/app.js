// The console: signing in (a token pasted once, kept in this tab's session storage), the header,
// the theme, and the pages by the URL's fragment (#/fleet, #/inbox, #/unit/<sandbox>).
import { ApiError, call, onSignedOut, token } from './api.js';
import { el, fill, ticking } from './dom.js';
import * as fleet from './fleet.js';
import * as inbox from './inbox.js';
import { connect, disconnect, state, subscribe } from './state.js';
import * as unit from './unit.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
let leave = null;

function theme() {
  const saved = localStorage.getItem('hangar.theme');
  if (saved) document.documentElement.dataset.theme = saved;
  document.getElementById('theme').addEventListener('click', () => {
    const dark = (document.documentElement.dataset.theme ?? (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light')) === 'dark';
    document.documentElement.dataset.theme = dark ? 'light' : 'dark';
    localStorage.setItem('hangar.theme', document.documentElement.dataset.theme);
  });
}

function signIn(message) {
  leave?.();
  leave = null;
  disconnect();
  nav.hidden = true;
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', 'aria-label': 'token', placeholder: 'hgr_…' });
  const button = el('button', { type: 'submit', id: 'sign-in' }, 'Sign in');
  const form = el('form', { class: 'sign-in' },
    el('h1', {}, 'hangar'),
    el('p', {}, 'Paste a token (a person\'s user token, or an admin\'s). It stays in this tab only.'),
    input, button,
    message ? el('p', { class: 'error', role: 'alert' }, message) : null);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    token.set(input.value.trim());
    button.disabled = true;
    try {
      // Any page's first read: it says whether this token may use the console.
      await call('GET', '/api/inbox');
      start();
    } catch (e) {
      token.clear();
      const why = e instanceof ApiError && e.status === 403 ? 'this token\'s scope cannot use the console (a jobs token?)' : e.message;
      signIn(why);
    }
  });
  fill(main, form);
  input.focus();
}

function route() {
  leave?.();
  const hash = location.hash || '#/fleet';
  for (const a of nav.querySelectorAll('a[data-page]')) a.toggleAttribute('aria-current', hash.startsWith(`#/${a.dataset.page}`));
  const [, page, arg] = hash.match(/^#\/([^/]*)\/?(.*)$/) ?? [];
  if (page === 'inbox') leave = inbox.render(main);
  else if (page === 'unit' && arg) leave = unit.render(main, decodeURIComponent(arg));
  else leave = fleet.render(main);
}

function start() {
  nav.hidden = false;
  connect('');
  const badge = document.getElementById('inbox-count');
  subscribe((what) => {
    if (what !== 'inbox') return;
    const n = (state.inbox.items ?? []).filter((i) => i.kind === 'approval' || i.kind === 'question').length;
    badge.textContent = n ? String(n) : '';
  });
  window.onhashchange = route;
  route();
}

document.getElementById('sign-out').addEventListener('click', () => {
  token.clear();
  signIn();
});
onSignedOut(() => {
  token.clear();
  signIn('the relay refused the token (revoked or unknown): sign in again');
});
theme();
ticking();
if (token.get()) start();
else signIn();
