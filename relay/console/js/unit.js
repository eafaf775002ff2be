// A unit's page: its session's events live (follow-up and cancel), its background processes with
// live output, a command box that streams, and a watch of its working directory.
import { call, follow, postStream } from './api.js';
import { terminalPanel } from './terminal.js';
import { act, age, cost, count, el, failure, fill, running } from './dom.js';
import { card } from './inbox.js';
import { state, subscribe } from './state.js';

const TERMINAL = new Set(['succeeded', 'failed', 'crashed', 'cancelled', 'timed_out']);

const tokens = (d) => [['in', 'input_tokens'], ['out', 'output_tokens'], ['cache', 'cache_read_tokens']]
  .filter(([, k]) => d[k] != null).map(([label, k]) => `${label} ${count(d[k])}`).join(', ');

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

/**
 * What an event says, in words (as `hangar events` prints it), with its tone and, for usage and a
 * result, the cost shown apart (it is an estimate, labelled so).
 */
export function describe(e) {
  const d = e.data ?? {};
  let text = '';
  let tone = '';
  let usd = null;
  switch (e.type) {
    case 'run.state':
      text = `${d.from} → ${d.to}${d.reason ? ` (${d.reason})` : ''}${d.detail ? `: ${d.detail}` : ''}`;
      if (['failed', 'crashed', 'timed_out'].includes(d.to)) tone = 'bad';
      break;
    case 'run.started':
      text = `started: model ${d.model ?? 'not said'}${d.harness_version ? ` (version ${d.harness_version})` : ''}${d.cwd ? ` in ${d.cwd}` : ''}`;
      tone = 'thin';
      break;
    case 'tool.start':
      text = `${d.name ?? 'tool'}: ${d.summary ?? d.file ?? ''}`;
      break;
    case 'tool.end': {
      const bad = d.ok === false || d.is_error;
      const took = d.duration_ms != null ? ` in ${(d.duration_ms / 1000).toFixed(1)} s` : '';
      const first = String(d.summary ?? '').split('\n').map((l) => l.trim()).find((l) => l) ?? '';
      text = `${d.name ?? 'tool'} ${bad ? 'failed' : 'done'}${took}${first ? `: ${first}` : ''}`;
      if (bad) tone = 'bad';
      break;
    }
    case 'message':
    case 'agent.message':
      text = d.text ?? '';
      if (d.final) tone = 'final';
      break;
    case 'phase':
      text = d.phase ?? '';
      tone = 'thin';
      break;
    case 'usage':
      text = `tokens: ${tokens(d) || 'none said'}${d.turns != null ? `, ${plural(d.turns, 'turn', 'turns')}` : ''}`;
      usd = d.cost_usd;
      tone = 'thin';
      break;
    case 'run.result': {
      const turns = d.num_turns != null ? plural(d.num_turns, 'turn', 'turns') : '– turns';
      const took = d.duration_ms != null ? `, ${(d.duration_ms / 1000).toFixed(1)} s` : '';
      text = `${d.ok ? 'ok' : 'not ok'} (${d.subtype ?? '–'}), ${turns}${took}`;
      usd = d.cost_usd;
      tone = d.ok ? 'good' : 'bad';
      break;
    }
    case 'agent.progress':
      text = `${d.pct != null ? `${d.pct}% ` : ''}${d.text ?? ''}`;
      tone = 'thin';
      break;
    case 'input.requested':
      text = `asks: ${d.prompt ?? d.kind ?? ''}${(d.options ?? []).length ? ` (${d.options.join(' / ')})` : ''}`;
      tone = 'ask';
      break;
    case 'inbox.opened':
      text = `waiting on you: ${d.title ?? d.kind}`;
      tone = 'ask';
      break;
    case 'inbox.ended':
      text = `${d.kind} ${d.state}${d.by ? ` by ${d.by}` : ''}`;
      tone = 'thin';
      break;
    case 'test.result':
    case 'tests':
      text = `tests: ${d.passed ?? '?'} passed, ${d.failed ?? '?'} failed${d.skipped ? `, ${d.skipped} skipped` : ''}${d.framework ? ` (${d.framework})` : ''}`;
      tone = d.failed ? 'bad thin' : 'thin';
      break;
    case 'rate_limit':
    case 'usage.rate_limit':
      text = `rate limit${d.window ? ` (${d.window})` : ''}: ${d.status ?? ''}${d.used_pct != null ? `, ${d.used_pct}% used` : ''}`;
      tone = 'thin';
      break;
    case 'error':
      text = `${d.code ?? 'error'}: ${d.message ?? ''}${d.retryable ? ' (retried)' : ''}`;
      tone = 'bad';
      break;
    case 'harness.unknown':
      text = d.raw ?? '';
      tone = 'thin';
      break;
    case 'harness.truncated':
      text = `a line cut: ${d.reason ?? ''}${d.bytes != null ? ` (${count(d.bytes)} bytes)` : ''}`;
      tone = 'thin';
      break;
    default:
      text = d.summary ?? d.text ?? d.raw ?? d.message ?? '';
      if (!text) {
        const { source, ...rest } = d;
        text = Object.keys(rest).length ? JSON.stringify(rest) : '';
      }
      if (/error|failed/.test(e.type)) tone = 'bad';
      else if (/usage|rate|test/.test(e.type)) tone = 'thin';
  }
  return { text: String(text), tone, usd };
}

