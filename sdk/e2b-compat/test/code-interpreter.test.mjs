// The official @e2b/code-interpreter, unmodified, against smolvm serve:
// its default template (code-interpreter-v1) starts smolvm's kernel
// server (server/e2b/kernel/kernel.py) inside the sandbox, which the SDK
// reaches on port 49999 through E2B_SANDBOX_URL.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, NotFoundError, TimeoutError } from '@e2b/code-interpreter'

const created = []
after(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})))
})

async function newSandbox() {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  created.push(sbx)
  return sbx
}

test('runCode: output callbacks, the main result, JSON, errors, state', async () => {
  const sbx = await newSandbox()
  const out = []
  const err = []
  const ex = await sbx.runCode('x = 41\nprint("hello")\nimport sys\nprint("oops", file=sys.stderr)\nx + 1', {
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => err.push(m.line),
  })
  assert.equal(ex.error, undefined)
  assert.equal(ex.text, '42')
  assert.deepEqual(out, ['hello\n'])
  assert.deepEqual(err, ['oops\n'])
  assert.deepEqual(ex.logs, { stdout: ['hello\n'], stderr: ['oops\n'] })
  assert.equal(ex.results.length, 1)
  assert.equal(ex.results[0].isMainResult, true)
  assert.equal(ex.executionCount, 1)

  assert.equal((await sbx.runCode('x * 2')).text, '82', 'state persists between cells')
  assert.equal((await sbx.runCode('"a string"')).text, 'a string')
  assert.equal((await sbx.runCode('y = 1')).results.length, 0, 'a statement has no result')

  const j = await sbx.runCode('class J:\n    def _repr_json_(self):\n        return {"a": [1, 2]}\n    def _repr_html_(self):\n        return "<b>J</b>"\nJ()')
  assert.deepEqual(j.results[0].json, { a: [1, 2] })
  assert.equal(j.results[0].html, '<b>J</b>')
  assert.deepEqual(j.results[0].formats(), ['html', 'json'])

  const e = await sbx.runCode('def f():\n    raise ValueError("bad value")\nprint("before")\nf()')
  assert.equal(e.error.name, 'ValueError')
  assert.equal(e.error.value, 'bad value')
  assert.match(e.error.traceback, /line 2, in f/)
  assert.deepEqual(e.logs.stdout, ['before\n'])
  const syntax = await sbx.runCode('def (')
  assert.equal(syntax.error.name, 'SyntaxError')

  const hasPlot = (await sbx.runCode('import importlib.util\nimportlib.util.find_spec("matplotlib") is not None')).text === 'True'
  assert.ok(hasPlot || !process.env.CI, 'CI has matplotlib (scripts/test.sh installs it)')
  if (hasPlot) {
    const p = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
    assert.ok(p.results.some((r) => r.png && Buffer.from(r.png, 'base64').subarray(1, 4).toString() === 'PNG'), 'a PNG figure')
  }
  const env = await sbx.runCode('import os\nos.environ["CI_VAR"]', { envs: { CI_VAR: 'per cell' } })
  assert.equal(env.text, 'per cell')
  assert.equal((await sbx.runCode('os.environ.get("CI_VAR")')).results.length, 0, 'envs last one cell')
})

