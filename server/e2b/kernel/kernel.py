# smolvm's code interpreter: the server that @e2b/code-interpreter talks to
# on port 49999 inside a sandbox (POST /execute, /contexts...). Python
# stdlib only. Each context is a worker process holding one persistent
# interpreter (its globals, cwd, imports), so contexts are separate, a
# restart is a new process, and an interrupt is SIGINT to that worker.
#
#   python3 kernel.py PORT         the server
#   python3 kernel.py --worker     one context's interpreter (started by it)
import ast
import base64
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
import uuid
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


# --- the worker: one context's interpreter ------------------------------

class Emitter:
    """Writes messages to the server, one JSON line each."""

    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()

    def send(self, msg):
        line = json.dumps(msg) + '\n'
        with self.lock:
            self.out.write(line)
            self.out.flush()


class Stream:
    """sys.stdout or sys.stderr of user code: a message per line (what
    print writes in two calls arrives as one), the rest at flush."""

    def __init__(self, emit, kind):
        self.emit, self.kind, self.buf = emit, kind, ''

    def write(self, s):
        self.buf += s
        i = self.buf.rfind('\n')
        if i >= 0:
            text, self.buf = self.buf[:i + 1], self.buf[i + 1:]
            self.emit.send({'type': self.kind, 'text': text})
        return len(s)

    def flush(self):
        if self.buf:
            text, self.buf = self.buf, ''
            self.emit.send({'type': self.kind, 'text': text})

    def isatty(self):
        return False

    @property
    def encoding(self):
        return 'utf-8'


# Jupyter's MIME types and the keys the SDK reads them under.
FORMATS = [('_repr_html_', 'html'), ('_repr_markdown_', 'markdown'), ('_repr_svg_', 'svg'),
           ('_repr_png_', 'png'), ('_repr_jpeg_', 'jpeg'), ('_repr_pdf_', 'pdf'),
           ('_repr_latex_', 'latex'), ('_repr_json_', 'json'), ('_repr_javascript_', 'javascript')]


def result_of(value, main):
    """The result message for a value, as E2B's server builds it."""
    msg = {'type': 'result', 'is_main_result': main}
    text = repr(value)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in '\'"':
        text = text[1:-1]
    msg['text'] = text
    for method, key in FORMATS:
        fn = getattr(value, method, None)
        if callable(fn):
            try:
                data = fn()
            except Exception:
                continue
            if data is None:
                continue
            if isinstance(data, bytes):
                data = base64.b64encode(data).decode()
            msg[key] = data
    return msg


def figures(emit):
    """Sends matplotlib's open figures as PNG results, as Jupyter's inline
    backend does, and closes them."""
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return
    import io
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format='png', bbox_inches='tight')
        emit.send({'type': 'result', 'is_main_result': False, 'text': repr(fig),
                   'png': base64.b64encode(buf.getvalue()).decode()})
    plt.close('all')


def worker():
    # Messages go to the original stdout; user code gets Streams.
    emit = Emitter(os.fdopen(os.dup(1), 'w', encoding='utf-8'))
    # Figures are sent at the end of each cell (figures), as Jupyter's
    # inline backend does; plt.show() has nothing to show meanwhile.
    os.environ.setdefault('MPLBACKEND', 'Agg')
    warnings.filterwarnings('ignore', message='.*non-GUI backend')
    sys.stdout, sys.stderr = Stream(emit, 'stdout'), Stream(emit, 'stderr')
    ns = {'__name__': '__main__', '__builtins__': __builtins__}
    count = 0
    emit.send({'type': 'ready'})
    while True:
        # SIGINT interrupts a cell, and only a cell.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        line = sys.stdin.readline()
        if not line:
            return
        req = json.loads(line)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        count += 1
        old_env = {}
        try:
            emit.send({'type': 'number_of_executions', 'execution_count': count})
            for k, v in (req.get('env_vars') or {}).items():
                old_env[k] = os.environ.get(k)
                os.environ[k] = str(v)
            run_cell(req['code'], ns, count, emit)
        except KeyboardInterrupt:
            emit.send({'type': 'error', 'name': 'KeyboardInterrupt', 'value': 'interrupted', 'traceback': ''})
        finally:
            try:
                for k, v in old_env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            finally:
                emit.send({'type': 'end_of_execution'})


