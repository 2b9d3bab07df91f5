package network

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"smolvm.dev/smolvm/internal/store"
)

func TestDescribePacket(t *testing.T) {
	v4 := make([]byte, 24)
	v4[0], v4[9] = 0x45, 6
	copy(v4[16:], []byte{203, 0, 113, 20})
	v4[22], v4[23] = 0, 80
	if p, d := describePacket(v4); p != "tcp" || d != "203.0.113.20:80" {
		t.Errorf("v4: %s %s", p, d)
	}
	v6 := make([]byte, 48)
	v6[0], v6[6] = 0x60, 17
	v6[24], v6[25], v6[39] = 0x20, 0x01, 1
	v6[42], v6[43] = 0, 53
	if p, d := describePacket(v6); p != "udp" || d != "[2001::1]:53" {
		t.Errorf("v6: %s %s", p, d)
	}
	if p, _ := describePacket([]byte{0x45}); p != "ipv4" {
		t.Errorf("short: %s", p)
	}
}

// TestAllocateConcurrent allocates from many goroutines over one database
// under the slot lock, as concurrent CLIs do: every sandbox gets a
// different slot, none another data dir holds, and released slots are
// reused.
func TestAllocateConcurrent(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx, "network", schema); err != nil {
		t.Fatal(err)
	}
	h := &Host{Store: st, Lock: filepath.Join(t.TempDir(), "lock")}
	taken := map[int]bool{0: true, 7: true}
	var mu sync.Mutex
	slots := map[int]string{}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("%012x", i)
			unlock, err := h.lockSlots()
			if err != nil {
				t.Error(err)
				return
			}
			a, err := allocate(ctx, st, id, taken)
			unlock()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if taken[a.Slot] {
				t.Errorf("%s got slot %d, which another data dir holds", id, a.Slot)
			}
			if other, ok := slots[a.Slot]; ok {
				t.Errorf("slot %d given to %s and %s", a.Slot, other, id)
			}
			slots[a.Slot] = id
		}()
	}
	wg.Wait()
	if len(slots) != 32 {
		t.Fatalf("%d slots for 32 sandboxes", len(slots))
	}
	release(ctx, st, slots[5])
	a, err := allocate(ctx, st, "new", taken)
	if err != nil || a.Slot != 5 {
		t.Fatalf("after releasing slot 5: %+v, %v", a, err)
	}
	if a.Gateway4.String() != "10.213.0.21" || a.Sandbox4.String() != "10.213.0.22" || a.Sandbox6.String() != "fd73:6d6f:6c76:5::2" {
		t.Errorf("addresses of slot 5: %+v", a)
	}
}
