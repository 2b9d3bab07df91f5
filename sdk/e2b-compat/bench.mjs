// Times the E2B SDK's own path through smolvm: Sandbox.create followed by
// commands.run('true'), and commands.run('true') alone on a live sandbox.
// Prints {"createRun": [ms…], "exec": [ms…]} on stdout. Run by the Go
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
await sbx.kill()

console.log(JSON.stringify({ createRun, exec }))
