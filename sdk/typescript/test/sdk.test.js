// Tests of the TypeScript SDK against a real `smolvm serve` (real runsc
// sandboxes), started here on a loopback port. They need root, a smolvm
// binary ($SMOLVM_BIN or $PATH) and runsc; scripts/test.sh runs them
// through `go test ./sdk`.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Client, NotFoundError, ExpiredError, UnauthorizedError, TimeoutError, InvalidRequestError, ConflictError } from '../index.js'

const bin = process.env.SMOLVM_BIN || 'smolvm'
const skip = process.getuid() !== 0 ? 'needs root' : false
let dir, server, c, box

before(async () => {
  if (skip) return
  dir = mkdtempSync(join(tmpdir(), 'smolvm-ts-'))
  server = spawn(bin, ['--data-dir', dir, 'serve', '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'] })
  const host = await new Promise((resolve, reject) => {
    let log = ''
    server.stderr.on('data', (b) => {
      log += b
      const m = log.match(/at=(http:\/\/\S+)/)
      if (m) resolve(m[1])
    })
    server.on('exit', (code) => reject(new Error(`smolvm serve exited ${code}: ${log}`)))
  })
  const token = execFileSync(bin, ['--data-dir', dir, 'serve', 'token']).toString().trim()
  c = new Client({ host, token })
  box = await c.create({ name: 'ts-box' })
})

after(async () => {
  if (skip) return
  for (const sb of await c.list()) await c.kill(sb.id)
  // Volumes are mounted under dir.
  for (const v of await c.volumes()) await c.removeVolume(v.name, { force: true })
  server.kill('SIGTERM')
  await new Promise((resolve) => server.on('exit', resolve))
  rmSync(dir, { recursive: true, force: true })
})

test('create gives the default TTL', { skip }, () => {
  assert.equal(box.state, 'running')
  const ttl = (new Date(box.expires_at) - new Date(box.created_at)) / 1000
  assert.ok(ttl > 14 * 60 && ttl < 16 * 60, String(ttl))
})

