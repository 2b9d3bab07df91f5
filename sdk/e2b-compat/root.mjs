// The SDK pointed at smolvm serve's root rather than /e2b: the control
// plane and envd answer there too, around the native API. The Go test
// (e2b/compat_test.go, TestSDKAtRoot) starts the server; run it rather
// than this file directly. `node --test` alone does not pick it up.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, NotFoundError } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL']) {
  assert.equal(new URL(process.env[v]).pathname, '/', `${v} must be the server's root`)
}

test("the SDK works with the server's root as its base URL", async () => {
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
  try {
    assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n')
    const err = await sbx.commands.run('echo bad >&2; exit 4').catch((e) => e)
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.message, 'exit status 4')
    await sbx.files.write('/tmp/x', 'y')
    assert.equal(await sbx.files.read('/tmp/x'), 'y')
    const page = await Sandbox.list().nextItems()
    assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId))
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
})
