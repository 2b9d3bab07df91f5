// Snapshots and forks: the lineage drawn as a tree (snapshot -> the
// sandboxes restored from it -> their forks and snapshots), with sizes,
// ages and the actions on each node.
import { el, api, act, onEvent } from './app.js';
import { short, ago, bytes } from './util.js';
import { run } from './sandboxes.js';

const nodeW = 170;
const nodeH = 40;
const gapX = 50;
const gapY = 14;

// lineage links snapshots and sandboxes: a snapshot's children are the
// sandboxes restored from it, a sandbox's its forks and its snapshots.
// Only sandboxes that take part in some link are drawn.
export function lineage(snaps, sbs) {
  const nodes = new Map();
  for (const s of snaps) nodes.set(`s:${s.id}`, { key: `s:${s.id}`, kind: 'snapshot', obj: s, kids: [], parent: null });
  for (const b of sbs) nodes.set(`b:${b.id}`, { key: `b:${b.id}`, kind: 'sandbox', obj: b, kids: [], parent: null });
  const link = (from, to) => {
    const f = nodes.get(from);
    const t = nodes.get(to);
    if (!f || !t || t.parent) return;
    t.parent = f;
    f.kids.push(t);
  };
  for (const b of sbs) {
    if (b.snapshot) link(`s:${b.snapshot}`, `b:${b.id}`);
    else if (b.forked_from) link(`b:${b.forked_from}`, `b:${b.id}`);
  }
  for (const s of snaps) link(`b:${s.lineage?.sandbox}`, `s:${s.id}`);
  const linked = (n) => n.kind === 'snapshot' || n.parent || n.kids.length;
  return [...nodes.values()].filter((n) => !n.parent && linked(n));
}

// layout places a forest: depth across, each leaf on its own row, a
// parent level with the middle of its children.
function layout(roots) {
  let row = 0;
  const placed = [];
  const place = (n, depth) => {
    n.x = depth * (nodeW + gapX);
    if (!n.kids.length) {
      n.y = row++ * (nodeH + gapY);
    } else {
      n.kids.sort((a, b) => Date.parse(a.obj.created || a.obj.created_at) - Date.parse(b.obj.created || b.obj.created_at));
      for (const k of n.kids) place(k, depth + 1);
      n.y = (n.kids[0].y + n.kids.at(-1).y) / 2;
    }
    placed.push(n);
  };
  for (const r of roots) place(r, 0);
  return placed;
}

function label(n) {
  const o = n.obj;
  if (n.kind === 'snapshot') return [`◆ ${o.name || short(o.id)}`, `${bytes(o.size)} · ${ago(o.created)} ago`];
  return [`▢ ${o.name || short(o.id)}`, `${o.state} · ${ago(o.created_at)} ago`];
}

