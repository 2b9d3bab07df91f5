// Package network gives sandboxes a policed network: a namespace and veth
// per sandbox, nftables rules in the host, a DNS resolver that admits only
// allowed names' addresses, published ports and a deny log.
package network

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/internal/flock"
	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// Host sets up and tears down sandbox networks in one host network
// namespace. Everything a sandbox's network needs outside the sandbox
// lives there: the host end of its veth, its nftables table, and its
// helper process (DNS resolver, port forwarders, deny log).
type Host struct {
	// NetNS is the path of the host-side namespace; empty is this
	// process's own. Tests give a namespace with no route out.
	NetNS string
	// Resolver is the upstream DNS server (ip:port) that allowed queries
	// go to; empty takes the first nameserver of /etc/resolv.conf.
	Resolver string
	// Dir holds one directory per sandbox network.
	Dir string
	// Store records address slots.
	Store *store.Store
	// Helper is the command line that runs the helper process, to which
	// the sandbox's directory is appended (smolvm net-helper).
	Helper []string
	// Lock is the host-wide lock file under which every data dir takes
	// its slots; empty is DefaultLock.
	Lock string
}

// DefaultLock is the slot lock every smolvm on the host shares, whatever
// its data dir: slots (addresses, NFLOG groups) are the host namespace's.
const DefaultLock = "/run/smolvm/network.lock"

// helperConfig is what the helper reads from its directory.
type helperConfig struct {
	ID       string               `json:"id"`
	Addrs    sandbox.NetworkAddrs `json:"addresses"`
	Network  sandbox.Network      `json:"policy"`
	Resolver string               `json:"resolver"`
}

// Files in a sandbox's network directory.
const (
	fileNetNS   = "netns"
	fileConfig  = "helper.json"
	filePid     = "helper.pid"
	fileLog     = "helper.log"
	filePorts   = "ports.json"
	fileEvents  = "events.jsonl"
	fileResolvC = "resolv.conf"
)

// Prepare migrates the slot table; call it once before using h.
func (h *Host) Prepare(ctx context.Context) error {
	return h.Store.Migrate(ctx, "network", schema)
}

func (h *Host) dir(id string) string { return filepath.Join(h.Dir, id) }

// NetNSPath is the namespace a backend runs sandbox id in.
func (h *Host) NetNSPath(id string) string { return filepath.Join(h.dir(id), fileNetNS) }

// ResolvConf is the resolv.conf the sandbox must see as /etc/resolv.conf.
func (h *Host) ResolvConf(id string) string { return filepath.Join(h.dir(id), fileResolvC) }

// Setup builds sandbox id's network for p and starts its helper. On
// failure it removes what it made.
func (h *Host) Setup(ctx context.Context, id string, p *sandbox.Network) (err error) {
	if len(h.Helper) == 0 {
		return errors.New("no network helper command configured")
	}
	unlock, err := h.lockSlots()
	if err != nil {
		return err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	taken, err := h.takenSlots()
	if err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	a, err := allocate(ctx, h.Store, id, taken)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			h.Teardown(context.WithoutCancel(ctx), id)
		}
	}()
	d := h.dir(id)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	resolver, err := h.resolver()
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(d, fileConfig), helperConfig{ID: id, Addrs: a, Network: *p, Resolver: resolver}); err != nil {
		return err
	}
	conf := fmt.Sprintf("nameserver %s\nnameserver %s\noptions edns0\n", a.Gateway4, a.Gateway6)
	if err := os.WriteFile(filepath.Join(d, fileResolvC), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := newNetNS(h.NetNSPath(id)); err != nil {
		return err
	}
	if err := h.hostSide(id, a, p); err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	// The veth carries the slot's address now: other data dirs see it.
	unlock()
	locked = false
	if err := h.reset(ctx, id); err != nil {
		return err
	}
	return h.startHelper(ctx, id)
}

// lockSlots takes the host-wide slot lock.
func (h *Host) lockSlots() (unlock func(), err error) {
	p := h.Lock
	if p == "" {
		p = DefaultLock
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("slot lock: %w", err)
	}
	unlock, err = flock.Lock(p)
	if err != nil {
		return nil, fmt.Errorf("slot lock: %w", err)
	}
	return unlock, nil
}

// takenSlots are the slots whose gateway address an interface of the host
// namespace carries: this data dir's and every other's.
func (h *Host) takenSlots() (map[int]bool, error) {
	taken := map[int]bool{}
	err := InNetNS(h.NetNS, func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("list host addresses: %w", err)
		}
		for _, ad := range addrs {
			if a, ok := netip.AddrFromSlice(ad.IP.To4()); ok {
				if idx, ok := slotOf(a); ok {
					taken[idx] = true
				}
			}
		}
		return nil
	})
	return taken, err
}

