// Two tenants' API keys through the official e2b SDK: tenant B cannot
// list, connect to, kill, pause, time out, read the files of, or restore
// the snapshots of tenant A's sandboxes, nor see, destroy or mount A's
// volumes; every such call answers as for a sandbox, snapshot or volume
// that never existed. The Go test (e2b/compat_test.go,
// TestSDKTenants) starts the server, makes the tenants and their keys, and
// passes them as SMOLVM_KEY_A and SMOLVM_KEY_B.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume } from 'e2b'

const keyA = process.env.SMOLVM_KEY_A
const keyB = process.env.SMOLVM_KEY_B
assert.ok(keyA && keyB, 'SMOLVM_KEY_A and SMOLVM_KEY_B must be set (run through go test ./server/e2b)')
const A = { apiKey: keyA }
const B = { apiKey: keyB }
const missing = '0123456789ab'
const missingSnap = '0'.repeat(64)
const created = []

after(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})))
})

// outcome runs fn and describes what it gave, with id written as ID: the
// same description for another tenant's object and a missing one means
// the key cannot tell them apart.
async function outcome(fn, id) {
  try {
    return `ok ${JSON.stringify(await fn())}`.replaceAll(id, 'ID')
  } catch (e) {
    return `${e.constructor.name}: ${e.message}`.replaceAll(id, 'ID')
  }
}

test("tenant B reaches none of tenant A's sandboxes and snapshots", async () => {
  const a = await Sandbox.create('base', { ...A, timeoutMs: 300_000, metadata: { owner: 'a' } })
  created.push(a)
  await a.files.write('/tmp/secret', 'a-only')
  const snap = await a.createSnapshot({ name: `a-snap-${Date.now()}` })
  const b = await Sandbox.create('base', { ...B, timeoutMs: 300_000 })
  created.push(b)

  // Lists: each key sees its own.
  const listB = await Sandbox.list(B).nextItems()
  assert.deepEqual(listB.map((s) => s.sandboxId), [b.sandboxId])
  const listA = await Sandbox.list(A).nextItems()
  assert.deepEqual(listA.map((s) => s.sandboxId), [a.sandboxId])
  assert.deepEqual((await Sandbox.listSnapshots(B).nextItems()).map((s) => s.snapshotId), [])
  assert.deepEqual((await Sandbox.listSnapshots(A).nextItems()).map((s) => s.snapshotId), [snap.snapshotId])

  // Every control-plane call on A's sandbox, as B, answers as for a
  // sandbox that never existed, and fails.
  const calls = {
    getInfo: (id) => Sandbox.getInfo(id, B),
    connect: (id) => Sandbox.connect(id, B).then((s) => s.sandboxId),
    setTimeout: (id) => Sandbox.setTimeout(id, 60_000, B),
    pause: (id) => Sandbox.pause(id, B),
    kill: (id) => Sandbox.kill(id, B),
  }
  for (const [name, call] of Object.entries(calls)) {
    const theirs = await outcome(() => call(a.sandboxId), a.sandboxId)
    const none = await outcome(() => call(missing), missing)
    assert.equal(theirs, none, `${name}: A's sandbox and a missing one differ for B`)
    assert.ok(!theirs.startsWith('ok') || theirs === 'ok false', `${name}: B reached A's sandbox: ${theirs}`)
  }

  // envd: B's own sandbox's access token, aimed at A's sandbox, reads
  // and runs nothing there.
  const forged = new Sandbox({ ...B, sandboxId: a.sandboxId, envdAccessToken: b.envdAccessToken, envdVersion: b.envdApi.version })
  await assert.rejects(forged.files.read('/tmp/secret'), 'B read A\'s file with its own envd token')
  await assert.rejects(forged.commands.run('cat /tmp/secret'), 'B ran a command in A\'s sandbox')
  await assert.rejects(forged.files.write('/tmp/secret', 'b was here'), 'B wrote a file in A\'s sandbox')

  // Snapshots: B can neither restore nor delete A's.
  const restore = (id) => Sandbox.create(id, { ...B, timeoutMs: 60_000 }).then((s) => { created.push(s); return s.sandboxId })
  const theirs = await outcome(() => restore(snap.snapshotId), snap.snapshotId)
  assert.equal(theirs, await outcome(() => restore(missingSnap), missingSnap), "restore of A's snapshot and of a missing one differ for B")
  assert.ok(!theirs.startsWith('ok'), `B restored A's snapshot: ${theirs}`)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, B), false, "B deleted A's snapshot")

  // A's sandbox, file and snapshot are as A left them.
  assert.equal((await Sandbox.getInfo(a.sandboxId, A)).state, 'running')
  assert.equal(await a.files.read('/tmp/secret'), 'a-only')
  assert.deepEqual((await Sandbox.listSnapshots(A).nextItems()).map((s) => s.snapshotId), [snap.snapshotId])
  assert.equal((await Sandbox.connect(a.sandboxId, A)).sandboxId, a.sandboxId)
})

test("tenant B reaches none of tenant A's volumes", async () => {
  const name = `a-vol-${Date.now()}`
  const none = `no-vol-${Date.now()}`
  const va = await Volume.create(name, A)
  assert.ok(!(await Volume.list(B)).some((v) => v.name === name), "B lists A's volume")
  const calls = {
    getInfo: (id) => Volume.getInfo(id, B),
    connect: (id) => Volume.connect(id, B).then((v) => v.volumeId),
    destroy: (id) => Volume.destroy(id, B),
    mount: (id) => Sandbox.create('base', { ...B, timeoutMs: 60_000, volumeMounts: { '/v': id } }).then((s) => { created.push(s); return s.sandboxId }),
  }
  // A refused create names the sandbox it would have made.
  const fresh = (s) => s.replace(/sb-[0-9a-f]{12}/g, 'sb-NEW')
  for (const [what, call] of Object.entries(calls)) {
    const theirs = fresh(await outcome(() => call(name), name))
    assert.equal(theirs, fresh(await outcome(() => call(none), none)), `${what}: A's volume and a missing one differ for B`)
    assert.ok(!theirs.startsWith('ok') || theirs === 'ok false', `${what}: B reached A's volume: ${theirs}`)
  }
  // B may have a volume of the same name: names are per tenant, and so
  // are the content API's tokens.
  process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL
  await va.writeFile('/secret', 'a-only')
  const vb = await Volume.create(name, B)
  assert.equal(await vb.exists('/secret'), false, "B's token reached A's volume")
  assert.equal(await va.readFile('/secret'), 'a-only')
  assert.equal(await Volume.destroy(name, B), true)
  assert.equal((await Volume.getInfo(name, A)).name, name, "A's volume is as A left it")
  assert.equal(await Volume.destroy(name, A), true)
})
