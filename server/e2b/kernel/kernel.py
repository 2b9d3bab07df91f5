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
import functools
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


# --- the worker: one context's interpreter ------------------------------

# The last line of every answer, byte for byte (worker.js writes the same):
# the server looks for it without parsing the other lines.
END = '{"type": "end_of_execution"}'

# STREAM_DELAY bounds how long a stdout/stderr line waits to be sent while
# its cell runs on; a cell that ends sooner sends its whole answer at once.
STREAM_DELAY = 0.005


class Emitter:
    """Sends messages to the server, one JSON line each, in as few writes
    as it can: a cell's messages wait, and its end sends them all in one
    write, so a short cell costs one write; a stream message wakes the
    flusher thread, which sends what is pending within STREAM_DELAY."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = []
        self.due = False  # the flusher is woken
        self.cond = threading.Condition()
        threading.Thread(target=self.flusher, daemon=True).start()

    def send(self, msg, stream=False):
        line = json.dumps(msg)
        with self.cond:
            self.buf.append(line)
            if stream and not self.due:
                self.due = True
                self.cond.notify()

    def end(self):
        """Ends the answer: what is pending and END, in one write."""
        with self.cond:
            self.buf.append(END)
            self.write()

    def write(self):
        # Under self.cond. Only the flusher and end write: user code runs
        # with SIGINT on, and an interrupt must not cut a line in two.
        if not self.buf:
            return
        data = memoryview(('\n'.join(self.buf) + '\n').encode())
        self.buf, self.due = [], False
        while data:
            data = data[os.write(self.fd, data):]

    def flusher(self):
        with self.cond:
            while True:
                self.cond.wait_for(lambda: self.due)
                self.cond.wait(STREAM_DELAY)  # gather the lines that follow
                self.write()


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
            self.emit.send({'type': self.kind, 'text': text}, stream=True)
        return len(s)

    def flush(self):
        if self.buf:
            text, self.buf = self.buf, ''
            self.emit.send({'type': self.kind, 'text': text}, stream=True)

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
    # Messages go to the original stdout; user code gets Streams, and what
    # writes to fd 1 itself (a subprocess) goes to the kernel's log, not
    # into the messages.
    emit = Emitter(os.dup(1))
    os.dup2(2, 1)
    # Figures are sent at the end of each cell (figures), as Jupyter's
    # inline backend does; plt.show() has nothing to show meanwhile.
    os.environ.setdefault('MPLBACKEND', 'Agg')
    warnings.filterwarnings('ignore', message='.*non-GUI backend')
    sys.stdout, sys.stderr = Stream(emit, 'stdout'), Stream(emit, 'stderr')
    ns = {'__name__': '__main__', '__builtins__': __builtins__}
    count = 0
    emit.end()  # ready
    while True:
        # SIGINT interrupts a cell, and only a cell.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        line = sys.stdin.readline()
        if not line:
            return
        req = json.loads(line)
        count += 1
        emit.send({'type': 'number_of_executions', 'execution_count': count})
        old_env = {}
        for k, v in (req.get('env_vars') or {}).items():
            old_env[k] = os.environ.get(k)
            os.environ[k] = str(v)
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            run_cell(req['code'], ns, count, emit)
        except KeyboardInterrupt:
            emit.send({'type': 'error', 'name': 'KeyboardInterrupt', 'value': 'interrupted', 'traceback': ''})
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        emit.end()


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


# --- the bash worker: one bash context's shell ---------------------------

def bash_worker():
    """A bash context: one bash process whose state (variables, functions,
    cwd) lives on from cell to cell, as Jupyter's bash kernel keeps it.
    Each cell is sourced from a file, then bash prints a marker line with
    the cell's status on stdout and another on stderr; what comes before
    them is the cell's output. A status other than 0 is the cell's error,
    named as bash_kernel names it (no name, the status as its value)."""
    emit = Emitter(os.dup(1))
    os.dup2(2, 1)
    marker = 'smolvm-end-' + uuid.uuid4().hex
    sh = start_bash()
    cell = os.path.join('/tmp', 'smolvm-cell-%d.sh' % os.getpid())
    count = 0
    emit.end()  # ready
    while True:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        line = sys.stdin.readline()
        if not line:
            sh.kill()
            return
        req = json.loads(line)
        count += 1
        emit.send({'type': 'number_of_executions', 'execution_count': count})
        env = req.get('env_vars') or {}
        bad = [k for k in env if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', k)]
        if bad:
            emit.send({'type': 'error', 'name': 'ValueError', 'value': 'env_vars: %r is not a shell variable name' % bad[0],
                       'traceback': ''})
            emit.end()
            continue
        with open(cell, 'w') as f:
            f.write(req['code'] + '\n')
        script = ''.join('__smolvm_set_%d=${%s+x}; __smolvm_old_%d=${%s-}; export %s=%s\n'
                         % (i, k, i, k, k, shlex.quote(str(v))) for i, (k, v) in enumerate(env.items()))
        script += "source %s </dev/null; __smolvm_status=$?\n" % cell
        script += ''.join('if [ -n "$__smolvm_set_%d" ]; then export %s="$__smolvm_old_%d"; else unset %s; fi\n'
                          % (i, k, i, k) for i, k in enumerate(env))
        script += "printf '%s %%d\\n' $__smolvm_status; printf '%s\\n' >&2\n" % (marker, marker)
        signal.signal(signal.SIGINT, lambda *_: interrupt_group(sh.pid))
        status = bash_cell(sh, script.encode(), marker.encode(), emit)
        if status is None:
            # The cell ended bash (exit, exec): a new one, as a restart.
            sh.wait()
            sh = start_bash()
            emit.send({'type': 'error', 'name': 'ContextRestarting', 'value': 'bash exited', 'traceback': ''})
        elif status == 130:
            emit.send({'type': 'error', 'name': 'KeyboardInterrupt', 'value': 'interrupted', 'traceback': ''})
        elif status != 0:
            emit.send({'type': 'error', 'name': '', 'value': str(status), 'traceback': ''})
        emit.end()


def start_bash():
    """A bash in its own session, so an interrupt reaches the cell's whole
    process group. The kernel runs in the background of a shell, where
    SIGINT is ignored, and an ignored signal stays ignored across exec
    (bash cannot even trap it): bash gets the default, and its INT trap
    ends the cell, not bash."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        sh = subprocess.Popen(['bash', '--noprofile', '--norc'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    write_all(sh.stdin.fileno(), b"trap 'return 130 2>/dev/null' INT\n")
    return sh


