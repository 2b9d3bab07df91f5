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
  Volume,
  VolumeError,
  VolumeNotFoundError,
  VolumePathNotFoundError,
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
  assert.equal(info.templateId, template, 'the template create named, not the image it maps to')
  assert.deepEqual(info.metadata, { suite: 'compat', tag })
  assert.equal(info.state, 'running')
  assert.deepEqual(info.lifecycle, { onTimeout: 'kill', autoResume: false }, 'the timeout kills by default')
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

  // A second SDK client (its own Sandbox.connect) lists the command,
  // attaches to it by pid, writes to it and kills it.
  const other = await Sandbox.connect(sbx.sandboxId)
  assert.ok((await other.commands.list()).some((p) => p.pid === h.pid))
  let seen = ''
  const attached = await other.commands.connect(h.pid, { onStdout: (d) => (seen += d) })
  await other.commands.sendStdin(h.pid, 'again\n')
  await waitFor(() => seen === 'again\n' && out === 'hello\nagain\n', 5000, 'both clients to see new output')

  assert.equal(await other.commands.kill(h.pid), true)
  const res = await h.wait().catch((e) => e)
  assert.ok(res instanceof CommandExitError, `got ${res}`)
  assert.equal(res.message, 'signal: killed')
  await attached.wait().catch(() => {})
  await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 5000, 'the killed command to leave the list')
  // A finished command: kill says so, stdin and connect are NotFound.
  assert.equal(await sbx.commands.kill(h.pid), false, 'killing a gone command says so')
  await assert.rejects(sbx.commands.sendStdin(h.pid, 'late\n'), NotFoundError)
  await assert.rejects(sbx.commands.connect(h.pid), NotFoundError)

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
  await assert.rejects(sbx.files.list('/work/bin.dat'), (e) => e instanceof InvalidArgumentError && /not a directory/.test(e.message),
    'a listing of a file is the caller\'s wrong path, as envd answers it')
  const nocwd = await sbx.commands.run('pwd', { cwd: '/no/such/dir' }).catch((e) => e)
  assert.match(String(nocwd.message ?? nocwd), /working directory \/no\/such\/dir: no such file or directory/)
})

test('downloadUrl and uploadUrl: signed URLs that work without headers, for that file only', async () => {
  const sbx = await newSandbox()
  await sbx.files.write('/tmp/signed.txt', 'fetched by URL')
  const down = await sbx.downloadUrl('/tmp/signed.txt')
  assert.ok(!down.includes(sbx.sandboxId), 'with E2B_SANDBOX_URL set the URL names no sandbox: the signature finds it')
  const got = await fetch(down)
  assert.equal(got.status, 200)
  assert.equal(await got.text(), 'fetched by URL')

  const up = await sbx.uploadUrl('/tmp/uploaded.txt')
  const form = new FormData()
  form.append('file', new Blob(['sent by URL']), 'uploaded.txt')
  const put = await fetch(up, { method: 'POST', body: form })
  assert.equal(put.status, 200, await put.clone().text())
  assert.equal(await sbx.files.read('/tmp/uploaded.txt'), 'sent by URL')

  // The signature covers the path, the operation and the expiry.
  const other = new URL(down)
  other.searchParams.set('path', '/etc/passwd')
  assert.equal((await fetch(other)).status, 401)
  assert.equal((await fetch(up)).status, 401, 'a write signature does not read')
  const expired = await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: -10 })
  assert.equal((await fetch(expired)).status, 401)
  const lasting = await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 60 })
  assert.equal((await fetch(lasting)).status, 200)
  await sbx.kill()
  assert.equal((await fetch(down)).status, 401, 'a removed sandbox\'s URL opens nothing')
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

