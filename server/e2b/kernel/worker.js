// smolvm's code interpreter: one JavaScript context's interpreter (node),
// started by kernel.py for a context of language js. It speaks the Python
// worker's protocol: a JSON request per line on stdin ({code, env_vars}),
// answered by JSON message lines on stdout that end with END; one END when
// it is ready. State lives in this process's global scope, so top-level
// declarations persist from cell to cell, and contexts are separate.
'use strict'
const fs = require('node:fs')
const readline = require('node:readline')
const util = require('node:util')
const vm = require('node:vm')

const END = '{"type": "end_of_execution"}' // byte for byte as kernel.py's
const STREAM_DELAY = 5 // ms a stdout/stderr line may wait while a cell runs on

let pending = []
let timer = null

function write() {
  clearTimeout(timer)
  timer = null
  if (pending.length === 0) return
  const data = Buffer.from(pending.join('\n') + '\n')
  pending = []
  for (let off = 0; off < data.length; ) off += fs.writeSync(1, data, off)
}

function send(msg, stream) {
  pending.push(JSON.stringify(msg))
  if (stream && timer === null) timer = setTimeout(write, STREAM_DELAY)
}

function end() {
  pending.push(END)
  write()
}

// User code's output: console and process.stdout/stderr become messages.
const streams = { stdout: process.stdout, stderr: process.stderr }
for (const kind of ['stdout', 'stderr']) {
  streams[kind].write = (chunk, encoding, cb) => {
    send({ type: kind, text: typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString() }, true)
    if (typeof encoding === 'function') encoding()
    else if (typeof cb === 'function') cb()
    return true
  }
}
const log = (kind) => (...args) => send({ type: kind, text: util.format(...args) + '\n' }, true)
globalThis.console = Object.assign(Object.create(console), {
  log: log('stdout'), info: log('stdout'), debug: log('stdout'),
  error: log('stderr'), warn: log('stderr'), trace: log('stderr'),
})
globalThis.require = require

// SIGINT interrupts a cell: breakOnSigint stops synchronous code, and
// interrupt rejects a cell waiting on a promise; between cells it is
// ignored.
let interrupt = null
process.on('SIGINT', () => interrupt?.())

// What user code leaves running may fail after its cell: that is told on
// stderr, and the context lives on.
for (const event of ['uncaughtException', 'unhandledRejection']) {
  process.on(event, (e) => send({ type: 'stderr', text: `${event}: ${util.inspect(e)}\n` }, true))
}

class Interrupted extends Error {
  constructor() {
    super('interrupted')
    this.name = 'KeyboardInterrupt'
  }
}

function resultOf(value) {
  return { type: 'result', is_main_result: true, text: typeof value === 'string' ? value : util.inspect(value) }
}

// traceback is e's stack from the cell's own frames: the worker's are cut.
function traceback(e) {
  const lines = String(e.stack ?? '').split('\n')
  return lines.filter((l) => !l.startsWith('    at ') || l.includes('<cell ')).join('\n')
}

// A TypeScript context runs each cell through node's own type stripping
// (kernel.py offers typescript only where node has it).
const stripTypes = process.argv.includes('--typescript') ? require('node:module').stripTypeScriptTypes : null

// A cell with top-level await is not a script. Node's REPL evaluator
// rewrites such a cell into an async function whose declarations still
// land in the global scope (as the REPL and Jupyter's JavaScript kernels
// do), so it is borrowed for those cells; a REPL on idle streams, made at
// the first one.
let repl = null
function replEval(code, filename) {
  if (repl === null) {
    const { PassThrough } = require('node:stream')
    repl = require('node:repl').start({ input: new PassThrough(), output: new PassThrough(), terminal: false, useGlobal: true, prompt: '' })
  }
  return new Promise((resolve, reject) => {
    repl.eval(code, repl.context, filename, (err, value) => {
      if (err) reject(err.err ?? err) // a repl.Recoverable wraps a SyntaxError
      else resolve(value)
    })
  })
}

async function runCell(code, count) {
  const filename = `<cell ${count}>`
  if (stripTypes !== null) code = stripTypes(code)
  let value
  let script = null
  try {
    script = new vm.Script(code, { filename })
  } catch (e) {
    if (!(e instanceof SyntaxError) || !code.includes('await')) throw e
  }
  if (script !== null) value = script.runInThisContext({ breakOnSigint: true })
  else value = replEval(code, filename)
  if (value instanceof Promise) {
    value = await Promise.race([value, new Promise((_, reject) => { interrupt = () => reject(new Interrupted()) })])
  }
  if (value !== undefined) send(resultOf(value))
}

async function main() {
  let count = 0
  end() // ready
  for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    const req = JSON.parse(line)
    count++
    send({ type: 'number_of_executions', execution_count: count })
    const old = {}
    for (const [k, v] of Object.entries(req.env_vars ?? {})) {
      old[k] = process.env[k]
      process.env[k] = String(v)
    }
    try {
      await runCell(req.code, count)
    } catch (e) {
      const interrupted = e instanceof Interrupted || (e?.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')
      if (interrupted) send({ type: 'error', name: 'KeyboardInterrupt', value: 'interrupted', traceback: '' })
      else if (e instanceof Error) send({ type: 'error', name: e.name, value: e.message, traceback: traceback(e) })
      else send({ type: 'error', name: 'Error', value: util.inspect(e), traceback: '' })
    } finally {
      interrupt = null
    }
    for (const [k, v] of Object.entries(old)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
    end()
  }
}

main()
