// Scenarios run through the official, unmodified e2b SDK against smolvm.
// The Go test (e2b/compat_test.go) starts the server and sets E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY; run it rather than this file directly.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import {
  Sandbox,
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  NotFoundError,
  SandboxError,
  TimeoutError,
} from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  assert.ok(process.env[v], `${v} must be set (run through go test ./e2b)`)
}

// 'base' is the SDK's default template; smolvm maps it to its builtin image.
const template = process.env.SMOLVM_E2B_TEMPLATE ?? 'base'
const created = []

async function newSandbox(opts = {}, from = template) {
  const sbx = await Sandbox.create(from, { timeoutMs: 300_000, ...opts })
  created.push(sbx)
  return sbx
}

after(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})))
})

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// waitFor polls cond until it holds or ms pass.
async function waitFor(cond, ms, what) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await cond()) return
    await sleep(50)
  }
  assert.fail(`timed out waiting for ${what}`)
}

test('create, getInfo, list, connect, kill', async () => {
  const tag = `t${Date.now()}`
  const sbx = await newSandbox({ metadata: { suite: 'compat', tag }, envs: { GREETING: 'hi' } })
  assert.match(sbx.sandboxId, /^[0-9a-f]{12}$/)

  // create returned only once the sandbox answers: no polling needed.
  const r = await sbx.commands.run('echo $GREETING')
  assert.equal(r.stdout, 'hi\n')

  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.deepEqual(info.metadata, { suite: 'compat', tag })
  assert.equal(info.state, 'running')
  assert.ok(info.endAt > new Date(), 'endAt is in the future')

  const page = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  const none = await Sandbox.list({ query: { metadata: { tag: 'no-such-tag' } } }).nextItems()
  assert.equal(none.length, 0)

  const [metric] = await sbx.getMetrics()
  assert.ok(metric.memUsed > 0 && metric.memTotal === 1 << 30, JSON.stringify(metric))
  assert.equal(metric.cpuCount, 1)

  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await again.commands.run('echo connected')).stdout, 'connected\n')

  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill finds nothing')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError)
})

test('commands: streamed output, envs, cwd, exit codes', async () => {
  const sbx = await newSandbox()

  const chunks = []
  const started = Date.now()
  const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.4; done; echo oops >&2', {
    onStdout: (d) => chunks.push([Date.now() - started, d]),
    onStderr: (d) => chunks.push([Date.now() - started, 'ERR:' + d]),
  })
  const ended = Date.now() - started
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'line1\nline2\nline3\n')
  assert.equal(r.stderr, 'oops\n')
  // The command sleeps 1.2 s after printing line1: streamed output gets
  // here that long before the end, buffered output at the end.
  const first = chunks.find(([, d]) => d.includes('line1'))
  assert.ok(first && ended - first[0] >= 900, `line1 came ${first && ended - first[0]} ms before the end (${JSON.stringify(chunks)})`)
  assert.ok(chunks.some(([, d]) => d === 'ERR:oops\n'))

  const env = await sbx.commands.run('echo "$A-$B"; pwd', { envs: { A: 'x', B: 'y z' }, cwd: '/tmp' })
  assert.equal(env.stdout, 'x-y z\n/tmp\n')

  const err = await sbx.commands.run('echo partial; echo bad >&2; exit 3').catch((e) => e)
  assert.ok(err instanceof CommandExitError, `got ${err}`)
  assert.equal(err.exitCode, 3)
  // envd sends Wait's error, which the SDK makes the message.
  assert.equal(err.message, 'exit status 3')
  assert.equal(err.error, 'exit status 3')
  assert.equal(err.stdout, 'partial\n')
  assert.equal(err.stderr, 'bad\n')

  assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')

  const missing = await sbx.commands.run('no-such-command-here').catch((e) => e)
  assert.ok(missing instanceof CommandExitError)
  assert.equal(missing.exitCode, 127)
})

