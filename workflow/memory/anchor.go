package memory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// resolve fills in a's hashes from the working tree, failing when the path,
// lines or symbol it names do not exist.
func (r *Repo) resolve(ctx context.Context, a Anchor) (Anchor, error) {
	a.Blob, a.Hash, a.Drift, a.MovedTo = "", "", "", ""
	info, err := os.Stat(r.abs(a.Path))
	if err != nil {
		return Anchor{}, fmt.Errorf("anchor %s: %w", a, err)
	}
	if info.IsDir() {
		if a.Start > 0 || a.Symbol != "" {
			return Anchor{}, fmt.Errorf("anchor %s: a directory takes no line range or symbol", a)
		}
		// A directory's id is its tree at HEAD; it is only used to find
		// the directory again after a move.
		if out, err := git(ctx, r.root, "rev-parse", "-q", "--verify", "HEAD:"+a.Path); err == nil {
			a.Blob = strings.TrimSpace(out)
		}
		return a, nil
	}
	if a.Blob, err = r.hashObject(ctx, a.Path); err != nil {
		return Anchor{}, err
	}
	if a.Start == 0 && a.Symbol == "" {
		return a, nil
	}
	src, err := os.ReadFile(r.abs(a.Path))
	if err != nil {
		return Anchor{}, fmt.Errorf("anchor %s: %w", a, err)
	}
	if a.Start > 0 {
		lines := splitLines(src)
		if a.End > len(lines) {
			return Anchor{}, fmt.Errorf("anchor %s: file has only %d lines", a, len(lines))
		}
		a.Hash = hashLines(lines[a.Start-1 : a.End])
		return a, nil
	}
	found, h, err := findSymbol(a.Path, src, a.Symbol)
	if err != nil {
		return Anchor{}, fmt.Errorf("anchor %s: %w", a, err)
	}
	if !found {
		return Anchor{}, fmt.Errorf("anchor %s: symbol %s not found", a, a.Symbol)
	}
	a.Hash = h
	return a, nil
}

// check compares a with the working tree and returns it with Drift set
// (empty when it still matches). A line range that moved unchanged within
// its file is followed: the returned anchor carries the new lines.
//
// Line ranges compare only their own lines, so edits elsewhere in the file
// do not make a fact stale; Go symbols compare their declaration's source;
// symbols in other files only need to still occur as a whole word, and
// directories only need to still exist.
func (r *Repo) check(ctx context.Context, a Anchor) (Anchor, error) {
	a.Drift, a.MovedTo = "", ""
	info, err := os.Stat(r.abs(a.Path))
	if errors.Is(err, fs.ErrNotExist) {
		to, err := r.findRename(ctx, a.Path, a.Blob)
		if err != nil {
			return Anchor{}, fmt.Errorf("anchor %s: %w", a, err)
		}
		if to == "" {
			a.Drift = "deleted"
		} else {
			a.Drift, a.MovedTo = "renamed to "+to, to
		}
		return a, nil
	}
	if err != nil {
		return Anchor{}, fmt.Errorf("anchor %s: %w", a, err)
	}
	if info.IsDir() {
		if a.Start > 0 || a.Symbol != "" {
			a.Drift = "modified (now a directory)"
		}
		return a, nil
	}
	blob, err := r.hashObject(ctx, a.Path)
	if err != nil {
		return Anchor{}, err
	}
	if blob == a.Blob {
		return a, nil
	}
	if a.Start == 0 && a.Symbol == "" {
		a.Drift = "modified"
		return a, nil
	}
	src, err := os.ReadFile(r.abs(a.Path))
	if err != nil {
		return Anchor{}, fmt.Errorf("anchor %s: %w", a, err)
	}
	if a.Start > 0 {
		lines := splitLines(src)
		if a.End <= len(lines) && hashLines(lines[a.Start-1:a.End]) == a.Hash {
			return a, nil
		}
		if at := findLines(lines, a.End-a.Start+1, a.Hash); at > 0 {
			a.End, a.Start = at+a.End-a.Start, at
			return a, nil
		}
		a.Drift = fmt.Sprintf("modified (lines %d-%d changed)", a.Start, a.End)
		return a, nil
	}
	found, h, err := findSymbol(a.Path, src, a.Symbol)
	switch {
	case err != nil:
		a.Drift = fmt.Sprintf("modified (%v)", err)
	case !found:
		a.Drift = fmt.Sprintf("symbol %s gone", a.Symbol)
	case h != a.Hash:
		a.Drift = fmt.Sprintf("modified (symbol %s changed)", a.Symbol)
	}
	return a, nil
}

func (r *Repo) hashObject(ctx context.Context, p string) (string, error) {
	out, err := git(ctx, r.root, "hash-object", "--", p)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

func (r *Repo) abs(p string) string { return filepath.Join(r.root, filepath.FromSlash(p)) }

func splitLines(src []byte) []string {
	s := strings.ReplaceAll(string(src), "\r\n", "\n")
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func hashLines(lines []string) string {
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// findLines returns the first 1-based line where n lines hash to h, or 0.
func findLines(lines []string, n int, h string) int {
	for i := 0; i+n <= len(lines); i++ {
		if hashLines(lines[i:i+n]) == h {
			return i + 1
		}
	}
	return 0
}

// findSymbol looks for sym in a file. In Go files it matches top-level
// declarations (Name, or Type.Method for methods) and returns a hash of the
// declaration's source; elsewhere a whole-word occurrence is enough and the
// hash is empty.
func findSymbol(name string, src []byte, sym string) (found bool, hash string, err error) {
	if path.Ext(name) != ".go" {
		re := regexp.MustCompile(`\b` + regexp.QuoteMeta(sym) + `\b`)
		return re.Match(src), "", nil
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return false, "", fmt.Errorf("cannot parse %s: %w", name, err)
	}
	var node ast.Node
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if funcName(d) == sym {
				node = d
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.Name == sym {
						node = s
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.Name == sym {
							node = s
						}
					}
				}
			}
		}
	}
	if node == nil {
		return false, "", nil
	}
	body := src[fset.Position(node.Pos()).Offset:fset.Position(node.End()).Offset]
	sum := sha256.Sum256(bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n")))
	return true, hex.EncodeToString(sum[:]), nil
}

// funcName is Name for functions and Type.Name for methods.
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.Ident:
			return x.Name + "." + d.Name.Name
		default:
			return d.Name.Name
		}
	}
}
