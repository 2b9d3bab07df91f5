// Formatting and the small SVG charts the views draw.
import { el } from './app.js';

export function short(id) { return id ? id.slice(0, 12) : ''; }

export function bytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  const i = Math.min(u.length - 1, Math.floor(Math.log2(n) / 10));
  return `${(n / 2 ** (10 * i)).toFixed(i ? 1 : 0)} ${u[i]}`;
}

// ago says how long before now t was ("3m"), span how long s seconds are.
export function ago(t) { return t ? span((Date.now() - Date.parse(t)) / 1000) : ''; }

export function span(s) {
  if (s < 0) s = 0;
  if (s < 90) return `${Math.round(s)}s`;
  if (s < 5400) return `${Math.round(s / 60)}m`;
  if (s < 129600) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

// ttl is what is left of a sandbox's time to live.
export function ttl(sb) {
  if (!sb.expires_at || sb.state !== 'running') return '—';
  const left = (Date.parse(sb.expires_at) - Date.now()) / 1000;
  return left <= 0 ? 'expired' : span(left);
}

// lineChart draws series (arrays of numbers, one colour class each) as
// lines over the same x axis, with a title for screen readers.
export function lineChart(title, series, { w = 320, h = 80, max } = {}) {
  const n = Math.max(2, ...series.map((s) => s.values.length));
  const top = max ?? Math.max(1e-9, ...series.flatMap((s) => s.values));
  const svg = el('svg', { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img', 'aria-label': title, class: 'chart' },
    el('title', {}, title),
    el('line', { x1: 0, y1: h - 1, x2: w, y2: h - 1, class: 'axis' }));
  for (const s of series) {
    const pts = s.values.map((v, i) => `${((i / (n - 1)) * w).toFixed(1)},${(h - 2 - (v / top) * (h - 6)).toFixed(1)}`);
    svg.append(el('polyline', { points: pts.join(' '), class: `line ${s.cls}` }));
  }
  return svg;
}

// barChart draws one bar per value, with the labels under them.
export function barChart(title, bars, { w = 480, h = 120, fmt = String } = {}) {
  const top = Math.max(1e-9, ...bars.map((b) => b.value));
  const bw = w / Math.max(1, bars.length);
  const svg = el('svg', { viewBox: `0 0 ${w} ${h + 16}`, width: w, height: h + 16, role: 'img', 'aria-label': title, class: 'chart' }, el('title', {}, title));
  bars.forEach((b, i) => {
    const bh = (b.value / top) * (h - 4);
    svg.append(el('rect', { x: i * bw + 2, y: h - bh, width: Math.max(1, bw - 4), height: bh, class: `bar ${b.cls || ''}` }, el('title', {}, `${b.label}: ${fmt(b.value)}`)));
    if (bars.length <= 24) svg.append(el('text', { x: i * bw + bw / 2, y: h + 12, class: 'label' }, b.label));
  });
  return svg;
}