test('commands: background, sendStdin, list, kill, connect', async () => {
  const sbx = await newSandbox()
  let out = ''
  const h = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => (out += d) })
  assert.ok(h.pid > 0)
  await sbx.commands.sendStdin(h.pid, 'hello\n')
  await waitFor(() => out === 'hello\n', 5000, 'cat to echo stdin')

  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === h.pid && p.cmd === '/bin/bash'), JSON.stringify(procs))

  // A second client attaches to the running command by pid.
  let seen = ''
  const attached = await sbx.commands.connect(h.pid, { onStdout: (d) => (seen += d) })
  await h.sendStdin('again\n')
  await waitFor(() => seen === 'again\n', 5000, 'the attached client to see new output')

  assert.equal(await h.kill(), true)
  const res = await h.wait().catch((e) => e)
  assert.ok(res instanceof CommandExitError, `got ${res}`)
  assert.equal(res.message, 'signal: killed')
  await attached.wait().catch(() => {})
  await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 5000, 'the killed command to leave the list')
  assert.equal(await sbx.commands.kill(h.pid), false, 'killing a gone command says so')

  // closeStdin ends a reader.
  const wc = await sbx.commands.run('wc -c', { background: true, stdin: true })
  await wc.sendStdin('12345')
  await wc.closeStdin()
  assert.equal((await wc.wait()).stdout.trim(), '5')
})

test('commands: timeouts, and a client that leaves', async () => {
  const sbx = await newSandbox()
  const t0 = Date.now()
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), TimeoutError)
  assert.ok(Date.now() - t0 < 10_000)
  // The command's own timeout ends it in the sandbox, not just the call.
  await waitFor(async () => (await sbx.commands.list()).length === 0, 5000, 'the timed-out command to end')

  // envd's rule: a command outlives a client that disconnects, until it
  // ends or its timeout passes.
  const h = await sbx.commands.run('sleep 1; echo done > /tmp/marker', { background: true })
  await h.disconnect()
  await waitFor(async () => await sbx.files.exists('/tmp/marker'), 10_000, 'the disconnected command to finish')
  assert.equal(await sbx.files.read('/tmp/marker'), 'done\n')
})

test('files: write, read, list, exists, makeDir, rename, remove', async () => {
  const sbx = await newSandbox()
  const info = await sbx.files.write('/work/deep/a.txt', 'alpha')
  assert.equal(info.path, '/work/deep/a.txt')
  assert.equal(await sbx.files.read('/work/deep/a.txt'), 'alpha')
  assert.equal((await sbx.commands.run('cat /work/deep/a.txt')).stdout, 'alpha')

  const bytes = new Uint8Array([0, 1, 2, 255])
  await sbx.files.write('/work/bin.dat', bytes.buffer)
  assert.deepEqual(await sbx.files.read('/work/bin.dat', { format: 'bytes' }), bytes)

  // envd 0.5.7 uploads: a raw octet-stream body, plain or gzip-encoded.
  await sbx.files.write('/work/octet.txt', 'raw body', { useOctetStream: true })
  assert.equal(await sbx.files.read('/work/octet.txt'), 'raw body')
  await sbx.files.write('/work/gz.txt', 'zipped '.repeat(1000), { gzip: true })
  assert.equal(await sbx.files.read('/work/gz.txt'), 'zipped '.repeat(1000))
  const stream = await sbx.files.read('/work/gz.txt', { format: 'stream' })
  let streamed = ''
  for await (const chunk of stream) streamed += new TextDecoder().decode(chunk)
  assert.equal(streamed.length, 7000)

  await sbx.files.write([
    { path: '/work/m/one', data: '1' },
    { path: '/work/m/two', data: '22' },
  ])
  const names = (await sbx.files.list('/work/m')).map((e) => [e.name, e.type, e.size])
  assert.deepEqual(names, [['one', 'file', 1], ['two', 'file', 2]])
  const deep = await sbx.files.list('/work', { depth: 2 })
  assert.ok(deep.some((e) => e.path === '/work/deep/a.txt'))

  assert.equal(await sbx.files.exists('/work/deep/a.txt'), true)
  assert.equal(await sbx.files.exists('/work/nope'), false)
  assert.equal(await sbx.files.makeDir('/work/newdir/sub'), true)
  assert.equal(await sbx.files.makeDir('/work/newdir/sub'), false, 'an existing dir is not made again')
  assert.equal((await sbx.files.getInfo('/work/newdir/sub')).type, 'dir')

  const moved = await sbx.files.rename('/work/deep/a.txt', '/work/newdir/b.txt')
  assert.equal(moved.path, '/work/newdir/b.txt')
  assert.equal(await sbx.files.exists('/work/deep/a.txt'), false)
  await sbx.files.remove('/work/newdir')
  assert.equal(await sbx.files.exists('/work/newdir/b.txt'), false)

  await assert.rejects(sbx.files.read('/work/nope'), FileNotFoundError)
  await assert.rejects(sbx.files.read('/tmp/../etc/passwd'), InvalidArgumentError)
  await assert.rejects(sbx.files.list('/work/../..'), InvalidArgumentError)
})