def interrupt_group(pgid):
    try:
        os.killpg(pgid, signal.SIGINT)
    except ProcessLookupError:
        pass  # bash ended meanwhile: bash_cell sees it


def bash_cell(sh, script, marker, emit):
    """Runs script in sh and streams its output until both markers; the
    cell's status, or None if bash ended."""
    write_all(sh.stdin.fileno(), script)
    pending = {sh.stdout.fileno(): [b'', 'stdout'], sh.stderr.fileno(): [b'', 'stderr']}
    status = None
    while pending:
        try:
            ready, _, _ = select.select(list(pending), [], [])
        except InterruptedError:
            continue
        for fd in ready:
            buf, kind = pending[fd]
            data = os.read(fd, 1 << 16)
            if not data:
                return None
            buf += data
            i = buf.find(marker)
            if i < 0:
                # Keep what could be the start of a marker for the next read.
                keep = max(0, len(buf) - len(marker))
                out, pending[fd][0] = buf[:keep], buf[keep:]
            elif not buf.endswith(b'\n'):
                out, pending[fd][0] = buf[:i], buf[i:]  # the marker's line is not whole yet
            else:
                out = buf[:i]
                if kind == 'stdout':
                    status = int(buf[i + len(marker):])
                del pending[fd]
            if out:
                emit.send({'type': kind, 'text': out.decode(errors='replace')}, stream=True)
    return status


# --- the server --------------------------------------------------------

DEFAULT_CWD = '/home/user' if os.path.isdir('/home/user') else '/'
WORKER_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'worker.js')

# HEADER_DELAY is how long execute waits for a cell's whole answer before
# it sends the headers and streams: a short cell's answer goes out in one
# write, with its length. The SDK's request timeout covers only the
# headers, so a long cell still gets them at once.
HEADER_DELAY = 0.05

# The languages and their names (as E2B's server normalizes them).
LANGUAGES = {'python': 'python', 'py': 'python', 'js': 'javascript', 'javascript': 'javascript',
             'ts': 'typescript', 'typescript': 'typescript', 'bash': 'bash', 'sh': 'bash'}


def language(name):
    """The language name stands for, or an HTTPError saying what is served."""
    lang = LANGUAGES.get(name.strip().lower()) if isinstance(name, str) else None
    if lang is None:
        raise HTTPError(400, 'language %s is not supported: use python, bash, or js or typescript where the sandbox has node'
                        % json.dumps(name))
    if lang in ('javascript', 'typescript') and not shutil.which('node'):
        raise HTTPError(400, 'language %s: node is not installed in this sandbox' % json.dumps(name))
    if lang == 'typescript' and not strips_types():
        raise HTTPError(400, 'language %s: this sandbox\'s node cannot strip types (node 22.13 or later can)'
                        % json.dumps(name))
    if lang == 'bash' and not shutil.which('bash'):
        raise HTTPError(400, 'language %s: bash is not installed in this sandbox' % json.dumps(name))
    return lang


