// Agent runs: the list, and one run's timeline (base, iterations, flaky
// reruns, verdict), its tests per iteration as a chart, the guard's
// refusals, each iteration's diff, tokens and cost; live while it runs.
// An iteration's checkpoint opens in a sandbox, or the run resumes from it.
import { el, api, act, onEvent, currentSession } from './app.js';
import { ago, short, barChart } from './util.js';

export function runsView(main, [id]) {
  return id ? runPage(main, id) : runList(main);
}

// onRun calls fn, at most once a second, when an agent event comes for
// run id (any run when id is empty).
function onRun(id, fn) {
  let timer = null;
  const off = onEvent((e) => {
    if (e.type !== 'resync' && !(e.type?.startsWith('agent.') && (!id || e.id === id))) return;
    timer ??= setTimeout(() => { timer = null; fn(); }, 1000);
  });
  return () => { off(); clearTimeout(timer); };
}

function runList(main) {
  const body = el('tbody');
  const note = el('p');
  main.append(el('h1', {}, 'Agent runs'), note,
    el('table', { class: 'list' }, el('thead', {}, el('tr', {}, ...['Run', 'Task', 'Agent', 'State', 'Best', 'Tokens', 'Cost', 'Started'].map((h) => el('th', { scope: 'col' }, h)))), body));
  if (!currentSession().admin) {
    note.textContent = 'Agent runs are the admin\'s: a run works on a repository on the server\'s host.';
    return () => {};
  }
  const load = async () => {
    let runs;
    try {
      runs = await api('GET', '/v1/agent/runs');
    } catch (e) {
      note.textContent = e.message;
      return;
    }
    note.textContent = runs.length ? '' : 'No agent runs yet (smolvm agent run, or POST /v1/agent/runs).';
    body.replaceChildren(...runs.map((r) => el('tr', { 'data-id': r.id },
      el('td', {}, el('a', { href: `/ui/runs/${encodeURIComponent(r.id)}` }, short(r.id))),
      el('td', {}, r.task), el('td', {}, r.agent), el('td', {}, el('span', { class: `state ${r.state}` }, r.state)),
      el('td', {}, String(r.best)), el('td', {}, String(r.usage.input_tokens + r.usage.output_tokens)),
      el('td', {}, `$${r.usage.cost_usd.toFixed(4)}`), el('td', {}, `${ago(r.created)} ago`))));
    main.dataset.loaded = String(Date.now());
  };
  load();
  return onRun('', load);
}

// diffView renders a unified diff, each line classed by its kind.
function diffView(diff) {
  return el('pre', { class: 'diff', tabindex: '0' }, ...diff.split('\n').map((l) => {
    const cls = l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff ') ? 'file' : l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : '';
    return el('span', { class: cls }, `${l}\n`);
  }));
}

function runPage(main, id) {
  const head = el('h1', {}, `Run ${short(id)}`);
  const summary = el('dl', { class: 'info' });
  const chart = el('div', { class: 'charts' });
  const timeline = el('ol', { class: 'timeline' });
  main.append(el('p', {}, el('a', { href: '/ui/runs' }, '← Agent runs')), head, summary,
    el('h2', {}, 'Tests per iteration'), chart, el('h2', {}, 'Timeline'), timeline);
  const load = async () => {
    const { run: r, iterations: its } = await api('GET', `/v1/agent/runs/${encodeURIComponent(id)}`);
    head.textContent = `Run ${short(r.id)}: ${r.task}`;
    const rows = [['State', r.state + (r.reason ? ` (${r.reason})` : '')], ['Agent', r.agent], ['Repository', r.repo], ['Test command', r.test],
      ['Best iteration', String(r.best)], ['Tokens', `${r.usage.input_tokens} in, ${r.usage.output_tokens} out`], ['Cost', `$${r.usage.cost_usd.toFixed(4)}`],
      ['Elapsed', `${r.elapsed.toFixed(1)} s`], ['Flaky tests', (r.flaky || []).join(', ') || 'none'],
      ['Verdict', r.verdict ? `${r.verdict.passed} passed, ${r.verdict.failed} failed on the pristine tests` : '—'],
      ['Evidence', r.evidence ? `${r.evidence.verdict}${r.evidence.reason ? `: ${r.evidence.reason}` : ''}` : '—']];
    summary.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    const bars = its.flatMap((it) => [
      { label: `${it.n}✓`, value: it.tests?.passed ?? 0, cls: 'pass' },
      { label: `${it.n}✗`, value: it.tests?.failed ?? 0, cls: 'fail' }]);
    chart.replaceChildren(barChart('Tests passing (green) and failing (red) per iteration', bars));
    timeline.replaceChildren(...its.map((it) => {
      const kind = it.n === 0 ? 'base' : it.violations?.length ? 'rejected' : it.tests && it.tests.failed === 0 && it.tests.exit === 0 ? 'green' : 'red';
      const title = it.n === 0 ? 'Base' : `Iteration ${it.n} (from ${it.parent})`;
      return el('li', { class: `it ${kind}`, 'data-n': String(it.n) },
        el('h3', {}, `${title}${it.n === r.best ? ' — best' : ''}`),
        el('p', {}, it.tests ? `${it.tests.passed} passed, ${it.tests.failed} failed, ${it.tests.skipped} skipped` : 'refused by the guard',
          ` · ${it.usage.input_tokens + it.usage.output_tokens} tokens, $${it.usage.cost_usd.toFixed(4)}`, it.note ? ` · ${it.note}` : ''),
        it.flaky?.length ? el('p', { class: 'flaky' }, `flaky (passed on a rerun): ${it.flaky.join(', ')}`) : null,
        it.tests?.failing?.length ? el('p', {}, `failing: ${it.tests.failing.join(', ')}`) : null,
        it.violations?.length ? el('ul', { class: 'violations' }, ...it.violations.map((v) => el('li', {}, el('strong', {}, v.rule), ` ${v.path}: ${v.reason}`))) : null,
        it.snapshot ? el('p', { class: 'actions' },
          el('button', { type: 'button', 'data-action': 'restore-iteration', onclick: () => act(`restore iteration ${it.n}`, () => api('POST', `/v1/snapshots/${it.snapshot}/restore`, {})) }, 'Open this iteration in a sandbox'),
          // The run continues with its own agent; its events redraw the page.
          r.state === 'running' ? null : el('button', { type: 'button', 'data-action': 'resume-iteration', onclick: () => act(`resume from iteration ${it.n}`, () => api('POST', `/v1/agent/runs/${encodeURIComponent(r.id)}/resume`, { from: it.n })) }, `Resume the run from iteration ${it.n}`)) : null,
        it.diff ? el('details', {}, el('summary', {}, 'Diff'), diffView(it.diff)) : null);
    }));
    main.dataset.loaded = String(Date.now());
  };
  load().catch((e) => { head.textContent = e.message; });
  return onRun(id, () => load().catch(() => {}));
}
