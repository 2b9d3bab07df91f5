// SDK for smolvm's HTTP API (`smolvm serve`): fetch-based, no runtime
// dependencies. Types are in index.d.ts. node's fetch has no Unix sockets
// without undici's dispatcher (a dependency), so the SDK and its tests talk
// to a TCP listener.

import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { createHash, randomBytes } from 'node:crypto'

/** An error response from the server. */
export class SmolvmError extends Error {
  constructor(message, { code = '', status = 0, field = '', body = {} } = {}) {
    super(message)
    this.name = this.constructor.name
    this.code = code
    this.status = status
    this.field = field
    this.body = body
  }
}
/** Never existed, or removed; the message says which. */
export class NotFoundError extends SmolvmError {}
/** Expired; expiredAt says when. */
export class ExpiredError extends SmolvmError {
  get expiredAt() {
    return this.body.expired_at ? new Date(this.body.expired_at) : undefined
  }
}
export class UnauthorizedError extends SmolvmError {}
export class TimeoutError extends SmolvmError {}
export class ConflictError extends SmolvmError {}
export class InvalidRequestError extends SmolvmError {}
export class TooLargeError extends SmolvmError {}
export class BusyError extends SmolvmError {}

const byCode = {
  not_found: NotFoundError,
  no_such_file: NotFoundError,
  expired: ExpiredError,
  unauthorized: UnauthorizedError,
  timeout: TimeoutError,
  conflict: ConflictError,
  invalid: InvalidRequestError,
  too_large: TooLargeError,
  busy: BusyError,
}

function errorFrom(body, status = 0) {
  const Cls = byCode[body.code] ?? SmolvmError
  return new Cls(body.error ?? `HTTP ${status}`, { code: body.code ?? '', status, field: body.field ?? '', body })
}

function duration(v) {
  return v === undefined || v === null || typeof v === 'string' ? v : Number(v)
}

function envList(env) {
  return env ? Object.entries(env).map(([k, v]) => `${k}=${v}`) : undefined
}

function decodeData(ev) {
  return ev.encoding === 'base64' ? Buffer.from(ev.data ?? '', 'base64') : Buffer.from(ev.data ?? '', 'utf8')
}

/** Yields the parsed JSON lines of a streamed body. */
async function* jsonLines(body) {
  const decoder = new TextDecoder()
  let buf = ''
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true })
    let i
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim()
      buf = buf.slice(i + 1)
      if (line) yield JSON.parse(line)
    }
  }
  if (buf.trim()) yield JSON.parse(buf)
}

export class Client {
  /**
   * @param {{host?: string, token?: string}} [opts] host is http(s)://host:port
   *   (default $SMOLVM_HOST), token the API token (default $SMOLVM_TOKEN).
   */
  constructor({ host = process.env.SMOLVM_HOST, token = process.env.SMOLVM_TOKEN } = {}) {
    if (!host || !/^https?:\/\//.test(host)) {
      throw new Error(`host ${JSON.stringify(host)}: want http://host:port or https://host:port (fetch has no Unix sockets)`)
    }
    this.base = host.replace(/\/+$/, '')
    this.token = token ?? ''
  }