test('files.watchDir: create, write, rename and remove, recursively', async () => {
  const sbx = await newSandbox()
  await sbx.files.makeDir('/work/watched/sub')
  const events = []
  const seen = (type, name) => events.some((e) => e.type === type && e.name === name)
  const until = (what, ...want) => waitFor(() => want.every(([t, n]) => seen(t, n)), 10_000, `${what} (saw ${JSON.stringify(events)})`)
  const w = await sbx.files.watchDir('/work/watched', (e) => events.push(e), { recursive: true })

  // An upload is a create and a write of its own name.
  await sbx.files.write('/work/watched/a.txt', 'one')
  await until('the upload', ['create', 'a.txt'], ['write', 'a.txt'])
  await sbx.commands.run('echo more >> /work/watched/sub/b.txt; mkdir -p /work/watched/new/deep; echo x > /work/watched/new/deep/c.txt; chmod 600 /work/watched/sub/b.txt')
  await until('the command\'s changes', ['create', 'sub/b.txt'], ['write', 'sub/b.txt'], ['create', 'new/deep'], ['create', 'new/deep/c.txt'], ['chmod', 'sub/b.txt'])
  await sbx.files.rename('/work/watched/a.txt', '/work/watched/sub/moved.txt')
  await until('the rename', ['rename', 'a.txt'], ['create', 'sub/moved.txt'])
  await sbx.files.remove('/work/watched/sub/moved.txt')
  await until('the removal', ['remove', 'sub/moved.txt'])
  assert.ok(!events.some((e) => e.name.includes('.smolvm-')), 'upload temporaries never show')
  await w.stop()

  // Not recursive: the top level only.
  const top = []
  const t = await sbx.files.watchDir('/work/watched', (e) => top.push(e))
  await sbx.commands.run('touch /work/watched/sub/hidden /work/watched/shown')
  await waitFor(() => top.some((e) => e.name === 'shown'), 5000, 'the top-level event')
  assert.ok(!top.some((e) => e.name.includes('hidden')), JSON.stringify(top))
  await t.stop()

  // Bad input fails at once, as envd's errors.
  await assert.rejects(sbx.files.watchDir('/work/nope', () => {}), FileNotFoundError)
  await assert.rejects(sbx.files.watchDir('/work/watched/shown', () => {}), InvalidArgumentError)
  // The watched directory removed ends the watch; so does its timeout.
  let exited
  await sbx.files.makeDir('/work/doomed')
  await sbx.files.watchDir('/work/doomed', () => {}, { onExit: (err) => (exited = err ?? 'no error') })
  await sbx.files.remove('/work/doomed')
  await waitFor(() => exited, 5000, 'the watch of a removed directory to end')
  assert.ok(exited instanceof NotFoundError, `ended with ${exited}`)
  let timedOut
  await sbx.files.watchDir('/work/watched', () => {}, { timeoutMs: 2000, onExit: (err) => (timedOut = err ?? 'no error') })
  await waitFor(() => timedOut, 10_000, 'the watch to time out')
  assert.ok(timedOut instanceof TimeoutError, `ended with ${timedOut}`)

  // Watches per sandbox are bounded; a stopped one frees its place.
  const many = []
  for (let i = 0; i < 32; i++) many.push(await sbx.files.watchDir('/work', () => {}))
  await assert.rejects(sbx.files.watchDir('/work', () => {}), /already has 32 directory watches/)
  await many.pop().stop()
  await waitFor(async () => {
    const extra = await sbx.files.watchDir('/work', () => {}).catch(() => undefined)
    if (extra) many.push(extra)
    return extra
  }, 5000, 'a stopped watch to free its place')
  await Promise.all(many.map((h) => h.stop()))
})

test('stdin a command never reads does not hold up its kill', async () => {
  const sbx = await newSandbox()
  const h = await sbx.commands.run('sleep 100', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'x'.repeat(1 << 20), { requestTimeoutMs: 10_000 })
  assert.equal(await sbx.commands.kill(h.pid), true)
  const res = await h.wait().catch((e) => e)
  assert.ok(res instanceof CommandExitError, `got ${res}`)
})

test('a dead sandbox answers in E2B\'s terms, never hangs', async () => {
  const sbx = await newSandbox()
  const h = await sbx.commands.run('sleep 60', { background: true })
  await Sandbox.kill(sbx.sandboxId)
  await assert.rejects(sbx.commands.run('true'), SandboxError)
  await assert.rejects(sbx.files.read('/etc/hostname'), SandboxError)
  await assert.rejects(sbx.files.watchDir('/tmp', () => {}), SandboxError)
  await assert.rejects(sbx.commands.sendStdin(h.pid, 'x'), SandboxError)
  await assert.rejects(h.wait(), SandboxError)
  assert.equal(await sbx.isRunning(), false)
})

