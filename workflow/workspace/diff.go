package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Kind is how a file changed.
type Kind string

const (
	Added    Kind = "added"
	Modified Kind = "modified"
	Deleted  Kind = "deleted"
)

// entry is a file or symlink found by scan. Directories are not entries:
// they exist for the files in them.
type entry struct {
	mode fs.FileMode // type bits and permissions
	size int64
}

func (e entry) symlink() bool { return e.mode&fs.ModeSymlink != 0 }

// scan lists the regular files and symlinks under dir by slash path.
// Anything inside a directory named .git is left out: git's own state is
// never copied back, since a hook written there would run on the host.
func scan(dir string) (map[string]entry, error) {
	files := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" && p != dir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil // a worktree's or submodule's .git file
		}
		if !d.Type().IsRegular() && d.Type() != fs.ModeSymlink {
			return nil // directories, devices, fifos, sockets
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = entry{mode: fi.Mode(), size: fi.Size()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	return files, nil
}

// change is one path that differs between the sandbox's copy and the tree.
type change struct {
	path string
	kind Kind
	src  entry // the sandbox's version; zero for deletions
}

// diff compares the sandbox's copy src with the tree: content, permission
// bits and file type. The result is sorted by path.
func diff(src, tree string) ([]change, error) {
	from, err := scan(src)
	if err != nil {
		return nil, err
	}
	to, err := scan(tree)
	if err != nil {
		return nil, err
	}
	var cs []change
	for p, s := range from {
		t, ok := to[p]
		if !ok {
			cs = append(cs, change{path: p, kind: Added, src: s})
			continue
		}
		same, err := sameFile(filepath.Join(src, p), s, filepath.Join(tree, p), t)
		if err != nil {
			return nil, err
		}
		if !same {
			cs = append(cs, change{path: p, kind: Modified, src: s})
		}
	}
	for p := range to {
		if _, ok := from[p]; !ok {
			cs = append(cs, change{path: p, kind: Deleted})
		}
	}
	slices.SortFunc(cs, func(a, b change) int { return strings.Compare(a.path, b.path) })
	return cs, nil
}

// perm is the part of a mode that is copied back: setuid, setgid and
// sticky bits never are.
func perm(m fs.FileMode) fs.FileMode { return m & 0o777 }

func sameFile(a string, ea entry, b string, eb entry) (bool, error) {
	if ea.mode.Type() != eb.mode.Type() {
		return false, nil
	}
	if ea.symlink() {
		ta, err := os.Readlink(a)
		if err != nil {
			return false, err
		}
		tb, err := os.Readlink(b)
		return ta == tb, err
	}
	if perm(ea.mode) != perm(eb.mode) || ea.size != eb.size {
		return false, nil
	}
	return sameContent(a, b)
}

func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		aDone := errors.Is(erra, io.EOF) || errors.Is(erra, io.ErrUnexpectedEOF)
		bDone := errors.Is(errb, io.EOF) || errors.Is(errb, io.ErrUnexpectedEOF)
		switch {
		case erra != nil && !aDone:
			return false, erra
		case errb != nil && !bDone:
			return false, errb
		case aDone || bDone:
			return aDone == bDone, nil
		}
	}
}

// maxHops bounds symlink chains, as the kernel's ELOOP limit does.
const maxHops = 40

// escapes reports whether the symlink at rel in dir, pointing to target,
// resolves outside dir. Symlinks met on the way are followed as they are
// in dir, so a chain that climbs out through another link is caught too.
func escapes(dir, rel, target string) bool {
	var at []string // resolved components so far, none of them a symlink
	if d := path.Dir(rel); d != "." {
		at = strings.Split(d, "/")
	}
	todo := []string{target}
	for hops := 0; len(todo) > 0; {
		t := todo[0]
		todo = todo[1:]
		if path.IsAbs(t) {
			return true
		}
		name, rest, _ := strings.Cut(t, "/")
		if rest != "" {
			todo = append([]string{rest}, todo...)
		}
		switch name {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return true
			}
			at = at[:len(at)-1]
			continue
		}
		next := append(slices.Clone(at), name)
		p := filepath.Join(dir, filepath.FromSlash(strings.Join(next, "/")))
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			at = next // a directory, a file, or nothing yet
			continue
		}
		if hops++; hops > maxHops {
			return true
		}
		link, err := os.Readlink(p)
		if err != nil {
			return true
		}
		todo = append([]string{link}, todo...)
	}
	return false
}
