// Times the E2B SDK's own path through smolvm: Sandbox.create followed by
// commands.run('true'), commands.run('true') alone on a live sandbox, and
// files.write alone and until a watchDir on its directory sees the write.
// Prints {"createRun": [ms…], "exec": [ms…], "write": [ms…], "watched":
// [ms…]} on stdout. Run by the Go
// benchmark BenchmarkSDK in ./e2b, which compares the direct Manager path.
import { Sandbox } from 'e2b'

const n = Number(process.env.SMOLVM_BENCH_N ?? 20)
const createRun = []
const exec = []

for (let i = 0; i < n; i++) {
  const t = performance.now()
  const sbx = await Sandbox.create('base')
  await sbx.commands.run('true')
  createRun.push(performance.now() - t)
  await sbx.kill()
}

const sbx = await Sandbox.create('base')
await sbx.commands.run('true') // the first run warms the connection pool
for (let i = 0; i < n; i++) {
  const t = performance.now()
  await sbx.commands.run('true')
  exec.push(performance.now() - t)
}

const write = []
const watched = []
await sbx.files.makeDir('/tmp/w')
let onWrite = () => {}
const w = await sbx.files.watchDir('/tmp/w', (e) => e.type === 'write' && onWrite(e.name))
for (let i = 0; i < n; i++) {
  let t = performance.now()
  await sbx.files.write(`/tmp/w/plain${i}`, 'x')
  write.push(performance.now() - t)
  const seen = new Promise((resolve) => (onWrite = (name) => name === `f${i}` && resolve()))
  t = performance.now()
  await sbx.files.write(`/tmp/w/f${i}`, 'x')
  await seen
  watched.push(performance.now() - t)
}
await w.stop()
await sbx.kill()

console.log(JSON.stringify({ createRun, exec, write, watched }))
