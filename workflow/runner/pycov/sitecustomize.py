# smolvm's diff coverage for Python: the verdict run puts this directory
# first on PYTHONPATH, so every python the test command starts (pytest,
# unittest, their subprocesses) imports it. It traces only the changed
# files named in SMOLVM_PYCOV_FILES and, at exit, writes the lines run and
# the lines that hold code (from the compiled files) to
# $SMOLVM_PYCOV/PID.json. Then it runs the sitecustomize it shadows.
import os
import sys


def _smolvm_pycov():
    out = os.environ.get("SMOLVM_PYCOV")
    files = [f for f in os.environ.get("SMOLVM_PYCOV_FILES", "").split("\n") if f]
    if not out or not files:
        return
    import atexit
    import threading

    hits = {f: set() for f in files}
    names = {}  # co_filename: its set in hits, or None

    def traced(name):
        s = names.get(name, 0)
        if s == 0:
            s = names[name] = hits.get(os.path.abspath(name))
        return s

    def local(frame, event, arg):
        if event == "line":
            names[frame.f_code.co_filename].add(frame.f_lineno)
        return local

    def call(frame, event, arg):
        if traced(frame.f_code.co_filename) is not None:
            return local
        return None

    def code_lines(path):
        import dis

        try:
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec", dont_inherit=True)
        except Exception:
            return None
        lines, todo = set(), [code]
        while todo:
            c = todo.pop()
            lines.update(n for _, n in dis.findlinestarts(c) if n)
            todo.extend(k for k in c.co_consts if isinstance(k, type(code)))
        return sorted(lines)

    def write():
        sys.settrace(None)
        threading.settrace(None)
        import json

        doc = {f: {"executed": sorted(hits[f]), "code": code_lines(f)} for f in files}
        try:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "%d.json" % os.getpid()), "w") as f:
                json.dump(doc, f)
        except OSError:
            pass

    atexit.register(write)
    threading.settrace(call)
    sys.settrace(call)


def _shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        p = os.path.join(os.path.abspath(d or "."), "sitecustomize.py")
        if os.path.dirname(p) != here and os.path.isfile(p):
            with open(p, "rb") as f:
                exec(compile(f.read(), p, "exec"), {"__name__": "sitecustomize", "__file__": p})
            return


_smolvm_pycov()
try:
    _shadowed()
except Exception:
    pass