  async #fetch(method, path, { query, json, body, headers = {}, signal } = {}) {
    const url = new URL(this.base + path)
    for (const [k, v] of Object.entries(query ?? {})) url.searchParams.set(k, String(v))
    const h = { ...headers }
    if (this.token) h.Authorization = `Bearer ${this.token}`
    if (json !== undefined) {
      body = JSON.stringify(json)
      h['Content-Type'] = 'application/json'
    }
    let resp
    try {
      resp = await fetch(url, { method, headers: h, body, signal })
    } catch (e) {
      if (e?.name === 'TimeoutError') throw new TimeoutError(`smolvm server: ${method} ${path}: ${e.message}`, { code: 'timeout' })
      throw e
    }
    if (resp.status >= 300) {
      const text = await resp.text()
      let parsed
      try {
        parsed = JSON.parse(text)
      } catch {
        throw new SmolvmError(`smolvm server: HTTP ${resp.status}: ${text.slice(0, 200)}`, { status: resp.status })
      }
      throw errorFrom(parsed, resp.status)
    }
    return resp
  }

  async #json(method, path, opts) {
    const resp = await this.#fetch(method, path, opts)
    const text = await resp.text()
    return text ? JSON.parse(text) : undefined
  }

  #sb(ref, rest = '') {
    return `/v1/sandboxes/${encodeURIComponent(ref)}${rest}`
  }

  /** Create (and start) a sandbox; timeout is its time to live (seconds or "15m"; default 15m; 0: none). */
  create(opts = {}) {
    const { env, timeout, idleTimeout, onExpiry, volumes, start = true, ...rest } = opts
    const req = {
      ...rest, env: envList(env), timeout: duration(timeout), idle_timeout: duration(idleTimeout), on_expiry: onExpiry, start,
      volumes: volumes?.map(({ name, path, readOnly }) => ({ name, path, read_only: readOnly })),
    }
    return this.#json('POST', '/v1/sandboxes', { json: req })
  }

  list() {
    return this.#json('GET', '/v1/sandboxes')
  }

  /** Throws NotFoundError (never existed, removed) or ExpiredError (with expiredAt). */
  get(ref) {
    return this.#json('GET', this.#sb(ref))
  }

  start(ref) {
    return this.#json('POST', this.#sb(ref, '/start'))
  }

  stop(ref, grace = 10) {
    return this.#json('POST', this.#sb(ref, '/stop'), { json: { timeout: duration(grace) } })
  }

  /** Remove the sandbox, running or not. */
  async kill(ref) {
    await this.#json('DELETE', this.#sb(ref), { query: { force: true } })
  }

  setTimeout(ref, timeout) {
    return this.#json('POST', this.#sb(ref, '/timeout'), { json: { timeout: duration(timeout) } })
  }

  /**
   * Run a command, yielding {type: 'stdout'|'stderr', data: Buffer} as output
   * streams in, then {type: 'exit', exit}. Aborting the signal (or breaking
   * out of the loop) kills the command.
   */
  async *execStream(ref, args, { env, workdir, user, timeout, stdin, signal } = {}) {
    const req = { args, env: envList(env), workdir, user, timeout: duration(timeout), stdin }
    const controller = new AbortController()
    const onAbort = () => controller.abort(signal.reason)
    signal?.addEventListener('abort', onAbort)
    try {
      const resp = await this.#fetch('POST', this.#sb(ref, '/exec'), { json: req, signal: controller.signal })
      for await (const ev of jsonLines(resp.body)) {
        if (ev.type === 'stdout' || ev.type === 'stderr') yield { type: ev.type, data: decodeData(ev) }
        else if (ev.type === 'exit') {
          yield { type: 'exit', exit: ev.exit }
          return
        } else if (ev.type === 'error') throw errorFrom(ev.error ?? {})
      }
      throw new SmolvmError('smolvm server: exec stream ended without an exit')
    } finally {
      signal?.removeEventListener('abort', onAbort)
      controller.abort() // ends the request if the caller stopped early
    }
  }

  /**
   * Run a command to completion. onStdout/onStderr get output as it streams.
   * A command killed by its timeout throws TimeoutError (with .result).
   */
  async exec(ref, args, { onStdout, onStderr, ...opts } = {}) {
    const out = []
    const err = []
    for await (const ev of this.execStream(ref, args, opts)) {
      if (ev.type === 'stdout') {
        out.push(ev.data)
        onStdout?.(ev.data)
      } else if (ev.type === 'stderr') {
        err.push(ev.data)
        onStderr?.(ev.data)
      } else {
        const result = { exitCode: ev.exit.code, stdout: Buffer.concat(out), stderr: Buffer.concat(err), exit: ev.exit }
        if (ev.exit.timed_out) {
          const e = new TimeoutError(ev.exit.error ?? 'timed out', { code: 'timeout' })
          e.result = result
          throw e
        }
        return result
      }
    }
    throw new SmolvmError('smolvm server: exec stream ended without an exit')
  }

  /**
   * Start args (default bash -i -l, as E2B's pty.create) on a terminal of
   * rows x cols, over the exec WebSocket. onData gets the terminal's output
   * as it comes. Resolves once the server has accepted the connection.
   */
  async pty(ref, { args = ['/bin/bash', '-i', '-l'], rows = 24, cols = 80, env, workdir, user, timeout, onData } = {}) {
    const url = new URL(this.base + this.#sb(ref, '/exec/ws'))
    const ws = await WebSocketConn.open(url, this.token)
    ws.send(JSON.stringify({ args, tty: true, rows, cols, env: envList(env), workdir, user, timeout: duration(timeout) }), true)
    return new Pty(ws, onData)
  }

  /** Write data as the file at path (absolute) inside the sandbox. */
  async writeFile(ref, path, data) {
    const body = typeof data === 'string' ? Buffer.from(data) : data
    await this.#json('PUT', this.#sb(ref, '/files'), { query: { path }, body, headers: { 'Content-Type': 'application/octet-stream' } })
  }

  async readFile(ref, path) {
    const resp = await this.#fetch('GET', this.#sb(ref, '/files'), { query: { path } })
    return Buffer.from(await resp.arrayBuffer())
  }

  checkpoint(ref, { name, stop = false } = {}) {
    return this.#json('POST', this.#sb(ref, '/checkpoint'), { json: { name, stop } })
  }

  restore(snapshot, { name } = {}) {
    return this.#json('POST', `/v1/snapshots/${encodeURIComponent(snapshot)}/restore`, { json: { name } })
  }

  fork(ref, { n = 1, namePrefix } = {}) {
    return this.#json('POST', this.#sb(ref, '/fork'), { json: { n, name_prefix: namePrefix } })
  }

  pause(ref) {
    return this.#json('POST', this.#sb(ref, '/pause'))
  }

  resume(ref) {
    return this.#json('POST', this.#sb(ref, '/resume'))
  }

  snapshots() {
    return this.#json('GET', '/v1/snapshots')
  }

  async removeSnapshot(ref) {
    await this.#json('DELETE', `/v1/snapshots/${encodeURIComponent(ref)}`)
  }

  /**
   * Build a template: a sandbox of image runs start until ready passes, and is checkpointed;
   * create({ image: name }) restores it, its server already up. Without start, the image alone.
   */
  buildTemplate(name, { image, start, ready, env, workdir, user, public: pub, cpus, memory, hot } = {}) {
    const envList = env && Object.entries(env).map(([k, v]) => `${k}=${v}`)
    return this.#json('POST', '/v1/templates', { json: { name, image, start, ready, env: envList, workdir, user, public: pub, cpus, memory, hot } })
  }

  templates() {
    return this.#json('GET', '/v1/templates')
  }

  template(name) {
    return this.#json('GET', `/v1/templates/${encodeURIComponent(name)}`)
  }

  async removeTemplate(name) {
    await this.#json('DELETE', `/v1/templates/${encodeURIComponent(name)}`)
  }

  /** Create a volume of size bytes (or "10g"; default 1 GiB): a file system that outlives sandboxes. */
  createVolume(name, { size } = {}) {
    return this.#json('POST', '/v1/volumes', { json: { name, size } })
  }

  volumes() {
    return this.#json('GET', '/v1/volumes')
  }

  /** Throws NotFoundError for a missing volume, and for another tenant's. */
  volume(name) {
    return this.#json('GET', `/v1/volumes/${encodeURIComponent(name)}`)
  }

  /** Throws ConflictError while sandboxes mount it, unless force. */
  async removeVolume(name, { force = false } = {}) {
    await this.#json('DELETE', `/v1/volumes/${encodeURIComponent(name)}`, { query: { force } })
  }

  /** Boot headless Chromium and checkpoint it as the golden browser; browsers may reach allowHosts/allowCidrs. */
  browserStart({ golden, allowHosts, allowCidrs, mode, image, timeout } = {}) {
    return this.#json('POST', '/v1/browsers/golden', {
      json: { golden, allow_hosts: allowHosts, allow_cidrs: allowCidrs, mode, image, timeout: duration(timeout) },
    })
  }

  /** A fresh browser from the golden: { id, name, cdp_url, http_url, expires_at }; cdp_url is for connectOverCDP. */
  browserNew({ golden, name, ttl } = {}) {
    return this.#json('POST', '/v1/browsers', { json: { golden, name, ttl: duration(ttl) } })
  }

  async browserRelease(ref) {
    await this.#json('DELETE', `/v1/browsers/${encodeURIComponent(ref)}`)
  }

  /** A PNG of url, taken in a fresh browser that is removed afterwards. */
  async screenshot(url, { fullPage = false, width, height, golden } = {}) {
    const resp = await this.#fetch('POST', '/v1/browsers/screenshot', { json: { url, full_page: fullPage, width, height, golden } })
    return Buffer.from(await resp.arrayBuffer())
  }

  /**
   * Start an agent run (smolvm agent run --task) on repo, a git work tree on
   * the server's host; agent is "builtin" (the server's model) or an agent
   * CLI command line. Resolves to the run, running; agentRunWatch follows it.
   */
  agentRunStart(task, repo, { test, agent, maxIterations, maxTime, maxTokens, maxCost, testTimeout, flakyReruns, stuckAfter, allowTestChanges } = {}) {
    const json = {
      task, repo, test, agent, max_iterations: maxIterations, max_time: duration(maxTime), max_tokens: maxTokens, max_cost: maxCost,
      test_timeout: duration(testTimeout), flaky_reruns: flakyReruns, stuck_after: stuckAfter, allow_test_changes: allowTestChanges,
    }
    return this.#json('POST', '/v1/agent/runs', { json })
  }

  /** The server's agent runs, newest first. */
  agentRuns() {
    return this.#json('GET', '/v1/agent/runs')
  }

  /** A run and its iterations: { run, iterations }. */
  agentRun(id) {
    return this.#json('GET', `/v1/agent/runs/${encodeURIComponent(id)}`)
  }

  /** Stop a running run; resolves to it once ended (stopped, its best checkpoint standing). */
  agentRunStop(id) {
    return this.#json('POST', `/v1/agent/runs/${encodeURIComponent(id)}/stop`)
  }

  /** Yield the run's progress (phase, iteration, passed, failed, tokens, cost_usd, elapsed) until its "done"; nothing if it is no longer running. */
  async *agentRunWatch(id, { signal } = {}) {
    const ac = new AbortController()
    const abort = () => ac.abort()
    signal?.addEventListener('abort', abort)
    // Subscribed once the headers are in: a run that ends is seen in its
    // state below or in the stream.
    const resp = await this.#fetch('GET', '/v1/events', { signal: ac.signal })
    try {
      if ((await this.agentRun(id)).run.state !== 'running') return
      for await (const e of jsonLines(resp.body)) {
        if (e.id !== id || !e.data) continue
        yield e.data
        if (e.data.phase === 'done') return
      }
    } finally {
      signal?.removeEventListener('abort', abort)
      ac.abort()
    }
  }

  /** Yield lifecycle events until the signal aborts or the caller stops. */
  async *events({ signal } = {}) {
    const resp = await this.#fetch('GET', '/v1/events', { signal })
    yield* jsonLines(resp.body)
  }
}

