package network

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/netip"

	"smolvm.dev/smolvm/internal/store"
	"smolvm.dev/smolvm/sandbox"
)

// Every sandbox with a network gets slot idx: 10.213.0.0/16 in /30s
// (gateway .1, sandbox .2) and a ULA /64 (gateway ::1, sandbox ::2). The
// slot is recorded before anything is made, so concurrent CLIs never share
// one and a crash leaves a record that GC follows.
const maxSlots = 1 << 14

var (
	base4 = netip.MustParseAddr("10.213.0.0")
	base6 = netip.MustParseAddr("fd73:6d6f:6c76::")
)

var schema = []string{
	`CREATE TABLE net_slots (
		idx INTEGER PRIMARY KEY,
		sandbox TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL
	)`,
}

func addrsFor(idx int, id string) sandbox.NetworkAddrs {
	b4 := base4.As4()
	n := uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(idx)<<2
	v4 := func(host uint32) netip.Addr {
		x := n | host
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	b6 := base6.As16()
	b6[6], b6[7] = byte(idx>>8), byte(idx)
	v6 := func(host byte) netip.Addr {
		a := b6
		a[15] = host
		return netip.AddrFrom16(a)
	}
	return sandbox.NetworkAddrs{
		Slot: idx, Gateway4: v4(1), Sandbox4: v4(2), Gateway6: v6(1), Sandbox6: v6(2),
		HostVeth: vethName(id), LogGroup: uint16(1<<15 + idx),
	}
}

// vethName is the host end's name: "smv" and the 12-digit ID fit IFNAMSIZ.
func vethName(id string) string { return "smv" + id }

// allocate records a free slot for id, or returns the one it has. taken
// are slots other data dirs hold in the host namespace; the caller holds
// the host-wide lock (Host.lockSlots) until the slot's veth carries its
// address there, so no two data dirs pick one slot.
func allocate(ctx context.Context, st *store.Store, id string, taken map[int]bool) (sandbox.NetworkAddrs, error) {
	if a, err := lookupSlot(ctx, st, id); err == nil || !errors.Is(err, sql.ErrNoRows) {
		return a, err
	}
	rows, err := st.DB().QueryContext(ctx, `SELECT idx FROM net_slots`)
	if err != nil {
		return sandbox.NetworkAddrs{}, fmt.Errorf("allocate addresses for %s: %w", id, err)
	}
	used := map[int]bool{}
	maps.Copy(used, taken)
	for rows.Next() {
		var idx int
		if err := rows.Scan(&idx); err != nil {
			rows.Close()
			return sandbox.NetworkAddrs{}, fmt.Errorf("allocate addresses for %s: %w", id, err)
		}
		used[idx] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return sandbox.NetworkAddrs{}, fmt.Errorf("allocate addresses for %s: %w", id, err)
	}
	idx := 0
	for used[idx] {
		idx++
	}
	if idx >= maxSlots {
		return sandbox.NetworkAddrs{}, fmt.Errorf("allocate addresses for %s: all %d slots in use", id, maxSlots)
	}
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO net_slots (idx, sandbox, created_at) VALUES (?, ?, ?)`,
		idx, id, store.Now().UnixMilli()); err != nil {
		return sandbox.NetworkAddrs{}, fmt.Errorf("allocate addresses for %s: %w", id, err)
	}
	return addrsFor(idx, id), nil
}

// slotOf is the slot whose pair holds address a, if a is in the range.
func slotOf(a netip.Addr) (int, bool) {
	if !a.Is4() || !netip.PrefixFrom(base4, 16).Contains(a) {
		return 0, false
	}
	b := a.As4()
	return (int(b[2])<<8 | int(b[3])) >> 2, true
}

func lookupSlot(ctx context.Context, st *store.Store, id string) (sandbox.NetworkAddrs, error) {
	var idx int
	if err := st.DB().QueryRowContext(ctx, `SELECT idx FROM net_slots WHERE sandbox = ?`, id).Scan(&idx); err != nil {
		return sandbox.NetworkAddrs{}, err
	}
	return addrsFor(idx, id), nil
}

func release(ctx context.Context, st *store.Store, id string) error {
	_, err := st.DB().ExecContext(ctx, `DELETE FROM net_slots WHERE sandbox = ?`, id)
	return err
}

func slotOwners(ctx context.Context, st *store.Store) ([]string, error) {
	rows, err := st.DB().QueryContext(ctx, `SELECT sandbox FROM net_slots`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// prefix4 and prefix6 are the on-link prefixes of the pair.
func prefix4(a sandbox.NetworkAddrs) netip.Prefix { return netip.PrefixFrom(a.Gateway4, 30) }

func prefix6(a sandbox.NetworkAddrs) netip.Prefix { return netip.PrefixFrom(a.Gateway6, 64) }