/** One line for an event: its time, what happened, with the details one click away. */
export function eventLine(e) {
  const d = e.data ?? {};
  const { text, tone, usd } = describe(e);
  const source = d.source === 'hangar' ? '' : ' agent-text';
  return el('details', { class: `event ${tone}`, dataset: { seq: e.seq, type: e.type } },
    el('summary', {},
      el('span', { class: 'seq muted' }, String(e.seq)),
      el('span', { class: 'type' }, e.type),
      el('span', { class: `what${source}` }, text.slice(0, 300), usd != null ? ' · ' : null, usd != null ? cost(usd) : null),
      e.ts != null ? age(e.ts) : null),
    el('pre', { class: 'agent-text' }, JSON.stringify(d, null, 2)));
}

/** The head of a turn in the event list: its number and the prompt it was given. */
function turnHead(turn) {
  return el('div', { class: 'turn-head', dataset: { turn: turn.id } },
    el('span', { class: 'badge' }, `turn ${turn.n ?? ''}`),
    turn.started_at ?? turn.created_at ? age(turn.started_at ?? turn.created_at) : null,
    el('p', { class: 'prompt agent-text' }, turn.prompt ?? ''));
}

/** Whether a turn in this state may still change its worktree. */
const live = (s) => s && !TERMINAL.has(s.state);

/**
 * The session's changes: the worktree against where the turn started, a line per file, a file's
 * hunks on a click. Read again every 2 s while the turn runs and the page is in view.
 */