// Exec WebSocket stream bytes (api.StreamStdin and friends).
const STDIN = 0
const STDOUT = 1
const STDERR = 2

/** A command on a terminal inside a sandbox (Client.pty). */
export class Pty {
  #ws
  #exited
  constructor(ws, onData) {
    this.#ws = ws
    this.#exited = new Promise((resolve, reject) => {
      let settled = false
      ws.onMessage = (text, data) => {
        if (!text) {
          if (data.length > 0 && (data[0] === STDOUT || data[0] === STDERR)) onData?.(data.subarray(1))
          return
        }
        const m = JSON.parse(data.toString())
        if (m.exit) {
          settled = true
          resolve(m.exit)
        } else if (m.error) {
          settled = true
          reject(errorFrom(m.error))
        }
        if (settled) ws.close()
      }
      ws.onClose = (err) => {
        if (!settled) reject(new SmolvmError(`smolvm server: exec connection closed without an exit${err ? `: ${err.message}` : ''}`))
      }
    })
    this.#exited.catch(() => {}) // read by wait(); not an unhandled rejection meanwhile
  }

  /** Type data (a string or bytes) into the terminal. */
  write(data) {
    const b = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data)
    this.#ws.send(Buffer.concat([Buffer.from([STDIN]), b]), false)
  }

  resize({ rows, cols }) {
    this.#ws.send(JSON.stringify({ resize: { rows, cols } }), true)
  }

  /** Send signal (default SIGKILL, 9) to the command's process group. */
  kill(signal = 9) {
    this.#ws.send(JSON.stringify({ signal }), true)
  }

  /** The command's exit ({code, signal, ...}); rejects if it could not run. */
  wait() {
    return this.#exited
  }

  /** Close the connection, which kills the command. */
  close() {
    this.#ws.close()
  }
}

