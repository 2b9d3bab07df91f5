"""Python SDK for smolvm's HTTP API (`smolvm serve`). Standard library only.

    from smolvm import Client
    c = Client("unix:///var/lib/smolvm/smolvm.sock", token)   # or SMOLVM_HOST / SMOLVM_TOKEN
    sb = c.create(timeout=600)
    r = c.exec(sb.id, ["python3", "-c", "print(6*7)"])
    assert r.stdout == b"42\\n" and r.exit_code == 0
    c.kill(sb.id)
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import queue
import socket
import ssl
import struct
import threading
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

__all__ = [
    "Client", "Sandbox", "Snapshot", "Volume", "ExecResult", "ExecEvent", "Event", "Pty",
    "SmolvmError", "NotFound", "Expired", "Unauthorized", "Timeout", "Conflict", "InvalidRequest", "TooLarge", "Busy",
]


class SmolvmError(Exception):
    """An error response from the server: `code` is the API's error code,
    `status` the HTTP status, `field` the request field a 400 is about."""

    def __init__(self, message: str, code: str = "", status: int = 0, field: str = "", body: Optional[dict] = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.field = field
        self.body = body or {}


class NotFound(SmolvmError):
    """The sandbox (or snapshot, or file) never existed or was removed; the message says which."""


class Expired(SmolvmError):
    """The sandbox expired; `expired_at` says when."""

    @property
    def expired_at(self) -> Optional[datetime]:
        return _time(self.body.get("expired_at"))


class Unauthorized(SmolvmError):
    """Missing or wrong API token."""


class Timeout(SmolvmError, TimeoutError):
    """A command or request ran out of time."""


class Conflict(SmolvmError):
    """Wrong state (e.g. not running), or a name already in use."""


class InvalidRequest(SmolvmError):
    """A malformed request; `field` names the culprit."""


class TooLarge(SmolvmError):
    """Over a size limit (uploads)."""


class Busy(SmolvmError):
    """The server is at its concurrency limit; retry."""


_BY_CODE = {
    "not_found": NotFound, "no_such_file": NotFound, "expired": Expired, "unauthorized": Unauthorized,
    "timeout": Timeout, "conflict": Conflict, "invalid": InvalidRequest, "too_large": TooLarge, "busy": Busy,
}


def _error(status: int, body: bytes) -> SmolvmError:
    try:
        e = json.loads(body)
        msg = e["error"]
    except (ValueError, KeyError, TypeError):
        return SmolvmError(f"smolvm server: HTTP {status}: {body[:200]!r}", status=status)
    return _error_from(e, status)


def _error_from(e: dict, status: int = 0) -> SmolvmError:
    cls = _BY_CODE.get(e.get("code", ""), SmolvmError)
    return cls(e.get("error", ""), code=e.get("code", ""), status=status, field=e.get("field", ""), body=e)


def _time(s: Optional[str]) -> Optional[datetime]:
    # Python 3.11 reads RFC 3339 with "Z" and any number of fraction digits.
    return datetime.fromisoformat(s) if s else None


@dataclass
class Sandbox:
    id: str
    name: str
    image: str
    state: str
    reason: str = ""
    exit_code: Optional[int] = None
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    snapshot: str = ""
    forked_from: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def _from(cls, d: dict) -> "Sandbox":
        return cls(id=d["id"], name=d["name"], image=d.get("image", ""), state=d["state"], reason=d.get("reason", ""),
                   exit_code=d.get("exit_code"), created_at=_time(d.get("created_at")), expires_at=_time(d.get("expires_at")),
                   snapshot=d.get("snapshot", ""), forked_from=d.get("forked_from", ""), raw=d)


@dataclass
class Snapshot:
    id: str
    name: str
    size: int
    created: Optional[datetime]
    durable: bool = False  # hashed and synced to disk, in the background after checkpoint
    digest: str = ""  # "sha256:…" of the content, once durable
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def _from(cls, d: dict) -> "Snapshot":
        return cls(id=d["id"], name=d.get("name", ""), size=d.get("size", 0), created=_time(d.get("created")),
                   durable=d.get("durable", False), digest=d.get("digest", ""), raw=d)


@dataclass
class Volume:
    """A named volume: a file system of size bytes that outlives sandboxes."""
    name: str
    size: int
    used: int = 0
    created_at: Optional[datetime] = None
    tenant: str = ""
    used_by: List[str] = field(default_factory=list)  # sandboxes whose config mounts it

    @classmethod
    def _from(cls, d: dict) -> "Volume":
        return cls(name=d["name"], size=d.get("size", 0), used=d.get("used", 0), created_at=_time(d.get("created_at")),
                   tenant=d.get("tenant", ""), used_by=d.get("used_by") or [])


@dataclass
class ExecEvent:
    """One event of an exec stream: type is "stdout", "stderr" or "exit"."""
    type: str
    data: bytes = b""
    exit_code: Optional[int] = None
    exit: Optional[dict] = None


@dataclass
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    #: The agent's exit record: signal, error (e.g. "not found"), kind, timed_out.
    exit: Dict[str, Any] = field(default_factory=dict)

    @property
    def timed_out(self) -> bool:
        return bool(self.exit.get("timed_out"))


@dataclass
class Event:
    type: str
    id: str
    name: str
    state: str = ""
    reason: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


Seconds = Union[int, float, str]


def _duration(v: Optional[Seconds]) -> Optional[Union[float, str]]:
    return v if v is None or isinstance(v, str) else float(v)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Client:
    """A client for one smolvm server. Each call opens its own connection,
    so one Client may be used from several threads."""

    def __init__(self, host: Optional[str] = None, token: Optional[str] = None, timeout: Optional[float] = 300.0,
                 ssl_context: Optional[ssl.SSLContext] = None):
        host = host or os.environ.get("SMOLVM_HOST", "")
        self.token = token if token is not None else os.environ.get("SMOLVM_TOKEN", "")
        self.timeout = timeout
        if host.startswith("unix://"):
            self._unix: Optional[str] = host[len("unix://"):]
        else:
            self._unix = None
            u = urllib.parse.urlsplit(host)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise ValueError(f"host {host!r}: want unix:///path, http://host:port or https://host:port")
            self._scheme, self._netloc, self._prefix = u.scheme, u.netloc, u.path.rstrip("/")
        self._ssl = ssl_context

    # -- plumbing

    def _conn(self) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, self.timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._netloc, timeout=self.timeout, context=self._ssl)
        return http.client.HTTPConnection(self._netloc, timeout=self.timeout)

    def _open(self, method: str, path: str, query: Optional[dict] = None, body: Any = None,
              headers: Optional[dict] = None) -> http.client.HTTPResponse:
        if self._unix is None:
            path = self._prefix + path
        if query:
            path += "?" + urllib.parse.urlencode(query)
        # One connection per call; "close" lets the response own (and
        # close) the socket.
        h = dict(headers or {}, Connection="close")
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn = self._conn()
        try:
            try:
                conn.request(method, path, body=body, headers=h)
            except (BrokenPipeError, ConnectionResetError):
                # The server refused the request before reading the whole
                # body (a bad path, a 413): its answer is still there.
                pass
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise Timeout(f"smolvm server: {method} {path}: {e}", code="timeout") from e
        except OSError as e:
            conn.close()
            raise SmolvmError(f"smolvm server: {method} {path}: {e}") from e
        if resp.status >= 300:
            data = resp.read()
            conn.close()
            raise _error(resp.status, data)
        return resp

    def _json(self, method: str, path: str, body: Any = None, query: Optional[dict] = None) -> Any:
        resp = self._open(method, path, query=query, body=body)
        try:
            data = resp.read()
        finally:
            resp.close()
        return json.loads(data) if data else None

    @staticmethod
    def _sb(ref: str, rest: str = "") -> str:
        return "/v1/sandboxes/" + urllib.parse.quote(ref, safe="") + rest

    # -- sandboxes

    def create(self, *, name: Optional[str] = None, image: Optional[str] = None, cmd: Optional[List[str]] = None,
               env: Optional[Dict[str, str]] = None, workdir: Optional[str] = None, user: Optional[str] = None,
               cpus: Optional[float] = None, memory: Optional[Union[int, str]] = None, disk: Optional[Union[int, str]] = None,
               pids: Optional[int] = None, timeout: Optional[Seconds] = None, idle_timeout: Optional[Seconds] = None,
               on_expiry: Optional[str] = None, pool: Optional[str] = None, start: bool = True,
               volumes: Optional[List[Dict[str, Any]]] = None) -> Sandbox:
        """Create (and start) a sandbox. timeout is its time to live in
        seconds or as "15m"; None takes the server's default (15 minutes), 0 is none.
        pool takes a ready sandbox from that pool (see smolvm pool).
        volumes mounts volumes: [{"name": "cache", "path": "/cache", "read_only": False}]."""
        req: Dict[str, Any] = {"start": start}
        for k, v in (("name", name), ("image", image), ("cmd", cmd), ("workdir", workdir), ("user", user), ("volumes", volumes),
                     ("cpus", cpus), ("memory", memory), ("disk", disk), ("pids", pids), ("on_expiry", on_expiry), ("pool", pool),
                     ("timeout", _duration(timeout)), ("idle_timeout", _duration(idle_timeout))):
            if v is not None:
                req[k] = v
        if env:
            req["env"] = [f"{k}={v}" for k, v in env.items()]
        return Sandbox._from(self._json("POST", "/v1/sandboxes", req))

    def list(self) -> List[Sandbox]:
        return [Sandbox._from(d) for d in self._json("GET", "/v1/sandboxes") or []]

    def get(self, ref: str) -> Sandbox:
        """Raises NotFound (never existed, or removed) or Expired (with expired_at)."""
        return Sandbox._from(self._json("GET", self._sb(ref)))

    def start(self, ref: str) -> Sandbox:
        return Sandbox._from(self._json("POST", self._sb(ref, "/start")))

    def stop(self, ref: str, grace: Seconds = 10) -> Sandbox:
        return Sandbox._from(self._json("POST", self._sb(ref, "/stop"), {"timeout": _duration(grace)}))

    def kill(self, ref: str) -> None:
        """Remove the sandbox, running or not."""
        self._json("DELETE", self._sb(ref), query={"force": "true"})

    def set_timeout(self, ref: str, timeout: Seconds) -> Sandbox:
        """Set the time to live to timeout from now (0: none)."""
        return Sandbox._from(self._json("POST", self._sb(ref, "/timeout"), {"timeout": _duration(timeout)}))

    # -- exec

    def exec_stream(self, ref: str, args: List[str], *, env: Optional[Dict[str, str]] = None, workdir: Optional[str] = None,
                    user: Optional[str] = None, timeout: Optional[Seconds] = None,
                    stdin: Optional[Union[str, bytes]] = None) -> Iterator[ExecEvent]:
        """Run a command and yield its output as it comes, then its exit.
        Closing the iterator early kills the command."""
        req: Dict[str, Any] = {"args": list(args)}
        if env:
            req["env"] = [f"{k}={v}" for k, v in env.items()]
        for k, v in (("workdir", workdir), ("user", user), ("timeout", _duration(timeout))):
            if v is not None:
                req[k] = v
        if stdin is not None:
            req["stdin"] = stdin.decode() if isinstance(stdin, bytes) else stdin
        resp = self._open("POST", self._sb(ref, "/exec"), body=req)
        try:
            while True:
                line = resp.readline()
                if not line:
                    raise SmolvmError("smolvm server: exec stream ended without an exit")
                if not line.strip():
                    continue
                ev = json.loads(line)
                t = ev["type"]
                if t in ("stdout", "stderr"):
                    data = ev.get("data", "")
                    yield ExecEvent(t, base64.b64decode(data) if ev.get("encoding") == "base64" else data.encode())
                elif t == "exit":
                    yield ExecEvent("exit", exit_code=ev["exit"]["code"], exit=ev["exit"])
                    return
                elif t == "error":
                    raise _error_from(ev.get("error") or {})
        finally:
            resp.close()

    def exec(self, ref: str, args: List[str], *, on_stdout: Optional[Callable[[bytes], None]] = None,
             on_stderr: Optional[Callable[[bytes], None]] = None, raise_on_timeout: bool = True, **kw: Any) -> ExecResult:
        """Run a command to completion, calling on_stdout/on_stderr as output
        streams in. A command killed by its timeout raises Timeout (with the
        result in .result) unless raise_on_timeout is False."""
        out, err = bytearray(), bytearray()
        for ev in self.exec_stream(ref, args, **kw):
            if ev.type == "stdout":
                out += ev.data
                if on_stdout:
                    on_stdout(ev.data)
            elif ev.type == "stderr":
                err += ev.data
                if on_stderr:
                    on_stderr(ev.data)
            else:
                res = ExecResult(ev.exit_code or 0, bytes(out), bytes(err), ev.exit or {})
                if res.timed_out and raise_on_timeout:
                    e = Timeout(res.exit.get("error", "timed out"), code="timeout")
                    e.result = res  # type: ignore[attr-defined]
                    raise e
                return res
        raise SmolvmError("smolvm server: exec stream ended without an exit")

    def pty(self, ref: str, args: Optional[List[str]] = None, *, rows: int = 24, cols: int = 80,
            env: Optional[Dict[str, str]] = None, workdir: Optional[str] = None, user: Optional[str] = None,
            timeout: Optional[Seconds] = None) -> "Pty":
        """Start args (default: bash -i -l, as E2B's pty.create) on a terminal of
        rows x cols, over the exec WebSocket. Write to it, resize it, read
        its output and kill it through the returned Pty; closing it kills
        the command."""
        req: Dict[str, Any] = {"args": list(args or ["/bin/bash", "-i", "-l"]),
                               "tty": True, "rows": rows, "cols": cols}
        if env:
            req["env"] = [f"{k}={v}" for k, v in env.items()]
        for k, v in (("workdir", workdir), ("user", user), ("timeout", _duration(timeout))):
            if v is not None:
                req[k] = v
        ws = _WebSocket(self._ws_socket(), self._ws_host(), self._prefix_path(self._sb(ref, "/exec/ws")), self.token)
        ws.send(json.dumps(req).encode(), text=True)
        return Pty(ws)

    def _prefix_path(self, path: str) -> str:
        return path if self._unix is not None else self._prefix + path

    def _ws_host(self) -> str:
        return "localhost" if self._unix is not None else self._netloc

    def _ws_socket(self) -> socket.socket:
        if self._unix is not None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(self.timeout)
            s.connect(self._unix)
            return s
        host, _, port = self._netloc.rpartition(":")
        if not host:
            host, port = self._netloc, ("443" if self._scheme == "https" else "80")
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=self.timeout)
        if self._scheme == "https":
            s = (self._ssl or ssl.create_default_context()).wrap_socket(s, server_hostname=host.strip("[]"))
        return s

    # -- files

    def write_file(self, ref: str, path: str, data: Union[bytes, str]) -> None:
        """Write data as the file at path (absolute) inside the sandbox."""
        body = data.encode() if isinstance(data, str) else bytes(data)
        resp = self._open("PUT", self._sb(ref, "/files"), query={"path": path}, body=body,
                          headers={"Content-Type": "application/octet-stream"})
        resp.read()
        resp.close()

    def read_file(self, ref: str, path: str) -> bytes:
        resp = self._open("GET", self._sb(ref, "/files"), query={"path": path})
        try:
            return resp.read()
        finally:
            resp.close()

    # -- snapshots

    def checkpoint(self, ref: str, name: Optional[str] = None, stop: bool = False) -> Snapshot:
        req: Dict[str, Any] = {"stop": stop}
        if name:
            req["name"] = name
        return Snapshot._from(self._json("POST", self._sb(ref, "/checkpoint"), req))

    def restore(self, snapshot: str, name: Optional[str] = None) -> Sandbox:
        req = {"name": name} if name else {}
        return Sandbox._from(self._json("POST", "/v1/snapshots/" + urllib.parse.quote(snapshot, safe="") + "/restore", req))

    def fork(self, ref: str, n: int = 1, name_prefix: Optional[str] = None) -> List[Sandbox]:
        req: Dict[str, Any] = {"n": n}
        if name_prefix:
            req["name_prefix"] = name_prefix
        return [Sandbox._from(d) for d in self._json("POST", self._sb(ref, "/fork"), req)]

    def pause(self, ref: str) -> Sandbox:
        return Sandbox._from(self._json("POST", self._sb(ref, "/pause")))

    def resume(self, ref: str) -> Sandbox:
        return Sandbox._from(self._json("POST", self._sb(ref, "/resume")))

    def snapshots(self) -> List[Snapshot]:
        return [Snapshot._from(d) for d in self._json("GET", "/v1/snapshots") or []]

    def remove_snapshot(self, ref: str) -> None:
        self._json("DELETE", "/v1/snapshots/" + urllib.parse.quote(ref, safe=""))

    # -- templates

    def build_template(self, name: str, *, image: Optional[str] = None, start: Optional[List[str]] = None,
                       ready: Optional[Dict[str, Any]] = None, env: Optional[Dict[str, str]] = None,
                       workdir: Optional[str] = None, user: Optional[str] = None, public: bool = False,
                       cpus: Optional[float] = None, memory: Optional[Union[int, str]] = None,
                       hot: Optional[int] = None) -> Dict[str, Any]:
        """Build a template: a sandbox of image runs start until ready passes
        ({"port": 8000}, {"url": "http://localhost:8000/health", "status": 200},
        {"file": ...}, {"process": ...}, {"cmd": ...}, {"after": "2s"}; every one
        given must pass, within "timeout"), and is checkpointed. Returns once
        built; create(image=name) restores it, its server already up. Without
        start, the template is the image alone. Building a name again replaces it.
        hot keeps that many copies restored and paused, which creates claim."""
        req: Dict[str, Any] = {"name": name}
        for k, v in (("image", image), ("start", start), ("ready", ready), ("workdir", workdir), ("user", user),
                     ("cpus", cpus), ("memory", memory), ("hot", hot)):
            if v is not None:
                req[k] = v
        if env:
            req["env"] = [k + "=" + v for k, v in env.items()]
        if public:
            req["public"] = True
        return self._json("POST", "/v1/templates", req)

    def templates(self) -> List[Dict[str, Any]]:
        """Your templates and the public ones."""
        return self._json("GET", "/v1/templates") or []

    def template(self, name: str) -> Dict[str, Any]:
        return self._json("GET", "/v1/templates/" + urllib.parse.quote(name, safe=""))

    def remove_template(self, name: str) -> None:
        self._json("DELETE", "/v1/templates/" + urllib.parse.quote(name, safe=""))

    # -- volumes

    def create_volume(self, name: str, size: Optional[Union[int, str]] = None) -> Volume:
        """size is the quota, in bytes or as "10g"; None is the server's default (1 GiB)."""
        req: Dict[str, Any] = {"name": name}
        if size is not None:
            req["size"] = size
        return Volume._from(self._json("POST", "/v1/volumes", req))

    def volumes(self) -> List[Volume]:
        return [Volume._from(d) for d in self._json("GET", "/v1/volumes") or []]

    def volume(self, name: str) -> Volume:
        """Raises NotFound for a missing volume, and for another tenant's."""
        return Volume._from(self._json("GET", "/v1/volumes/" + urllib.parse.quote(name, safe="")))

    def remove_volume(self, name: str, force: bool = False) -> None:
        """Raises Conflict while sandboxes mount it, unless force."""
        self._json("DELETE", "/v1/volumes/" + urllib.parse.quote(name, safe=""), query={"force": "true" if force else "false"})

    # -- browsers

    def browser_start(self, *, golden: Optional[str] = None, allow_hosts: Optional[List[str]] = None,
                      allow_cidrs: Optional[List[str]] = None, mode: Optional[str] = None,
                      image: Optional[str] = None, timeout: Optional[Seconds] = None) -> Snapshot:
        """Boot headless Chromium and checkpoint it as the golden browser.
        Browsers may reach allow_hosts and allow_cidrs (mode egress, the default)."""
        req: Dict[str, Any] = {}
        for k, v in (("golden", golden), ("allow_hosts", allow_hosts), ("allow_cidrs", allow_cidrs),
                     ("mode", mode), ("image", image), ("timeout", _duration(timeout))):
            if v is not None:
                req[k] = v
        return Snapshot._from(self._json("POST", "/v1/browsers/golden", req))

    def browser_new(self, *, golden: Optional[str] = None, name: Optional[str] = None,
                    ttl: Optional[Seconds] = None) -> Dict[str, Any]:
        """A fresh browser from the golden: {"id", "name", "cdp_url", "http_url", "expires_at"}.
        cdp_url is for Playwright's connect_over_cdp; browser_release removes it."""
        req: Dict[str, Any] = {}
        for k, v in (("golden", golden), ("name", name), ("ttl", _duration(ttl))):
            if v is not None:
                req[k] = v
        return self._json("POST", "/v1/browsers", req)

    def browser_release(self, ref: str) -> None:
        self._json("DELETE", "/v1/browsers/" + urllib.parse.quote(ref, safe=""))

    def screenshot(self, url: str, *, full_page: bool = False, width: Optional[int] = None,
                   height: Optional[int] = None, golden: Optional[str] = None) -> bytes:
        """A PNG of url, taken in a fresh browser that is removed afterwards."""
        req: Dict[str, Any] = {"url": url, "full_page": full_page}
        for k, v in (("width", width), ("height", height), ("golden", golden)):
            if v is not None:
                req[k] = v
        resp = self._open("POST", "/v1/browsers/screenshot", body=req)
        try:
            return resp.read()
        finally:
            resp.close()

    # -- agent runs

    def agent_run_start(self, task: str, repo: str, *, test: Optional[str] = None, agent: Optional[str] = None,
                        max_iterations: Optional[int] = None, max_time: Optional[Seconds] = None,
                        max_tokens: Optional[int] = None, max_cost: Optional[float] = None,
                        test_timeout: Optional[Seconds] = None, flaky_reruns: Optional[int] = None,
                        stuck_after: Optional[int] = None, allow_test_changes: Optional[bool] = None) -> Dict[str, Any]:
        """Start an agent run (smolvm agent run --task) on repo, a git work tree
        on the server's host. agent is "builtin" (the server's model) or an
        agent CLI command line. Returns the run ({"id", "state": "running", ...});
        agent_run_watch follows it."""
        req: Dict[str, Any] = {"task": task, "repo": repo}
        for k, v in (("test", test), ("agent", agent), ("max_iterations", max_iterations),
                     ("max_time", _duration(max_time)), ("max_tokens", max_tokens), ("max_cost", max_cost),
                     ("test_timeout", _duration(test_timeout)), ("flaky_reruns", flaky_reruns),
                     ("stuck_after", stuck_after), ("allow_test_changes", allow_test_changes)):
            if v is not None:
                req[k] = v
        return self._json("POST", "/v1/agent/runs", req)

    def agent_runs(self) -> List[Dict[str, Any]]:
        """The server's agent runs, newest first."""
        return self._json("GET", "/v1/agent/runs")

    def agent_run(self, run_id: str) -> Dict[str, Any]:
        """A run and its iterations: {"run": {...}, "iterations": [...]}."""
        return self._json("GET", "/v1/agent/runs/" + urllib.parse.quote(run_id, safe=""))

    def agent_run_stop(self, run_id: str) -> Dict[str, Any]:
        """Stop a running run; returns it once ended (stopped, its best checkpoint standing)."""
        return self._json("POST", "/v1/agent/runs/" + urllib.parse.quote(run_id, safe="") + "/stop")

    def agent_run_watch(self, run_id: str) -> Iterator[Dict[str, Any]]:
        """Yield the run's progress ({"phase", "iteration", "passed", "failed",
        "tokens", "cost_usd", "elapsed", ...}) until its "done"; nothing if it
        is no longer running."""
        resp = self._open("GET", "/v1/events")  # subscribed once this returns
        try:
            if self.agent_run(run_id)["run"]["state"] != "running":
                return
            while True:
                line = resp.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                d = json.loads(line)
                if d.get("id") != run_id or "data" not in d:
                    continue
                yield d["data"]
                if d["data"].get("phase") == "done":
                    return
        finally:
            resp.close()

    # -- events

    def events(self) -> Iterator[Event]:
        """Yield lifecycle events until the caller stops iterating."""
        resp = self._open("GET", "/v1/events")
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    d = json.loads(line)
                    yield Event(d["type"], d["id"], d["name"], d.get("state", ""), d.get("reason", ""), d)
        finally:
            resp.close()


# Exec WebSocket stream bytes (api.StreamStdin and friends).
_STDIN, _STDOUT, _STDERR = 0, 1, 2


class Pty:
    """A command on a terminal inside a sandbox (Client.pty). Output is
    read with read(); exit() waits for the end. Thread-safe: one thread may
    read while another writes."""

    def __init__(self, ws: "_WebSocket"):
        self._ws = ws
        self._out: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self.exit: Optional[dict] = None
        self.error: Optional[SmolvmError] = None
        self._done = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            while True:
                msg = self._ws.recv()
                if msg is None:
                    if self.exit is None and self.error is None:
                        self.error = SmolvmError("smolvm server: exec connection closed without an exit")
                    return
                text, data = msg
                if not text:
                    if data and data[0] in (_STDOUT, _STDERR):
                        self._out.put(data[1:])
                    continue
                m = json.loads(data)
                if m.get("exit") is not None:
                    self.exit = m["exit"]
                    return
                if m.get("error") is not None:
                    self.error = _error_from(m["error"])
                    return
        except (OSError, ValueError) as e:
            if self.exit is None and self.error is None:
                self.error = SmolvmError(f"smolvm server: exec connection lost: {e}")
        finally:
            self._ws.close()
            self._done.set()
            self._out.put(None)

    def write(self, data: Union[str, bytes]) -> None:
        """Type data into the terminal."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        self._ws.send(bytes([_STDIN]) + b)

    def resize(self, rows: int, cols: int) -> None:
        self._ws.send(json.dumps({"resize": {"rows": rows, "cols": cols}}).encode(), text=True)

    def kill(self, signal: int = 9) -> None:
        """Send signal (default SIGKILL) to the command's process group."""
        self._ws.send(json.dumps({"signal": signal}).encode(), text=True)

    def read(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next output, b"" if none came within timeout, None once the
        command has ended and all its output was read."""
        try:
            b = self._out.get(timeout=timeout)
        except queue.Empty:
            return b""
        if b is None:
            self._out.put(None)  # every later read sees the end too
        return b

    def wait(self, timeout: Optional[float] = None) -> dict:
        """The command's exit ({"code": ..., "signal": ...}); raises the
        server's error if it could not run, Timeout if it is still running
        after timeout."""
        if not self._done.wait(timeout):
            raise Timeout("the terminal's command is still running", code="timeout")
        if self.error is not None:
            raise self.error
        return self.exit or {}

    def close(self) -> None:
        """Kill the command (the server does when the connection closes)."""
        self._ws.close()

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _WebSocket:
    """The client side of RFC 6455, enough for the exec WebSocket: masked
    frames out, unfragmented or fragmented messages in, pings answered."""

    _GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, sock: socket.socket, host: str, path: str, token: str):
        self._sock = sock
        self._wlock = threading.Lock()
        self._closed = False
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if token:
            lines.append("Authorization: Bearer " + token)
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        # The response's headers and the frames after them come from one
        # buffered reader.
        self._rf = sock.makefile("rb")
        resp = http.client.HTTPResponse(_Files(self._rf))
        try:
            resp.begin()
            if resp.status != 101:
                raise _error(resp.status, resp.read())
            want = base64.b64encode(hashlib.sha1((key + self._GUID).encode()).digest()).decode()
            if resp.getheader("Sec-WebSocket-Accept") != want:
                raise SmolvmError("smolvm server: bad WebSocket handshake")
            resp.fp = None  # the frames' reader now: the response must not close it when collected
        except BaseException:
            self.close()
            raise
        sock.settimeout(None)  # a terminal may be quiet for long

    def send(self, payload: bytes, text: bool = False, opcode: Optional[int] = None) -> None:
        op = opcode if opcode is not None else (0x1 if text else 0x2)
        n = len(payload)
        if n < 126:
            hdr = struct.pack("!BB", 0x80 | op, 0x80 | n)
        elif n < 1 << 16:
            hdr = struct.pack("!BBH", 0x80 | op, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x80 | op, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self._wlock:
            if self._closed:
                raise SmolvmError("smolvm server: the terminal's connection is closed")
            self._sock.sendall(hdr + mask + masked)

    def _read(self, n: int) -> bytes:
        b = self._rf.read(n)
        if len(b) < n:
            raise EOFError
        return b

    def recv(self) -> Optional[tuple]:
        """The next message as (is_text, payload); None at the close."""
        msg, text = bytearray(), False
        try:
            while True:
                b0, b1 = self._read(2)
                op, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", self._read(8))[0]
                if n > 16 << 20:
                    raise ValueError(f"WebSocket frame of {n} bytes")
                payload = self._read(n)
                if op == 0x8:
                    return None
                if op == 0x9:
                    self.send(payload, opcode=0xA)
                    continue
                if op == 0xA:
                    continue
                if op in (0x1, 0x2):
                    text = op == 0x1
                msg += payload
                if b0 & 0x80:
                    return text, bytes(msg)
        except EOFError:
            return None

    def close(self) -> None:
        with self._wlock:
            if self._closed:
                return
            self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # ends a read in progress, so the reader can close
        except OSError:
            pass
        self._rf.close()
        self._sock.close()


class _Files:
    """What http.client.HTTPResponse needs of a socket: its reader."""

    def __init__(self, f: Any):
        self._f = f

    def makefile(self, mode: str) -> Any:
        return self._f
