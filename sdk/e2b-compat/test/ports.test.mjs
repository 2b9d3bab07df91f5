// A port inside a sandbox, reached at the SDK's own getHost(port): the
// name PORT-ID.DOMAIN resolves to the server under test in this process
// only (node:http's lookup option); the SDK is not touched.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import crypto from 'node:crypto'
import { Sandbox } from 'e2b'

const domain = process.env.SMOLVM_E2B_DOMAIN
const api = new URL(process.env.E2B_API_URL)
const created = []
after(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})))
})

// toServer resolves every name to the server's loopback address.
const toServer = (_host, opts, cb) =>
  opts?.all ? cb(null, [{ address: api.hostname, family: 4 }]) : cb(null, api.hostname, 4)

// get requests path from host (a getHost result) and returns status and body.
function get(host, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host, port: api.port, path, headers, lookup: toServer }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
  })
}

// wsEcho opens a WebSocket at host+path, sends msg and returns the first
// message back.
function wsEcho(host, path, headers, msg) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host, port: api.port, path, lookup: toServer,
      headers: {
        ...headers, Connection: 'Upgrade', Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
      },
    })
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)))
    req.on('upgrade', (res, socket) => {
      const data = Buffer.from(msg)
      const mask = crypto.randomBytes(4)
      socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | data.length]), mask, data.map((b, i) => b ^ mask[i % 4])]))
      let buf = Buffer.alloc(0)
      socket.on('data', (d) => {
        buf = Buffer.concat([buf, d])
        if (buf.length >= 2 && buf.length >= 2 + buf[1]) {
          socket.destroy()
          resolve(buf.subarray(2, 2 + buf[1]).toString())
        }
      })
    })
    req.on('error', reject)
    req.end()
  })
}

test('getHost(port) reaches a server inside the sandbox, HTTP and WebSocket', async () => {
  assert.ok(domain, 'SMOLVM_E2B_DOMAIN must be set (run through go test ./server/e2b)')
  const sbx = await Sandbox.create('base', { timeoutMs: 300_000 })
  created.push(sbx)
  await sbx.files.write('/tmp/www/hello.txt', 'hi from the sandbox')
  await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www', { background: true })
  const ws = await sbx.files.write('/tmp/ws.py', process.env.SMOLVM_PORT_SERVER ?? '')
  assert.ok(ws)
  await sbx.commands.run('python3 /tmp/ws.py 8001 0.0.0.0', { background: true })

  const host = sbx.getHost(8000)
  assert.equal(host, `8000-${sbx.sandboxId}.${domain}`)
  const auth = { 'E2B-Traffic-Access-Token': sbx.trafficAccessToken }
  let r
  for (let i = 0; i < 100; i++) {
    r = await get(host, '/hello.txt', auth)
    if (r.status === 200) break
    await new Promise((res) => setTimeout(res, 100))
  }
  assert.deepEqual(r, { status: 200, body: 'hi from the sandbox' })

  const denied = await get(host, '/hello.txt')
  assert.equal(denied.status, 401)
  assert.match(JSON.parse(denied.body).message, /missing or invalid access token/)
  const closed = await get(sbx.getHost(8002), '/', auth)
  assert.equal(closed.status, 502)
  assert.match(JSON.parse(closed.body).message, /nothing answers on port 8002/)

  for (let i = 0; (await get(sbx.getHost(8001), '/', auth)).status !== 200; i++) {
    assert.ok(i < 100, 'the WebSocket server never answered')
    await new Promise((res) => setTimeout(res, 100))
  }
  assert.equal(await wsEcho(sbx.getHost(8001), '/ws', auth, 'ping from node'), 'echo:ping from node')
})
