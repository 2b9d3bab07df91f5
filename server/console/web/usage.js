// Usage and quotas per tenant over time. The server keeps usage by the
// hour, and /v1/usage sums what accrued since an hour; the buckets are
// the differences of such sums (one request per bucket edge, when the
// view opens).
import { el, api, currentSession } from './app.js';
import { barChart } from './util.js';

const hour = 3600 * 1000;
// ranges: how many buckets of how many hours, and how a bucket is named.
const ranges = {
  '24h': [24, 1, (t) => `${t.toISOString().slice(11, 13)}h`],
  '7d': [7, 24, (t) => t.toISOString().slice(5, 10)],
};

export function usageView(main) {
  const pick = el('select', { id: 'range' }, ...Object.keys(ranges).map((r) => el('option', { value: r }, `last ${r}`)));
  const out = el('div', { class: 'usage' });
  const quotas = el('div');
  main.append(el('h1', {}, 'Usage and quotas'), el('label', { for: 'range' }, 'Range '), pick, out, quotas);
  const load = async () => {
    const [n, hours, name] = ranges[pick.value];
    // The last bucket ends with the current hour; its end is in the future,
    // whose sum is nothing.
    const end = Math.floor(Date.now() / hour) * hour + hour;
    const edges = Array.from({ length: n + 1 }, (_, i) => new Date(end - (n - i) * hours * hour));
    const sums = await Promise.all(edges.map((t) => api('GET', `/v1/usage?since=${encodeURIComponent(t.toISOString())}&by=tenant`)));
    const byTenant = new Map();
    sums.forEach((rows, i) => {
      for (const u of rows) {
        if (!byTenant.has(u.tenant)) byTenant.set(u.tenant, Array.from({ length: n + 1 }, () => ({ sandbox_seconds: 0, cpu_seconds: 0, memory_gib_seconds: 0 })));
        byTenant.get(u.tenant)[i] = u;
      }
    });
    out.replaceChildren(...[...byTenant].map(([t, s]) => {
      const bucket = (k) => s.slice(0, n).map((u, i) => ({ label: name(edges[i]), value: Math.max(0, u[k] - s[i + 1][k]) }));
      return el('section', { class: 'tenant' }, el('h2', {}, t || '(admin)'),
        el('figure', {}, barChart(`${t || 'admin'}: sandbox seconds per bucket`, bucket('sandbox_seconds'), { fmt: (v) => `${v.toFixed(0)} s` }), el('figcaption', {}, `sandbox-seconds: ${s[0].sandbox_seconds.toFixed(0)} in the range`)),
        el('figure', {}, barChart(`${t || 'admin'}: CPU seconds per bucket`, bucket('cpu_seconds'), { fmt: (v) => `${v.toFixed(1)} s` }), el('figcaption', {}, `CPU-seconds: ${s[0].cpu_seconds.toFixed(1)} in the range`)));
    }));
    if (!out.children.length) out.append(el('p', {}, 'No usage in this range.'));
    // Quotas are the admin's to read and set (GET /v1/tenants).
    if (currentSession().admin) {
      try {
        const ts = await api('GET', '/v1/tenants');
        quotas.replaceChildren(el('h2', {}, 'Quotas'), el('table', { class: 'list' },
          el('thead', {}, el('tr', {}, ...['Tenant', 'Quota'].map((h) => el('th', { scope: 'col' }, h)))),
          el('tbody', {}, ...ts.map((t) => el('tr', {}, el('td', {}, t.name), el('td', { class: 'mono' }, JSON.stringify(t.quota)))))));
      } catch (e) { quotas.replaceChildren(el('p', {}, `Quotas: ${e.message}`)); }
    }
    main.dataset.loaded = String(Date.now());
  };
  pick.addEventListener('change', load);
  load().catch((e) => out.replaceChildren(el('p', {}, e.message)));
  return () => {};
}
