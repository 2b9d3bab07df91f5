package trust

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// Gates is the exec gate of sandboxes under a trust policy (their
// Config.Policy names the repository whose policy governs them). It keeps
// each repository's policy parsed, reloading it when its file changes, and
// opens the ledger once, at the first check: a check writes only what
// Gate.Check writes (its audit record, and an ask's approval). It is safe
// for concurrent use.
type Gates struct {
	st *store.Store

	ledgerMu sync.Mutex
	ledger   *Ledger

	mu       sync.Mutex
	policies map[string]*loaded // by repository root
}

// NewGates returns the exec gate over st, which holds the ledger.
func NewGates(st *store.Store) *Gates {
	return &Gates{st: st, policies: map[string]*loaded{}}
}

// Check returns nil once argv may run in sb, as Gate.Check decides and
// records it under the requester "sandbox:NAME".
func (g *Gates) Check(ctx context.Context, sb *sandbox.Sandbox, argv []string) error {
	pol, err := g.policy(sb.Config.TrustRepo)
	if err != nil {
		return err
	}
	l, err := g.openLedger(ctx)
	if err != nil {
		return err
	}
	gate := &Gate{Policy: pol, Ledger: l}
	return gate.Check(ctx, Action{Kind: Run, Argv: argv}, "sandbox:"+sb.Name)
}

// Network checks the policy of the repository at root for a sandbox being
// created under it, and returns the sandbox's network: want, if the
// policy's [net] rules allow all of it, or, for a nil want, the widest
// network they allow outright (nil when none). So the policy's egress is
// enforced by the network layer, outside the sandbox. A root without a
// policy file, a malformed policy and a wider network are
// sandbox.ErrInvalid: a typo is caught at create, not at the first exec.
func (g *Gates) Network(root string, want *sandbox.Network) (*sandbox.Network, error) {
	if _, err := os.Stat(filepath.Join(root, FileName)); err != nil {
		return nil, fmt.Errorf("%w: --policy %s: %v", sandbox.ErrInvalid, root, err)
	}
	pol, err := g.policy(root)
	if err != nil {
		return nil, fmt.Errorf("%w: --policy: %v", sandbox.ErrInvalid, err)
	}
	eg := pol.Egress()
	if want == nil {
		switch {
		case eg.Any:
			return &sandbox.Network{Mode: sandbox.NetFull}, nil
		case len(eg.Hosts)+len(eg.CIDRs) > 0:
			return &sandbox.Network{Mode: sandbox.NetEgress, Hosts: eg.Hosts, CIDRs: eg.CIDRs}, nil
		}
		return nil, nil
	}
	refuse := func(what string) error {
		return fmt.Errorf("%w: %s: the trust policy of %s does not allow it (smolvm policy explain net HOST)", sandbox.ErrInvalid, what, root)
	}
	if want.Mode == sandbox.NetFull && !eg.Any {
		return nil, refuse("--net full")
	}
	for _, h := range want.Hosts {
		if !eg.Allows(h) {
			return nil, refuse("--allow-host " + h)
		}
	}
	for _, c := range want.CIDRs {
		if !eg.Allows(c) {
			return nil, refuse("--allow-cidr " + c)
		}
	}
	return want, nil
}

// openLedger opens the ledger, applying its schema, the first time it is
// needed; a failure is retried at the next call.
func (g *Gates) openLedger(ctx context.Context) (*Ledger, error) {
	g.ledgerMu.Lock()
	defer g.ledgerMu.Unlock()
	if g.ledger == nil {
		l, err := OpenLedger(ctx, g.st)
		if err != nil {
			return nil, err
		}
		g.ledger = l
	}
	return g.ledger, nil
}

// racyWindow is how long after a file's last change its stat may not yet
// tell a later change apart: filesystems that keep whole seconds (ext3,
// ext4 with small inodes, FAT at two) give a write in the same second the
// same times, and the kernel stamps files from a clock that lags by a
// tick.
const racyWindow = 2 * time.Second

// loaded is a parsed policy file and the stat it was read under.
type loaded struct {
	pol *Policy
	id  fileID
	// racy: the file changed within racyWindow of the stat, so the same
	// stat later does not prove the same content (as in git's "racily
	// clean" index entries). A racy entry is read again at every use.
	racy bool
}

// fileID is what changes when a file is written or replaced.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

func idOf(fi os.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), uint64(st.Ino)
		id.ctime = time.Unix(st.Ctim.Unix()).UnixNano()
	}
	return id
}

// policy returns the policy of the repository at root, as Load does,
// from memory unless its file changed since it was read.
func (g *Gates) policy(root string) (*Policy, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	g.mu.Lock()
	old := g.policies[root]
	g.mu.Unlock()
	// The time is taken before the stat and the stat before the read: a
	// write after either leaves the entry stale, to be seen at next use.
	now := time.Now()
	fi, err := os.Stat(filepath.Join(root, FileName))
	if err != nil {
		// No file: the default (Load's answer), which is not cached.
		return Load(root)
	}
	id := idOf(fi)
	if old != nil && old.id == id && !old.racy {
		return old.pol, nil
	}
	pol, err := Load(root)
	if err != nil {
		return nil, err
	}
	changed := time.Unix(0, max(id.mtime, id.ctime))
	l := &loaded{pol: pol, id: id, racy: changed.After(now.Add(-racyWindow))}
	g.mu.Lock()
	g.policies[root] = l
	g.mu.Unlock()
	return pol, nil
}
