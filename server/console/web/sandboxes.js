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

// statsEvery is how often a sandbox's stats are sampled while it is on
// screen, and samples how many are kept (5 minutes).
const statsEvery = 5000;
const samples = 60;

// Usage is one sandbox's CPU (percent of one core) and memory over the
// last samples.
class Usage {
  cpu = [];
  mem = [];
  last = null;

  // sample asks for the sandbox's stats once more.
  async sample(id) {
    const st = await api('GET', `/v1/sandboxes/${encodeURIComponent(id)}/stats`);
    const now = performance.now();
    if (this.last) this.cpu.push(Math.max(0, (100 * (st.CPUNanos - this.last.cpu)) / ((now - this.last.t) * 1e6)));
    this.mem.push(st.MemoryBytes);
    this.last = { cpu: st.CPUNanos, t: now };
    this.cpu.splice(0, this.cpu.length - samples);
    this.mem.splice(0, this.mem.length - samples);
  }

  text() { return `CPU ${(this.cpu.at(-1) ?? 0).toFixed(1)}%, ${bytes(this.mem.at(-1))}`; }
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
    el('thead', {}, el('tr', {}, ...['Name', 'ID', 'State', 'Image', 'Tenant', 'CPU, memory (5 min)', 'TTL left', 'Created', 'Actions'].map((h) => el('th', { scope: 'col' }, h)))),
    body);
  count.id = 'sandboxes-count';
  main.append(el('h1', {}, 'Sandboxes'), count, table);

  const row = (sb) => el('tr', { 'data-id': sb.id, 'data-state': sb.state },
    el('td', {}, el('a', { href: `/ui/sandboxes/${encodeURIComponent(sb.id)}` }, sb.name || short(sb.id))),
    el('td', { class: 'mono' }, short(sb.id)),
    el('td', {}, el('span', { class: `state ${sb.state}` }, sb.state)),
    el('td', {}, sb.image || ''),
    el('td', {}, sb.tenant || '(admin)'),
    el('td', { class: 'usage' }, sb.state === 'running' ? spark(sb.id) : ''),
    el('td', { class: 'ttl' }, ttl(sb)),
    el('td', {}, ago(sb.created_at)),
    el('td', { class: 'actions' }, ...actions(sb).map(([a, label]) => el('button', { type: 'button', 'data-action': a, 'aria-label': `${label} ${sb.name || short(sb.id)}` }, label))));
  // Only rows on screen sample their sandbox's stats: a list of 500
  // asks for the few dozen in view, not for all.
  const usage = new Map(); // id -> Usage
  const shown = new Set();
  const seen = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (e.isIntersecting) shown.add(e.target.dataset.id);
      else shown.delete(e.target.dataset.id);
    }
  });
  function spark(id) {
    const u = usage.get(id);
    if (!u?.mem.length) return '';
    return el('span', { class: 'spark' }, lineChart(`CPU of ${id}, last 5 minutes`, [{ values: u.cpu, cls: 'cpu' }], { w: 60, h: 18 }),
      lineChart(`Memory of ${id}, last 5 minutes`, [{ values: u.mem, cls: 'mem' }], { w: 60, h: 18 }), ` ${u.text()}`);
  }
  const sampleShown = async () => {
    for (const id of [...shown]) {
      const r = rows.get(id);
      if (r?.sb.state !== 'running') continue;
      if (!usage.has(id)) usage.set(id, new Usage());
      try {
        await usage.get(id).sample(id);
        rows.get(id)?.tr.querySelector('.usage').replaceChildren(spark(id));
      } catch { /* stopped or gone meanwhile: its event redraws the row */ }
    }
  };
  const setCount = () => { count.textContent = `${rows.size} sandboxes`; };
  const upsert = (sb) => {
    const tr = row(sb);
    const old = rows.get(sb.id);
    if (old) {
      seen.unobserve(old.tr);
      old.tr.replaceWith(tr);
    } else body.prepend(tr);
    seen.observe(tr);
    rows.set(sb.id, { sb, tr });
  };
  const drop = (id) => {
    const r = rows.get(id);
    if (r) seen.unobserve(r.tr);
    r?.tr.remove();
    rows.delete(id);
    usage.delete(id);
  };
  const load = async () => {
    const list = await api('GET', '/v1/sandboxes');
    list.sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
    rows.clear();
    seen.disconnect();
    shown.clear();
    const frag = document.createDocumentFragment();
    for (const sb of list) {
      const tr = row(sb);
      rows.set(sb.id, { sb, tr });
      seen.observe(tr);
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
    timer ??= setTimeout(refresh, 100);
  });
  const tick = setInterval(() => { for (const { sb, tr } of rows.values()) tr.querySelector('.ttl').textContent = ttl(sb); }, 10000);
  const stats = setInterval(sampleShown, statsEvery);
  load().then(sampleShown).catch((e) => { count.textContent = `Could not list sandboxes: ${e.message}`; });
  return () => { off(); clearInterval(tick); clearInterval(stats); clearTimeout(timer); seen.disconnect(); };
}


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
  const u = new Usage();
  const sample = async () => {
    if (sb?.state !== 'running') return;
    try {
      await u.sample(id);
      charts.replaceChildren(
        el('figure', {}, lineChart('CPU, percent of one core, last 5 minutes', [{ values: u.cpu, cls: 'cpu' }]), el('figcaption', {}, `CPU ${(u.cpu.at(-1) ?? 0).toFixed(1)}%`)),
        el('figure', {}, lineChart('Memory, last 5 minutes', [{ values: u.mem, cls: 'mem' }]), el('figcaption', {}, `memory ${bytes(u.mem.at(-1))}`)));
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