export function snapshotsView(main) {
  const graph = el('div', { class: 'graph' });
  const panel = el('section', { class: 'panel', 'aria-live': 'polite', 'aria-label': 'Selected' });
  const table = el('tbody');
  main.append(el('h1', {}, 'Snapshots and forks'), graph, panel,
    el('h2', {}, 'Snapshots'),
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ...['Name', 'ID', 'Source', 'Size', 'Age', 'Tenant', 'Actions'].map((h) => el('th', { scope: 'col' }, h)))), table));
  let selected = null;

  const snapActions = (s) => [
    el('button', { type: 'button', 'data-action': 'restore', onclick: () => act(`restore ${s.name || short(s.id)}`, () => api('POST', `/v1/snapshots/${s.id}/restore`, {})).then(load) }, 'Restore'),
    el('button', { type: 'button', 'data-action': 'remove-snapshot', onclick: () => act(`remove ${s.name || short(s.id)}`, () => api('DELETE', `/v1/snapshots/${s.id}`)).then(load) }, 'Remove'),
  ];
  const select = (n) => {
    selected = n?.key;
    for (const g of graph.querySelectorAll('.node')) g.classList.toggle('selected', g.dataset.key === selected);
    if (!n) { panel.replaceChildren(); return; }
    const o = n.obj;
    if (n.kind === 'snapshot') {
      panel.replaceChildren(el('h2', {}, `Snapshot ${o.name || short(o.id)}`),
        el('p', {}, `${bytes(o.size)}, taken ${ago(o.created)} ago from ${o.lineage?.sandbox_name || short(o.lineage?.sandbox) || '?'}`),
        el('div', { class: 'actions' }, ...snapActions(o)));
    } else {
      const acts = o.state === 'running' || o.state === 'paused' ? [['checkpoint', 'Checkpoint'], ['fork', 'Fork']] : [];
      panel.replaceChildren(el('h2', {}, `Sandbox ${o.name || short(o.id)}`), el('p', {}, `${o.state}, created ${ago(o.created_at)} ago`),
        el('div', { class: 'actions' }, el('a', { href: `/ui/sandboxes/${o.id}` }, 'Open'),
          ...acts.map(([a, l]) => el('button', { type: 'button', 'data-action': a, onclick: () => run(a, o.id, o.name).then(load) }, l))));
    }
  };
  const draw = (roots) => {
    const nodes = layout(roots);
    const w = Math.max(nodeW, ...nodes.map((n) => n.x + nodeW)) + 2;
    const h = Math.max(nodeH, ...nodes.map((n) => n.y + nodeH)) + 2;
    const svg = el('svg', { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'group', 'aria-label': 'Lineage of snapshots and sandboxes' });
    for (const n of nodes) {
      for (const k of n.kids) {
        const x1 = n.x + nodeW;
        const y1 = n.y + nodeH / 2;
        const x2 = k.x;
        const y2 = k.y + nodeH / 2;
        svg.append(el('path', { class: `edge ${k.kind}`, d: `M${x1},${y1} C${x1 + gapX / 2},${y1} ${x2 - gapX / 2},${y2} ${x2},${y2}` }));
      }
    }
    for (const n of nodes) {
      const [l1, l2] = label(n);
      const g = el('g', { class: `node ${n.kind}`, 'data-key': n.key, transform: `translate(${n.x},${n.y})`, tabindex: '0', role: 'button', 'aria-label': `${n.kind} ${l1.slice(2)}, ${l2}` },
        el('rect', { width: nodeW, height: nodeH, rx: 6 }),
        el('text', { x: 8, y: 16 }, l1.length > 24 ? `${l1.slice(0, 23)}…` : l1),
        el('text', { x: 8, y: 32, class: 'sub' }, l2));
      g.addEventListener('click', () => select(n));
      g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); select(n); } });
      svg.append(g);
    }
    graph.replaceChildren(nodes.length ? svg : el('p', {}, 'No snapshots yet: checkpoint a sandbox.'));
    select(nodes.find((n) => n.key === selected));
  };
  const load = async () => {
    const [snaps, sbs] = await Promise.all([api('GET', '/v1/snapshots'), api('GET', '/v1/sandboxes')]);
    draw(lineage(snaps, sbs));
    table.replaceChildren(...snaps.map((s) => el('tr', { 'data-id': s.id },
      el('td', {}, s.name || ''), el('td', { class: 'mono' }, short(s.id)), el('td', {}, s.lineage?.sandbox_name || short(s.lineage?.sandbox)),
      el('td', {}, bytes(s.size)), el('td', {}, ago(s.created)), el('td', {}, s.tenant || '(admin)'),
      el('td', { class: 'actions' }, ...snapActions(s)))));
    main.dataset.loaded = String(Date.now());
  };
  // Sandbox events redraw the graph, at most once a second.
  let timer = null;
  const off = onEvent((e) => {
    if (e.type?.startsWith('agent.')) return;
    timer ??= setTimeout(() => { timer = null; load().catch(() => {}); }, 1000);
  });
  load().catch((e) => graph.replaceChildren(el('p', {}, e.message)));
  return () => { off(); clearTimeout(timer); };
}