test('contexts: separate state, cwd, list, restart, remove', async () => {
  const sbx = await newSandbox()
  const c1 = await sbx.createCodeContext()
  const c2 = await sbx.createCodeContext({ cwd: '/tmp', language: 'python' })
  assert.equal(c1.language, 'python')
  assert.equal(c2.cwd, '/tmp')
  await sbx.runCode('y = "one"', { context: c1 })
  await sbx.runCode('y = "two"', { context: c2 })
  assert.equal((await sbx.runCode('y', { context: c1 })).text, 'one')
  assert.equal((await sbx.runCode('y', { context: c2 })).text, 'two')
  assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: c2 })).text, '/tmp')
  assert.equal((await sbx.runCode('y')).error?.name, 'NameError', 'the default context is separate')
  const ids = (await sbx.listCodeContexts()).map((c) => c.id)
  assert.ok(ids.includes(c1.id) && ids.includes(c2.id), JSON.stringify(ids))

  await sbx.restartCodeContext(c1)
  assert.equal((await sbx.runCode('y', { context: c1 })).error?.name, 'NameError', 'a restart clears the state')
  await sbx.removeCodeContext(c2.id)
  // The SDK leaves its request timer running when runCode fails before the
  // body (2.8.0): a short one keeps node from waiting 60 s at the end.
  await assert.rejects(sbx.runCode('y', { context: c2, requestTimeoutMs: 2000 }), NotFoundError)
  await assert.rejects(sbx.removeCodeContext(c2.id), NotFoundError)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === c2.id))
})

test('timeouts interrupt the running cell, and the context goes on', async () => {
  const sbx = await newSandbox()
  await sbx.runCode('kept = "still here"')
  await assert.rejects(sbx.runCode('import time\nwhile True:\n    time.sleep(0.01)', { timeoutMs: 1000 }), TimeoutError)
  const next = await sbx.runCode('kept')
  assert.equal(next.text, 'still here', 'the next cell runs: the endless one was interrupted')
  await assert.rejects(sbx.runCode('time.sleep(60)', { timeoutMs: 500 }), TimeoutError)
  assert.equal((await sbx.runCode('1 + 1')).text, '2')
})

test('fork copies the live interpreter: state in every copy, changes apart', async () => {
  const sbx = await newSandbox()
  await sbx.runCode('data = list(range(1000))\nmarker = "before fork"')
  const forks = await sbx.fork({ count: 2 })
  for (const f of forks) {
    assert.ok(!(f instanceof Error), `fork failed: ${f}`)
    created.push(f)
    assert.equal((await f.runCode('marker, len(data)')).text, "('before fork', 1000)")
  }
  await forks[0].runCode('marker = "changed in copy 0"')
  assert.equal((await forks[0].runCode('marker')).text, 'changed in copy 0')
  assert.equal((await forks[1].runCode('marker')).text, 'before fork', 'copies are independent')
  assert.equal((await sbx.runCode('marker')).text, 'before fork', 'the source is untouched')

  // A dead sandbox: runCode fails at once, in E2B's terms.
  await forks[1].kill()
  await assert.rejects(forks[1].runCode('marker', { requestTimeoutMs: 5000 }), (e) => e instanceof NotFoundError && e.message.includes(forks[1].sandboxId))
})

