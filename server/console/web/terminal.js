// A terminal in the page: xterm.js (vendored, loaded on first use) over
// the exec WebSocket's PTY stream (GET /v1/sandboxes/{id}/exec/ws).
import { el, currentSession } from './app.js';

let loading = null;

// xterm loads the vendored xterm.js once; it is a UMD script that
// defines globalThis.Terminal.
function xterm() {
  loading ??= new Promise((resolve, reject) => {
    document.head.append(el('link', { rel: 'stylesheet', href: '/ui/vendor/xterm.css' }));
    const s = el('script', { src: '/ui/vendor/xterm.js' });
    s.addEventListener('load', () => resolve(globalThis.Terminal));
    s.addEventListener('error', () => reject(new Error('could not load the terminal')));
    document.head.append(s);
  });
  return loading;
}

// openStyled opens term in screen. xterm's DOM renderer styles itself
// with <style> elements, which the console's CSP (style-src 'self')
// refuses; while it opens (when it makes them), each is an inert
// stand-in whose text goes to a constructed style sheet, which the CSP
// allows (document.adoptedStyleSheets).
function openStyled(term, screen) {
  const create = document.createElement;
  document.createElement = function (tag, ...rest) {
    if (String(tag).toLowerCase() !== 'style') return create.call(this, tag, ...rest);
    const sheet = new CSSStyleSheet();
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    const stand = create.call(this, 'template');
    Object.defineProperty(stand, 'textContent', { get: () => '', set: (v) => sheet.replaceSync(v) });
    const remove = stand.remove.bind(stand);
    stand.remove = () => {
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
      remove();
    };
    return stand;
  };
  try {
    term.open(screen);
  } finally {
    document.createElement = create;
  }
}

const stdin = 0;
const enc = new TextEncoder();

// openTerminal runs a shell in sandbox id inside box; close() ends it.
export function openTerminal(box, id) {
  let ws = null;
  let term = null;
  let closed = false;
  const status = el('p', { class: 'term-status', role: 'status' }, 'connecting…');
  const screen = el('div', { class: 'term-screen' });
  box.replaceChildren(status, screen);
  xterm().then((Terminal) => {
    if (closed) return;
    term = new Terminal({ rows: 24, cols: 100, convertEol: false, screenReaderMode: true });
    openStyled(term, screen);
    const url = new URL(`/v1/sandboxes/${encodeURIComponent(id)}/exec/ws`, location.href);
    url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
    // A browser sets no header on a WebSocket: the CSRF token rides in the URL.
    url.searchParams.set('csrf', currentSession().csrf);
    ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    ws.addEventListener('open', () => {
      ws.send(JSON.stringify({ args: ['/bin/sh'], env: ['TERM=xterm-256color'], tty: true, rows: term.rows, cols: term.cols }));
      status.textContent = 'connected';
      term.focus();
    });
    ws.addEventListener('message', (m) => {
      if (typeof m.data !== 'string') {
        term.write(new Uint8Array(m.data, 1));
        return;
      }
      const c = JSON.parse(m.data);
      if (c.exit) status.textContent = `exited with ${c.exit.code}`;
      if (c.error) status.textContent = `error: ${c.error.message}`;
    });
    ws.addEventListener('close', () => { if (!/exited|error/.test(status.textContent)) status.textContent = 'disconnected'; });
    term.onData((d) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const b = enc.encode(d);
      const msg = new Uint8Array(b.length + 1);
      msg[0] = stdin;
      msg.set(b, 1);
      ws.send(msg);
    });
    term.onResize(({ rows, cols }) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ resize: { rows, cols } })));
  }, (e) => { status.textContent = e.message; });
  return { close() { closed = true; ws?.close(); term?.dispose(); } };
}