test('pause, then connect resumes', async () => {
  const sbx = await newSandbox()
  await sbx.files.write('/tmp/state', 'kept')
  // A pause freezes the sandbox with its connections: a watch open
  // across it sees what happens after the resume.
  const seen = []
  const w = await sbx.files.watchDir('/tmp', (e) => seen.push(e.name))
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
  assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId))
  assert.equal(await sbx.pause(), false, 'pausing a paused sandbox says so')

  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await resumed.getInfo()).state, 'running')
  assert.equal(await resumed.files.read('/tmp/state'), 'kept')
  assert.equal((await resumed.commands.run('echo back > /tmp/after')).exitCode, 0)
  await waitFor(() => seen.includes('after'), 5000, `the watch to see a write after the resume (saw ${seen})`)
  await w.stop()

  // A paused sandbox can be killed without resuming it.
  await resumed.pause()
  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError)
})

test('list filters by metadata, state, template and start time as the SDK sends them', async () => {
  const tag = `m${Date.now()}`
  const odd = 'a b&c=d/é%'
  const one = await newSandbox({ metadata: { tag, kind: odd } })
  const two = await newSandbox({ metadata: { tag, kind: 'plain' } })
  const ids = async (query) => (await Sandbox.list({ query }).nextItems()).map((s) => s.sandboxId).sort()
  assert.deepEqual(await ids({ metadata: { tag } }), [one.sandboxId, two.sandboxId].sort())
  assert.deepEqual(await ids({ metadata: { tag, kind: odd } }), [one.sandboxId])
  assert.deepEqual(await ids({ metadata: { [odd]: 'x' } }), [])
  await two.pause()
  assert.deepEqual(await ids({ metadata: { tag }, state: ['paused'] }), [two.sandboxId])
  assert.deepEqual(await ids({ metadata: { tag }, state: ['running'] }), [one.sandboxId])
  assert.deepEqual(await ids({ metadata: { tag }, state: ['running', 'paused'] }), [one.sandboxId, two.sandboxId].sort())
  const { templateId, startedAt } = await one.getInfo()
  assert.equal(templateId, template)
  assert.deepEqual(await ids({ metadata: { tag }, template }), [one.sandboxId, two.sandboxId].sort())
  assert.deepEqual(await ids({ metadata: { tag }, template: 'no-such-template' }), [])
  assert.ok((await ids({ metadata: { tag }, startedAfter: new Date(startedAt.getTime() - 1) })).includes(one.sandboxId))
  assert.deepEqual(await ids({ metadata: { tag }, startedAfter: new Date(Date.now() + 60_000) }), [])
})

test('list pages with limit and nextToken, newest first, as the SDK\'s paginator reads them', async () => {
  const tag = `p${Date.now()}`
  const made = []
  for (let i = 0; i < 3; i++) made.push((await newSandbox({ metadata: { tag } })).sandboxId)
  const pager = Sandbox.list({ query: { metadata: { tag } }, limit: 2 })
  const first = await pager.nextItems()
  assert.equal(first.length, 2)
  assert.ok(pager.hasNext, 'a full page leaves a token')
  const second = await pager.nextItems()
  assert.equal(second.length, 1)
  assert.equal(pager.hasNext, false, 'the last page has no token')
  const seen = [...first, ...second]
  assert.deepEqual(seen.map((s) => s.sandboxId).sort(), [...made].sort(), 'every sandbox once')
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i - 1].startedAt >= seen[i].startedAt, 'newest first')
  const res = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes?limit=0`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  assert.equal(res.status, 400)
  const bad = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes?nextToken=junk`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  assert.equal(bad.status, 400)
  assert.match((await bad.json()).message, /nextToken/)
})

