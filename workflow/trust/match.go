package trust

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// matchPath reports whether a slash-separated path matches a glob. A
// pattern without a slash matches the base name of any path; one starting
// with / matches absolute paths; any other is anchored at the repository
// root. ** matches any number of directories.
func matchPath(pattern, p string) bool {
	if p == "" {
		return false
	}
	if !strings.Contains(pattern, "/") {
		return pattern == "**" || globMatch(pattern, path.Base(p))
	}
	if strings.HasPrefix(pattern, "/") != strings.HasPrefix(p, "/") {
		return false
	}
	return matchSegs(strings.Split(strings.Trim(pattern, "/"), "/"), strings.Split(strings.Trim(p, "/"), "/"))
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			pat = pat[1:]
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat, segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 || !globMatch(pat[0], segs[0]) {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

func globMatch(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

// checkGlob reports a malformed path pattern.
func checkGlob(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("empty pattern")
	}
	for _, seg := range strings.Split(pattern, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("bad glob %q: %w", pattern, err)
		}
	}
	return nil
}

type argvResult int

const (
	argvNo    argvResult = iota
	argvMatch            // the pattern is a prefix of argv
	argvMaybe            // argv is a proper prefix of the pattern
)

// matchArgv compares a command prefix pattern with argv word by word. A
// pattern word * matches any word, other words are globs; the command name
// also matches by its base name, so rm matches /bin/rm.
func matchArgv(words, argv []string) argvResult {
	if len(words) == 0 || len(argv) == 0 {
		return argvNo
	}
	for i, w := range words {
		if i == len(argv) {
			return argvMaybe
		}
		a := argv[i]
		if i == 0 && !strings.Contains(w, "/") {
			a = path.Base(a)
		}
		if w != "*" && w != a && !globMatch(w, a) {
			return argvNo
		}
	}
	return argvMatch
}

// patternWords splits a command prefix pattern into words with shell
// quoting rules.
func patternWords(pattern string) ([]string, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(pattern), "")
	if err != nil {
		return nil, fmt.Errorf("bad command pattern %q: %w", pattern, err)
	}
	if len(f.Stmts) != 1 || len(f.Stmts[0].Redirs) > 0 {
		return nil, fmt.Errorf("command pattern %q is not a single simple command", pattern)
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil, fmt.Errorf("command pattern %q is not a single simple command", pattern)
	}
	words := make([]string, len(call.Args))
	for i, w := range call.Args {
		s, ok := literal(w)
		if !ok {
			return nil, fmt.Errorf("command pattern %q has a word that is not plain text", pattern)
		}
		words[i] = s
	}
	return words, nil
}

// normalizeHost reduces a URL, host:port or host to a lower-case host name
// or IP address.
func normalizeHost(target string) string {
	h := strings.TrimSpace(target)
	if strings.Contains(h, "://") {
		if u, err := url.Parse(h); err == nil {
			h = u.Hostname()
		}
	} else if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// matchHost matches a host against a domain (example.com), a wildcard
// domain (*.example.com: subdomains only), an IP, a CIDR, or *.
func matchHost(pattern, host string) bool {
	if host == "" {
		return false
	}
	pattern = strings.ToLower(pattern)
	switch {
	case pattern == "*":
		return true
	case strings.Contains(pattern, "/"):
		pre, err1 := netip.ParsePrefix(pattern)
		ip, err2 := netip.ParseAddr(host)
		return err1 == nil && err2 == nil && pre.Contains(ip.Unmap())
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(host, pattern[1:])
	}
	if ip, err := netip.ParseAddr(pattern); err == nil {
		h, err := netip.ParseAddr(host)
		return err == nil && h.Unmap() == ip.Unmap()
	}
	return host == strings.TrimSuffix(pattern, ".")
}

// checkHost reports a malformed network pattern.
func checkHost(pattern string) error {
	switch {
	case pattern == "*":
		return nil
	case strings.Contains(pattern, "/"):
		if _, err := netip.ParsePrefix(pattern); err != nil {
			return fmt.Errorf("bad CIDR %q: %w", pattern, err)
		}
		return nil
	}
	d := strings.TrimPrefix(pattern, "*.")
	if _, err := netip.ParseAddr(d); err == nil && d == pattern {
		return nil
	}
	if d == "" || strings.ContainsAny(d, "*/:@ \t") || strings.HasPrefix(d, ".") || strings.Contains(d, "..") {
		return fmt.Errorf("bad domain %q (want example.com, *.example.com, an IP or a CIDR)", pattern)
	}
	return nil
}