function diffPanel() {
  const box = el('section', { class: 'panel diff', 'aria-label': 'changes' });
  const head = el('p', { class: 'diff-head muted small' }, 'Not read yet.');
  const files = el('ul', { class: 'diff-files' });
  const patch = el('div', { class: 'patch' });
  fill(box, el('h2', {}, 'Changes'), head, files, patch);
  let session = null;
  let busy = false;
  let shown = '';
  let opened = null;

  const showPatch = async (path) => {
    opened = path;
    for (const b of files.querySelectorAll('button.file')) b.setAttribute('aria-pressed', String(b.dataset.path === path));
    let d;
    try {
      d = await call('GET', `/api/sessions/${encodeURIComponent(session.id)}/diff?${new URLSearchParams({ path })}`);
    } catch (e) {
      fill(patch, el('p', { class: 'error', role: 'alert' }, e.message));
      return;
    }
    if (opened !== path) return;
    // Each line is text in its own span, coloured by its class: diff text is the agent's.
    const lines = String(d.patch ?? '').split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    const pre = el('pre', { class: 'hunks agent-text', dataset: { path } }, lines.map((l) => {
      let kind = 'ctx';
      if (/^(diff |index |--- |\+\+\+ |new file|deleted file|similarity|rename |old mode|new mode|Binary)/.test(l)) kind = 'meta';
      else if (l.startsWith('@@')) kind = 'hunk';
      else if (l.startsWith('+')) kind = 'add';
      else if (l.startsWith('-')) kind = 'del';
      return el('span', { class: `line ${kind}` }, `${l}\n`);
    }));
    fill(patch, el('p', { class: 'small' }, el('code', { class: 'path agent-text' }, d.path ?? path)),
      pre, d.truncated ? el('p', { class: 'muted small' }, `cut: ${d.truncated}`) : null);
  };

  const draw = (d) => {
    if (!d.repository) {
      fill(head, `No diff: ${d.reason ?? 'not a git repository'}`);
      files.replaceChildren();
      patch.replaceChildren();
      return;
    }
    const t = d.totals ?? {};
    fill(head,
      `${t.files ?? d.files.length} files, `, el('span', { class: 'add' }, `+${t.added ?? 0}`), ' ',
      el('span', { class: 'del' }, `−${t.removed ?? 0}`),
      d.base ? ` against ${String(d.base).slice(0, 12)}` : '',
      d.computed_at ? ' · ' : '', d.computed_at ? age(d.computed_at, { prefix: 'read ' }) : null,
      d.truncated ? el('span', { class: 'gap' }, ` · cut: ${d.truncated}`) : null);
    // Redrawn only when the list changed, so a click is never lost under a redraw.
    const key = JSON.stringify(d.files);
    if (key === shown) return;
    shown = key;
    fill(files, d.files.length ? d.files.map((f) => el('li', {},
      el('button', { type: 'button', class: 'file link', dataset: { path: f.path }, 'aria-pressed': String(f.path === opened), onclick: () => showPatch(f.path) },
        el('span', { class: `badge change-${f.status}` }, f.status),
        ' ',
        el('span', { class: 'path agent-text' }, f.old_path && f.old_path !== f.path ? `${f.old_path} → ${f.path}` : f.path)),
      f.binary ? el('span', { class: 'muted small' }, 'binary')
        : el('span', { class: 'counts small' }, el('span', { class: 'add' }, `+${f.added ?? 0}`), ' ', el('span', { class: 'del' }, `−${f.removed ?? 0}`))))
      : el('li', { class: 'muted' }, 'No changes yet.'));
    if (opened && d.files.some((f) => f.path === opened)) showPatch(opened);
    else if (opened) {
      opened = null;
      patch.replaceChildren();
    }
  };

  const load = async () => {
    if (!session || busy) return;
    busy = true;
    const id = session.id;
    try {
      const d = await call('GET', `/api/sessions/${encodeURIComponent(id)}/diff`);
      if (session?.id === id) {
        box.querySelector(':scope > .error')?.remove();
        draw(d);
      }
    } catch (e) {
      failure(box, e);
    } finally {
      busy = false;
    }
  };

  const timer = setInterval(() => {
    if (document.visibilityState === 'visible' && live(session)) load();
  }, 2000);
  return {
    node: box,
    /** The session shown, after each read of it: a new one, or a state change, is read at once. */
    show: (s) => {
      const changed = !session || session.id !== s.id || session.state !== s.state;
      if (session && session.id !== s.id) {
        shown = '';
        opened = null;
        files.replaceChildren();
        patch.replaceChildren();
      }
      session = s;
      if (changed) load();
    },
    /** No session: nothing to compare. */
    none: () => fill(head, 'No session in this sandbox: nothing to compare.'),
    stop: () => clearInterval(timer),
  };
}

