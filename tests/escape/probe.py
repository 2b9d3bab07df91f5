# The escape probe: run inside a default smolvm sandbox by escape_test.go.
# Each check prints one line, "NAME blocked: how" or "NAME ESCAPED: what";
# the environment names the host's canaries (ESCAPE_*). Stdlib only.
import ctypes, errno, os, socket, stat

libc = ctypes.CDLL(None, use_errno=True)
SYS = {"ptrace": 101, "mount": 165, "init_module": 175, "finit_module": 313, "bpf": 321}  # x86_64


def syscall(name, *args):
    r = libc.syscall(SYS[name], *args)
    return r, ctypes.get_errno()


def report(name, escaped, detail):
    print(f"{name} {'ESCAPED' if escaped else 'blocked'}: {detail}", flush=True)


def check(name):
    def wrap(fn):
        try:
            escaped, detail = fn()
        except OSError as e:
            escaped, detail = False, f"{errno.errorcode.get(e.errno, e.errno)}: {e.strerror}"
        report(name, escaped, detail)
        return fn
    return wrap


def err(e):
    return errno.errorcode.get(e, str(e))


@check("host-files")
def _():
    p = os.environ["ESCAPE_HOST_FILE"]
    return os.path.exists(p), f"{p} exists={os.path.exists(p)}"


@check("host-pids")
def _():
    seen = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue  # this probe's own text names runsc
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if os.environ["ESCAPE_HOST_MARK"] in cmd or "runsc" in cmd:
            seen.append(f"{pid}:{cmd[:60]}")
    return bool(seen), f"host processes visible: {seen}" if seen else "no host or runsc process in /proc"


def open_dev(path):
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    return True, f"opened {path}"


@check("dev-mem")
def _():
    return open_dev("/dev/mem")


@check("dev-kvm")
def _():
    return open_dev("/dev/kvm")


@check("block-devices")
def _():
    found = []
    for root, _, files in os.walk("/dev"):
        for f in files:
            try:
                if stat.S_ISBLK(os.lstat(os.path.join(root, f)).st_mode):
                    found.append(os.path.join(root, f))
            except OSError:
                pass
    return bool(found), f"block devices: {found}" if found else "no block device under /dev"


@check("mknod")
def _():
    p = "/tmp/escape-sda"
    os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(8, 0))
    try:
        fd = os.open(p, os.O_RDONLY)
        os.close(fd)
        return True, "made and opened a block device node for 8:0"
    except OSError as e:
        return False, f"node made but opening it: {err(e.errno)}"


@check("mount")
def _():
    os.makedirs("/tmp/escape-mnt", exist_ok=True)
    r, e = syscall("mount", b"proc", b"/tmp/escape-mnt", b"proc", 0, None)
    return r == 0, "mounted proc" if r == 0 else f"mount: {err(e)}"


@check("cgroup-release-agent")
def _():
    wrote = []
    for root, _, files in os.walk("/sys/fs/cgroup"):
        for f in files:
            if f == "release_agent":
                try:
                    with open(os.path.join(root, f), "w") as fh:
                        fh.write("/tmp/x")
                    wrote.append(os.path.join(root, f))
                except OSError:
                    pass
    return bool(wrote), f"wrote {wrote}" if wrote else "no writable release_agent"


@check("ptrace-runtime")
def _():
    pid = int(os.environ["ESCAPE_RUNSC_PID"])
    r, e = syscall("ptrace", 16, pid, 0, 0)  # PTRACE_ATTACH
    if r != 0:
        return False, f"attach to host pid {pid}: {err(e)}"
    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    syscall("ptrace", 17, pid, 0, 0)  # PTRACE_DETACH
    return b"runsc" in cmd, f"attached to pid {pid} inside: {cmd[:40]!r}"


@check("raw-socket")
def _():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.close()
    return True, "opened a raw socket"


def connect(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        return True, f"connected to {host}:{port}"
    except (OSError, socket.timeout) as e:
        return False, f"{host}:{port}: {e}"
    finally:
        s.close()


@check("host-loopback")
def _():
    return connect("127.0.0.1", int(os.environ["ESCAPE_HOST_PORT"]))


@check("cloud-metadata")
def _():
    return connect("169.254.169.254", 80)


@check("other-sandboxes")
def _():
    hits = [d for d in (connect(h, 22) for h in os.environ["ESCAPE_OTHER_ADDRS"].split()) if d[0]]
    return bool(hits), str(hits) if hits else "no other address reachable"


@check("module-loading")
def _():
    r, e = syscall("init_module", None, 0, b"")
    r2, e2 = syscall("finit_module", -1, b"", 0)
    return r == 0 or r2 == 0, f"init_module: {err(e)}, finit_module: {err(e2)}"


@check("bpf")
def _():
    attr = (ctypes.c_uint32 * 5)(2, 4, 4, 1, 0)  # BPF_MAP_TYPE_ARRAY, key 4, value 4, 1 entry
    r, e = syscall("bpf", 0, ctypes.byref(attr), ctypes.sizeof(attr))  # BPF_MAP_CREATE
    if r >= 0:
        os.close(r)
    return r >= 0, "made a BPF map" if r >= 0 else f"bpf: {err(e)}"


@check("sysrq")
def _():
    with open("/proc/sysrq-trigger", "w") as f:
        f.write("h")
    return True, "wrote /proc/sysrq-trigger"


@check("readonly-image")
def _():
    p = os.environ["ESCAPE_IMAGE_FILE"]
    with open(p, "w") as f:
        f.write("escaped")
    return True, f"wrote {p}"
