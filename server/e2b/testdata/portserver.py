# A server for the port tests, run inside a sandbox: python3 -c "$(cat)" PORT [ADDR].
# GET answers its path and headers as JSON; POST echoes the body; /stream
# sends "first", waits for GET /release, then sends "second"; /ws is a
# WebSocket that echoes each message prefixed with "echo:"; POST /duplex
# answers at once and then echoes each line of the body as it comes.
import base64, hashlib, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RELEASE = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype='application/json'):
        self.send_response(code)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == '/ws':
            return self.websocket()
        if self.path == '/stream':
            return self.stream()
        if self.path == '/release':
            RELEASE.set()
            return self.reply(200, b'released', 'text/plain')
        self.reply(200, json.dumps({'method': self.command, 'path': self.path, 'headers': dict(self.headers)}).encode())

    do_DELETE = do_OPTIONS = do_GET

    def do_POST(self):
        if self.path == '/duplex':
            return self.duplex()
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        self.reply(200, body, 'application/octet-stream')

    do_PUT = do_PATCH = do_POST

    def duplex(self):
        self.send_response(200)
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        self.wfile.flush()
        left = int(self.headers.get('Content-Length', 0))
        while left > 0:
            line = self.rfile.readline(left)
            left -= len(line)
            self.wfile.write(b'%x\r\n%s\r\n' % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b'0\r\n\r\n')

    def stream(self):
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()

        def chunk(b):
            self.wfile.write(b'%x\r\n%s\r\n' % (len(b), b))
            self.wfile.flush()
        chunk(b'first\n')
        RELEASE.wait(30)
        RELEASE.clear()
        chunk(b'second\n')
        chunk(b'')

    def websocket(self):
        key = self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
        self.send_response(101)
        self.send_header('Upgrade', 'websocket')
        self.send_header('Connection', 'Upgrade')
        self.send_header('Sec-WebSocket-Accept', base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        r = self.rfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0f, h[1] & 0x7f
            if n == 126:
                n = int.from_bytes(r.read(2), 'big')
            elif n == 127:
                n = int.from_bytes(r.read(8), 'big')
            mask = r.read(4) if h[1] & 0x80 else b'\0\0\0\0'
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                self.wfile.write(b'\x88\x02' + data[:2])
                self.wfile.flush()
                return
            if op == 9:
                op = 10
            elif op in (1, 2):
                data = b'echo:' + data
            size = bytes([len(data)]) if len(data) < 126 else bytes([126]) + len(data).to_bytes(2, 'big')
            self.wfile.write(bytes([0x80 | op]) + size + data)
            self.wfile.flush()


ThreadingHTTPServer((sys.argv[2] if len(sys.argv) > 2 else '127.0.0.1', int(sys.argv[1])), Handler).serve_forever()