test('a wrong API key is refused', async () => {
  await assert.rejects(Sandbox.create(template, { apiKey: 'wrong-key' }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey: 'wrong-key' }).nextItems(), AuthenticationError)
})

test('an unknown sandbox is NotFound', async () => {
  await assert.rejects(Sandbox.connect('000000000000'), NotFoundError)
  await assert.rejects(Sandbox.getInfo('000000000000'), NotFoundError)
  assert.equal(await Sandbox.kill('000000000000'), false)
})

test('setTimeout extends and ends a sandbox', async () => {
  // 5 s leaves room for the setTimeout call on a loaded machine.
  const sbx = await newSandbox({ timeoutMs: 5000 })
  await sbx.setTimeout(60_000)
  await sleep(5500)
  assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n', 'the extended sandbox outlived its first timeout')
  const { endAt } = await sbx.getInfo()
  assert.ok(endAt - Date.now() > 50_000, `endAt ${endAt.toISOString()} is about a minute away`)

  await sbx.setTimeout(1000)
  await waitFor(async () => !(await sbx.isRunning().catch(() => false)), 10_000, 'the sandbox to expire')
  await assert.rejects(sbx.getInfo(), NotFoundError)
  const listed = await Sandbox.list().nextItems()
  assert.ok(!listed.some((s) => s.sandboxId === sbx.sandboxId), 'an expired sandbox is not listed')
})

test('pause, then connect resumes', async () => {
  const sbx = await newSandbox()
  await sbx.files.write('/tmp/state', 'kept')
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
  assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId))
  assert.equal(await sbx.pause(), false, 'pausing a paused sandbox says so')

  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await resumed.getInfo()).state, 'running')
  assert.equal(await resumed.files.read('/tmp/state'), 'kept')
  assert.equal((await resumed.commands.run('echo back')).stdout, 'back\n')
})

test('fork copies a running sandbox', async () => {
  const sbx = await newSandbox({ metadata: { role: 'parent' } })
  await sbx.files.write('/tmp/origin', 'parent data')
  const forks = await sbx.fork({ count: 2 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(!(f instanceof Error), `fork failed: ${f}`)
    created.push(f)
    assert.notEqual(f.sandboxId, sbx.sandboxId)
    assert.equal(await f.files.read('/tmp/origin'), 'parent data')
    assert.deepEqual((await f.getInfo()).metadata, { role: 'parent' })
  }
  await forks[0].files.write('/tmp/origin', 'changed in fork')
  assert.equal(await sbx.files.read('/tmp/origin'), 'parent data', 'the source is untouched')
  assert.equal(await forks[1].files.read('/tmp/origin'), 'parent data', 'forks are independent')
})

test('pty: a terminal with input and resize', async () => {
  const sbx = await newSandbox()
  let out = ''
  const dec = new TextDecoder()
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d, { stream: true })) })
  const enc = new TextEncoder()
  await sbx.pty.sendInput(term.pid, enc.encode('stty size\n'))
  await waitFor(() => out.includes('24 80'), 5000, `stty to print 24 80 (got ${JSON.stringify(out)})`)
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(term.pid, enc.encode('stty size; exit 0\n'))
  await waitFor(() => out.includes('30 100'), 5000, `stty to print 30 100 (got ${JSON.stringify(out)})`)
  const res = await term.wait()
  assert.equal(res.exitCode, 0)
})