/** The client side of RFC 6455, enough for the exec WebSocket. */
class WebSocketConn {
  onMessage = () => {}
  onClose = () => {}
  #sock
  #buf = Buffer.alloc(0)
  #frags = []
  #fragText = false
  #closed = false

  static open(url, token) {
    const key = randomBytes(16).toString('base64')
    const headers = { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Key': key, 'Sec-WebSocket-Version': '13' }
    if (token) headers.Authorization = `Bearer ${token}`
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { headers })
    return new Promise((resolve, reject) => {
      req.on('upgrade', (res, sock, head) => {
        const want = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
        if (res.headers['sec-websocket-accept'] !== want) {
          sock.destroy()
          reject(new SmolvmError('smolvm server: bad WebSocket handshake'))
          return
        }
        resolve(new WebSocketConn(sock, head))
      })
      req.on('response', async (res) => {
        let text = ''
        for await (const chunk of res) text += chunk
        try {
          reject(errorFrom(JSON.parse(text), res.statusCode))
        } catch {
          reject(new SmolvmError(`smolvm server: HTTP ${res.statusCode}: ${text.slice(0, 200)}`, { status: res.statusCode }))
        }
      })
      req.on('error', reject)
      req.end()
    })
  }

  constructor(sock, head) {
    this.#sock = sock
    sock.setNoDelay(true)
    sock.on('data', (b) => this.#read(b))
    sock.on('close', () => this.#end())
    sock.on('error', (err) => this.#end(err))
    if (head?.length) queueMicrotask(() => this.#read(head))
  }

  send(data, text) {
    if (this.#closed) throw new SmolvmError('smolvm server: the terminal\'s connection is closed')
    const payload = typeof data === 'string' ? Buffer.from(data) : data
    const n = payload.length
    const hdr = n < 126 ? Buffer.alloc(2) : n < 65536 ? Buffer.alloc(4) : Buffer.alloc(10)
    hdr[0] = 0x80 | (text === true ? 0x1 : text === false ? 0x2 : text)
    if (n < 126) hdr[1] = 0x80 | n
    else if (n < 65536) {
      hdr[1] = 0x80 | 126
      hdr.writeUInt16BE(n, 2)
    } else {
      hdr[1] = 0x80 | 127
      hdr.writeBigUInt64BE(BigInt(n), 2)
    }
    const mask = randomBytes(4)
    const masked = Buffer.alloc(n)
    for (let i = 0; i < n; i++) masked[i] = payload[i] ^ mask[i & 3]
    this.#sock.write(Buffer.concat([hdr, mask, masked]))
  }

  close() {
    if (!this.#closed) this.#sock.destroy()
  }

  #end(err) {
    if (this.#closed) return
    this.#closed = true
    this.#sock.destroy()
    this.onClose(err)
  }

  #read(chunk) {
    this.#buf = Buffer.concat([this.#buf, chunk])
    for (;;) {
      const b = this.#buf
      if (b.length < 2) return
      let n = b[1] & 0x7f
      let off = 2
      if (n === 126) {
        if (b.length < 4) return
        n = b.readUInt16BE(2)
        off = 4
      } else if (n === 127) {
        if (b.length < 10) return
        n = Number(b.readBigUInt64BE(2))
        off = 10
      }
      if (b.length < off + n) return
      const op = b[0] & 0x0f
      const fin = (b[0] & 0x80) !== 0
      const payload = b.subarray(off, off + n)
      this.#buf = b.subarray(off + n)
      if (op === 0x8) return this.#end()
      if (op === 0x9) {
        this.send(payload, 0xa)
        continue
      }
      if (op === 0xa) continue
      if (op === 0x1 || op === 0x2) this.#fragText = op === 0x1
      this.#frags.push(payload)
      if (fin) {
        const msg = Buffer.concat(this.#frags)
        this.#frags = []
        this.onMessage(this.#fragText, msg)
      }
    }
  }
}
