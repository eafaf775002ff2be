// The relay's API as the page uses it: the token in session storage and only ever in a header;
// one-use tickets for every EventSource (which cannot send headers); POST streams read with
// fetch.

const KEY = 'hangar.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

/** An error the relay answered (`status`, `code`, its message), or a network failure (0). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Listeners told when the relay refuses the token (401), to sign in again. */
const signedOut = new Set();
export function onSignedOut(fn) {
  signedOut.add(fn);
}

/** One request; the parsed JSON answer (null for 204), or an ApiError. */
export async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${token.get() ?? ''}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, 'network', `the relay did not answer (${e.message})`);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const err = data && data.error;
    if (response.status === 401) signedOut.forEach((fn) => fn());
    throw new ApiError(response.status, err?.code ?? 'http', err?.message ?? `HTTP ${response.status}`);
  }
  return data;
}

/** A ticket that opens `path` once: a fleet ticket for the fleet stream, a route ticket else. */
async function ticket(path) {
  const t = path === '/api/fleet/stream' ? await call('POST', '/api/fleet/tickets', {}) : await call('POST', '/api/tickets', { path });
  return t.ticket;
}

/**
 * Follows an SSE stream with EventSource, live until `stop()`. Each open takes a new ticket;
 * after a break it opens again with `resume(lastId)`'s query parameters (where the stream takes
 * one: `since`, `last_event_id`), so nothing is lost or repeated. `on` maps event names to
 * handlers of (data, event); a handler returning `'stop'` ends the stream (a process's `end`).
 * `status` is told 'live', 'reconnecting' or an error.
 */
export function follow(path, { query = {}, resume, on, status, reconnect = true }) {
  let source = null;
  let lastId = null;
  let stopped = false;
  let wait = 500;
  let timer = null;

  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    source?.close();
  };

  const again = () => {
    source?.close();
    if (stopped || !reconnect) return;
    status?.('reconnecting');
    timer = setTimeout(open, wait);
    wait = Math.min(wait * 2, 10000);
  };

  async function open() {
    if (stopped) return;
    let t;
    try {
      t = await ticket(path);
    } catch (e) {
      status?.(e);
      if (e.status === 401 || e.status === 403 || e.status === 404) return;
      again();
      return;
    }
    if (stopped) return;
    const params = new URLSearchParams({ ...query, ...(lastId != null && resume ? resume(lastId) : {}), ticket: t });
    source = new EventSource(`${path}?${params}`);
    source.onopen = () => {
      wait = 500;
      status?.('live');
    };
    source.onerror = again;
    for (const [name, handler] of Object.entries(on)) {
      source.addEventListener(name, (ev) => {
        if (ev.lastEventId) lastId = ev.lastEventId;
        let data = null;
        try {
          data = JSON.parse(ev.data);
        } catch {
          data = ev.data;
        }
        if (handler(data, ev) === 'stop') stop();
      });
    }
  }

  open();
  return { stop };
}

/** Reads a POST answered with SSE (`exec/stream`) with fetch; `on(event, data)` per event. */
export async function postStream(path, body, on, signal) {
  let response;
  try {
    response = await fetch(path, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token.get() ?? ''}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
  } catch (e) {
    throw new ApiError(0, 'network', `the relay did not answer (${e.message})`);
  }
  if (!response.ok) {
    let err = null;
    try {
      err = (await response.json()).error;
    } catch {
      err = null;
    }
    throw new ApiError(response.status, err?.code ?? 'http', err?.message ?? `HTTP ${response.status}`);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) {
        let parsed = data.join('\n');
        try {
          parsed = JSON.parse(parsed);
        } catch {
          // Not JSON: handed on as text.
        }
        on(event, parsed);
      }
    }
  }
}
