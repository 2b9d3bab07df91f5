// Project memory (workflow/memory) of a repository on the server's host:
// facts with their anchors to code, state, author and audit history;
// accept or reject a proposal, confirm, correct or retire a fact, and
// verify them all against the working tree (what a change invalidated).
import { el, api, act, currentSession } from './app.js';
import { ago } from './util.js';

// The actions a fact in each state offers.
const actions = {
  proposed: [['accept', 'Accept'], ['reject', 'Reject']],
  stale: [['confirm', 'Confirm'], ['correct', 'Correct'], ['retire', 'Retire']],
  valid: [['correct', 'Correct'], ['retire', 'Retire']],
};

function anchor(a) {
  let s = a.path;
  if (a.start) s += `:${a.start}-${a.end}`;
  if (a.symbol) s += `#${a.symbol}`;
  return el('li', { class: a.drift ? 'drift' : '' }, el('code', {}, s), a.moved_to ? ` (moved to ${a.moved_to})` : '', a.drift ? ` — drifted: ${a.drift}` : '');
}

export function memoryView(main) {
  const repo = new URLSearchParams(location.search).get('repo') || '';
  const input = el('input', { id: 'repo', name: 'repo', type: 'text', value: repo, size: 60, placeholder: '/path/to/a/git/work/tree' });
  const filter = el('select', { id: 'state' }, ...['open', 'all', 'valid', 'stale', 'proposed', 'rejected', 'forgotten'].map((s) => el('option', { value: s }, s)));
  const changes = el('div', { class: 'changes', 'aria-live': 'polite' });
  const list = el('div', { class: 'facts' });
  const form = el('form', { class: 'repo' }, el('label', { for: 'repo' }, 'Repository '), input, el('button', { type: 'submit' }, 'Open'));
  main.append(el('h1', {}, 'Project memory'), form);
  if (!currentSession().admin) {
    main.append(el('p', {}, 'The project memory is the admin\'s: a repository is a path on the server\'s host.'));
    return () => {};
  }
  main.append(el('p', {}, el('label', { for: 'state' }, 'Show '), filter, ' ',
    el('button', { type: 'button', id: 'verify', onclick: () => verify() }, 'Verify against the working tree')), changes, list);
  let facts = [];

  const draw = () => {
    const want = filter.value;
    const shown = facts.filter((f) => want === 'all' || (want === 'open' ? !['rejected', 'forgotten'].includes(f.status) : f.status === want));
    list.replaceChildren(...shown.map(card));
    if (!shown.length) list.append(el('p', {}, repo ? 'No facts in this state.' : 'Name a repository.'));
  };
  const card = (f) => {
    const body = el('div', { class: 'actions' }, ...(actions[f.status] || []).map(([a, label]) =>
      el('button', { type: 'button', 'data-action': a, onclick: () => (a === 'correct' || a === 'retire' ? ask(f, body, a) : run(f, a)) }, label)));
    return el('article', { class: `fact ${f.status}`, 'data-id': f.id, 'aria-label': `fact ${f.id}` },
      el('h2', {}, el('span', { class: `state ${f.status}` }, f.status), ` ${f.kind} `, el('code', {}, f.id)),
      el('p', { class: 'text' }, f.text),
      el('p', { class: 'meta' }, `by ${f.author}, ${ago(f.created_at)} ago`, f.invalidated_reason ? ` · ${f.invalidated_reason}` : '', f.superseded_by ? ` · superseded by ${f.superseded_by}` : ''),
      f.anchors?.length ? el('ul', { class: 'anchors', 'aria-label': 'Anchors' }, ...f.anchors.map(anchor)) : null,
      el('details', {}, el('summary', {}, `History (${f.history.length})`),
        el('ol', { class: 'history' }, ...f.history.map((h) => el('li', {}, `${new Date(h.at).toISOString().slice(0, 16).replace('T', ' ')} ${h.by}: ${h.action}`, h.why ? ` — ${h.why}` : '')))),
      body);
  };
  const load = async () => {
    if (!repo) { draw(); return; }
    facts = await api('GET', `/v1/memory?repo=${encodeURIComponent(repo)}`);
    draw();
    main.dataset.loaded = String(Date.now());
  };
  const post = (body) => api('POST', '/v1/memory', { repo, ...body });
  const run = (f, action) => act(`${action} ${f.id}`, () => post({ fact: f.id, action })).then(load);
  // ask takes what a correction or a retirement needs (the new text; a
  // reason) in a form in place of the fact's buttons.
  const ask = (f, box, action) => {
    const text = el('textarea', { id: `text-${f.id}`, rows: 3, cols: 70 });
    text.value = f.text;
    const why = el('input', { id: `why-${f.id}`, type: 'text', size: 50, required: action === 'retire' });
    const form = el('form', { class: 'correct' },
      action === 'correct' ? [el('label', { for: `text-${f.id}` }, 'Corrected text'), text] : null,
      el('label', { for: `why-${f.id}` }, action === 'retire' ? 'Why retire it' : 'Why'), why,
      el('button', { type: 'submit' }, action === 'retire' ? 'Retire' : 'Save'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const body = { fact: f.id, action, why: why.value };
      if (action === 'correct') body.text = text.value;
      act(`${action} ${f.id}`, () => post(body)).then(load);
    });
    box.replaceChildren(form);
    (action === 'correct' ? text : why).focus();
  };
  const verify = () => act('verify', async () => {
    const ch = await api('POST', '/v1/memory/verify', { repo });
    changes.replaceChildren(el('h2', {}, 'What the working tree changed'),
      ch.length ? el('ul', {}, ...ch.map((c) => el('li', {}, el('code', {}, c.fact), ` became ${c.change}`, c.drift ? `: ${c.drift.join('; ')}` : ''))) : el('p', {}, 'Nothing: every fact holds.'));
    await load();
  });
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    history.pushState(null, '', `/ui/memory?repo=${encodeURIComponent(input.value.trim())}`);
    dispatchEvent(new PopStateEvent('popstate'));
  });
  filter.addEventListener('change', draw);
  load().catch((e) => list.replaceChildren(el('p', {}, e.message)));
  return () => {};
}