test('pty: write, resize, read, kill', { skip }, async () => {
  let out = ''
  const t = await c.pty(box.id, { args: ['sh'], rows: 24, cols: 80, onData: (d) => (out += d.toString()) })
  const until = async (want) => {
    const deadline = Date.now() + 10_000
    while (!out.includes(want)) {
      assert.ok(Date.now() < deadline, `no ${JSON.stringify(want)} from the terminal; saw ${JSON.stringify(out)}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  t.write('stty size\n')
  await until('24 80')
  t.resize({ rows: 30, cols: 100 })
  // The resize travels apart from the input: ask until it is seen.
  for (const deadline = Date.now() + 10_000; !out.includes('30 100') && Date.now() < deadline; ) {
    t.write('stty size; tty\n')
    await new Promise((r) => setTimeout(r, 300))
  }
  await until('30 100')
  assert.match(out, /\/dev\/pts\//)
  t.kill()
  assert.equal((await t.wait()).signal, 9)

  const done = await c.pty(box.id, { args: ['sh'] })
  done.write('exit 3\n')
  assert.equal((await done.wait()).code, 3)
  await assert.rejects(c.pty('no-such-box', { args: ['sh'] }), NotFoundError)
})

test('exec streams output and returns the exit code', { skip }, async () => {
  const chunks = []
  const r = await c.exec(box.id, ['sh', '-c', 'echo one; sleep 0.2; echo two; echo err >&2; exit 3'], {
    onStdout: (d) => chunks.push([performance.now(), d.toString()]),
  })
  assert.equal(r.exitCode, 3)
  assert.equal(r.stdout.toString(), 'one\ntwo\n')
  assert.equal(r.stderr.toString(), 'err\n')
  assert.deepEqual(chunks.map(([, d]) => d), ['one\n', 'two\n'])
  assert.ok(chunks[1][0] - chunks[0][0] > 100, 'output was not streamed')
  const types = []
  for await (const ev of c.execStream(box.id, ['echo', 'x'])) types.push(ev.type)
  assert.deepEqual(types, ['stdout', 'exit'])
  assert.equal((await c.exec(box.id, ['cat'], { stdin: 'fed', env: { A: '1' } })).stdout.toString(), 'fed')
  const missing = await c.exec(box.id, ['no-such-command'])
  assert.equal(missing.exitCode, 127)
  assert.equal(missing.exit.kind, 'not-found')
})

test('exec timeout throws TimeoutError', { skip }, async () => {
  await assert.rejects(c.exec(box.id, ['sleep', '5'], { timeout: 0.3 }), (e) => e instanceof TimeoutError && e.result.exitCode === 137)
})

test('files', { skip }, async () => {
  await c.writeFile(box.id, '/tmp/hello.bin', Buffer.from([0, 255, 100]))
  assert.deepEqual([...(await c.readFile(box.id, '/tmp/hello.bin'))], [0, 255, 100])
  await assert.rejects(c.readFile(box.id, '/tmp/nothing-here'), NotFoundError)
  await assert.rejects(c.writeFile(box.id, '../../etc/passwd', 'x'), (e) => e instanceof InvalidRequestError && e.field === 'path')
})

test('volumes: create, mount read-write and read-only, list, remove', { skip }, async () => {
  const v = await c.createVolume('ts-vol', { size: '16m' })
  assert.deepEqual([v.name, v.size, v.used_by], ['ts-vol', 16 << 20, []])
  await assert.rejects(c.createVolume('../up'), (e) => e instanceof InvalidRequestError && e.field === 'name')
  const w = await c.create({ volumes: [{ name: 'ts-vol', path: '/v' }] })
  const r = await c.create({ volumes: [{ name: 'ts-vol', path: '/v', readOnly: true }] })
  await c.writeFile(w.id, '/v/f', 'shared')
  assert.equal((await c.readFile(r.id, '/v/f')).toString(), 'shared')
  assert.notEqual((await c.exec(r.id, ['sh', '-c', 'echo x > /v/g'])).exitCode, 0)
  assert.deepEqual((await c.volume('ts-vol')).used_by.sort(), [w.name, r.name].sort())
  await assert.rejects(c.removeVolume('ts-vol'), ConflictError)
  await c.kill(w.id)
  await c.kill(r.id)
  assert.ok((await c.volumes()).some((x) => x.name === 'ts-vol'))
  await c.removeVolume('ts-vol')
  await assert.rejects(c.volume('ts-vol'), NotFoundError)
})

test('typed errors', { skip }, async () => {
  await assert.rejects(c.get('never-was'), (e) => e instanceof NotFoundError && /never existed/.test(e.message))
  await assert.rejects(new Client({ host: c.base, token: 'wrong' }).list(), UnauthorizedError)
  await assert.rejects(c.create({ memory: 'lots' }), (e) => e instanceof InvalidRequestError && e.field === 'memory')
  const brief = await c.create({ timeout: 1 })
  const deadline = Date.now() + 20000
  for (;;) {
    try {
      await c.get(brief.id)
    } catch (e) {
      assert.ok(e instanceof ExpiredError, String(e))
      assert.equal(e.expiredAt.getTime(), new Date(brief.expires_at).getTime())
      break
    }
    assert.ok(Date.now() < deadline, 'sandbox did not expire')
    await new Promise((r) => setTimeout(r, 200))
  }
})

const browserSkip =
  skip || (process.env.SMOLVM_NET_NETNS && existsSync('/usr/lib/chromium/chromium') ? false : 'needs chromium and a closed test network (go test ./sdk gives one)')

test('browser: start, screenshot, new, release', { skip: browserSkip, timeout: 300_000 }, async () => {
  const snap = await c.browserStart({ golden: 'ts-browser', allowHosts: ['allowed.test'] })
  assert.equal(snap.name, 'ts-browser')
  const png = await c.screenshot('http://allowed.test/', { width: 320, height: 200, golden: 'ts-browser' })
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [320, 200])
  const b = await c.browserNew({ golden: 'ts-browser', ttl: 60 })
  assert.match(b.cdp_url, /^ws:\/\/127\.0\.0\.1:\d+\/devtools\/browser\//)
  await c.browserRelease(b.id)
  await assert.rejects(c.get(b.id), NotFoundError)
  await assert.rejects(c.screenshot('file:///etc/passwd', { golden: 'ts-browser' }), InvalidRequestError)
  await c.removeSnapshot('ts-browser')
})

test('checkpoint, restore, fork, kill', { skip }, async () => {
  const src = await c.create({ name: 'ts-src' })
  await c.exec(src.id, ['sh', '-c', 'echo kept > /root/state'])
  const snap = await c.checkpoint(src.id, { name: 'ts-snap' })
  assert.match(snap.id, /^[0-9a-f]{64}$/)
  const copy = await c.restore('ts-snap', { name: 'ts-copy' })
  assert.equal((await c.exec(copy.id, ['cat', '/root/state'])).stdout.toString(), 'kept\n')
  const kids = await c.fork(src.id, { n: 2, namePrefix: 'ts-kid' })
  assert.equal(kids.length, 2)
  for (const k of kids) {
    assert.equal((await c.exec(k.id, ['cat', '/root/state'])).stdout.toString(), 'kept\n')
    await c.kill(k.id)
  }
  assert.equal((await c.pause(src.id)).state, 'paused')
  assert.equal((await c.resume(src.id)).state, 'running')
  await c.kill(copy.id)
  await c.kill(src.id)
  await assert.rejects(c.get(src.id), (e) => e instanceof NotFoundError && /was removed at/.test(e.message))
  await c.removeSnapshot('ts-snap')
})

test('templates: build with a started server, create from it, remove', { skip }, async () => {
  // A server that listens after 1 s; the copy answers its first request.
  const start = ['python3', '-c', "import time, http.server as h; time.sleep(1); h.HTTPServer(('127.0.0.1', 8071), h.SimpleHTTPRequestHandler).serve_forever()"]
  const t = await c.buildTemplate('ts-web', { start, ready: { url: 'http://localhost:8071/', timeout: '1m' }, env: { WHO: 'ts' } })
  assert.ok(t.snapshot)
  assert.ok((await c.templates()).some((x) => x.name === 'ts-web'))
  assert.equal((await c.template('ts-web')).ready.url, 'http://localhost:8071/')
  const sb = await c.create({ image: 'ts-web' })
  const r = await c.exec(sb.id, ['python3', '-c', "import os, urllib.request as u; print(u.urlopen('http://127.0.0.1:8071/').status, os.environ['WHO'])"])
  assert.equal(r.stdout.toString(), '200 ts\n')
  await c.kill(sb.id)
  await assert.rejects(c.buildTemplate('ts-bad', { ready: { port: 80 } }), (e) => e instanceof InvalidRequestError && /needs a start command/.test(e.message))
  await c.removeTemplate('ts-web')
  await assert.rejects(c.template('ts-web'), NotFoundError)
})

test('agent runs: start, watch, log, stop', { skip, timeout: 300_000 }, async () => {
  const repo = mkdtempSync(join(tmpdir(), 'smolvm-ts-repo-'))
  try {
    writeFileSync(join(repo, 'calc.js'), 'exports.add = (a, b) => a - b;\n')
    writeFileSync(join(repo, 'calc.test.js'), "const test = require('node:test');\nconst assert = require('node:assert');\n" +
      "test('add', () => { assert.strictEqual(require('./calc.js').add(2, 3), 5); });\n")
    writeFileSync(join(repo, 'fix.sh'), "sed -i 's/a - b/a + b/' calc.js\n") // the stand-in for an agent CLI
    for (const args of [['init', '-q'], ['add', '-A'], ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'base']]) {
      execFileSync('git', ['-C', repo, ...args])
    }
    const testCmd = 'node --test --test-reporter=tap'
    const run = await c.agentRunStart('make add add', repo, { test: testCmd, agent: 'sh fix.sh', flakyReruns: -1, maxTime: '5m' })
    assert.equal(run.state, 'running')
    const phases = []
    for await (const p of c.agentRunWatch(run.id)) phases.push(p.phase)
    assert.ok(phases.includes('tests'), phases.join(','))
    assert.equal(phases.at(-1), 'done')
    const log = await c.agentRun(run.id)
    assert.deepEqual([log.run.state, log.run.best, log.run.verdict.passed], ['resolved', 1, 1])
    assert.ok(log.iterations[1].diff.includes('+exports.add = (a, b) => a + b;'))
    const ev = log.run.evidence
    assert.deepEqual([ev.verdict, ev.fail_to_pass, ev.hunks[0].pinned], ['proven', ['add'], true])
    assert.ok((await c.agentRuns()).some((r) => r.id === run.id))

    const hang = await c.agentRunStart('wait', repo, { test: testCmd, agent: 'sleep 600', flakyReruns: -1 })
    for await (const p of c.agentRunWatch(hang.id)) if (p.phase === 'agent') break
    const stopped = await c.agentRunStop(hang.id)
    assert.deepEqual([stopped.state, stopped.best], ['stopped', 0])

    await assert.rejects(c.agentRunStart('x', tmpdir(), { test: 'true', agent: 'true' }), InvalidRequestError) // not a git repository
    await assert.rejects(c.agentRun('run-00000000'), NotFoundError)
    await assert.rejects(c.agentRunStop('run-00000000'), NotFoundError)
  } finally {
    rmSync(repo, { recursive: true, force: true })
  }
})
