// Package names checks the names and IDs users give smolvm, and joins them
// into host paths so they cannot leave their root.
//
// Every name or ID that comes from a request or a command line goes
// through Check, at the boundary (the HTTP surfaces, the Manager's entry
// points) and again where it becomes a path (Join). The rules are the ones
// each kind always had; what they share (no '/', no "..", no NUL, valid
// UTF-8, a maximum length) is checked first, so a message names the most
// telling fault.
package names

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"smolvm.dev/smolvm/internal/lazyre"
	"smolvm.dev/smolvm/sandbox"
)

// ErrInvalid matches every error of this package. It is the contract's
// sentinel (class errdefs.ErrInvalid), which every surface answers as a
// bad request.
var ErrInvalid = sandbox.ErrInvalid

// Kind is what a name names; it sets the rule and the wording of errors.
type Kind int

// The kinds of names.
const (
	// Sandbox is a sandbox's name, or a reference to one: a name, an ID or
	// an ID prefix (all fit the name rule).
	Sandbox Kind = iota + 1
	// Snapshot is a snapshot's name, or a reference to one: a name, an ID
	// (hex digits) or a full ID (sha256:…).
	Snapshot
	// Pool is a warm pool's name.
	Pool
	// Image is an image reference (registry/repository[:tag][@digest]) or
	// ID. It may hold '/' between its path components, none of which may
	// be empty, "." or "..".
	Image
	// Tenant is a tenant's name.
	Tenant
	// Context is a code-interpreter context's ID.
	Context
	// Port is a TCP port number, 1-65535.
	Port
	// Path is a path inside a sandbox (see CheckPath).
	Path
	// Key is a tenant API key's ID (never its secret).
	Key
	// Template is a template's name, with an optional ":TAG".
	Template
	// Hex is an ID in hex digits (a content hash, a build's ID).
	Hex
	// Volume is a named volume's name.
	Volume
)

type rule struct {
	what  string
	max   int
	re    func() *regexp.Regexp
	want  string
	slash bool // '/' separates path components
}

const (
	word = `[A-Za-z0-9][A-Za-z0-9_.-]`
	// short is the rule of sandbox, pool, tenant and volume names.
	short = "use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"
)