def flush():
    sys.stdout.flush()
    sys.stderr.flush()


def run_cell(code, ns, count, emit):
    name = '<cell %d>' % count
    try:
        tree = ast.parse(code, name)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, 'exec'), ns)
        value = eval(compile(last, name, 'eval'), ns) if last is not None else None
        flush()
        figures(emit)
        if value is not None:
            ns['_'] = value
            emit.send(result_of(value, True))
    except BaseException as e:  # KeyboardInterrupt and SystemExit included
        flush()
        tb = traceback.TracebackException.from_exception(e)
        # Drop the kernel's own frames: the traceback starts in the cell.
        while tb.stack and not tb.stack[0].filename.startswith('<cell'):
            tb.stack.pop(0)
        emit.send({'type': 'error', 'name': type(e).__name__, 'value': str(e), 'traceback': ''.join(tb.format())})


# --- the server --------------------------------------------------------

DEFAULT_CWD = '/home/user' if os.path.isdir('/home/user') else '/'


class Context:
    def __init__(self, cwd, id=None):
        self.id = id or uuid.uuid4().hex
        self.language = 'python'
        self.cwd = cwd
        self.lock = threading.Lock()  # one cell at a time
        self.proc = None
        self.start()

    def start(self):
        # Unbuffered pipes: execute selects on the worker's stdout and the
        # client's socket in one thread, and reads whole lines itself.
        self.proc = subprocess.Popen([sys.executable, '-u', os.path.abspath(__file__), '--worker'],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.cwd, bufsize=0)
        self.buf = b''
        if self.line() is None:
            raise RuntimeError('the interpreter did not start')

    def line(self):
        """The worker's next message line, or None at its end."""
        while b'\n' not in self.buf:
            data = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b'\n', 1)
        return line

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def restart(self):
        # Not under the cell lock: a restart also ends a running cell,
        # whose reader then sees its process gone.
        self.stop()
        self.start()

    def json(self):
        return {'id': self.id, 'language': self.language, 'cwd': self.cwd}


contexts = {}
contexts_lock = threading.Lock()
default = None