function sessionPanel(sandbox, diff) {
  const box = el('section', { class: 'panel session', 'aria-label': 'session' });
  const head = el('div', { class: 'session-head' });
  const summary = el('div', { class: 'summary' });
  const asks = el('div', { class: 'asks', 'aria-label': 'waiting on you' });
  const events = el('div', { class: 'events', role: 'log', 'aria-live': 'polite' });
  const chooser = el('select', { class: 'sessions', 'aria-label': 'session', hidden: true });
  const prompt = el('textarea', { rows: 2, placeholder: 'a follow-up prompt', 'aria-label': 'follow-up prompt' });
  const send = el('button', { class: 'send' }, 'Send');
  const cancel = el('button', { class: 'cancel deny' }, 'Cancel turn');
  const form = el('div', { class: 'follow-up' }, prompt, send, cancel);
  fill(box, el('div', { class: 'bar' }, el('h2', {}, 'Session'), chooser), head, summary, asks, events, form);
  let stream = null;
  let current = null;
  let model = null;
  // The agent's latest message, and the one before each ask: what the person decides on.
  let lastMessage = null;
  const before = new Map();
  let asksShown = '';
  let lastTurn = null;
  let inDelta = false;

  const showSession = (s) => {
    current = s;
    const m = s.summary ?? {};
    const unit = state.units.get(sandbox.id);
    fill(head,
      el('span', { class: 'name' }, s.name),
      el('span', { class: `badge state-${s.state}` }, s.state),
      s.reason ? el('span', { class: 'muted' }, ` ${s.reason}`) : null,
      el('span', { class: 'muted' }, ` · ${s.harness}${model ?? unit?.model ? ` · ${model ?? unit.model}` : ''} · turn ${s.turns?.length ?? 0}`));
    fill(summary,
      m.phase ? el('span', { class: 'chip' }, m.phase) : null,
      m.last_tool ? el('span', { class: 'chip agent-text' }, `last: ${m.last_tool}`) : null,
      Array.isArray(m.files_touched) ? el('span', { class: 'chip' }, `${m.files_touched.length} files`) : null,
      m.output_tokens != null ? el('span', { class: 'chip' }, `${count(m.output_tokens)} out tokens`) : null,
      m.cost_usd != null ? el('span', { class: 'chip' }, cost(m.cost_usd)) : null);
    cancel.disabled = TERMINAL.has(s.state);
    diff.show(s);
    drawAsks();
  };

  /** The held calls and questions of this session, each with what the agent said before it. */
  function drawAsks() {
    if (!current) return;
    const items = (state.inbox.items ?? []).filter((i) => (i.kind === 'approval' || i.kind === 'question') && i.session === current.id);
    const key = JSON.stringify(items.map((i) => [i.id, before.get(i.id) ?? lastMessage]));
    if (key === asksShown) return;
    asksShown = key;
    fill(asks, items.map((i) => card(i, { before: before.get(i.id) ?? lastMessage })));
  }
  const offInbox = subscribe((what) => {
    if (what === 'inbox') drawAsks();
  });

  const reload = async () => {
    if (!current) return;
    showSession(await call('GET', `/api/sessions/${encodeURIComponent(current.id)}`));
  };

  /** A turn's head, its prompt filled in once the session says it (a new turn: read it again). */
  const headFor = (turnId) => {
    const known = current?.turns?.find((t) => t.id === turnId);
    const node = turnHead(known ?? { id: turnId });
    if (!known) {
      reload().then(() => {
        const t = current?.turns?.find((x) => x.id === turnId);
        if (t && node.isConnected) node.replaceWith(turnHead(t));
      }).catch(() => {});
    }
    return node;
  };

  send.addEventListener('click', () => act(send, form, async () => {
    if (!prompt.value.trim()) throw new Error('write a prompt first');
    showSession(await call('POST', `/api/sessions/${encodeURIComponent(current.id)}/turns`, { prompt: prompt.value }));
    prompt.value = '';
  }));
  cancel.addEventListener('click', () => act(cancel, form, async () => {
    showSession(await call('POST', `/api/sessions/${encodeURIComponent(current.id)}/cancel`));
  }));

  (async () => {
    try {
      const all = (await call('GET', '/api/sessions')).sessions.filter((s) => s.sandbox === sandbox.name);
      if (!all.length) {
        fill(events, el('p', { class: 'muted empty' }, 'No session in this sandbox.'));
        diff.none();
        form.hidden = true;
        return;
      }
      all.sort((a, b) => b.created_at - a.created_at);
      fill(chooser, all.map((s) => el('option', { value: s.id }, `${s.name} (${s.state})`)));
      chooser.hidden = all.length < 2;
      chooser.onchange = () => open(all.find((s) => s.id === chooser.value));
      open(all[0]);
    } catch (e) {
      failure(box, e);
    }
  })();

  function open(session) {
    stream?.stop();
    events.replaceChildren();
    asks.replaceChildren();
    asksShown = '';
    lastMessage = null;
    lastTurn = null;
    inDelta = false;
    model = null;
    before.clear();
    showSession(session);
    stream = follow(`/api/sessions/${encodeURIComponent(session.id)}/events/stream`, {
      query: { follow: 'true' },
      resume: (id) => ({ since: id }),
      status: (s) => {
        if (s instanceof Error) failure(box, s);
      },
      on: {
        message: (e) => {
          const atBottom = events.scrollTop + events.clientHeight >= events.scrollHeight - 8;
          if (e.turn && e.turn !== lastTurn) {
            lastTurn = e.turn;
            events.append(headFor(e.turn));
          }
          events.append(eventLine(e));
          if (atBottom) events.scrollTop = events.scrollHeight;
          const d = e.data ?? {};
          // A message streamed in pieces (`delta`) is one message: its pieces joined.
          if (e.type === 'message' && d.text && d.role !== 'user') lastMessage = d.delta && inDelta ? lastMessage + d.text : d.text;
          inDelta = e.type === 'message' ? Boolean(d.delta) : inDelta;
          if (e.type === 'run.started' && d.model) model = d.model;
          if (e.type === 'inbox.opened' && d.item && lastMessage) before.set(d.item, lastMessage);
          if (e.type === 'inbox.opened' || e.type === 'inbox.ended') drawAsks();
          if (e.type === 'run.state' || e.type === 'run.result' || e.type === 'run.started') reload().catch(() => {});
        },
      },
    });
  }
  return {
    node: box,
    stop: () => {
      stream?.stop();
      offInbox();
    },
  };
}

