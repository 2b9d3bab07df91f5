// E2B's Template SDK against smolvm serve: Template.build with steps
// (setEnvs, runCmd with a user, copy of a directory and a file, setWorkdir,
// setUser, skipCache) and a start command with a ready check, then
// Sandbox.create(name) restores it with the server already up; exists,
// tags, buildInBackground with getBuildStatus, fromTemplate,
// fromDockerfile, a failing step. The Go test (e2b/templates_test.go,
// TestSDKTemplates) makes the base image, busybox-base, in the store.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Template, Sandbox, waitForURL, BuildError } from 'e2b'

const created = []
after(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})))
})

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smolvm-template-'))
fs.mkdirSync(path.join(dir, 'www'))
fs.writeFileSync(path.join(dir, 'www', 'index.html'), 'hello from the template\n')
fs.writeFileSync(path.join(dir, 'config.txt'), 'mode=fast\n')
after(() => fs.rmSync(dir, { recursive: true, force: true }))

// get asks the server on port inside sb for path, from inside (busybox nc).
async function get(sb, port, p) {
  const r = await sb.commands.run(`printf 'GET ${p} HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 ${port}`)
  return r.stdout
}

test('a template with a started server, created by name', async () => {
  const t = Template({ fileContextPath: dir })
    .fromImage('busybox-base')
    .setEnvs({ GREETING: 'hi there' })
    .runCmd('mkdir -p /www && echo "$GREETING" > /www/greeting.txt')
    .copy('www', '/www/')
    .copy('config.txt', '/etc/app.conf')
    .setWorkdir('/www')
    .runCmd('touch made-by-root', { user: 'root' })
    .setUser('root')
    .skipCache()
    .runCmd('date +%s%N > /www/built-at')
    // The server takes 2 s to listen; the ready check waits for it.
    // The server takes 2 s to listen; the ready check waits for it. The
    // token it serves is drawn at its start: copies that serve the same
    // one run the build's server, restored, not a start of their own.
    .setStartCmd('od -An -N8 -tx1 /dev/urandom > /www/token; sleep 2; exec httpd -f -p 127.0.0.1:8000 -h /www', waitForURL('http://localhost:8000/index.html'))
  const logs = []
  const info = await Template.build(t, 'web:v1', { onBuildLogs: (e) => logs.push(String(e)), cpuCount: 1, memoryMB: 256 })
  assert.equal(info.name, 'web:v1')
  assert.ok(info.buildId, 'a build ID')
  assert.ok(logs.some((l) => l.includes('ready after')), `the build's log says when the server was ready:\n${logs.join('\n')}`)

  assert.equal(await Template.exists('web:v1'), true)
  assert.equal(await Template.exists('web:v2'), false)
  assert.equal(await Template.exists('nothing-here'), false)

  // The first request, with no retry, is answered.
  const [sb, sb2] = await Promise.all([Sandbox.create('web:v1'), Sandbox.create('web:v1')])
  created.push(sb, sb2)
  const page = await get(sb, 8000, '/index.html')
  assert.match(page, /200 OK/, page)
  assert.match(page, /hello from the template/)
  assert.match(await get(sb, 8000, '/greeting.txt'), /hi there/)
  const token = (await get(sb, 8000, '/token')).split('\r\n\r\n')[1]
  assert.match(token, /[0-9a-f]{2}/)
  assert.equal((await get(sb2, 8000, '/token')).split('\r\n\r\n')[1], token)
  const r = await sb.commands.run('cat /etc/app.conf; pwd; ls /www/made-by-root')
  assert.equal(r.stdout, 'mode=fast\n/www\n/www/made-by-root\n')

  // Tags: another name for the same build, listed, then removed.
  const tagged = await Template.assignTags('web:v1', ['prod'])
  assert.deepEqual(tagged.tags, ['prod'])
  assert.equal(tagged.buildId, info.buildId)
  const tags = (await Template.getTags('web')).map((x) => x.tag).sort()
  assert.deepEqual(tags, ['prod', 'v1'])
  assert.equal(await Template.exists('web:prod'), true)
  await Template.removeTags('web', 'prod')
  assert.equal(await Template.exists('web:prod'), false)
})

test('buildInBackground, getBuildStatus, fromTemplate and fromDockerfile', async () => {
  const fromTmpl = Template().fromTemplate('web:v1').runCmd('echo layered > /www/layer.txt')
  const data = await Template.buildInBackground(fromTmpl, 'web-layered')
  let status
  for (let i = 0; i < 600; i++) {
    status = await Template.getBuildStatus(data, { logsOffset: 0 })
    if (status.status !== 'building' && status.status !== 'waiting') break
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.equal(status.status, 'ready', JSON.stringify(status.reason))
  assert.ok(status.logEntries.length > 0)
  // It inherited the base template's start command: its server answers.
  const sb = await Sandbox.create('web-layered')
  created.push(sb)
  assert.match(await get(sb, 8000, '/layer.txt'), /layered/)

  const df = Template().fromDockerfile('FROM busybox-base\nENV COLOR=blue\nRUN echo "$COLOR" > /color\nWORKDIR /srv\n')
  await Template.build(df, 'from-dockerfile')
  const d = await Sandbox.create('from-dockerfile')
  created.push(d)
  const r = await d.commands.run('cat /color; pwd')
  assert.equal(r.stdout, 'blue\n/srv\n')
})

test('a failing step fails the build with its output', async () => {
  const bad = Template().fromImage('busybox-base').runCmd('echo about to fail; exit 3')
  await assert.rejects(Template.build(bad, 'broken'), (e) => {
    assert.ok(e instanceof BuildError, `${e.constructor.name}: ${e.message}`)
    assert.match(e.message, /exit code: 3/)
    return true
  })
  assert.equal(await Template.exists('broken'), false)
  const noBase = Template().fromTemplate('no-such-template').runCmd('true')
  await assert.rejects(Template.build(noBase, 'orphan'), /no such template/)
})
