package guest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"testing"

	"smolvm.dev/smolvm/sandbox"
)

// frame builds one frame of the agent's protocol.
func frame(typ byte, p []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	return append(b, p...)
}

// FuzzFrames feeds hostile bytes to both framings the agent speaks: the
// per-connection frames (requests, stdio, exit) and the mux frames of the
// serial port. Neither may panic, allocate past its frame limit, or write
// a mirrored file it was not told to receive.
func FuzzFrames(f *testing.F) {
	req, _ := json.Marshal(Request{Op: OpExec, Exec: &sandbox.Process{Args: []string{"sh", "-c", "true"}}})
	f.Add(frame(frameRequest, req))
	f.Add(frame(frameStdout, []byte("out")))
	f.Add([]byte{frameRequest, 0xff, 0xff, 0xff, 0xff})
	f.Add(append(frame(muxOpen, []byte{0, 0, 0, 1}), 0, 0, 0, 0))
	f.Add([]byte{muxFile, 0, 0, 0, 1, 0, 0, 0, 8, fileReplace, 3, '.', '.', '/', 'x', 'y', 'z'})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newConn(struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard})
		for {
			typ, p, err := c.read()
			if err != nil {
				break
			}
			if len(p) > maxFrame {
				t.Fatalf("frame of %d bytes read", len(p))
			}
			if typ == frameRequest {
				var r Request
				json.Unmarshal(p, &r)
			}
		}

		// Round trip: what is written reads back whole.
		var buf bytes.Buffer
		w := newConn(struct {
			io.Reader
			io.Writer
		}{&buf, &buf})
		body := in[:min(len(in), maxFrame)]
		if err := w.write(frameStdout, body); err != nil {
			t.Fatal(err)
		}
		if typ, p, err := w.read(); err != nil || typ != frameStdout || !bytes.Equal(p, body) {
			t.Fatalf("round trip: %q %d bytes %v", typ, len(p), err)
		}

		dir := t.TempDir()
		m := NewMux(struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard})
		m.ReceiveFiles(dir, []string{"log"})
		if err := m.Run(); err == nil {
			t.Fatal("Run ended without an error at the end of its input")
		}
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range des {
			if d.Name() != "log" {
				t.Fatalf("mux wrote %q", d.Name())
			}
		}
	})
}
