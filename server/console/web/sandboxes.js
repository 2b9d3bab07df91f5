// The sandboxes: a live list with its actions, and one sandbox's page
// (details, CPU and memory over the last minutes, logs, a terminal).
import { el, api, act, onEvent, navigate } from './app.js';
import { short, ago, ttl, lineChart, bytes } from './util.js';
import { openTerminal } from './terminal.js';

// sandboxEvent reports whether e names a sandbox (created, started,
// paused, resumed, restored, ttl, stopped, removed…); agent.* events
// name runs.
const sandboxEvent = (e) => e.id && !e.type.startsWith('agent.');

// The actions a row offers, by state.
function actions(sb) {
  const a = [];
  if (sb.state === 'running') a.push(['pause', 'Pause'], ['checkpoint', 'Checkpoint'], ['fork', 'Fork'], ['stop', 'Stop']);
  if (sb.state === 'paused') a.push(['resume', 'Resume'], ['checkpoint', 'Checkpoint'], ['fork', 'Fork'], ['stop', 'Stop']);
  if (sb.state === 'stopped' || sb.state === 'created') a.push(['start', 'Start']);
  a.push(['remove', 'Remove']);
  return a;
}

// run does action on sandbox id through the native API.
export function run(action, id, name) {
  const p = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const calls = {
    pause: () => api('POST', `${p}/pause`),
    resume: () => api('POST', `${p}/resume`),
    start: () => api('POST', `${p}/start`),
    stop: () => api('POST', `${p}/stop`, {}),
    checkpoint: () => api('POST', `${p}/checkpoint`, {}),
    fork: () => api('POST', `${p}/fork`, {}),
    remove: () => api('DELETE', p),
  };
  return act(`${action} ${name || short(id)}`, calls[action]);
}

export function sandboxesView(main, [id]) {
  return id ? sandboxPage(main, id) : sandboxList(main);
}

function sandboxList(main) {
  const rows = new Map(); // id -> {sb, tr}
  const body = el('tbody');
  const count = el('p', { class: 'count', 'aria-live': 'polite' });
  const table = el('table', { class: 'list', 'aria-describedby': 'sandboxes-count' },
    el('caption', { class: 'sr' }, 'Sandboxes'),
    el('thead', {}, el('tr', {}, ...['Name', 'ID', 'State', 'Image', 'Tenant', 'TTL left', 'Created', 'Actions'].map((h) => el('th', { scope: 'col' }, h)))),
    body);
  count.id = 'sandboxes-count';
  main.append(el('h1', {}, 'Sandboxes'), count, table);

  const row = (sb) => el('tr', { 'data-id': sb.id, 'data-state': sb.state },
    el('td', {}, el('a', { href: `/ui/sandboxes/${encodeURIComponent(sb.id)}` }, sb.name || short(sb.id))),
    el('td', { class: 'mono' }, short(sb.id)),
    el('td', {}, el('span', { class: `state ${sb.state}` }, sb.state)),
    el('td', {}, sb.image || ''),
    el('td', {}, sb.tenant || '(admin)'),
    el('td', { class: 'ttl' }, ttl(sb)),
    el('td', {}, ago(sb.created_at)),
    el('td', { class: 'actions' }, ...actions(sb).map(([a, label]) => el('button', { type: 'button', 'data-action': a, 'aria-label': `${label} ${sb.name || short(sb.id)}` }, label))));
  const setCount = () => { count.textContent = `${rows.size} sandboxes`; };
  const upsert = (sb) => {
    const tr = row(sb);
    const old = rows.get(sb.id);
    if (old) old.tr.replaceWith(tr);
    else body.prepend(tr);
    rows.set(sb.id, { sb, tr });
  };
  const drop = (id) => {
    rows.get(id)?.tr.remove();
    rows.delete(id);
  };
  const load = async () => {
    const list = await api('GET', '/v1/sandboxes');
    list.sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
    rows.clear();
    const frag = document.createDocumentFragment();
    for (const sb of list) {
      const tr = row(sb);
      rows.set(sb.id, { sb, tr });
      frag.append(tr);
    }
    body.replaceChildren(frag);
    setCount();
    main.dataset.loaded = String(Date.now());
  };
  body.addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-action]');
    if (!b) return;
    const { sb } = rows.get(b.closest('tr').dataset.id);
    run(b.dataset.action, sb.id, sb.name);
  });
  // An event refetches its one sandbox; several events for one sandbox
  // within a moment cost one request.
  const pending = new Set();
  let timer = null;
  const refresh = async () => {
    timer = null;
    const ids = [...pending];
    pending.clear();
    for (const id of ids) {
      try {
        upsert(await api('GET', `/v1/sandboxes/${encodeURIComponent(id)}`));
      } catch (e) {
        if (e.status === 404) drop(id);
      }
    }
    setCount();
  };
  const off = onEvent((e) => {
    if (e.type === 'resync') { load(); return; }
    if (!sandboxEvent(e)) return;
    if (e.type === 'removed') { drop(e.id); setCount(); return; }
    pending.add(e.id);
    timer ??= setTimeout(refresh, 200);
  });
  const tick = setInterval(() => { for (const { sb, tr } of rows.values()) tr.querySelector('.ttl').textContent = ttl(sb); }, 10000);
  load().catch((e) => { count.textContent = `Could not list sandboxes: ${e.message}`; });
  return () => { off(); clearInterval(tick); clearTimeout(timer); };
}