function processesPanel(sandbox) {
  const box = el('section', { class: 'panel processes', 'aria-label': 'processes' });
  const list = el('ul', { class: 'plist' });
  const output = el('pre', { class: 'output', role: 'log', 'aria-live': 'polite' });
  fill(box, el('h2', {}, 'Background processes'), list, output);
  let attached = null;
  let shown = '';
  const base = `/api/sandboxes/${encodeURIComponent(sandbox.id)}/processes`;

  const attach = (p) => {
    attached?.stop();
    output.replaceChildren();
    output.dataset.process = p.process_id;
    attached = follow(`${base}/${p.process_id}/stream`, {
      query: { since: '0' },
      resume: (id) => ({ since: id }),
      status: (s) => {
        if (s instanceof Error) failure(box, s);
      },
      on: {
        output: (d) => {
          output.append(el('span', { class: d.stream === 'stderr' ? 'stderr' : '' }, d.data));
          output.scrollTop = output.scrollHeight;
        },
        gap: (d) => output.append(el('span', { class: 'gap' }, `\n[${d.lost} bytes lost]\n`)),
        end: (d) => {
          output.append(el('span', { class: 'end' }, `\n[${d.status}]\n`));
          return 'stop';
        },
        close: (d) => {
          output.append(el('span', { class: 'end' }, `\n[closed: ${d.reason}]\n`));
          return 'stop';
        },
      },
    });
  };

  let busy = false;
  const load = async () => {
    if (busy) return;
    busy = true;
    try {
      const { processes } = await call('GET', base);
      box.querySelector(':scope > .error')?.remove();
      // Drawn again only when something changed, so a button is never replaced under a click.
      const key = JSON.stringify(processes.map((p) => [p.process_id, p.state, p.status]));
      if (key === shown) return;
      shown = key;
      fill(list, processes.length ? processes.map((p) => el('li', { dataset: { process: p.process_id, state: p.state } },
        el('code', { class: 'agent-text' }, p.command),
        el('span', { class: `badge state-${p.state}` }, p.state === 'exited' ? p.status : `running, pid ${p.pid}`),
        el('span', { class: 'muted' }, ' started ', age(p.started_at)),
        el('button', { class: 'attach', onclick: () => attach(p) }, 'Attach'),
        p.state === 'running' ? el('button', {
          class: 'kill deny',
          onclick: (ev) => act(ev.currentTarget, box, async () => {
            await call('DELETE', `${base}/${p.process_id}`);
            load();
          }),
        }, 'Kill') : null)) : el('li', { class: 'muted' }, 'None of yours.'));
    } catch (e) {
      failure(box, e);
    } finally {
      busy = false;
    }
  };
  load();
  // Kept current while the page is open and in view: a process ends, or another client starts one.
  const timer = setInterval(() => {
    if (document.visibilityState === 'visible') load();
  }, 3000);
  return {
    node: box,
    stop: () => {
      attached?.stop();
      clearInterval(timer);
    },
    reload: load,
  };
}

function commandPanel(sandbox, processes) {
  const box = el('section', { class: 'panel command', 'aria-label': 'command' });
  const input = el('input', { type: 'text', placeholder: 'a command, run with bash -lc', 'aria-label': 'command', class: 'command-input' });
  const run = el('button', { type: 'submit', class: 'run' }, 'Run');
  const background = el('button', { type: 'button', class: 'background' }, 'Start in background');
  const output = el('pre', { class: 'output', role: 'log', 'aria-live': 'polite' });
  const form = el('form', { class: 'command-form' }, input, run, background);
  fill(box, el('h2', {}, 'Command'), form, output);
  let aborter = null;
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) return;
    aborter?.abort();
    aborter = new AbortController();
    output.replaceChildren();
    act(run, box, () => postStream(`/api/sandboxes/${encodeURIComponent(sandbox.id)}/exec/stream`, { command: input.value }, (event, d) => {
      if (event === 'stdout' || event === 'stderr') output.append(el('span', { class: event }, d.data));
      else if (event === 'gap') output.append(el('span', { class: 'gap' }, `\n[${d.lost} bytes lost]\n`));
      else if (event === 'result') output.append(el('span', { class: `end${d.exit_code ? ' bad' : ''}` }, `\n[exit ${d.exit_code}]\n`));
      output.scrollTop = output.scrollHeight;
    }, aborter.signal));
  });
  background.addEventListener('click', () => act(background, box, async () => {
    if (!input.value.trim()) throw new Error('write a command first');
    await call('POST', `/api/sandboxes/${encodeURIComponent(sandbox.id)}/processes`, { command: input.value });
    processes.reload();
  }));
  return { node: box, stop: () => aborter?.abort() };
}