test('js contexts: state persists within one, results, errors; an unknown language is refused', async () => {
  const sbx = await newSandbox()
  const js = await sbx.createCodeContext({ language: 'js' })
  assert.equal(js.language, 'javascript')
  const out = []
  const ex = await sbx.runCode('let n = 40\nconsole.log("hi", { a: 1 })\nn + 2', { context: js, onStdout: (m) => out.push(m.line) })
  assert.equal(ex.error, undefined)
  assert.equal(ex.text, '42')
  assert.deepEqual(out, ['hi { a: 1 }\n'])
  assert.equal((await sbx.runCode('n += 1; n', { context: js })).text, '41', 'state persists within the context')
  assert.equal((await sbx.runCode('Promise.resolve("awaited")', { context: js })).text, 'awaited')
  const e = await sbx.runCode('function f() { throw new TypeError("bad " + n) }\nf()', { context: js })
  assert.equal(e.error.name, 'TypeError')
  assert.equal(e.error.value, 'bad 41')
  assert.match(e.error.traceback, /at f \(<cell \d+>:1:/)
  await assert.rejects(sbx.runCode('while (true) {}', { context: js, timeoutMs: 1000 }), TimeoutError)
  assert.equal((await sbx.runCode('n', { context: js })).text, '41', 'an interrupted cell leaves the context alive')

  // runCode(code, {language}) runs in that language's default context.
  await sbx.runCode('var viaLanguage = "kept"', { language: 'js' })
  assert.equal((await sbx.runCode('viaLanguage', { language: 'javascript' })).text, 'kept')
  assert.equal((await sbx.runCode('n', { language: 'js' })).error?.name, 'ReferenceError', 'contexts are separate')
  assert.equal((await sbx.runCode('1 + 1')).text, '2', 'python stays the default')

  await assert.rejects(sbx.runCode('1', { language: 'cobol', requestTimeoutMs: 5000 }), /400/)
  await assert.rejects(sbx.createCodeContext({ language: 'cobol' }), /400/)
  // The body is E2B's error shape, saying what is served.
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/execute`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-API-KEY': process.env.E2B_API_KEY },
    body: JSON.stringify({ code: '1', language: 'cobol' }),
  })
  assert.equal(res.status, 400)
  const body = await res.json()
  assert.equal(body.code, 400)
  assert.match(body.message, /language "cobol" is not supported: use python, bash, or js or typescript/)
})

test('js top-level await keeps its declarations; bash contexts keep their shell; typescript needs node to strip types', async () => {
  const sbx = await newSandbox()
  const js = await sbx.createCodeContext({ language: 'js' })
  const ex = await sbx.runCode('const r = await new Promise((ok) => setTimeout(() => ok(41), 10))\nr + 1', { context: js })
  assert.equal(ex.error, undefined)
  assert.equal(ex.text, '42')
  assert.equal((await sbx.runCode('r * 2', { context: js })).text, '82', 'a declaration after await stays global')
  assert.equal((await sbx.runCode('await (', { context: js })).error?.name, 'SyntaxError')

  const bash = await sbx.createCodeContext({ language: 'bash', cwd: '/tmp' })
  assert.equal(bash.language, 'bash')
  const out = []
  const err = []
  const b = await sbx.runCode('x=5; cd /; echo "x=$x"; echo warn >&2; printf "no newline"', {
    context: bash, onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line),
  })
  assert.equal(b.error, undefined)
  assert.equal(out.join(''), 'x=5\nno newline')
  assert.deepEqual(err, ['warn\n'])
  assert.deepEqual((await sbx.runCode('echo "$x $PWD"', { context: bash })).logs.stdout, ['5 /\n'], 'variables and cwd persist')
  const failed = await sbx.runCode('false', { context: bash })
  assert.equal(failed.error?.value, '1', 'a failing status is the error, as bash_kernel reports it')
  const env = await sbx.runCode('echo "[$GREETING]"', { context: bash, envs: { GREETING: 'hi there' } })
  assert.deepEqual(env.logs.stdout, ['[hi there]\n'])
  assert.deepEqual((await sbx.runCode('echo "[$GREETING]"', { context: bash })).logs.stdout, ['[]\n'], 'envs last one cell')
  await assert.rejects(sbx.runCode('sleep 30', { context: bash, timeoutMs: 1000 }), TimeoutError)
  assert.deepEqual((await sbx.runCode('echo $x', { context: bash })).logs.stdout, ['5\n'], 'an interrupted cell leaves the shell')
  assert.equal((await sbx.runCode('exit 3', { context: bash })).error?.name, 'ContextRestarting')
  assert.deepEqual((await sbx.runCode('echo alive', { language: 'bash' })).logs.stdout, ['alive\n'])

  // TypeScript runs through node's own type stripping, where node has it.
  const node = await sbx.commands.run(`node -e "process.stdout.write(typeof require('node:module').stripTypeScriptTypes)"`)
  if (node.stdout === 'function') {
    assert.equal((await sbx.runCode('const t: number = 41; t + 1', { language: 'typescript' })).text, '42')
  } else {
    await assert.rejects(sbx.runCode('1', { language: 'ts', requestTimeoutMs: 5000 }), /400/)
  }
})
