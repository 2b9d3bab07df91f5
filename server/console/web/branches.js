// Branches: the fan-outs of smolvm branch, and one fan-out's branches
// (each one's CI result and change), its merge queue's steps in order
// (the ranking, conflicts and how they were resolved, CI after each
// merge) and the integration branch with its CI. A fan-out runs in the
// smolvm branch command, which sends no events to this server: the view
// loads when opened and on Refresh, and polls nothing.
import { el, api, currentSession } from './app.js';
import { ago, short, span } from './util.js';

export function branchesView(main, [id]) {
  return id ? fanoutPage(main, id) : fanoutList(main);
}

const tests = (t) => (t ? `${t.passed} passed, ${t.failed} failed${t.skipped ? `, ${t.skipped} skipped` : ''}` : '—');
const state = (s) => el('span', { class: `state ${s}` }, s);
const table = (label, heads, body) => el('table', { class: 'list', 'aria-label': label },
  el('thead', {}, el('tr', {}, ...heads.map((h) => el('th', { scope: 'col' }, h)))), body);

// refreshing adds a heading with a Refresh button to main, and calls
// load now and on each click; what load returns (or its error) is the
// note under the heading.
function refreshing(main, heading, load) {
  const note = el('p');
  const run = () => load().then((msg) => { note.textContent = msg || ''; main.dataset.loaded = String(Date.now()); }, (e) => { note.textContent = e.message; });
  main.append(el('div', { class: 'titlebar' }, heading, el('button', { type: 'button', onclick: run }, 'Refresh')), note);
  run();
}

function fanoutList(main) {
  const body = el('tbody');
  refreshing(main, el('h1', {}, 'Branches'), async () => {
    if (!currentSession().admin) return 'Branch runs are the admin\'s: a fan-out works on a repository on the server\'s host.';
    const runs = await api('GET', '/v1/agent/branches');
    body.replaceChildren(...runs.map((r) => el('tr', { 'data-id': r.id },
      el('td', {}, el('a', { href: `/ui/branches/${encodeURIComponent(r.id)}` }, r.id)),
      el('td', {}, r.mode), el('td', {}, r.task || `${r.branches} sub-tasks`), el('td', {}, state(r.state)),
      el('td', {}, `${r.green} of ${r.branches} green`), el('td', { class: 'mono' }, r.integration || '—'),
      el('td', {}, r.repo), el('td', {}, `${ago(r.created)} ago`))));
    return runs.length ? '' : 'No fan-outs yet (smolvm branch fanout).';
  });
  main.append(table('Fan-outs', ['Run', 'Mode', 'Task', 'State', 'CI', 'Integration branch', 'Repository', 'Started'], body));
  return () => {};
}

// The integration branch's CI is that of the queue's last merge (split)
// or of the winner (best-of-N).
function integrationCI(steps) {
  return steps.findLast((s) => (s.kind === 'merged' || s.kind === 'winner') && s.tests);
}

function stepItem(s) {
  const what = s.branch ? `branch ${s.branch}` : 'the run';
  return el('li', { class: `step ${s.kind}`, 'data-kind': s.kind, 'data-branch': String(s.branch) },
    el('h3', {}, `${s.n}. ${s.kind} · ${what}`),
    s.note ? el('p', { class: 'note' }, s.note) : null,
    s.files?.length ? el('p', {}, 'conflicted: ', ...s.files.map((f) => el('code', {}, f, ' '))) : null,
    s.tests ? el('p', {}, `CI: ${tests(s.tests)}`, s.tests.failing?.length ? ` (failing: ${s.tests.failing.join(', ')})` : '') : null,
    s.commit ? el('p', { class: 'mono' }, `commit ${short(s.commit)}`) : null);
}

function fanoutPage(main, id) {
  const heading = el('h1', {}, `Fan-out ${id}`);
  const info = el('dl', { class: 'info' });
  const body = el('tbody');
  const queue = el('ol', { class: 'queue' });
  const integration = el('dl', { class: 'info' });
  const summary = el('pre', { class: 'logs', tabindex: '0' });
  main.append(el('p', {}, el('a', { href: '/ui/branches' }, '← Branches')));
  refreshing(main, heading, async () => {
    const { run: r, branches, steps } = await api('GET', `/v1/agent/branches/${encodeURIComponent(id)}`);
    heading.textContent = `Fan-out ${r.id} (${r.mode})`;
    const rows = [['State', state(r.state), r.reason ? ` ${r.reason}` : ''], ['Task', r.task || `${r.branches} sub-tasks, one per branch`],
      ['Repository', r.repo], ['Base', el('span', { class: 'mono' }, short(r.base))],
      ['CI', el('code', {}, r.ci.command), ` (${r.ci.source})`], ['CI steps not run', (r.ci.unsupported || []).join('; ') || 'none'],
      ['Set-up', r.setup ? el('code', {}, r.setup) : 'none', ` · once, in ${span(r.setup_elapsed)}, then forked`],
      ['Elapsed', span(r.elapsed)], ['Branches', `${r.green} of ${r.branches} green`]];
    info.replaceChildren(...rows.flatMap(([k, ...v]) => [el('dt', {}, k), el('dd', {}, ...v)]));
    body.replaceChildren(...branches.map((b) => el('tr', { 'data-k': String(b.k), 'data-state': b.state },
      el('td', { class: 'mono' }, b.name), el('td', {}, b.task), el('td', {}, b.agent), el('td', {}, state(b.state)),
      el('td', {}, b.tests ? tests(b.tests) : b.last ? `#${b.last.iteration} ${b.last.phase}: ${b.last.passed} passed, ${b.last.failed} failed` : '—'),
      el('td', {}, `${b.diff_lines} lines, ${b.iterations} iterations, ${b.interventions} refused`),
      el('td', {}, String(b.usage.input_tokens + b.usage.output_tokens)),
      el('td', {}, b.agent_run ? el('a', { href: `/ui/runs/${encodeURIComponent(b.agent_run)}` }, short(b.agent_run)) : '—'),
      el('td', {}, b.reason || ''))));
    queue.replaceChildren(...(steps.length ? steps.map(stepItem) : [el('li', {}, 'The merge queue has not run (smolvm branch merge).')]));
    const ci = integrationCI(steps);
    integration.replaceChildren(el('dt', {}, 'Branch'), el('dd', { class: 'mono' }, r.integration || 'not made yet'),
      el('dt', {}, 'CI'), el('dd', { class: 'integration-ci' }, ci ? `${tests(ci.tests)} (step ${ci.n}, ${ci.kind} branch ${ci.branch})` : '—'));
    summary.textContent = r.summary || 'No summary yet.';
  });
  main.append(info, el('h2', {}, 'Branches'),
    table('Branches', ['Branch', 'Task', 'Agent', 'State', 'CI', 'Change', 'Tokens', 'Agent run', 'Reason'], body),
    el('h2', {}, 'Merge queue'), queue, el('h2', {}, 'Integration branch'), integration, el('h2', {}, 'Summary'), summary);
  return () => {};
}
