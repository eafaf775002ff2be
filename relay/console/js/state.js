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
  includeStopped: false,
};

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

/** Opens (or reopens, for other filters) the fleet stream. */
export function connect(owner = state.owner, includeStopped = state.includeStopped) {
  state.owner = owner;
  state.includeStopped = includeStopped;
  stream?.stop();
  state.units = new Map();
  const query = {};
  if (owner) query.owner = owner;
  if (includeStopped) query.include_stopped = 'true';
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
        state.inbox = inbox;
        changed('units');
        changed('inbox');
        changed('summary');
      },
      agent: (u) => {
        state.units.set(u.id, u);
        changed('units');
      },
      gone: (d) => {
        state.units.delete(d.id);
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
