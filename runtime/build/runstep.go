package build

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"golang.org/x/sys/unix"

	"smolvm.dev/smolvm/runtime/image"
	"smolvm.dev/smolvm/sandbox"
)

// runStep runs a RUN in a sandbox of the image so far whose writes go to
// an upper directory in dir, and writes that directory as the layer.
func (r *run) runStep(ctx context.Context, st *state, c *instructions.RunCommand, n int, dir string) (string, error) {
	if st.base == nil {
		return "", fmt.Errorf("%w: the stage has no files to run anything in (FROM scratch)", ErrStep)
	}
	img, err := r.runnable(ctx, st)
	if err != nil {
		return "", err
	}
	upper := filepath.Join(dir, "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		return "", err
	}
	env := st.cf.Config.Env
	for k, v := range st.args {
		if !hasEnv(env, k) {
			env = append(env, k+"="+v)
		}
	}
	cfg := sandbox.Config{Env: env, WorkDir: st.cf.Config.WorkingDir, User: st.cf.Config.User, Network: r.o.Network}
	sb, err := r.b.m.CreateWriting(ctx, sandbox.CreateOptions{Image: img.ID, Backend: r.o.Backend, Config: cfg, Start: true}, upper)
	if err != nil {
		return "", err
	}
	removed := false
	remove := func() error {
		removed = true
		return r.b.m.Remove(context.WithoutCancel(ctx), sb.ID, true)
	}
	defer func() {
		if !removed {
			remove()
		}
	}()
	// The step writes through gVisor to this host upper directory (runsc
	// --overlay2 none, Rootfs.Upper), which also gets what the sandbox's
	// start put there (runsc's gofer's mount points, the agent's
	// /etc/machine-id): no part of the step unless the step changes it.
	// Writing through costs about twice gVisor's memory-backed overlay for
	// many small files (docs/build.md).
	before, err := stamps(upper)
	if err != nil {
		return "", err
	}
	argv := r.argv(st, c.CmdLine, c.PrependShell)
	out := &output{p: r.p, n: n, start: time.Now()}
	exit, err := r.b.m.Exec(ctx, sb.ID, sandbox.Process{Args: argv}, sandbox.Stdio{Stdout: out, Stderr: out})
	out.flush()
	if err == nil && exit.Error != "" {
		err = fmt.Errorf("%s", exit.Error)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrStep, strings.Join(argv, " "), err)
	}
	if exit.Code != 0 {
		return "", fmt.Errorf("%w: process %q did not complete successfully: exit code: %d\n%s", ErrStep, strings.Join(argv, " "), exit.Code, tail(out.all.Bytes(), 20))
	}
	// The overlay must be unmounted before its upper directory is read.
	if err := remove(); err != nil {
		return "", err
	}
	after, err := stamps(upper)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "layer.tar")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	err = image.WriteLayer(f, upper, func(rel string) bool {
		b, ok := before[rel]
		return ok && b == after[rel]
	})
	if err != nil {
		return "", err
	}
	return p, f.Close()
}

// runnable is an image of st's files that starts no command of its own:
// st.base itself, or, for a base image with a command, a copy of its
// config without it.
func (r *run) runnable(ctx context.Context, st *state) (*sandbox.Image, error) {
	if len(st.base.Config.Cmd) == 0 && len(st.base.Config.Entrypoint) == 0 {
		return st.base, nil
	}
	key := chain("", "idle", st.base.ID)
	img, err := r.b.cache.get(ctx, r.b.images, key)
	if err != nil || img != nil {
		return img, err
	}
	cf, err := r.b.images.ConfigFile(ctx, st.base)
	if err != nil {
		return nil, err
	}
	if img, err = r.b.images.Commit(ctx, st.base, nil, idle(*cf), nil, cacheSource+key); err != nil {
		return nil, err
	}
	return img, r.b.cache.put(ctx, key, img.ID)
}

func hasEnv(env []string, k string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, k+"=") {
			return true
		}
	}
	return false
}

// stamp is what tells a file changed.
type stamp struct {
	mode       uint32
	size, mtim int64
}

// stamps maps every path under dir (relative) to its stamp.
func stamps(dir string) (map[string]stamp, error) {
	out := map[string]stamp{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = stamp{st.Mode, st.Size, st.Mtim.Nano()}
		return nil
	})
	return out, err
}
