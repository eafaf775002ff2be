// Fleet: a tile per unit (sandbox), live from the fleet stream, with the deck of what needs you
// on top, counts by role and the owners filter.
import { age, clock, cost, count, el, fill, running, sparkline } from './dom.js';
import { deck } from './inbox.js';
import { connect, isSettled, state, subscribe } from './state.js';

const ROLES = ['approval', 'failed', 'denied', 'running', 'queued', 'off'];
const ROLE_ORDER = Object.fromEntries(ROLES.map((r, i) => [r, i]));

/** The short name a person reads: the unit's own `short` (unique, from the relay), or HGR- and
 * the id's last four characters from a relay that does not send one. */
export function shortId(unit) {
  return unit.short ?? `HGR-${String(unit.id).slice(-4).toUpperCase()}`;
}

/** How long a settled unit stays on the Fleet, dimmed, before it leaves (unless asked for). */
const SETTLED_SHOWN_S = 600;

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
  const basis = `${e.basis ?? 'estimate'}: ${e.samples ?? 0} earlier ${e.samples === 1 ? 'sample' : 'samples'} of this stage; ${e.elapsed_s ?? '?'} s in it against a typical ${e.typical_s ?? '?'} s`;
  return el('span', { class: 'pct estimate', title: basis, dataset: { samples: String(e.samples ?? 0) } }, `~${e.pct}% (est.)`);
}

/** One unit's tile: what it works on, who, where it is, how long and what it cost so far. */
export function tile(unit, { dim = false } = {}) {
  const label = unit.label ?? unit.role;
  const who = [unit.session?.name, unit.harness, unit.model].filter(Boolean).join(' · ');
  return el('a', { class: `tile role-${unit.role}${dim ? ' settled' : ''}`, href: `#/unit/${encodeURIComponent(unit.id)}`, dataset: { unit: unit.id, role: unit.role } },
    el('header', {},
      el('span', { class: 'name' }, unit.name ?? unit.id),
      el('span', { class: 'short muted' }, shortId(unit))),
    unit.work ? el('p', { class: 'work agent-text', title: unit.task ?? unit.work }, unit.work) : null,
    who ? el('p', { class: 'who muted small agent-text' }, who) : null,
    el('p', { class: 'role' },
      el('span', { class: `badge role-${unit.role}` }, label),
      unit.reason ? el('span', { class: 'reason agent-text' }, ` ${unit.reason.title ?? ''}: ${unit.reason.text ?? ''}`) : null),
    el('p', { class: 'now agent-text' }, unit.now ?? (unit.live ? '…' : 'idle')),
    el('div', { class: 'stage-line' },
      unit.stage ? el('span', { class: `badge stage-${unit.stage}` }, unit.stage) : null,
      progress(unit)),
    stages(unit),
    el('footer', {},
      unit.live && unit.started_at ? el('span', { class: 'run-time' }, 'running ', running(unit.started_at)) : null,
      el('span', { title: 'files changed' }, `${unit.files_changed ?? 0} files`),
      el('span', { title: 'commits' }, `${unit.commits ?? 0} commits`),
      el('span', { title: 'tokens, last hour' }, `${count((unit.tokens_1h ?? []).reduce((a, b) => a + b, 0))} tok`),
      sparkline(unit.tokens_1h ?? [], 'new tokens, five-minute buckets over the last hour'),
      unit.usage?.cost_usd != null ? cost(unit.usage.cost_usd, { short: true }) : null,
      unit.last_activity_at ? el('span', { class: 'muted last', title: 'last sign of life' }, age(unit.last_activity_at)) : null));
}

export function render(main) {
  const status = el('p', { class: 'status muted', 'aria-live': 'polite' });
  const counts = el('div', { class: 'counts' });
  const owners = el('select', { 'aria-label': 'owner', class: 'owners' });
  const stopped = el('input', { type: 'checkbox', class: 'stopped', checked: state.includeStopped });
  const stoppedLabel = el('label', { class: 'chip', title: 'units that settled more than 10 minutes ago too' }, stopped, ' all settled');
  const deckBox = el('section', { class: 'deck-box', 'aria-label': 'needs you' });
  const tiles = el('section', { class: 'tiles', 'aria-live': 'polite' });
  fill(main, el('div', { class: 'bar' }, el('h1', {}, 'Fleet'), counts, owners, stoppedLabel, status), el('div', { class: 'fleet' }, deckBox, tiles));
  owners.addEventListener('change', () => connect(owners.value));
  stopped.addEventListener('change', () => {
    state.includeStopped = stopped.checked;
    drawUnits();
  });

  const drawSummary = () => {
    const s = state.summary;
    if (!s) return;
    fill(counts, ROLES.map((r) => el('span', { class: `chip role-${r}` }, `${r} ${s.counts?.[r] ?? 0}`)),
      s.slots ? el('span', { class: 'chip' }, `slots ${s.slots.used}/${s.slots.max}`) : null);
    const chosen = state.owner;
    fill(owners, el('option', { value: '' }, 'Everyone'),
      (s.owners ?? []).map((o) => el('option', { value: o.id, selected: o.id === chosen }, `${o.name ?? (o.id === 'none' ? 'Nobody' : o.id)} (${o.count})`)));
  };
  let drawn = '';
  const drawUnits = () => {
    const now = Date.now() / 1000;
    // A unit that just settled stays, dimmed, for a while: its end is worth a look.
    const shown = [...state.units.values()].filter((u) =>
      !isSettled(u) || state.includeStopped || now - (state.settledAt.get(u.id) ?? 0) < SETTLED_SHOWN_S);
    const units = shown.sort((a, b) =>
      isSettled(a) - isSettled(b) || (ROLE_ORDER[a.role] ?? 9) - (ROLE_ORDER[b.role] ?? 9) || (b.last_activity_at ?? 0) - (a.last_activity_at ?? 0));
    // Ages and clocks move by themselves; the tiles are drawn again when a unit changed (and
    // every 15 s, for the open stage's share of the timeline).
    const key = JSON.stringify([Math.floor(now / 15), units.map((u) => [u, isSettled(u)])]);
    if (key === drawn) return;
    drawn = key;
    fill(tiles, units.length ? units.map((u) => tile(u, { dim: isSettled(u) })) : el('p', { class: 'muted empty' }, 'No agents yet.'));
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
  // A settled unit's time on the page runs out with the clock, not with a change.
  const tick = setInterval(drawUnits, 5000);
  return () => {
    off();
    clearInterval(tick);
  };
}
