package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a connection to QEMU's monitor (QMP: JSON lines).
type qmp struct {
	c net.Conn
	r *bufio.Reader
}

// dialQMP connects to the monitor at path, waiting for QEMU to open it,
// and negotiates capabilities.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var c net.Conn
	for {
		var d net.Dialer
		var err error
		if c, err = d.DialContext(ctx, "unix", path); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	q := &qmp{c: c, r: bufio.NewReader(c)}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := q.r.ReadBytes('\n'); err != nil { // the greeting
		c.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if _, err := q.run(ctx, "qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) Close() error { return q.c.Close() }

// run executes cmd and returns its result, skipping events.
func (q *qmp) run(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	stop := context.AfterFunc(ctx, func() { q.c.Close() })
	defer stop()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	p, _ := json.Marshal(req)
	if _, err := q.c.Write(append(p, '\n')); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	return q.read(ctx, cmd)
}

func (q *qmp) read(ctx context.Context, cmd string) (json.RawMessage, error) {
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class, Desc string
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, fmt.Errorf("qmp %s: %s", cmd, resp.Error.Desc)
		}
		return resp.Return, nil
	}
}

// waitMigration polls until the migration (outgoing or incoming) ends.
func (q *qmp) waitMigration(ctx context.Context) error {
	for {
		p, err := q.run(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		json.Unmarshal(p, &st)
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return errors.New("migration " + st.Status + ": " + st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ignoreShared makes a migration skip RAM that lives in a shared file:
// the RAM file is the snapshot's memory, the stream only device state.
func (q *qmp) ignoreShared(ctx context.Context) error {
	_, err := q.run(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	})
	return err
}

// sendFD hands QEMU f under name (getfd), for an fd: migration URI: a
// QEMU under -sandbox spawn=deny cannot run exec: URIs, and 7.2 has no
// file: URI.
func (q *qmp) sendFD(ctx context.Context, name string, f *os.File) error {
	uc, ok := q.c.(*net.UnixConn)
	if !ok {
		return errors.New("qmp: not a unix socket")
	}
	p, _ := json.Marshal(map[string]any{"execute": "getfd", "arguments": map[string]string{"fdname": name}})
	if _, _, err := uc.WriteMsgUnix(append(p, '\n'), unix.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("qmp getfd: %w", err)
	}
	return q.result(ctx, "getfd")
}

// result reads the answer to a command already sent.
func (q *qmp) result(ctx context.Context, cmd string) error {
	_, err := q.read(ctx, cmd)
	return err
}
