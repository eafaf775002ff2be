// What the Fleet and Needs-you pages share: one fleet stream while signed in (the units, the
// caller's inbox, the summary), and whoever listens to it.
import { call, follow } from './api.js';

export const state = {
  /** The last snapshot's top fields (at, person, counts, owners, slots). */
  summary: null,
  /** Units by id, as the stream last said. */
  units: new Map(),
  inbox: { counts: {}, items: [] },
  /** 'connecting', 'live', 'reconnecting', or an error. */
  status: 'connecting',
  owner: '',
  /** Whether the Fleet shows every settled unit, not only those that settled a moment ago. */
  includeStopped: false,
  /** When each settled unit was seen to settle (epoch seconds), for how long it stays shown. */
  settledAt: new Map(),
};

/** Nothing runs or waits in it any more, and its work ended: what `include_stopped` adds. */
export function isSettled(u) {
  return u.role === 'off' && !u.live && (u.state !== 'running' || Boolean(u.job) || Boolean(u.session));
}

/** Keeps when each unit settled: now for one seen to settle, else when its work ended (or its
 * last sign of life, from a relay that does not say). */
function noteSettled(u, before) {
  if (!isSettled(u)) state.settledAt.delete(u.id);
  else if (before && !isSettled(before)) state.settledAt.set(u.id, Date.now() / 1000);
  else if (!state.settledAt.has(u.id)) state.settledAt.set(u.id, u.ended_at ?? u.last_activity_at ?? u.started_at ?? u.created_at ?? 0);
}

const listeners = new Set();

/** Calls `fn(what)` on every change ('units', 'inbox', 'summary', 'status'); returns an unsubscribe. */
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function changed(what) {
  for (const fn of listeners) fn(what);
}

let stream = null;

/**
 * Opens (or reopens, for another owner) the fleet stream. Settled units are always asked for
 * (`include_stopped`), so a unit whose turn just ended stays with its final state; the Fleet page
 * decides how long to show them.
 */
export function connect(owner = state.owner) {
  state.owner = owner;
  stream?.stop();
  state.units = new Map();
  const query = { include_stopped: 'true' };
  if (owner) query.owner = owner;
  stream = follow('/api/fleet/stream', {
    query,
    resume: (id) => ({ last_event_id: id }),
    status: (s) => {
      state.status = s;
      changed('status');
    },
    on: {
      snapshot: (d) => {
        const { units, inbox, ...summary } = d;
        state.summary = summary;
        state.units = new Map(units.map((u) => [u.id, u]));
        for (const u of units) noteSettled(u, null);
        state.inbox = inbox;
        changed('units');
        changed('inbox');
        changed('summary');
      },
      agent: (u) => {
        noteSettled(u, state.units.get(u.id));
        state.units.set(u.id, u);
        changed('units');
      },
      gone: (d) => {
        state.units.delete(d.id);
        state.settledAt.delete(d.id);
        changed('units');
      },
      inbox: (d) => {
        state.inbox = d;
        changed('inbox');
      },
      summary: (d) => {
        state.summary = { ...state.summary, ...d };
        changed('summary');
      },
      close: (d) => {
        state.status = new Error(`the relay closed the fleet stream: ${d.reason}`);
        changed('status');
      },
    },
  });
}

export function disconnect() {
  stream?.stop();
  stream = null;
}

/** Reads the inbox again (after an action, or where no stream tells). */
export async function refreshInbox() {
  state.inbox = await call('GET', '/api/inbox');
  changed('inbox');
}
