// Drives smolvm serve's web console in Debian's Chromium: every view with
// the real data the Go test made, each action and its effect, a tenant
// held to its own objects, actions refused without the CSRF token, no
// console errors, an axe-core check of each view, and screenshots.
// Usage: node console.mjs CONFIG.json; prints a JSON report as its last
// line (go test ./server/console runs it; see console_test.go).
// CONFIG: {url, admin, tenant: {key, own, other}, running, stopped, shots,
// run, fanout, memory, mode: "views" | "bench", n}
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const report = { errors: [], checks: [], axe: {}, figures: {} };
const browser = await chromium.launch({ executablePath: cfg.chromium || '/usr/bin/chromium', args: ['--no-sandbox'], timeout: 120000 });

// check records what was looked at and whether it held; the Go test
// fails on any that did not.
function check(name, ok, detail = '') {
  report.checks.push({ name, ok: !!ok, detail: String(detail) });
}

// api calls the native API with a key, as a second client would.
async function api(method, path, key, body) {
  const r = await fetch(cfg.url + path, { method, headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.status === 204 ? null : r.json();
}

async function newPage(name) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  page.setDefaultTimeout(60000);
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') report.errors.push(`${name}: console ${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => report.errors.push(`${name}: page error: ${e.message}`));
  return page;
}

async function axe(page, view) {
  await page.evaluate(axeSource);
  const r = await page.evaluate(() => globalThis.axe.run(document, { resultTypes: ['violations'] }));
  report.axe[view] = r.violations.map((v) => `${v.id} (${v.impact}): ${v.nodes.length} nodes, e.g. ${v.nodes[0]?.target}`);
}

async function shot(page, name) {
  if (cfg.shots) await page.screenshot({ path: `${cfg.shots}/${name}.png`, fullPage: false });
}

async function signIn(page, key) {
  await page.goto(`${cfg.url}/ui/`);
  await page.getByLabel(/API key/).fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('nav').waitFor({ state: 'visible' });
}

// row is the sandbox list's row of sandbox id.
const row = (page, id) => page.locator(`tr[data-id="${id}"]`);

async function views() {
  const page = await newPage('admin');
  // First load: what the browser fetched, compressed, and when the
  // sign-in form could be used.
  const t0 = Date.now();
  await page.goto(`${cfg.url}/ui/`);
  await page.getByLabel(/API key/).waitFor();
  report.figures.signin_interactive_ms = Date.now() - t0;
  report.figures.first_load_bytes = await page.evaluate(() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')).reduce((n, e) => n + e.transferSize, 0));
  await axe(page, 'signin');
  await shot(page, 'signin');

  // A wrong key is refused on the page, and no cookie is set.
  await page.getByLabel(/API key/).fill('not-a-key');
  const refused = page.waitForResponse((r) => r.url().endsWith('/ui/session') && r.request().method() === 'POST');
  await page.getByRole('button', { name: 'Sign in' }).click();
  check('wrong key refused', (await refused).status() === 401 && (await page.getByRole('alert').textContent()).includes('not a valid API key'));
  report.errors = report.errors.filter((e) => !e.includes('401')); // that refusal's own log line

  await page.getByLabel(/API key/).fill(cfg.admin);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await row(page, cfg.running).waitFor();
  const cookie = (await page.context().cookies()).find((c) => c.name === 'smolvm_session');
  check('session cookie HttpOnly, SameSite=Strict', cookie && cookie.httpOnly && cookie.sameSite === 'Strict', JSON.stringify(cookie));
  check('admin sees the tenant\'s sandbox', await row(page, cfg.tenant.own).count() === 1);
  // Rows on screen sample their running sandbox's CPU and memory.
  await row(page, cfg.running).locator('.usage .spark').waitFor();
  check('CPU and memory in the list', /CPU [0-9.]+%/.test(await row(page, cfg.running).locator('.usage').textContent()));
  await axe(page, 'sandboxes');
  await shot(page, 'sandboxes');

  // Live: a stop made through the API shows in the open list.
  await api('POST', `/v1/sandboxes/${cfg.stopped}/stop`, cfg.admin, {});
  await page.locator(`tr[data-id="${cfg.stopped}"][data-state="stopped"]`).waitFor();
  check('live update of a stop made elsewhere', true);

  // Actions from the list: pause, resume, fork (a new row appears).
  await row(page, cfg.running).getByRole('button', { name: /^Pause/ }).click();
  await page.locator(`tr[data-id="${cfg.running}"][data-state="paused"]`).waitFor();
  await row(page, cfg.running).getByRole('button', { name: /^Resume/ }).click();
  await page.locator(`tr[data-id="${cfg.running}"][data-state="running"]`).waitFor();
  const rowsBefore = await page.locator('tbody tr').count();
  await row(page, cfg.running).getByRole('button', { name: /^Fork/ }).click();
  await page.waitForFunction((n) => document.querySelectorAll('tbody tr').length === n + 1, rowsBefore);
  check('pause, resume, fork from the list', true);
  await row(page, cfg.running).getByRole('button', { name: /^Checkpoint/ }).click();
  await page.getByText(/checkpoint .*: done/).waitFor();

  // One sandbox's page: details, stats, logs and a shell in the terminal.
  await row(page, cfg.running).getByRole('link').click();
  await page.getByRole('heading', { name: /^Sandbox / }).waitFor();
  await page.locator('.logs').filter({ hasText: cfg.logLine }).waitFor();
  await page.locator('svg.chart').first().waitFor();
  await page.getByRole('button', { name: 'Open a shell' }).click();
  await page.getByText('connected', { exact: true }).waitFor();
  await page.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type('echo hi-$((40+2))\n');
  await page.locator('.xterm-rows').filter({ hasText: 'hi-42' }).waitFor();
  check('a shell in the terminal', true);
  await axe(page, 'sandbox');
  await shot(page, 'sandbox');

  // Snapshots: the lineage graph, with the checkpoint just taken; a
  // restore from the node adds a sandbox under it.
  await page.getByRole('link', { name: 'Snapshots' }).click();
  const snapNode = page.locator('.graph .node.snapshot').first();
  await snapNode.waitFor();
  const kidsBefore = await page.locator('.graph .node.sandbox').count();
  await snapNode.click();
  await page.locator('.panel').getByRole('button', { name: 'Restore' }).click();
  await page.waitForFunction((n) => document.querySelectorAll('.graph .node.sandbox').length > n, kidsBefore);
  check('restore from the lineage graph', true);
  await axe(page, 'snapshots');
  await shot(page, 'snapshots');

  for (const [view, ready] of [['runs', 'h1'], ['usage', 'section.tenant, .usage p']]) {
    await page.getByRole('link', { name: view === 'runs' ? 'Agent runs' : 'Usage' }).click();
    await page.locator(`main[data-loaded] ${ready}`).first().waitFor();
    if (view === 'usage') {
      const bars = await page.locator('section.tenant rect.bar').evaluateAll((rs) => rs.filter((r) => Number(r.getAttribute('height')) > 0).length);
      check('usage charts have bars', bars > 0, bars);
    }
    await axe(page, view);
    await shot(page, view);
  }
  if (cfg.fanout) {
    // A real fan-out: three branches (two green, one red), a merge queue
    // that met a conflict and had it resolved, the integration's CI.
    await page.getByRole('link', { name: 'Branches' }).click();
    const fr = page.locator(`tr[data-id="${cfg.fanout}"]`);
    await fr.waitFor();
    check('fan-out listed with its branches\' CI', (await fr.textContent()).includes('2 of 3 green'), await fr.textContent());
    await axe(page, 'branches list');
    await fr.getByRole('link').click();
    await page.locator('ol.queue li.step').first().waitFor();
    const states = await page.locator('tbody tr').evaluateAll((rs) => rs.map((r) => r.dataset.state));
    check('branches with their CI result', states.join() === 'passed,passed,red', states);
    const kinds = await page.locator('ol.queue li.step').evaluateAll((ls) => ls.map((l) => l.dataset.kind));
    check('the merge queue: conflict, resolution, merges, in order', ['conflict', 'resolve', 'merged'].every((k) => kinds.includes(k)) &&
      kinds.indexOf('conflict') < kinds.indexOf('resolve') && kinds.at(-1) === 'done', kinds);
    const ci = await page.locator('.integration-ci').textContent();
    check('the integration branch\'s CI', /^\d+ passed, 0 failed/.test(ci), ci);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.locator('ol.queue li.step').first().waitFor();
    await axe(page, 'branches');
    await shot(page, 'branches');
    await page.getByRole('heading', { name: 'Merge queue' }).evaluate((h) => h.scrollIntoView());
    await shot(page, 'merge-queue');
  }

  if (cfg.run) {
    await page.goto(`${cfg.url}/ui/runs/${cfg.run}`);
    await page.locator('ol.timeline li.it').first().waitFor();
    const its = await page.locator('ol.timeline li.it').count();
    check('agent run timeline', its >= 2, its);
    await axe(page, 'run');
    await shot(page, 'run');
    // Resumed from its base, the run's agent fixes add again in a new
    // iteration from 0; the run's events redraw the page, whose resume
    // buttons come back once it has ended.
    await page.locator('ol.timeline li.it[data-n="0"]').getByRole('button', { name: /^Resume the run/ }).click();
    const next = page.locator(`ol.timeline li.it[data-n="${its}"]`);
    await next.filter({ hasText: 'from 0' }).waitFor({ timeout: 180000 });
    await next.locator('button[data-action="resume-iteration"]').waitFor({ timeout: 180000 });
    const st = await page.locator('dl.info dd').first().textContent();
    check('resume from an iteration', st.startsWith('resolved'), st);
  }

  if (cfg.memory) {
    // The Go test changed the code under the facts' anchor: an accepted
    // proposal is checked at once, and verify makes the valid fact stale.
    const { repo, proposed, valid } = cfg.memory;
    const fact = (id) => page.locator(`article.fact[data-id="${id}"]`);
    await page.goto(`${cfg.url}/ui/memory?repo=${encodeURIComponent(repo)}`);
    await fact(proposed).waitFor();
    check('memory facts listed', await page.locator('article.fact').count() === 2);
    await fact(proposed).getByRole('button', { name: 'Accept' }).click();
    await page.locator(`article.fact[data-id="${proposed}"]:not(.proposed)`).waitFor();
    await page.getByRole('button', { name: 'Verify against the working tree' }).click();
    await page.locator(`article.fact.stale[data-id="${valid}"] .anchors .drift`).waitFor();
    check('verify shows what the change made stale', (await page.locator('.changes').textContent()).includes(valid));
    await fact(valid).getByRole('button', { name: 'Correct' }).click();
    await fact(valid).getByLabel('Corrected text').fill('add subtracts now');
    await fact(valid).getByRole('button', { name: 'Save' }).click();
    await fact(valid).locator('.text', { hasText: 'add subtracts now' }).waitFor();
    check('a correction is in the history', (await fact(valid).locator('.history').textContent()).includes('human:admin: edit'));
    await axe(page, 'memory');
    await shot(page, 'memory');
    await fact(valid).getByRole('button', { name: 'Retire' }).click();
    await fact(valid).getByLabel('Why retire it').fill('calc.js changed its mind');
    await fact(valid).getByRole('button', { name: 'Retire' }).click();
    await fact(valid).waitFor({ state: 'detached' });
    await page.getByLabel('Show').selectOption('forgotten');
    await fact(valid).waitFor();
    check('accept, verify, correct and retire facts', true);
  }

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel(/API key/).waitFor();
  const after = await page.evaluate(async () => (await fetch('/v1/sandboxes')).status);
  check('signed out: the API refuses the old cookie', after === 401, after);
  report.errors = report.errors.filter((e) => !e.includes('401'));
  await page.context().close();
}

async function tenantViews() {
  const page = await newPage('tenant');
  await signIn(page, cfg.tenant.key);
  await row(page, cfg.tenant.own).waitFor();
  check('tenant sees only its own sandboxes', await page.locator('tbody tr').count() === cfg.tenant.count, await page.locator('tbody tr').count());
  check('tenant does not see the other\'s', await row(page, cfg.tenant.other).count() === 0);
  // Through the console's own pages and its credential, the other
  // tenant's sandbox is missing, and actions without the token refused.
  const probes = await page.evaluate(async ({ other, own, fanout }) => {
    const s = await (await fetch('/ui/session')).json();
    const st = async (m, p, h = {}) => (await fetch(p, { method: m, headers: { 'Content-Type': 'application/json', ...h }, body: m === 'GET' ? undefined : '{}' })).status;
    return {
      get: await st('GET', `/v1/sandboxes/${other}`),
      stopOther: await st('POST', `/v1/sandboxes/${other}/stop`, { 'X-CSRF-Token': s.csrf }),
      stopNoToken: await st('POST', `/v1/sandboxes/${own}/stop`),
      stopBadToken: await st('POST', `/v1/sandboxes/${own}/stop`, { 'X-CSRF-Token': 'x' }),
      fanouts: await st('GET', '/v1/agent/branches'),
      fanout: await st('GET', `/v1/agent/branches/${fanout}`),
    };
  }, { ...cfg.tenant, fanout: cfg.fanout });
  check('other tenant\'s sandbox missing', probes.get === 404 && probes.stopOther === 404, JSON.stringify(probes));
  check('branch runs refused to a tenant', probes.fanouts === 403 && probes.fanout === 403, JSON.stringify(probes));
  check('actions without the CSRF token refused', probes.stopNoToken === 403 && probes.stopBadToken === 403, JSON.stringify(probes));
  report.errors = report.errors.filter((e) => !/40[34]/.test(e));
  await page.goto(`${cfg.url}/ui/sandboxes/${cfg.tenant.other}`);
  await page.getByRole('heading', { name: /no such sandbox/ }).waitFor();
  report.errors = report.errors.filter((e) => !e.includes('404'));
  check('other tenant\'s sandbox page answers missing', true);
  await shot(page, 'tenant');
  // The other views, as the tenant: none of the admin's snapshots, and
  // the admin's views say so without asking the API.
  await page.getByRole('link', { name: 'Snapshots' }).click();
  await page.locator('main[data-loaded] .graph p').waitFor();
  check('tenant sees none of the admin\'s snapshots', (await page.locator('.graph').textContent()).includes('No snapshots'));
  for (const [link, text] of [['Agent runs', 'admin\'s'], ['Branches', 'admin\'s'], ['Memory', 'admin\'s'], ['Usage', 'Usage']]) {
    await page.getByRole('link', { name: link }).click();
    await page.getByText(text).first().waitFor();
    await axe(page, `tenant ${link}`);
  }
  await page.context().close();
}

// bench: the sandbox list with many sandboxes, n times: from sign-in to
// every row drawn, and from an API stop to the row showing it.
async function bench() {
  const page = await newPage('bench');
  report.figures.render_ms = [];
  report.figures.update_ms = [];
  await signIn(page, cfg.admin);
  for (let i = 0; i < cfg.n; i++) {
    const t0 = Date.now();
    await page.goto(`${cfg.url}/ui/sandboxes`);
    await page.waitForFunction((n) => document.querySelectorAll('tbody tr').length >= n, cfg.count, { polling: 'raf' });
    report.figures.render_ms.push(Date.now() - t0);
    if (i === 0) {
      // The first load of the list: every byte fetched (compressed where
      // served so), the list's JSON among them, and when the DOM was
      // interactive.
      Object.assign(report.figures, await page.evaluate(() => {
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        return {
          list_load_bytes: [nav, ...res].reduce((n, e) => n + e.transferSize, 0),
          list_json_bytes: res.filter((e) => e.name.endsWith('/v1/sandboxes')).reduce((n, e) => n + e.transferSize, 0),
          dom_interactive_ms: nav.domInteractive,
        };
      }));
    }
    // From the API's answer, as the Go side measures the event's arrival.
    await api('POST', `/v1/sandboxes/${cfg.id}/${i % 2 ? 'resume' : 'pause'}`, cfg.admin);
    const t1 = Date.now();
    // Checked at every frame: a locator's wait polls every 500 ms after a while.
    await page.waitForFunction(([id, state]) => document.querySelector(`tr[data-id="${id}"]`)?.dataset.state === state, [cfg.id, i % 2 ? 'running' : 'paused'], { polling: 'raf' });
    report.figures.update_ms.push(Date.now() - t1);
  }
  await page.context().close();
}

try {
  if (cfg.mode === 'bench') await bench();
  else {
    await views();
    await tenantViews();
  }
} catch (e) {
  check('script ran to the end', false, e.stack);
} finally {
  await browser.close();
  console.log(JSON.stringify(report));
}
