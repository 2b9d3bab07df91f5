"""Tests of the Python SDK against a real `smolvm serve` (real runsc
sandboxes), started here. They need root, a smolvm binary ($SMOLVM_BIN or
$PATH) and runsc; scripts/test.sh runs them through `go test ./sdk`."""

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import smolvm  # noqa: E402


def _smolvm_bin():
    return os.environ.get("SMOLVM_BIN") or shutil.which("smolvm")


@unittest.skipUnless(os.geteuid() == 0 and _smolvm_bin(), "needs root and a smolvm binary")
class SDKTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="smolvm-py-")
        cls.bin = _smolvm_bin()
        sock = os.path.join(cls.dir, "api.sock")
        cls.server = subprocess.Popen([cls.bin, "--data-dir", cls.dir, "serve", "--listen", "unix://" + sock],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while not os.path.exists(sock):
            if cls.server.poll() is not None or time.time() > deadline:
                raise RuntimeError("smolvm serve did not start: " + cls.server.stderr.read().decode())
            time.sleep(0.05)
        token = subprocess.check_output([cls.bin, "--data-dir", cls.dir, "serve", "token"]).decode().strip()
        cls.c = smolvm.Client("unix://" + sock, token)
        cls.box = cls.c.create(name="py-box")

    @classmethod
    def tearDownClass(cls):
        for sb in cls.c.list():
            cls.c.kill(sb.id)
        for v in cls.c.volumes():  # mounted under cls.dir
            cls.c.remove_volume(v.name, force=True)
        cls.server.terminate()
        cls.server.wait(30)
        cls.server.stderr.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_create_defaults(self):
        self.assertEqual(self.box.state, "running")
        ttl = (self.box.expires_at - self.box.created_at).total_seconds()
        self.assertTrue(14 * 60 < ttl < 16 * 60, ttl)

    def test_pty(self):
        def until(t, want):
            seen, deadline = b"", time.time() + 10
            while want not in seen:
                if time.time() > deadline:
                    self.fail(f"no {want!r} from the terminal; saw {seen!r}")
                b = t.read(timeout=0.5)
                self.assertIsNotNone(b, f"the terminal ended before {want!r}; saw {seen!r}")
                seen += b
            return seen

        with self.c.pty(self.box.id, ["sh"], rows=24, cols=80) as t:
            t.write("stty size\n")
            until(t, b"24 80")
            t.resize(30, 100)
            # The resize travels apart from the input: ask until it is seen.
            seen, deadline = b"", time.time() + 10
            while b"30 100" not in seen and time.time() < deadline:
                t.write("stty size; tty\n")
                time.sleep(0.3)
                b = t.read(timeout=0)
                while b:
                    seen += b
                    b = t.read(timeout=0)
            self.assertIn(b"30 100", seen)
            if b"/dev/pts/" not in seen:
                until(t, b"/dev/pts/")
            t.kill()
            self.assertEqual(t.wait(10).get("signal"), 9)
            rest = t.read(timeout=1)
            while rest:  # what the terminal printed before the kill
                rest = t.read(timeout=1)
            self.assertIsNone(rest, "a killed terminal's output ends")
        # A shell that exits on its own reports its status.
        with self.c.pty(self.box.id, ["sh"]) as t:
            t.write("exit 3\n")
            self.assertEqual(t.wait(10).get("code"), 3)
        with self.assertRaises(smolvm.NotFound):
            self.c.pty("no-such-box", ["sh"])

    def test_exec_streams_and_exit_code(self):
        chunks = []
        r = self.c.exec(self.box.id, ["sh", "-c", "echo one; sleep 0.2; echo two; echo err >&2; exit 3"],
                        on_stdout=lambda b: chunks.append((time.monotonic(), b)))
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, b"one\ntwo\n", b"err\n"))
        # Streamed: "one" arrived before "two" was even printed.
        self.assertEqual([b for _, b in chunks], [b"one\n", b"two\n"])
        self.assertGreater(chunks[1][0] - chunks[0][0], 0.1)
        events = [e.type for e in self.c.exec_stream(self.box.id, ["echo", "x"])]
        self.assertEqual(events, ["stdout", "exit"])
        r = self.c.exec(self.box.id, ["cat"], stdin="fed", env={"A": "1"})
        self.assertEqual(r.stdout, b"fed")
        r = self.c.exec(self.box.id, ["no-such-command"])
        self.assertEqual((r.exit_code, r.exit["kind"]), (127, "not-found"))

    def test_exec_timeout(self):
        with self.assertRaises(smolvm.Timeout) as cm:
            self.c.exec(self.box.id, ["sleep", "5"], timeout=0.3)
        self.assertEqual(cm.exception.result.exit_code, 137)
        self.assertIsInstance(cm.exception, TimeoutError)

    def test_files(self):
        self.c.write_file(self.box.id, "/tmp/hello.bin", b"\x00\xffdata")
        self.assertEqual(self.c.read_file(self.box.id, "/tmp/hello.bin"), b"\x00\xffdata")
        with self.assertRaises(smolvm.NotFound):
            self.c.read_file(self.box.id, "/tmp/nothing-here")
        with self.assertRaises(smolvm.InvalidRequest) as cm:
            self.c.write_file(self.box.id, "../../etc/passwd", "x")
        self.assertEqual(cm.exception.field, "path")

    def test_volumes(self):
        v = self.c.create_volume("py-vol", size="16m")
        self.assertEqual((v.name, v.size, v.used_by), ("py-vol", 16 << 20, []))
        with self.assertRaises(smolvm.InvalidRequest) as cm:
            self.c.create_volume("../up")
        self.assertEqual(cm.exception.field, "name")
        w = self.c.create(volumes=[{"name": "py-vol", "path": "/v"}])
        r = self.c.create(volumes=[{"name": "py-vol", "path": "/v", "read_only": True}])
        self.c.write_file(w.id, "/v/f", "shared")
        self.assertEqual(self.c.read_file(r.id, "/v/f"), b"shared")
        self.assertNotEqual(self.c.exec(r.id, ["sh", "-c", "echo x > /v/g"]).exit_code, 0)
        self.assertEqual(sorted(self.c.volume("py-vol").used_by), sorted([w.name, r.name]))
        with self.assertRaises(smolvm.Conflict):
            self.c.remove_volume("py-vol")
        self.c.kill(w.id)
        self.c.kill(r.id)
        self.assertIn("py-vol", [v.name for v in self.c.volumes()])
        self.c.remove_volume("py-vol")
        with self.assertRaises(smolvm.NotFound):
            self.c.volume("py-vol")

    def test_typed_errors(self):
        with self.assertRaises(smolvm.NotFound) as cm:
            self.c.get("never-was")
        self.assertIn("never existed", str(cm.exception))
        with self.assertRaises(smolvm.Unauthorized):
            smolvm.Client(self.c._unix and "unix://" + self.c._unix, "wrong").list()
        with self.assertRaises(smolvm.InvalidRequest) as cm:
            self.c.create(memory="lots")
        self.assertEqual(cm.exception.field, "memory")
        brief = self.c.create(timeout=1)
        deadline = time.time() + 20
        while True:
            try:
                self.c.get(brief.id)
            except smolvm.Expired as e:
                self.assertEqual(e.expired_at, brief.expires_at)
                break
            self.assertLess(time.time(), deadline, "sandbox did not expire")
            time.sleep(0.2)
        self.c.kill(brief.id)
        with self.assertRaises(smolvm.Expired):  # the tombstone still says it expired
            self.c.get(brief.id)

    @unittest.skipUnless(os.environ.get("SMOLVM_NET_NETNS") and os.path.exists("/usr/lib/chromium/chromium"),
                         "needs chromium and a closed test network (go test ./sdk gives one)")
    def test_browser(self):
        snap = self.c.browser_start(allow_hosts=["allowed.test"], golden="py-browser")
        self.assertEqual(snap.name, "py-browser")
        png = self.c.screenshot("http://allowed.test/", width=320, height=200, golden="py-browser")
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertEqual(struct.unpack(">II", png[16:24]), (320, 200))
        b = self.c.browser_new(golden="py-browser", ttl=60)
        self.assertTrue(b["cdp_url"].startswith("ws://127.0.0.1:"), b)
        self.c.browser_release(b["id"])
        with self.assertRaises(smolvm.NotFound):
            self.c.get(b["id"])
        with self.assertRaises(smolvm.InvalidRequest):
            self.c.screenshot("file:///etc/passwd", golden="py-browser")
        self.c.remove_snapshot("py-browser")

    def test_checkpoint_restore_fork_kill(self):
        src = self.c.create(name="py-src")
        self.c.exec(src.id, ["sh", "-c", "echo kept > /root/state"])
        snap = self.c.checkpoint(src.id, name="py-snap")
        self.assertRegex(snap.id, "^[0-9a-f]{64}$")
        copy = self.c.restore("py-snap", name="py-copy")
        self.assertEqual(self.c.exec(copy.id, ["cat", "/root/state"]).stdout, b"kept\n")
        kids = self.c.fork(src.id, n=2, name_prefix="py-kid")
        self.assertEqual(len(kids), 2)
        for k in kids:
            self.assertEqual(self.c.exec(k.id, ["cat", "/root/state"]).stdout, b"kept\n")
            self.c.kill(k.id)
        self.assertEqual(self.c.pause(src.id).state, "paused")
        self.assertEqual(self.c.resume(src.id).state, "running")
        self.c.kill(copy.id)
        self.c.kill(src.id)
        with self.assertRaises(smolvm.NotFound) as cm:
            self.c.get(src.id)
        self.assertIn("was removed at", str(cm.exception))
        self.c.remove_snapshot("py-snap")

    def test_template(self):
        # A server that listens after 1 s; the copy answers its first request.
        start = ["python3", "-c", "import time, http.server as h; time.sleep(1); "
                 "h.HTTPServer(('127.0.0.1', 8070), h.SimpleHTTPRequestHandler).serve_forever()"]
        t = self.c.build_template("py-web", start=start, ready={"port": 8070, "timeout": "1m"}, env={"WHO": "py"})
        self.assertTrue(t["snapshot"])
        self.assertIn("py-web", [x["name"] for x in self.c.templates()])
        self.assertEqual(self.c.template("py-web")["ready"]["port"], 8070)
        sb = self.c.create(image="py-web")
        r = self.c.exec(sb.id, ["python3", "-c", "import os, urllib.request as u; "
                                "print(u.urlopen('http://127.0.0.1:8070/').status, os.environ['WHO'])"])
        self.assertEqual(r.stdout, b"200 py\n")
        self.c.kill(sb.id)
        with self.assertRaises(smolvm.SmolvmError) as cm:
            self.c.build_template("py-bad", ready={"port": 80})
        self.assertIn("needs a start command", str(cm.exception))
        self.c.remove_template("py-web")
        with self.assertRaises(smolvm.NotFound):
            self.c.template("py-web")

    def test_events(self):
        seen = []
        got = threading.Event()

        def watch():
            for e in self.c.events():
                seen.append(e)
                if e.name == "py-ev" and e.type == "removed":
                    got.set()
                    return

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        time.sleep(0.3)
        sb = self.c.create(name="py-ev")
        self.c.kill(sb.id)
        self.assertTrue(got.wait(20), [e.type for e in seen])
        self.assertIn("created", [e.type for e in seen if e.name == "py-ev"])

    def test_agent_runs(self):
        repo = tempfile.mkdtemp(prefix="smolvm-py-repo-")
        self.addCleanup(shutil.rmtree, repo, True)
        files = {
            "calc.js": "exports.add = (a, b) => a - b;\n",
            "calc.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n"
                            "test('add', () => { assert.strictEqual(require('./calc.js').add(2, 3), 5); });\n",
            # The stand-in for an agent CLI.
            "fix.sh": "sed -i 's/a - b/a + b/' calc.js\n",
        }
        for name, data in files.items():
            with open(os.path.join(repo, name), "w") as f:
                f.write(data)
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
            subprocess.check_call(["git", "-C", repo] + args)
        test = "node --test --test-reporter=tap"

        run = self.c.agent_run_start("make add add", repo, test=test, agent="sh fix.sh", flaky_reruns=-1, max_time="5m")
        self.assertEqual(run["state"], "running")
        phases = [p["phase"] for p in self.c.agent_run_watch(run["id"])]
        self.assertIn("tests", phases)
        self.assertEqual(phases[-1], "done")
        log = self.c.agent_run(run["id"])
        self.assertEqual((log["run"]["state"], log["run"]["best"], log["run"]["verdict"]["passed"]), ("resolved", 1, 1))
        self.assertIn("+exports.add = (a, b) => a + b;", log["iterations"][1]["diff"])
        ev = log["run"]["evidence"]
        self.assertEqual((ev["verdict"], ev["fail_to_pass"], ev["hunks"][0]["pinned"]), ("proven", ["add"], True))
        self.assertIn(run["id"], [r["id"] for r in self.c.agent_runs()])

        hang = self.c.agent_run_start("wait", repo, test=test, agent="sleep 600", flaky_reruns=-1)
        watch = self.c.agent_run_watch(hang["id"])
        for p in watch:
            if p["phase"] == "agent":
                break
        watch.close()
        stopped = self.c.agent_run_stop(hang["id"])
        self.assertEqual((stopped["state"], stopped["best"]), ("stopped", 0))

        with self.assertRaises(smolvm.InvalidRequest):
            self.c.agent_run_start("x", tempfile.gettempdir(), test="true", agent="true")  # not a git repository
        with self.assertRaises(smolvm.NotFound):
            self.c.agent_run("run-00000000")
        with self.assertRaises(smolvm.NotFound):
            self.c.agent_run_stop("run-00000000")


if __name__ == "__main__":
    unittest.main()
