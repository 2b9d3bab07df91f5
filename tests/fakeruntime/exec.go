package fakeruntime

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"smolvm.dev/smolvm/sandbox"
)

// Exec runs one of a tiny built-in command set, never the host's:
//
//	true, false     exit 0, 1
//	echo ARGS...    ARGS on stdout
//	cat [FILE...]   the files (the sandbox's), or stdin, on stdout
//	exit N          exit N
//	sleep SECONDS   until then, ctx's end or a signal (128+signal)
//
// Anything else is not found (127), as a missing executable is.
func (r *Runtime) Exec(ctx context.Context, ref string, p sandbox.Process, stdio sandbox.Stdio) (sandbox.Exit, error) {
	fs, err := r.FS(ctx, ref)
	if err != nil {
		return sandbox.Exit{}, err
	}
	if len(p.Args) == 0 {
		return sandbox.Exit{}, fmt.Errorf("exec: %w: no command", sandbox.ErrInvalid)
	}
	out, errw := orDiscard(stdio.Stdout), orDiscard(stdio.Stderr)
	if p.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(p.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	args := p.Args[1:]
	switch p.Args[0] {
	case "true":
		return sandbox.Exit{}, nil
	case "false":
		return sandbox.Exit{Code: 1}, nil
	case "echo":
		_, err := fmt.Fprintln(out, strings.Join(args, " "))
		return sandbox.Exit{}, err
	case "cat":
		if len(args) == 0 {
			if stdio.Stdin == nil {
				return sandbox.Exit{}, nil
			}
			_, err := io.Copy(out, stdio.Stdin)
			return sandbox.Exit{}, err
		}
		for _, a := range args {
			if err := fs.ReadFile(ctx, a, out); err != nil {
				fmt.Fprintf(errw, "cat: %s: %v\n", a, err)
				return sandbox.Exit{Code: 1}, nil
			}
		}
		return sandbox.Exit{}, nil
	case "exit":
		code := 0
		if len(args) > 0 {
			code, _ = strconv.Atoi(args[0])
		}
		return sandbox.Exit{Code: code}, nil
	case "sleep":
		secs := 0.0
		if len(args) > 0 {
			secs, _ = strconv.ParseFloat(args[0], 64)
		}
		t := time.NewTimer(time.Duration(secs * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
			return sandbox.Exit{}, nil
		case sig := <-stdio.Signals:
			return sandbox.Exit{Code: 128 + int(sig), Signal: int(sig)}, nil
		case <-ctx.Done():
			if p.TimeoutMS > 0 && ctx.Err() == context.DeadlineExceeded {
				return sandbox.Exit{Code: 137, Signal: 9, TimedOut: true}, nil
			}
			return sandbox.Exit{}, ctx.Err()
		}
	}
	msg := fmt.Sprintf("exec %q: not found in the fake runtime's commands", p.Args[0])
	return sandbox.Exit{Code: 127, Error: msg, Kind: sandbox.KindNotFound}, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