function watchPanel(sandbox) {
  const box = el('section', { class: 'panel watch', 'aria-label': 'files' });
  const list = el('ul', { class: 'changes', role: 'log', 'aria-live': 'polite' });
  fill(box, el('h2', {}, 'Files changing'), el('p', { class: 'muted small path' }, `in ${sandbox.workdir ?? 'the working directory'}`), list);
  const stream = follow(`/api/sandboxes/${encodeURIComponent(sandbox.id)}/watch`, {
    query: { path: '.', recursive: 'true' },
    reconnect: false,
    status: (s) => {
      if (s instanceof Error) failure(box, s);
    },
    on: {
      change: (d) => {
        list.prepend(el('li', {}, el('span', { class: `badge change-${d.type}` }, d.type), ' ', el('code', { class: 'agent-text' }, d.name)));
        while (list.children.length > 200) list.lastChild.remove();
      },
      overflow: (d) => list.prepend(el('li', { class: 'gap' }, `${d.dropped} changes lost`)),
      close: (d) => {
        list.prepend(el('li', { class: 'muted' }, `watch ended: ${d.reason}`));
        return 'stop';
      },
    },
  });
  return { node: box, stop: () => stream.stop() };
}

/** The unit's line under its name, from the fleet stream: its role, work, model, time and cost. */
function unitLine(sandbox) {
  const unit = state.units.get(sandbox.id);
  if (!unit) return [];
  return [
    el('span', { class: `badge role-${unit.role}`, dataset: { role: unit.role } }, unit.label ?? unit.role),
    unit.short ? el('span', { class: 'short muted' }, unit.short) : null,
    unit.model ? el('span', { class: 'chip model' }, unit.model) : null,
    unit.live && unit.started_at ? el('span', { class: 'chip' }, 'running ', running(unit.started_at)) : null,
    unit.usage?.cost_usd != null ? el('span', { class: 'chip' }, cost(unit.usage.cost_usd)) : null,
    unit.work ? el('p', { class: 'work agent-text', title: unit.task ?? unit.work }, unit.work) : null,
  ];
}

export function render(main, ref) {
  const header = el('div', { class: 'bar' }, el('a', { href: '#/fleet' }, '← Fleet'));
  const line = el('div', { class: 'bar unit-line' });
  const body = el('div', { class: 'unit' });
  fill(main, header, line, body);
  const parts = [];
  let left = false;
  let off = () => {};
  (async () => {
    let sandbox;
    try {
      sandbox = await call('GET', `/api/sandboxes/${encodeURIComponent(ref)}`);
    } catch (e) {
      failure(body, e);
      return;
    }
    if (left) return;
    fill(header, header.firstChild,
      el('h1', {}, sandbox.name),
      el('span', { class: 'badge' }, sandbox.provider),
      el('span', { class: `badge state-${sandbox.state}` }, sandbox.state));
    // The role is the fleet stream's: each `agent` event is the whole unit, so it stays true.
    let drawn = '';
    const drawLine = () => {
      const unit = state.units.get(sandbox.id);
      const key = JSON.stringify(unit ? [unit.role, unit.label, unit.short, unit.model, unit.live, unit.started_at, unit.usage?.cost_usd, unit.work] : null);
      if (key === drawn) return;
      drawn = key;
      fill(line, unitLine(sandbox));
    };
    off = subscribe((what) => {
      if (what === 'units') drawLine();
    });
    drawLine();
    const diff = diffPanel();
    const session = sessionPanel(sandbox, diff);
    const processes = processesPanel(sandbox);
    const command = commandPanel(sandbox, processes);
    const watch = watchPanel(sandbox);
    const terminal = terminalPanel(sandbox);
    parts.push(session, diff, processes, command, watch, terminal);
    fill(body, session.node, el('div', { class: 'side' }, diff.node, terminal.node, command.node, processes.node, watch.node));
  })();
  return () => {
    left = true;
    off();
    parts.forEach((p) => p.stop());
  };
}