@functools.cache
def strips_types():
    """Whether node has module.stripTypeScriptTypes, which TypeScript
    contexts run each cell through: node's own type stripping, not a
    second compiler. Asked once."""
    probe = "process.exit(typeof require('node:module').stripTypeScriptTypes === 'function' ? 0 : 1)"
    return subprocess.run(['node', '-e', probe], stderr=subprocess.DEVNULL).returncode == 0


class Context:
    """One context: a worker process (python3, node, or python3 holding a
    bash) holding its state.
    A worker answers each request line with message lines ending in END,
    and writes one END when it is ready."""

    def __init__(self, lang, cwd):
        self.id = uuid.uuid4().hex
        self.language = lang
        self.cwd = cwd
        self.lock = threading.Lock()  # one cell at a time
        self.proc = None
        self.start()

    def start(self):
        # Unbuffered pipes: execute selects on the worker's stdout and the
        # client's socket in one thread, and reads whole lines itself.
        if self.language in ('javascript', 'typescript'):
            args = ['node', WORKER_JS] + (['--typescript'] if self.language == 'typescript' else [])
        elif self.language == 'bash':
            args = [sys.executable, '-u', os.path.abspath(__file__), '--bash-worker']
        else:
            args = [sys.executable, '-u', os.path.abspath(__file__), '--worker']
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.cwd, bufsize=0)
        self.buf = b''
        if self.read() and self.buf.startswith(END_LINE):
            self.buf = self.buf[len(END_LINE):]
            return
        self.stop()
        raise HTTPError(500, 'the %s interpreter did not start (see /tmp/smolvm-kernel.log)' % self.language)

    def read(self):
        """Reads what the worker wrote into self.buf; False at its end."""
        data = os.read(self.proc.stdout.fileno(), 1 << 16)
        self.buf += data
        return bool(data)

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


END_LINE = END.encode() + b'\n'
contexts = {}
contexts_lock = threading.Lock()
defaults = {}  # language: its default context, made at its first cell


class HTTPError(Exception):
    def __init__(self, status, msg):
        self.status, self.msg = status, msg


