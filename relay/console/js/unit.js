// A unit's page: its session's events live (follow-up and cancel), its background processes with
// live output, a command box that streams, and a watch of its working directory.
import { call, follow, postStream } from './api.js';
import { terminalPanel } from './terminal.js';
import { act, ago, el, failure, fill } from './dom.js';
import { state } from './state.js';

const TERMINAL = new Set(['succeeded', 'failed', 'crashed', 'cancelled', 'timed_out']);

/** One line for an event: what happened, with the details one click away. */
export function eventLine(e) {
  const d = e.data ?? {};
  let text = '';
  let tone = '';
  switch (e.type) {
    case 'run.state':
      text = `${d.from} → ${d.to}${d.reason ? ` (${d.reason})` : ''}${d.detail ? `: ${d.detail}` : ''}`;
      if (['failed', 'crashed', 'timed_out'].includes(d.to)) tone = 'bad';
      break;
    case 'tool.start':
      text = `${d.name ?? 'tool'}: ${d.summary ?? d.file ?? ''}`;
      break;
    case 'tool.end':
      text = `${d.name ?? 'tool'} ${d.ok === false || d.is_error ? 'failed' : 'done'}`;
      if (d.ok === false || d.is_error) tone = 'bad';
      break;
    case 'message':
    case 'agent.message':
      text = d.text ?? '';
      break;
    case 'phase':
      text = d.phase ?? '';
      tone = 'thin';
      break;
    case 'agent.progress':
      text = `${d.pct != null ? `${d.pct}% ` : ''}${d.text ?? ''}`;
      tone = 'thin';
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
      text = `tests: ${d.passed ?? '?'} passed, ${d.failed ?? '?'} failed${d.framework ? ` (${d.framework})` : ''}`;
      tone = d.failed ? 'bad thin' : 'thin';
      break;
    case 'rate_limit':
    case 'usage.rate_limit':
      text = `rate limit: ${d.status ?? ''} ${d.used_pct != null ? `${d.used_pct}%` : ''}`;
      tone = 'thin';
      break;
    default:
      text = d.summary ?? d.text ?? d.raw ?? d.message ?? '';
      if (/error|failed/.test(e.type)) tone = 'bad';
      else if (/usage|rate|test/.test(e.type)) tone = 'thin';
  }
  const source = d.source === 'hangar' ? '' : ' agent-text';
  return el('details', { class: `event ${tone}`, dataset: { seq: e.seq, type: e.type } },
    el('summary', {},
      el('span', { class: 'seq muted' }, String(e.seq)),
      el('span', { class: 'type' }, e.type),
      el('span', { class: `what${source}` }, String(text).slice(0, 300))),
    el('pre', { class: 'agent-text' }, JSON.stringify(d, null, 2)));
}

function sessionPanel(sandbox) {
  const box = el('section', { class: 'panel session', 'aria-label': 'session' });
  const head = el('div', { class: 'session-head' });
  const summary = el('div', { class: 'summary' });
  const events = el('div', { class: 'events', role: 'log', 'aria-live': 'polite' });
  const chooser = el('select', { class: 'sessions', 'aria-label': 'session', hidden: true });
  const prompt = el('textarea', { rows: 2, placeholder: 'a follow-up prompt', 'aria-label': 'follow-up prompt' });
  const send = el('button', { class: 'send' }, 'Send');
  const cancel = el('button', { class: 'cancel deny' }, 'Cancel turn');
  const form = el('div', { class: 'follow-up' }, prompt, send, cancel);
  fill(box, el('div', { class: 'bar' }, el('h2', {}, 'Session'), chooser), head, summary, events, form);
  let stream = null;
  let current = null;

  const showSession = (s) => {
    current = s;
    fill(head,
      el('span', { class: 'name' }, s.name),
      el('span', { class: `badge state-${s.state}` }, s.state),
      s.reason ? el('span', { class: 'muted' }, ` ${s.reason}`) : null,
      el('span', { class: 'muted' }, ` · ${s.harness} · turn ${s.turns?.length ?? 0}`));
    const m = s.summary ?? {};
    fill(summary,
      m.phase ? el('span', { class: 'chip' }, m.phase) : null,
      m.last_tool ? el('span', { class: 'chip agent-text' }, `last: ${m.last_tool}`) : null,
      Array.isArray(m.files_touched) ? el('span', { class: 'chip' }, `${m.files_touched.length} files`) : null,
      m.output_tokens != null ? el('span', { class: 'chip' }, `${m.output_tokens} out tokens`) : null);
    cancel.disabled = TERMINAL.has(s.state);
  };

  const reload = async () => {
    if (!current) return;
    showSession(await call('GET', `/api/sessions/${encodeURIComponent(current.id)}`));
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
          events.append(eventLine(e));
          if (atBottom) events.scrollTop = events.scrollHeight;
          if (e.type === 'run.state' || e.type === 'run.result') reload().catch(() => {});
        },
      },
    });
  }
  return { node: box, stop: () => stream?.stop() };
}

function processesPanel(sandbox) {
  const box = el('section', { class: 'panel processes', 'aria-label': 'processes' });
  const list = el('ul', { class: 'plist' });
  const output = el('pre', { class: 'output', role: 'log', 'aria-live': 'polite' });
  const refresh = el('button', {}, 'Refresh');
  fill(box, el('h2', {}, 'Background processes'), refresh, list, output);
  let attached = null;
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

  const load = () => act(refresh, box, async () => {
    const { processes } = await call('GET', base);
    fill(list, processes.length ? processes.map((p) => el('li', { dataset: { process: p.process_id } },
      el('code', { class: 'agent-text' }, p.command),
      el('span', { class: `badge state-${p.state}` }, p.state === 'exited' ? p.status : `running, pid ${p.pid}`),
      el('span', { class: 'muted' }, ` ${ago(p.started_at)} ago`),
      el('button', { class: 'attach', onclick: () => attach(p) }, 'Attach'),
      p.state === 'running' ? el('button', {
        class: 'kill deny',
        onclick: (ev) => act(ev.currentTarget, box, async () => {
          await call('DELETE', `${base}/${p.process_id}`);
          setTimeout(load, 500);
        }),
      }, 'Kill') : null)) : el('li', { class: 'muted' }, 'None of yours.'));
  });
  refresh.addEventListener('click', load);
  load();
  return { node: box, stop: () => attached?.stop(), reload: load };
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

export function render(main, ref) {
  const header = el('div', { class: 'bar' }, el('a', { href: '#/fleet' }, '← Fleet'));
  const body = el('div', { class: 'unit' });
  fill(main, header, body);
  const parts = [];
  (async () => {
    let sandbox;
    try {
      sandbox = await call('GET', `/api/sandboxes/${encodeURIComponent(ref)}`);
    } catch (e) {
      failure(body, e);
      return;
    }
    const unit = state.units.get(sandbox.id);
    fill(header, header.firstChild,
      el('h1', {}, sandbox.name),
      el('span', { class: 'badge' }, sandbox.provider),
      el('span', { class: `badge state-${sandbox.state}` }, sandbox.state),
      unit ? el('span', { class: `badge role-${unit.role}` }, unit.label ?? unit.role) : null);
    const session = sessionPanel(sandbox);
    const processes = processesPanel(sandbox);
    const command = commandPanel(sandbox, processes);
    const watch = watchPanel(sandbox);
    const terminal = terminalPanel(sandbox);
    parts.push(session, processes, command, watch, terminal);
    fill(body, session.node, el('div', { class: 'side' }, terminal.node, command.node, processes.node, watch.node));
  })();
  return () => parts.forEach((p) => p.stop());
}
