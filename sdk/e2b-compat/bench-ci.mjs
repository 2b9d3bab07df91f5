// Times @e2b/code-interpreter's runCode('1+1') on a warm sandbox against
// commands.run of the same code as a new python3 process, interleaved.
// Prints {"runCode": [ms…], "commands": [ms…]} on stdout. Run by the Go
// benchmark BenchmarkCodeInterpreter in ./server/e2b.
import { Sandbox } from '@e2b/code-interpreter'

const n = Number(process.env.SMOLVM_BENCH_N ?? 20)
const runCode = []
const commands = []
const sbx = await Sandbox.create()
await sbx.runCode('1+1') // warm the connections
await sbx.commands.run('python3 -c "print(1+1)"')
for (let i = 0; i < n; i++) {
  let t = performance.now()
  const ex = await sbx.runCode('1+1')
  runCode.push(performance.now() - t)
  if (ex.text !== '2') throw new Error(`runCode('1+1') gave ${JSON.stringify(ex)}`)
  t = performance.now()
  await sbx.commands.run('python3 -c "print(1+1)"')
  commands.push(performance.now() - t)
}
await sbx.kill()
console.log(JSON.stringify({ runCode, commands }))
