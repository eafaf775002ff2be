// Fleet: a tile per unit (sandbox), live from the fleet stream, with the deck of what needs you
// on top, counts by role and the owners filter.
import { ago, clock, count, el, fill, sparkline } from './dom.js';
import { deck } from './inbox.js';
import { connect, state, subscribe } from './state.js';

const ROLES = ['approval', 'failed', 'denied', 'running', 'queued', 'off'];
const ROLE_ORDER = Object.fromEntries(ROLES.map((r, i) => [r, i]));

/** The short name a person reads: HGR- and the id's last four characters. */
export function shortId(id) {
  return `HGR-${String(id).slice(-4).toUpperCase()}`;
}

function stages(unit) {
  const all = unit.stages ?? [];
  if (!all.length) return null;
  const start = all[0].started_at;
  const end = Math.max(Date.now() / 1000, ...all.map((s) => s.ended_at ?? 0));
  const span = Math.max(1, end - start);
  return el('div', { class: 'stages', role: 'img', 'aria-label': `stages: ${all.map((s) => s.stage).join(', ')}` },
    all.map((s) => el('span', {
      class: `stage stage-${s.stage}${s.ended_at == null ? ' open' : ''}`,
      style: { flexGrow: String(Math.max(0.02, ((s.ended_at ?? Date.now() / 1000) - s.started_at) / span)) },
      title: `${s.stage} ${clock((s.ended_at ?? Date.now() / 1000) - s.started_at)}`,
    }, s.stage)));
}

function progress(unit) {
  if (unit.stage_pct != null) return el('span', { class: 'pct' }, `${unit.stage_pct}%`);
  const e = unit.stage_estimate;
  if (!e) return null;
  return el('span', { class: 'pct estimate', title: e.basis ?? '' }, `~${e.pct}% (est.)`);
}

/** One unit's tile. */
export function tile(unit) {
  const label = unit.label ?? unit.role;
  return el('a', { class: `tile role-${unit.role}`, href: `#/unit/${encodeURIComponent(unit.id)}`, dataset: { unit: unit.id, role: unit.role } },
    el('header', {},
      el('span', { class: 'name' }, unit.name ?? unit.id),
      el('span', { class: 'short muted' }, shortId(unit.id))),
    el('p', { class: 'role' },
      el('span', { class: `badge role-${unit.role}` }, label),
      unit.reason ? el('span', { class: 'reason agent-text' }, ` ${unit.reason.title ?? ''}: ${unit.reason.text ?? ''}`) : null),
    el('p', { class: 'now agent-text' }, unit.now ?? (unit.live ? '…' : 'idle')),
    el('div', { class: 'stage-line' },
      unit.stage ? el('span', { class: `badge stage-${unit.stage}` }, unit.stage) : null,
      progress(unit)),
    stages(unit),
    el('footer', {},
      el('span', { title: 'files changed' }, `${unit.files_changed ?? 0} files`),
      el('span', { title: 'commits' }, `${unit.commits ?? 0} commits`),
      el('span', { title: 'tokens, last hour' }, `${count((unit.tokens_1h ?? []).reduce((a, b) => a + b, 0))} tok`),
      sparkline(unit.tokens_1h ?? [], 'new tokens, five-minute buckets over the last hour'),
      unit.usage?.cost_usd != null ? el('span', { title: 'cost of the live turn' }, `$${unit.usage.cost_usd.toFixed(2)}`) : null,
      el('span', { class: 'muted', title: 'last sign of life' }, unit.last_activity_at ? `${ago(unit.last_activity_at)} ago` : '')));
}

export function render(main) {
  const status = el('p', { class: 'status muted', 'aria-live': 'polite' });
  const counts = el('div', { class: 'counts' });
  const owners = el('select', { 'aria-label': 'owner', class: 'owners' });
  const stopped = el('input', { type: 'checkbox', class: 'stopped', checked: state.includeStopped });
  const stoppedLabel = el('label', { class: 'chip' }, stopped, ' settled too');
  const deckBox = el('section', { class: 'deck-box', 'aria-label': 'needs you' });
  const tiles = el('section', { class: 'tiles', 'aria-live': 'polite' });
  fill(main, el('div', { class: 'bar' }, el('h1', {}, 'Fleet'), counts, owners, stoppedLabel, status), deckBox, tiles);
  owners.addEventListener('change', () => connect(owners.value, stopped.checked));
  stopped.addEventListener('change', () => connect(owners.value, stopped.checked));

  const drawSummary = () => {
    const s = state.summary;
    if (!s) return;
    fill(counts, ROLES.map((r) => el('span', { class: `chip role-${r}` }, `${r} ${s.counts?.[r] ?? 0}`)),
      s.slots ? el('span', { class: 'chip' }, `slots ${s.slots.used}/${s.slots.max}`) : null);
    const chosen = state.owner;
    fill(owners, el('option', { value: '' }, 'Everyone'),
      (s.owners ?? []).map((o) => el('option', { value: o.id, selected: o.id === chosen }, `${o.name ?? (o.id === 'none' ? 'Nobody' : o.id)} (${o.count})`)));
  };
  const drawUnits = () => {
    const units = [...state.units.values()].sort((a, b) =>
      (ROLE_ORDER[a.role] ?? 9) - (ROLE_ORDER[b.role] ?? 9) || (b.last_activity_at ?? 0) - (a.last_activity_at ?? 0));
    fill(tiles, units.length ? units.map(tile) : el('p', { class: 'muted empty' }, 'No agents yet.'));
  };
  const drawStatus = () => {
    const s = state.status;
    fill(status, s instanceof Error ? el('span', { class: 'error' }, s.message) : s === 'live' ? '● live' : String(s));
  };
  const off = subscribe((what) => {
    if (what === 'units') drawUnits();
    if (what === 'summary') drawSummary();
    if (what === 'inbox') fill(deckBox, deck(state.inbox.items ?? []));
    if (what === 'status') drawStatus();
  });
  drawSummary();
  drawUnits();
  drawStatus();
  fill(deckBox, deck(state.inbox.items ?? []));
  // The ages and estimates move with the clock: redrawn every few seconds.
  const tick = setInterval(drawUnits, 5000);
  return () => {
    off();
    clearInterval(tick);
  };
}