def write_all(fd, data):
    data = memoryview(data)
    while data:
        data = data[os.write(fd, data):]


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    # An answer streamed in parts is small writes: without TCP_NODELAY
    # the second waits for the peer's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def head(self, status, ctype, length=None):
        """The status line and headers, as bytes to write with the body."""
        h = 'HTTP/1.1 %d %s\r\nContent-Type: %s\r\n' % (status, self.responses[status][0], ctype)
        if length is None:
            h += 'Transfer-Encoding: chunked\r\n'
        else:
            h += 'Content-Length: %d\r\n' % length
        return (h + '\r\n').encode()

    def send(self, status, body, ctype='application/json'):
        """Writes a whole answer in one write."""
        data = body.encode() if isinstance(body, str) else body
        self.wfile.write(self.head(status, ctype, len(data)) + data)

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
            # E2B's error shape, as the rest of smolvm's E2B API answers.
            self.send(e.status, json.dumps({'code': e.status, 'message': e.msg}))

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
            raise HTTPError(404, 'context %s not found' % id)
        return ctx

    def contexts(self, method, rest):
        if method == 'GET' and not rest:
            with contexts_lock:
                return self.send(200, json.dumps([c.json() for c in contexts.values()]))
        if method == 'POST' and not rest:
            req = self.body()
            lang = language(req.get('language') or 'python')
            cwd = req.get('cwd') or DEFAULT_CWD
            if not isinstance(cwd, str) or not os.path.isdir(cwd):
                raise HTTPError(400, 'cwd %s is not a directory' % json.dumps(cwd))
            ctx = Context(lang, cwd)
            with contexts_lock:
                contexts[ctx.id] = ctx
            return self.send(200, json.dumps(ctx.json()))
        if method == 'DELETE' and len(rest) == 1:
            ctx = self.lookup(rest[0])
            with contexts_lock:
                contexts.pop(ctx.id, None)
                if defaults.get(ctx.language) is ctx:
                    del defaults[ctx.language]
            ctx.stop()
            return self.send(200, 'null')
        if method == 'POST' and len(rest) == 2 and rest[1] == 'restart':
            self.lookup(rest[0]).restart()
            return self.send(200, 'null')
        raise HTTPError(404, 'no route %s /contexts/%s' % (method, '/'.join(rest)))

    def default(self, lang):
        """The language's default context, made at its first cell."""
        with contexts_lock:
            ctx = defaults.get(lang)
        if ctx is not None:
            return ctx
        ctx = Context(lang, DEFAULT_CWD)
        with contexts_lock:
            if lang in defaults:  # made meanwhile by another cell
                ctx.stop()
                return defaults[lang]
            defaults[lang] = contexts[ctx.id] = ctx
        return ctx

    def execute(self, req):
        code = req.get('code')
        if not isinstance(code, str):
            raise HTTPError(400, 'code: a string is required')
        if req.get('context_id') and req.get('language'):
            raise HTTPError(400, 'Only one of context_id or language can be provided')
        if req.get('context_id'):
            ctx = self.lookup(req['context_id'])
        else:
            ctx = self.default(language(req.get('language') or 'python'))
        env = req.get('env_vars') or {}
        if not isinstance(env, dict):
            raise HTTPError(400, 'env_vars: an object is required')
        with ctx.lock:
            self.run(ctx, json.dumps({'code': code, 'env_vars': env}).encode() + b'\n')

    def run(self, ctx, request):
        """Runs one cell in ctx and answers with its messages (NDJSON):
        all at once if they come within HEADER_DELAY, else streamed."""
        proc = ctx.proc
        write_all(proc.stdin.fileno(), request)
        out, sock = proc.stdout.fileno(), self.connection
        watch = [out, sock]
        deadline = time.monotonic() + HEADER_DELAY
        lines = []       # complete message lines not sent yet
        streaming = False
        gone = False     # the client went away: read on, send nothing
        while True:
            i = ctx.buf.rfind(b'\n')
            if i >= 0:
                lines.append(ctx.buf[:i + 1])
                ctx.buf = ctx.buf[i + 1:]
                if lines[-1].endswith(END_LINE) and (len(lines[-1]) == len(END_LINE) or lines[-1][-len(END_LINE) - 1] == 10):
                    lines[-1] = lines[-1][:-len(END_LINE)]
                    break
            if streaming and lines and not gone:
                gone = not self.chunks(lines)
                lines = []
            timeout = None if streaming else max(0, deadline - time.monotonic())
            ready, _, _ = select.select(watch, [], [], timeout)
            if not ready:
                # A long cell: the headers (and what it said so far) now.
                streaming = True
                gone = not self.chunks(lines, head=True)
                lines = []
                continue
            if sock in ready:
                try:
                    peek = sock.recv(1, socket.MSG_PEEK)
                except OSError:
                    peek = b''
                watch = [out]  # EOF, or (unlikely) a pipelined request
                if not peek:
                    # The client going away interrupts the cell: the SDK
                    # has no interrupt call (its timeoutMs aborts the
                    # fetch), and the agent half-closes the port when
                    # serve's upstream connection closes.
                    gone = True
                    proc.send_signal(signal.SIGINT)
            if out in ready and not ctx.read():
                lines.append((json.dumps({'type': 'error', 'name': 'ContextRestarting',
                                          'value': 'the interpreter exited', 'traceback': ''}) + '\n').encode())
                if ctx.proc is proc:  # it died; a restart replaced it otherwise
                    ctx.restart()
                break
        if gone:
            return
        if streaming:
            self.chunks(lines, last=True)
            return
        data = b''.join(lines)
        self.wfile.write(self.head(200, 'application/x-ndjson', len(data)) + data)

    def chunks(self, lines, head=False, last=False):
        """Writes lines as one chunk, after the headers (head) or with the
        last chunk (last), in one write. False if the client is gone."""
        data = b''.join(lines)
        out = self.head(200, 'application/x-ndjson') if head else b''
        if data:
            out += b'%x\r\n%s\r\n' % (len(data), data)
        if last:
            out += b'0\r\n\r\n'
        try:
            if out:
                self.wfile.write(out)
            return True
        except OSError:
            return False


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 49999
    # Debian's matplotlib needs a matplotlibrc outside its data (in /etc),
    # which an image may lack: the workers get one that says only agg.
    rc = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'matplotlibrc')
    if not os.path.exists(rc):
        with open(rc, 'w') as f:
            f.write('backend: agg\n')
    os.environ.setdefault('MATPLOTLIBRC', rc)
    ctx = Context('python', DEFAULT_CWD)
    defaults['python'] = contexts[ctx.id] = ctx
    srv = ThreadingHTTPServer(('127.0.0.1', port), Handler)
    srv.daemon_threads = True
    print('listening on %d' % port, flush=True)
    srv.serve_forever()


if __name__ == '__main__':
    if sys.argv[1:] == ['--worker']:
        worker()
    elif sys.argv[1:] == ['--bash-worker']:
        bash_worker()
    else:
        main()