// The lengths are checked before the patterns (max), which therefore
// say "*" rather than "{0,62}": a counted repetition compiles into that
// many copies, and these compile at every smolvm start (1.5 ms against
// 0.14 ms).
var rules = map[Kind]rule{
	Sandbox: {what: "sandbox name", max: 63, re: lazyre.New(`^` + word + `*$`), want: short},
	Pool:    {what: "pool name", max: 63, re: lazyre.New(`^` + word + `*$`), want: short},
	Tenant:  {what: "tenant name", max: 63, re: lazyre.New(`^` + word + `*$`), want: short},
	Volume:  {what: "volume name", max: 63, re: lazyre.New(`^` + word + `*$`), want: short},
	Snapshot: {what: "snapshot name", max: 128, re: lazyre.New(`^(sha256:[0-9a-f]{1,64}|` + word + `*)$`),
		want: "use up to 128 letters, digits, '_', '.' or '-', starting with a letter or digit, or a snapshot ID"},
	Context: {what: "context ID", max: 128, re: lazyre.New(`^` + word + `*$`),
		want: "use up to 128 letters, digits, '_', '.' or '-', starting with a letter or digit"},
	// 255 is Docker's limit on a reference's name.
	Image: {what: "image reference", max: 255, re: lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_.:/@-]*$`), slash: true,
		want: "use letters, digits and '_', '.', '-', ':', '/', '@', starting with a letter or digit"},
	Port: {what: "port", max: 5, re: lazyre.New(`^[1-9][0-9]{0,4}$`), want: "use a number from 1 to 65535"},
	Path: {what: "path", max: MaxPath},
	Template: {what: "template name", max: 128, re: lazyre.New(`^` + word + `*(:` + word + `*)?$`),
		want: "use up to 128 letters, digits, '_', '.' or '-', starting with a letter or digit, and an optional :TAG of the same"},
	Hex: {what: "hex ID", max: 64, re: lazyre.New(`^[0-9a-f]+$`), want: "use up to 64 hex digits"},
	Key: {what: "key ID", max: 64, re: lazyre.New(`^[0-9a-f]+$`), want: "use the hex ID that smolvm tenant ls shows"},
}

// String names the kind as messages do ("pool name").
func (k Kind) String() string {
	if r, ok := rules[k]; ok {
		return r.what
	}
	return "name"
}

// Max is the longest name of kind k, in bytes.
func (k Kind) Max() int { return rules[k].max }

// Error is a name that breaks its kind's rule. It matches ErrInvalid.
type Error struct {
	Kind  Kind
	Value string
	// Reason says what is wrong, or what the rule is.
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Kind, quote(e.Value), e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) match.
func (e *Error) Unwrap() error { return ErrInvalid }

// quoteMax is how much of a bad name a message repeats.
const quoteMax = 48

// quote quotes s for a message: escaped (NUL, invalid UTF-8) and cut short.
func quote(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:quoteMax]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// Check returns an *Error if s is not a valid name of kind k.
func Check(k Kind, s string) error {
	r, ok := rules[k]
	if !ok {
		return &Error{Kind: k, Value: s, Reason: "unknown kind of name"}
	}
	if k == Path {
		return CheckPath(s)
	}
	fail := func(why string) error { return &Error{Kind: k, Value: s, Reason: why} }
	switch {
	case s == "":
		return fail("must not be empty")
	case !utf8.ValidString(s):
		return fail("must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fail("must not contain a NUL byte")
	case len(s) > r.max:
		return fail(fmt.Sprintf("longer than %d bytes", r.max))
	case !r.slash && strings.ContainsRune(s, '/'):
		return fail("must not contain '/'")
	}
	for _, el := range strings.Split(s, "/") {
		switch el {
		case "..", ".":
			return fail(fmt.Sprintf("must not contain a %q element", el))
		case "":
			return fail("must not contain an empty element")
		}
	}
	if !r.re().MatchString(s) {
		return fail(r.want)
	}
	if k == Port {
		if n, err := strconv.Atoi(s); err != nil || n > 65535 {
			return fail(r.want)
		}
	}
	return nil
}

// Join joins elems under root, as filepath.Join does, and refuses a result
// outside root (a NUL byte, or ".." climbing out). It is the last line of
// defence behind Check: its error names the offending elements, never
// root, which is a host path callers must not show. filepath.Join contains
// nothing: Join(locks, "pool-"+name) with name ../../../x left the data
// dir, and POST /v1/pools/..%2F..%2Fx/fill made a root-owned file there
// (the mux decodes %2F inside a {pool} segment); an over-long name failed
// with "file name too long" in a 500 that showed the data dir's path.
func Join(root string, elems ...string) (string, error) {
	root = filepath.Clean(root)
	p := filepath.Join(append([]string{root}, elems...)...)
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: path %s: %s", ErrInvalid, quote(strings.Join(elems, "/")), why)
	}
	for _, e := range elems {
		if strings.IndexByte(e, 0) >= 0 {
			return bad("contains a NUL byte")
		}
	}
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return bad("leaves its directory")
	}
	return p, nil
}

// MaxPath is the longest path inside a sandbox a user may give, and
// MaxPathElement the longest element of one (Linux's limits).
const (
	MaxPath        = 4096
	MaxPathElement = 255
)

// CheckPath checks a path inside a sandbox given by a user (a file to
// read, write or list): not empty, valid UTF-8, no NUL byte, at most
// MaxPath bytes and MaxPathElement per element, and no ".." element. Nothing inside a sandbox escapes to
// the host, but "/work/.." is "/": a path must mean what it says.
func CheckPath(p string) error {
	why := ""
	switch {
	case p == "":
		why = "must not be empty"
	case !utf8.ValidString(p):
		why = "must be valid UTF-8"
	case strings.IndexByte(p, 0) >= 0:
		why = "must not contain a NUL byte"
	case len(p) > MaxPath:
		why = fmt.Sprintf("longer than %d bytes", MaxPath)
	case slices.Contains(strings.Split(p, "/"), ".."):
		why = `must not contain a ".." element`
	case slices.ContainsFunc(strings.Split(p, "/"), func(el string) bool { return len(el) > MaxPathElement }):
		why = fmt.Sprintf("has an element longer than %d bytes", MaxPathElement)
	default:
		return nil
	}
	return &Error{Kind: Path, Value: p, Reason: why}
}
