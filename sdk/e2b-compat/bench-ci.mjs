// Times @e2b/code-interpreter's runCode('1+1') on a warm sandbox against
// commands.run of the same code as a new python3 process, and against the
// request runCode makes sent with node's fetch alone (no SDK), and envd's
// GET /health (the server's lookups, nothing in the sandbox), all
// interleaved. Prints {"runCode": [ms…], "commands": [ms…], "fetch":
// [ms…], "health": [ms…]} on stdout. Run by the Go benchmark BenchmarkCodeInterpreter in
// ./server/e2b.
import { Sandbox } from '@e2b/code-interpreter'

const n = Number(process.env.SMOLVM_BENCH_N ?? 20)
const runCode = []
const commands = []
const fetched = []
const health = []
const sbx = await Sandbox.create()
// What runCode sends, with the SDK's headers.
const headers = {
  'Content-Type': 'application/json',
  'E2b-Sandbox-Id': sbx.sandboxId,
  'E2b-Sandbox-Port': '49999',
  'E2B-Traffic-Access-Token': sbx.trafficAccessToken,
  'X-Access-Token': sbx.envdAccessToken,
}
const url = `${process.env.E2B_SANDBOX_URL}/execute`
async function fetchCell () {
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ code: '1+1' }) })
  const text = await res.text()
  if (!res.ok || !text.includes('"text": "2"')) throw new Error(`fetch /execute: ${res.status} ${text}`)
}
await sbx.runCode('1+1') // warm the connections
await sbx.commands.run('python3 -c "print(1+1)"')
async function envdHealth () {
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken },
  })
  await res.arrayBuffer()
  if (res.status !== 204) throw new Error(`envd /health: ${res.status}`)
}
await fetchCell()
await envdHealth()
for (let i = 0; i < n; i++) {
  let t = performance.now()
  const ex = await sbx.runCode('1+1')
  runCode.push(performance.now() - t)
  if (ex.text !== '2') throw new Error(`runCode('1+1') gave ${JSON.stringify(ex)}`)
  t = performance.now()
  await fetchCell()
  fetched.push(performance.now() - t)
  t = performance.now()
  await envdHealth()
  health.push(performance.now() - t)
  t = performance.now()
  await sbx.commands.run('python3 -c "print(1+1)"')
  commands.push(performance.now() - t)
}
await sbx.kill()
console.log(JSON.stringify({ runCode, commands, fetch: fetched, health }))