// hostSide makes the veth pair and the firewall in the host namespace.
func (h *Host) hostSide(id string, a sandbox.NetworkAddrs, p *sandbox.Network) error {
	sbns, err := os.Open(h.NetNSPath(id))
	if err != nil {
		return err
	}
	defer sbns.Close()
	return InNetNS(h.NetNS, func() error {
		// Forwarding is per namespace; IPv6 forwarding also turns off
		// router advertisements on this namespace's interfaces (see
		// docs/network.md).
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
				return err
			}
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.HostVeth}, PeerName: "eth0", PeerNamespace: netlink.NsFd(sbns.Fd())}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s: %w", a.HostVeth, err)
		}
		link, err := netlink.LinkByName(a.HostVeth)
		if err != nil {
			return err
		}
		if err := addAddrs(link, prefix4(a), prefix6(a)); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		if err := newFirewall(conn, id, a).create(p); err != nil {
			return err
		}
		if err := conn.Flush(); err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		return nil
	})
}

// reset (re)configures the sandbox's side of the veth. runsc takes the
// interface's addresses into gVisor's netstack and removes them from the
// namespace, so every boot (start, restart, restore) needs this first.
func (h *Host) reset(ctx context.Context, id string) error {
	a, err := lookupSlot(ctx, h.Store, id)
	if err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	err = InNetNS(h.NetNSPath(id), func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := addAddrs(eth, netip.PrefixFrom(a.Sandbox4, 30), netip.PrefixFrom(a.Sandbox6, 64)); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		for _, gw := range []netip.Addr{a.Gateway4, a.Gateway6} {
			r := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()}
			if err := netlink.RouteReplace(r); err != nil {
				return fmt.Errorf("default route via %s: %w", gw, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("network of %s: sandbox side: %w", id, err)
	}
	return nil
}

// Ensure readies id's network for a boot of a stopped sandbox. After a
// host reboot the namespace, veth, table and helper are gone while the
// record remains: a network that is not whole is rebuilt for p (the slot,
// and so the address, may change). A whole one only gets its sandbox side
// reset.
func (h *Host) Ensure(ctx context.Context, id string, p *sandbox.Network) error {
	if h.whole(id) {
		return h.reset(ctx, id)
	}
	if err := h.Teardown(ctx, id); err != nil {
		return err
	}
	return h.Setup(ctx, id, p)
}

// whole reports whether id's namespace is mounted, its helper runs and its
// table exists.
func (h *Host) whole(id string) bool {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if !strings.Contains(string(mi), h.NetNSPath(id)) || h.helperPid(id) == 0 {
		return false
	}
	err := InNetNS(h.NetNS, func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		_, err = conn.ListTableOfFamily(tableName(id), nftables.TableFamilyINet)
		return err
	})
	return err == nil
}

// addAddrs adds prefixes to link unless present; IPv6 skips duplicate
// address detection, so the address is usable at once.
func addAddrs(link netlink.Link, pfxs ...netip.Prefix) error {
	for _, p := range pfxs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("address %s on %s: %w", p, link.Attrs().Name, err)
		}
	}
	return nil
}

// resolver returns the upstream DNS server.
func (h *Host) resolver() (string, error) {
	if h.Resolver != "" {
		return h.Resolver, nil
	}
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return "", fmt.Errorf("upstream DNS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == "nameserver" {
			return net.JoinHostPort(fs[1], "53"), nil
		}
	}
	return "", errors.New("upstream DNS: no nameserver in /etc/resolv.conf")
}