test('what smolvm does not serve is an E2B error that says so', async () => {
  const sbx = await newSandbox()
  // The SDK refuses these itself for the envd version smolvm reports;
  // a raw call shows the server's answer.
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/StreamInput`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken ?? '' },
    body: '{}',
  })
  const body = await res.json()
  assert.equal(body.code, 'unimplemented', JSON.stringify(body))
  assert.match(body.message, /does not serve/)
})

test('volumes: create, mount in two sandboxes, getInfo, list, destroy', async () => {
  const name = `vol${Date.now()}`
  const vol = await Volume.create(name)
  assert.equal(vol.volumeId, name, "a smolvm volume's ID is its name")
  assert.ok((await Volume.list()).some((v) => v.volumeId === name && v.name === name))
  assert.equal((await Volume.getInfo(name)).name, name)
  const a = await newSandbox({ volumeMounts: { '/data': vol } })
  const b = await newSandbox({ volumeMounts: { '/mnt/v': name } })
  await a.files.write('/data/f', 'shared')
  assert.equal(await b.files.read('/mnt/v/f'), 'shared')
  assert.deepEqual((await a.getInfo()).volumeMounts, [{ name, path: '/data' }])

  // The content API (its URL is the control plane's here) and the
  // sandboxes see the same files.
  process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL
  assert.equal(await vol.readFile('/f'), 'shared')
  await vol.writeFile('/dir/from-api.txt', 'api')
  assert.equal(await a.files.read('/data/dir/from-api.txt'), 'api')
  assert.deepEqual((await vol.list('/')).map((e) => `${e.name} ${e.type}`).sort(), ['dir directory', 'f file', 'lost+found directory'])
  assert.deepEqual((await vol.list('/', { depth: 2 })).map((e) => e.path).filter((p) => p.startsWith('/dir')).sort(), ['/dir', '/dir/from-api.txt'])
  assert.equal((await vol.makeDir('/made')).type, 'directory')
  assert.equal(await vol.exists('/made'), true)
  await vol.remove('/made')
  assert.equal(await vol.exists('/made'), false)
  await assert.rejects(vol.readFile('/nope'), VolumePathNotFoundError)
  // Links a sandbox makes resolve within the volume; one leading out of
  // it (to /, to the host directory beside the volume's mount) is
  // refused, never followed on the host.
  await a.commands.run('ln -s / /data/root && ln -s .. /data/up && ln -s f /data/inside')
  assert.equal(await vol.readFile('/inside'), 'shared')
  assert.equal((await vol.getInfo('/root')).type, 'symlink')
  for (const p of ['/root/etc/hostname', '/up/disk.ext4', '/up/data/f']) {
    const e = await vol.readFile(p).catch((e) => e)
    assert.ok(e instanceof VolumeError && /leads out of the volume/.test(e.message), `readFile ${p}: ${e}`)
  }
  await assert.rejects(vol.list('/root'), /leads out of the volume/)
  await assert.rejects(vol.writeFile('/up/planted', 'x'), /leads out of the volume/)
  await assert.rejects(vol.readFile('/../disk.ext4'), VolumeError)
  const wrong = await new Volume(name, name, 'wrong-token').readFile('/f').catch((e) => e)
  assert.ok(wrong instanceof AuthenticationError && /volume token/.test(wrong.message), `a wrong token: ${wrong}`)
  const inUse = await Volume.destroy(name).catch((e) => e)
  assert.ok(inUse instanceof VolumeError && /in use/.test(inUse.message), `destroy while mounted: ${inUse}`)
  await a.kill()
  await b.kill()
  const c = await newSandbox({ volumeMounts: { '/again': name } })
  assert.equal(await c.files.read('/again/f'), 'shared', 'the volume outlives its sandboxes')
  await c.kill()
  assert.equal(await Volume.destroy(name), true)
  assert.equal(await Volume.destroy(name), false, 'a missing volume: 404')
  await assert.rejects(Volume.getInfo(name), VolumeNotFoundError)
  await assert.rejects(newSandbox({ volumeMounts: { '/x': name } }), (e) => /no such volume/.test(e.message))
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
    const info = await f.getInfo()
    assert.deepEqual(info.metadata, { role: 'parent' })
    assert.equal(info.templateId, template, "a copy's template is its source's")
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
  // A checkpoint closes the agent's connections: a watch ends.
  let watchEnded
  await sbx.files.watchDir('/tmp', () => {}, { onExit: (err) => (watchEnded = err ?? 'no error') })
  const snap = await sbx.createSnapshot({ name })
  await waitFor(() => watchEnded, 5000, 'the checkpoint to end the watch')
  assert.match(snap.snapshotId, /^[0-9a-f]{64}$/)
  assert.deepEqual(snap.names, [name])
  await sbx.files.write('/tmp/snap', 'changed after')
  assert.equal((await sbx.getInfo()).state, 'running', 'the source keeps running')

  const copy = await newSandbox({ metadata: { from: 'snapshot' } }, snap.snapshotId)
  assert.equal(await copy.files.read('/tmp/snap'), 'saved')
  const info = await copy.getInfo()
  assert.deepEqual(info.metadata, { from: 'snapshot' })
  assert.equal(info.templateId, snap.snapshotId, 'the template create named: the snapshot')

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
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
  await sbx.files.write('/tmp/kept', 'yes')
  await waitFor(async () => (await sbx.getInfo()).state === 'paused', 20_000, 'the timeout to pause the sandbox')
  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await back.getInfo()).state, 'running')
  assert.equal(await back.files.read('/tmp/kept'), 'yes')
})