class HTTPError(Exception):
    def __init__(self, status, msg):
        self.status, self.msg = status, msg


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    # Each NDJSON line is its own small write: without TCP_NODELAY the
    # second waits for the peer's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send(self, status, body, ctype='application/json'):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(n) if n else b''
        if not raw.strip():
            return {}
        try:
            v = json.loads(raw)
        except ValueError as e:
            raise HTTPError(400, 'malformed JSON body: %s' % e)
        if not isinstance(v, dict):
            raise HTTPError(400, 'the body must be a JSON object')
        return v

    def route(self, method):
        path = self.path.split('?', 1)[0]
        parts = [p for p in path.split('/') if p]
        try:
            if method == 'GET' and parts == ['health']:
                return self.send(200, 'OK', 'text/plain')
            if method == 'POST' and parts == ['execute']:
                return self.execute(self.body())
            if parts[:1] == ['contexts']:
                return self.contexts(method, parts[1:])
            raise HTTPError(404, 'no route %s %s' % (method, path))
        except HTTPError as e:
            self.send(e.status, e.msg, 'text/plain')

    def do_GET(self):
        self.route('GET')

    def do_POST(self):
        self.route('POST')

    def do_DELETE(self):
        self.route('DELETE')

    def lookup(self, id):
        with contexts_lock:
            ctx = contexts.get(id)
        if ctx is None:
            raise HTTPError(404, 'Context %s not found' % id)
        return ctx

    def contexts(self, method, rest):
        if method == 'GET' and not rest:
            with contexts_lock:
                return self.send(200, json.dumps([c.json() for c in contexts.values()]))
        if method == 'POST' and not rest:
            req = self.body()
            lang = req.get('language') or 'python'
            if lang != 'python':
                raise HTTPError(400, 'language %r is not supported: python only' % lang)
            cwd = req.get('cwd') or DEFAULT_CWD
            if not os.path.isdir(cwd):
                raise HTTPError(400, 'cwd %r is not a directory' % cwd)
            ctx = Context(cwd)
            with contexts_lock:
                contexts[ctx.id] = ctx
            return self.send(200, json.dumps(ctx.json()))
        if method == 'DELETE' and len(rest) == 1:
            ctx = self.lookup(rest[0])
            with contexts_lock:
                contexts.pop(ctx.id, None)
            ctx.stop()
            return self.send(200, 'null')
        if method == 'POST' and len(rest) == 2 and rest[1] == 'restart':
            self.lookup(rest[0]).restart()
            return self.send(200, 'null')
        raise HTTPError(404, 'no route %s /contexts/%s' % (method, '/'.join(rest)))

    def execute(self, req):
        code = req.get('code')
        if not isinstance(code, str):
            raise HTTPError(400, 'code: a string is required')
        if req.get('context_id') and req.get('language'):
            raise HTTPError(400, 'Only one of context_id or language can be provided')
        lang = req.get('language') or 'python'
        if lang != 'python':
            raise HTTPError(400, 'language %r is not supported: python only' % lang)
        ctx = self.lookup(req['context_id']) if req.get('context_id') else default
        env = req.get('env_vars') or {}
        # Headers go out at once: the SDK's request timeout covers only them.
        self.send_response(200)
        self.send_header('Content-Type', 'application/x-ndjson')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        self.wfile.flush()
        with ctx.lock:
            proc = ctx.proc
            proc.stdin.write((json.dumps({'code': code, 'env_vars': env}) + '\n').encode())
            out, sock = proc.stdout.fileno(), self.connection
            watch, gone = [out, sock], False
            while True:
                if b'\n' not in ctx.buf:
                    # The client going away (EOF) interrupts the cell.
                    ready, _, _ = select.select(watch, [], [])
                    if sock in ready:
                        try:
                            peek = sock.recv(1, socket.MSG_PEEK)
                        except OSError:
                            peek = b''
                        watch = [out]  # EOF, or (unlikely) a pipelined request
                        if not peek:
                            gone = True
                            proc.send_signal(signal.SIGINT)
                    if out not in ready:
                        continue
                line = ctx.line()
                if line is None:
                    self.chunk({'type': 'error', 'name': 'ContextRestarting', 'value': 'the interpreter exited', 'traceback': ''})
                    if ctx.proc is proc:  # it died; a restart replaced it otherwise
                        ctx.restart()
                    break
                msg = json.loads(line)
                if msg['type'] == 'end_of_execution':
                    break
                if not gone:
                    gone = not self.chunk(msg)
        self.chunk(None)

    def chunk(self, msg):
        """Writes one NDJSON line as one chunk (None: the last chunk)."""
        data = b'' if msg is None else (json.dumps(msg) + '\n').encode()
        try:
            self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
            self.wfile.flush()
            return True
        except OSError:
            return False


def main():
    global default
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 49999
    # Debian's matplotlib needs a matplotlibrc outside its data (in /etc),
    # which an image may lack: the workers get one that says only agg.
    rc = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'matplotlibrc')
    if not os.path.exists(rc):
        with open(rc, 'w') as f:
            f.write('backend: agg\n')
    os.environ.setdefault('MATPLOTLIBRC', rc)
    default = Context(DEFAULT_CWD)
    contexts[default.id] = default
    srv = ThreadingHTTPServer(('127.0.0.1', port), Handler)
    srv.daemon_threads = True
    print('listening on %d' % port, flush=True)
    srv.serve_forever()


if __name__ == '__main__':
    if sys.argv[1:] == ['--worker']:
        worker()
    else:
        main()
