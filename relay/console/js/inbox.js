// Needs you: the caller's inbox, with a decision for each item. The same cards form the deck atop
// the Fleet page, and a unit's page shows its session's held calls and questions with them: one
// card, so a decision is bound to the item shown (its `ask_id`) wherever it is made.
import { call } from './api.js';
import { act, age, el, fill } from './dom.js';
import { refreshInbox, state, subscribe } from './state.js';

const KIND_LABEL = { approval: 'Needs approval', question: 'Question', failed: 'Failed', denied: 'Denied' };

/** One item's card: what it is (the agent's text as text), and its buttons; `before`, the
 * agent's last message before it asked, where the page knows it. */
export function card(item, { before = null } = {}) {
  const actions = el('div', { class: 'actions' });
  const box = el(
    'article',
    { class: `card kind-${item.kind}`, dataset: { item: item.id, kind: item.kind } },
    el('header', {},
      el('span', { class: `badge role-${item.kind}` }, KIND_LABEL[item.kind] ?? item.kind),
      el('a', { href: `#/unit/${encodeURIComponent(item.sandbox ?? '')}`, class: 'where' }, item.sandbox_name ?? item.job ?? ''),
      item.session_name ? el('span', { class: 'muted' }, ` · ${item.session_name}`) : null,
      el('span', { class: 'muted right' }, age(item.created_at))),
    before ? el('blockquote', { class: 'before agent-text', title: 'the agent\'s last message before it asked' }, before) : null,
    el('p', { class: 'title agent-text' }, item.title),
    item.text ? el('p', { class: 'text agent-text' }, item.text) : null,
    item.tool ? el('pre', { class: 'tool agent-text' }, JSON.stringify(item.tool.input ?? {}, null, 2)) : null,
    item.expires_at ? el('p', { class: 'muted small' }, 'ends by itself ', age(item.expires_at, { prefix: 'in ', suffix: '' })) : null,
    actions,
  );
  const done = async (fn) => {
    await fn();
    await refreshInbox();
  };
  if (item.kind === 'approval') {
    const reason = el('input', { type: 'text', placeholder: 'reason (optional)', 'aria-label': 'reason', class: 'reason' });
    const decide = (decision) => (ev) =>
      act(ev.currentTarget, box, () =>
        done(() => call('POST', `/api/approvals/${encodeURIComponent(item.ask_id)}`, { decision, reason: reason.value || undefined })));
    fill(actions, reason,
      el('button', { class: 'allow', onclick: decide('allow') }, 'Allow'),
      el('button', { class: 'deny', onclick: decide('deny') }, 'Deny'));
  } else if (item.kind === 'question') {
    const answer = (text) => (ev) =>
      act(ev.currentTarget, box, () => done(() => call('POST', `/api/questions/${encodeURIComponent(item.ask_id)}`, { answer: text })));
    const free = el('input', { type: 'text', placeholder: 'your answer', 'aria-label': 'answer', class: 'answer' });
    const send = el('button', { class: 'send' }, 'Answer');
    send.addEventListener('click', (ev) => {
      if (free.value.trim()) answer(free.value)(ev);
    });
    fill(actions,
      (item.options ?? []).map((o) => el('button', { class: 'option', onclick: answer(o) }, o)),
      free, send);
  } else {
    fill(actions, el('button', {
      class: 'ack',
      onclick: (ev) => act(ev.currentTarget, box, () => done(() => call('POST', `/api/inbox/${encodeURIComponent(item.id)}/ack`))),
    }, 'Dismiss'));
  }
  return box;
}

/** The deck: every open item's card, or a line saying there is none. Failures are read, not
 * decided, so they can all go at once. */
export function deck(items) {
  if (!items.length) return el('p', { class: 'muted empty' }, 'Nothing needs you.');
  const box = el('div', { class: 'deck' });
  const failed = items.filter((i) => i.kind === 'failed').length;
  if (failed) {
    const all = el('button', { class: 'ack-all', type: 'button' }, `Dismiss all ${failed} ${failed === 1 ? 'failure' : 'failures'}`);
    all.addEventListener('click', () => act(all, bar, async () => {
      await call('POST', '/api/inbox/ack', { kind: 'failed' });
      await refreshInbox();
    }));
    const bar = el('div', { class: 'deck-actions' }, all);
    box.append(bar);
  }
  box.append(...items.map((i) => card(i)));
  return box;
}

export function render(main) {
  const list = el('section', { class: 'inbox', 'aria-live': 'polite' });
  const counts = el('p', { class: 'counts' });
  fill(main, el('div', { class: 'bar' }, el('h1', {}, 'Needs you'), counts), list);
  const draw = () => {
    const c = state.inbox.counts ?? {};
    fill(counts, Object.entries(c).filter(([, n]) => n).map(([k, n]) => el('span', { class: `chip role-${k}` }, `${KIND_LABEL[k] ?? k}: ${n}`)));
    fill(list, deck(state.inbox.items ?? []));
  };
  const off = subscribe((what) => {
    if (what === 'inbox') draw();
  });
  draw();
  refreshInbox().catch((e) => fill(list, el('p', { class: 'error', role: 'alert' }, e.message)));
  // The fleet stream tells every change; while it is down, the page reads the inbox itself.
  const poll = setInterval(() => {
    if (state.status !== 'live') refreshInbox().catch(() => {});
  }, 3000);
  return () => {
    off();
    clearInterval(poll);
  };
}