// statsEvery is how often an open sandbox's page samples its stats, and
// samples how many it keeps (5 minutes).
const statsEvery = 5000;
const samples = 60;

function sandboxPage(main, id) {
  const p = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const head = el('h1', {}, `Sandbox ${short(id)}`);
  const info = el('dl', { class: 'info' });
  const acts = el('div', { class: 'actions' });
  const charts = el('div', { class: 'charts' });
  const logs = el('pre', { class: 'logs', tabindex: '0', 'aria-label': 'Logs' });
  const termBox = el('div', { class: 'term' });
  main.append(el('p', {}, el('a', { href: '/ui/sandboxes' }, '← Sandboxes')), head, info, acts,
    el('h2', {}, 'CPU and memory'), charts,
    el('h2', {}, 'Terminal'), el('button', { type: 'button', id: 'open-term', onclick: () => { term?.close(); term = openTerminal(termBox, id); } }, 'Open a shell'), termBox,
    el('h2', {}, 'Logs'), el('button', { type: 'button', onclick: () => loadLogs() }, 'Reload logs'), logs);
  let term = null;
  let sb = null;
  const show = (s) => {
    sb = s;
    head.textContent = `Sandbox ${s.name || short(s.id)}`;
    const rows = [['ID', s.id], ['State', s.state], ['Image', s.image], ['Tenant', s.tenant || '(admin)'], ['Backend', s.backend],
      ['Created', `${ago(s.created_at)} ago`], ['TTL left', ttl(s)], ['Restored from', s.snapshot ? short(s.snapshot) : '—'], ['Forked from', s.forked_from ? short(s.forked_from) : '—']];
    info.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v || '')]));
    acts.replaceChildren(...actions(s).map(([a, label]) => el('button', { type: 'button', 'data-action': a, onclick: async () => {
      await run(a, s.id, s.name);
      if (a === 'remove') navigate('/ui/sandboxes');
    } }, label)));
  };
  const load = async () => { show(await api('GET', p)); };
  const loadLogs = async () => {
    try {
      const evs = await api('GET', `${p}/logs`);
      logs.textContent = evs.map((e) => (e.encoding === 'base64' ? atob(e.data) : e.data)).join('') || '(no output)';
    } catch (e) { logs.textContent = e.message; }
  };
  const cpu = [];
  const mem = [];
  let last = null;
  const sample = async () => {
    if (sb?.state !== 'running') return;
    try {
      const st = await api('GET', `${p}/stats`);
      const now = performance.now();
      if (last) cpu.push(Math.max(0, (100 * (st.CPUNanos - last.cpu)) / ((now - last.t) * 1e6)));
      mem.push(st.MemoryBytes);
      last = { cpu: st.CPUNanos, t: now };
      cpu.splice(0, cpu.length - samples);
      mem.splice(0, mem.length - samples);
      charts.replaceChildren(
        el('figure', {}, lineChart('CPU, percent of one core, last 5 minutes', [{ values: cpu, cls: 'cpu' }]), el('figcaption', {}, `CPU ${(cpu.at(-1) ?? 0).toFixed(1)}%`)),
        el('figure', {}, lineChart('Memory, last 5 minutes', [{ values: mem, cls: 'mem' }]), el('figcaption', {}, `memory ${bytes(mem.at(-1))}`)));
    } catch { /* stopped meanwhile: the event updates the page */ }
  };
  const off = onEvent((e) => {
    if (e.id === id && sandboxEvent(e)) {
      if (e.type === 'removed') navigate('/ui/sandboxes');
      else load().then(sample).catch(() => {});
    }
  });
  load().then(() => { sample(); loadLogs(); }).catch((e) => { head.textContent = e.message; });
  const timer = setInterval(sample, statsEvery);
  return () => { off(); clearInterval(timer); term?.close(); };
}