// startHelper starts the helper inside the host namespace, detached, and
// waits until it serves DNS and has bound the published ports.
func (h *Host) startHelper(ctx context.Context, id string) error {
	d := h.dir(id)
	logf, err := os.OpenFile(filepath.Join(d, fileLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(h.Helper[0], append(h.Helper[1:], d)...)
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logf, logf, []*os.File{w}
	// Its own session: the helper lives as long as the sandbox, not as
	// long as the CLI that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// A process forked on a thread inside the namespace starts there.
	err = InNetNS(h.NetNS, cmd.Start)
	w.Close()
	if err != nil {
		return fmt.Errorf("start network helper: %w", err)
	}
	// Reaped here if it dies while this process lives; otherwise init
	// inherits it.
	go cmd.Wait()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if s != "ok" {
			if s == "" {
				s = "exited: " + lastLogLine(filepath.Join(d, fileLog))
			}
			return fmt.Errorf("network helper: %s", s)
		}
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("network helper did not start within 10s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func lastLogLine(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// helperPid returns the running helper of id, checking that the pid is
// still that helper (pids are reused).
func (h *Host) helperPid(id string) int {
	b, err := os.ReadFile(filepath.Join(h.dir(id), filePid))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), h.dir(id)) {
		return 0
	}
	return pid
}

// Update changes a running sandbox's policy. New connections and DNS
// queries follow it at once; connections already open carry on.
func (h *Host) Update(ctx context.Context, id string, p *sandbox.Network) error {
	a, err := lookupSlot(ctx, h.Store, id)
	if err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	cfgPath := filepath.Join(h.dir(id), fileConfig)
	var cfg helperConfig
	if err := readJSON(cfgPath, &cfg); err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	// Published ports stay as bound: they are not part of a live update.
	cfg.Network.Mode, cfg.Network.Hosts, cfg.Network.CIDRs = p.Mode, p.Hosts, p.CIDRs
	// The helper rereads its config on every query, so the resolver
	// follows before the firewall forgets old admissions.
	if err := writeFileAtomic(cfgPath, cfg); err != nil {
		return err
	}
	return InNetNS(h.NetNS, func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		if err := newFirewall(conn, id, a).update(&cfg.Network); err != nil {
			return fmt.Errorf("network of %s: nftables: %w", id, err)
		}
		return nil
	})
}

// Status reports id's network, with live counters and port mappings.
func (h *Host) Status(ctx context.Context, id string) (*sandbox.NetworkState, error) {
	a, err := lookupSlot(ctx, h.Store, id)
	if err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	var cfg helperConfig
	if err := readJSON(filepath.Join(h.dir(id), fileConfig), &cfg); err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	st := &sandbox.NetworkState{Network: cfg.Network, Addrs: a, NetNS: h.NetNSPath(id), Helper: h.helperPid(id), Resolver: a.Gateway4}
	readJSON(filepath.Join(h.dir(id), filePorts), &st.Ports)
	c, err := h.Counters(id)
	if err == nil {
		st.Counters = &c
	}
	return st, err
}

// Counters reads id's byte and packet counters (its nftables table's):
// Tx is what the sandbox sent, to the host or beyond. They restart from
// zero when the table is made again.
func (h *Host) Counters(id string) (sandbox.NetworkCounters, error) {
	var c sandbox.NetworkCounters
	err := InNetNS(h.NetNS, func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		c, err = newFirewall(conn, id, sandbox.NetworkAddrs{}).counters()
		return err
	})
	if err != nil {
		return c, fmt.Errorf("counters of %s: %w", id, err)
	}
	return c, nil
}

// Teardown removes everything id's network made: helper, table, veth,
// namespace, directory and slot. It is idempotent and works on a half
// set-up network, which is how crashes are cleaned up.
func (h *Host) Teardown(ctx context.Context, id string) error {
	if pid := h.helperPid(id); pid > 0 {
		unix.Kill(pid, unix.SIGKILL)
	}
	var errs []error
	err := InNetNS(h.NetNS, func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		if err := deleteTable(conn, id); err != nil {
			return fmt.Errorf("delete nftables table: %w", err)
		}
		if link, err := netlink.LinkByName(vethName(id)); err == nil {
			if err := netlink.LinkDel(link); err != nil {
				return fmt.Errorf("delete veth: %w", err)
			}
		}
		return nil
	})
	errs = append(errs, err)
	errs = append(errs, delNetNS(h.NetNSPath(id)))
	if err := os.RemoveAll(h.dir(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, release(ctx, h.Store, id))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tear down network of %s: %w", id, err)
	}
	return nil
}

// GC tears down every network of this data dir whose sandbox alive does
// not know. It starts from slots and directories, never from what the
// namespace holds, which may belong to another data dir.
func (h *Host) GC(ctx context.Context, alive func(id string) bool) ([]string, error) {
	ids := map[string]bool{}
	owners, err := slotOwners(ctx, h.Store)
	if err != nil {
		return nil, err
	}
	for _, id := range owners {
		ids[id] = true
	}
	if ents, err := os.ReadDir(h.Dir); err == nil {
		for _, e := range ents {
			ids[e.Name()] = true
		}
	}
	var removed []string
	var errs []error
	for id := range ids {
		if alive(id) {
			continue
		}
		if err := h.Teardown(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "network of "+id)
	}
	return removed, errors.Join(errs...)
}

func writeFileAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Leftovers lists what of id's network exists: after Teardown, nothing.
func (h *Host) Leftovers(ctx context.Context, id string) []string {
	var left []string
	if _, err := lookupSlot(ctx, h.Store, id); err == nil {
		left = append(left, "address slot")
	}
	if _, err := os.Stat(h.dir(id)); err == nil {
		left = append(left, "directory "+h.dir(id))
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), h.NetNSPath(id)) {
		left = append(left, "namespace mount")
	}
	if procs, _ := filepath.Glob("/proc/[0-9]*/cmdline"); len(procs) > 0 {
		for _, p := range procs {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), h.dir(id)) {
				left = append(left, "helper process "+filepath.Base(filepath.Dir(p)))
			}
		}
	}
	InNetNS(h.NetNS, func() error {
		if _, err := netlink.LinkByName(vethName(id)); err == nil {
			left = append(left, "veth "+vethName(id))
		}
		if conn, err := nftables.New(); err == nil {
			if _, err := conn.ListTableOfFamily(tableName(id), nftables.TableFamilyINet); err == nil {
				left = append(left, "nftables table "+tableName(id))
			}
		}
		return nil
	})
	return left
}