test('createSnapshot, then Sandbox.create from it', async () => {
  const sbx = await newSandbox()
  await sbx.files.write('/tmp/snap', 'saved')
  const name = `snap-${Date.now()}`
  const snap = await sbx.createSnapshot({ name })
  assert.match(snap.snapshotId, /^sha256:[0-9a-f]{64}$/)
  assert.deepEqual(snap.names, [name])
  await sbx.files.write('/tmp/snap', 'changed after')
  assert.equal((await sbx.getInfo()).state, 'running', 'the source keeps running')

  const copy = await newSandbox({ metadata: { from: 'snapshot' } }, snap.snapshotId)
  assert.equal(await copy.files.read('/tmp/snap'), 'saved')
  assert.deepEqual((await copy.getInfo()).metadata, { from: 'snapshot' })

  const listed = await sbx.listSnapshots().nextItems()
  assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
  await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId), SandboxError, 'a snapshot in use is kept')
  await copy.kill()
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
})

test('commands: many at once in one sandbox', async () => {
  const sbx = await newSandbox()
  const n = 20
  const results = await Promise.all(Array.from({ length: n }, (_, i) => sbx.commands.run(`echo ${i}; sleep 0.2`)))
  assert.deepEqual(results.map((r) => r.stdout), Array.from({ length: n }, (_, i) => `${i}\n`))
  assert.equal((await sbx.commands.list()).length, 0, 'finished commands leave the list')
})

test('network: none by default, a network of its own when asked', async () => {
  const ifaces = async (sbx) => (await sbx.commands.run("awk 'NR>2 {print $1}' /proc/net/dev")).stdout.split('\n').filter(Boolean).sort()
  const closed = await newSandbox()
  assert.deepEqual(await ifaces(closed), ['lo:'])
  const open = await newSandbox({ allowInternetAccess: true })
  assert.ok((await ifaces(open)).length > 1, `interfaces: ${await ifaces(open)}`)
  assert.equal((await open.getInfo()).allowInternetAccess, true)
  const listed = await newSandbox({ network: { allowOut: ['example.com', '192.0.2.1'] } })
  assert.ok((await ifaces(listed)).length > 1)
  assert.deepEqual((await listed.getInfo()).network.allowOut, ['example.com', '192.0.2.1/32'])
  await listed.updateNetwork({ allowOut: ['pypi.org'] })
  assert.deepEqual((await listed.getInfo()).network.allowOut, ['pypi.org'])
  await assert.rejects(closed.updateNetwork({ allowOut: ['pypi.org'] }), SandboxError, 'no network can be added after create')
  await assert.rejects(Sandbox.create(template, { network: { denyOut: ['0.0.0.0/0'] } }), /denyOut/)
})

test("lifecycle onTimeout 'pause': the timeout pauses, connect resumes", async () => {
  const sbx = await newSandbox({ timeoutMs: 5000, lifecycle: { onTimeout: 'pause' } })
  await sbx.files.write('/tmp/kept', 'yes')
  await waitFor(async () => (await sbx.getInfo()).state === 'paused', 20_000, 'the timeout to pause the sandbox')
  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await back.getInfo()).state, 'running')
  assert.equal(await back.files.read('/tmp/kept'), 'yes')
})
