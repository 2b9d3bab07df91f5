// The console's client: sign-in, the router, the API (the session cookie
// is the credential; every action carries the session's CSRF token) and
// one stream of events that every view listens to.
import { sandboxesView } from './sandboxes.js';
import { snapshotsView } from './snapshots.js';
import { runsView } from './runs.js';
import { branchesView } from './branches.js';
import { usageView } from './usage.js';
import { memoryView } from './memory.js';

const views = { sandboxes: sandboxesView, snapshots: snapshotsView, runs: runsView, branches: branchesView, memory: memoryView, usage: usageView };
let session = null;
let unmount = null;

// el builds an element: el('td', {class: 'x', onclick: f}, 'text', child).
export function el(tag, attrs = {}, ...children) {
  const svg = ['svg', 'g', 'path', 'rect', 'circle', 'line', 'polyline', 'text', 'title'].includes(tag);
  const e = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  e.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return e;
}

export function toast(msg, bad = false) {
  const t = document.getElementById('toast');
  t.textContent = msg;
  t.className = bad ? 'bad' : '';
}

export class APIError extends Error {
  constructor(status, body) {
    super(body?.error || `HTTP ${status}`);
    this.status = status;
    this.code = body?.code;
  }
}

// api calls the native API (or the console's own routes) as the session.
export async function api(method, path, body) {
  const headers = {};
  if (method !== 'GET' && session) headers['X-CSRF-Token'] = session.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401 && path !== '/ui/session') {
    signedOut();
    throw new APIError(401, { error: 'signed out' });
  }
  if (!r.ok) {
    let b = null;
    try { b = await r.json(); } catch { /* not JSON */ }
    throw new APIError(r.status, b);
  }
  if (r.status === 204) return null;
  const type = r.headers.get('Content-Type') || '';
  if (type.includes('ndjson')) return (await r.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return type.includes('json') ? r.json() : r.text();
}

// act runs an action from a button, reporting how it went.
export async function act(what, fn) {
  toast(`${what}…`);
  try {
    await fn();
    toast(`${what}: done`);
  } catch (e) {
    toast(`${what}: ${e.message}`, true);
  }
}

// The event stream: one fetch of /v1/events (NDJSON) for the whole page,
// reopened after a pause if it ends; listeners get each event, and
// 'resync' when the stream was reopened (events may have been missed).
const bus = new EventTarget();
let streaming = null;

export function onEvent(fn) {
  const h = (e) => fn(e.detail);
  bus.addEventListener('event', h);
  return () => bus.removeEventListener('event', h);
}

async function stream() {
  const ctl = new AbortController();
  streaming = ctl;
  let first = true;
  while (!ctl.signal.aborted) {
    try {
      const r = await fetch('/v1/events', { credentials: 'same-origin', signal: ctl.signal });
      if (r.status === 401) { signedOut(); return; }
      if (!r.ok) throw new Error(`events: HTTP ${r.status}`);
      if (!first) bus.dispatchEvent(new CustomEvent('event', { detail: { type: 'resync' } }));
      first = false;
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line) bus.dispatchEvent(new CustomEvent('event', { detail: JSON.parse(line) }));
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    await new Promise((res) => setTimeout(res, 3000));
  }
}

function signedOut() {
  session = null;
  streaming?.abort();
  streaming = null;
  render();
}

export function currentSession() { return session; }

// navigate shows the view of path (/ui/VIEW/ARG…).
export function navigate(path, push = true) {
  if (push) history.pushState(null, '', path);
  render();
}

function render() {
  unmount?.();
  unmount = null;
  const main = document.getElementById('main');
  main.replaceChildren();
  const nav = document.querySelector('nav');
  const out = document.getElementById('signout');
  if (!session) {
    nav.hidden = true;
    out.hidden = true;
    document.getElementById('who').textContent = '';
    main.append(signInForm());
    return;
  }
  nav.hidden = false;
  out.hidden = false;
  document.getElementById('who').textContent = session.admin ? 'admin' : `tenant ${session.tenant}`;
  const [name, ...args] = location.pathname.replace(/^\/ui\/?/, '').split('/').filter(Boolean);
  const view = views[name] || sandboxesView;
  for (const a of nav.querySelectorAll('a')) {
    if (a.getAttribute('href') === `/ui/${name || 'sandboxes'}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  unmount = view(main, args.map(decodeURIComponent));
}

function signInForm() {
  const input = el('input', { id: 'key', name: 'key', type: 'password', autocomplete: 'current-password', required: true });
  const err = el('p', { class: 'error', role: 'alert' });
  const form = el('form', { class: 'signin', 'aria-labelledby': 'signin-title' },
    el('h1', { id: 'signin-title' }, 'Sign in'),
    el('label', { for: 'key' }, 'API key (the admin token or a tenant key)'),
    input,
    el('button', { type: 'submit' }, 'Sign in'),
    err);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      session = await api('POST', '/ui/session', { key: input.value });
      start();
    } catch (e) {
      err.textContent = e.message;
    }
  });
  return form;
}

function start() {
  if (!streaming) stream();
  if (!views[location.pathname.split('/')[2]]) history.replaceState(null, '', '/ui/sandboxes');
  render();
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[href^="/ui/"]');
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || a.target) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', () => render());
document.getElementById('signout').addEventListener('click', async () => {
  try { await api('DELETE', '/ui/session'); } catch { /* signed out anyway */ }
  signedOut();
});

api('GET', '/ui/session').then((s) => {
  if (s.signed_in) {
    session = s;
    start();
  } else render();
}, () => render());
