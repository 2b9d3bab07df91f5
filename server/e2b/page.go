package e2b

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sandbox.list pages as E2B's API does: newest first, at most limit
// sandboxes a page (default and most: 100), and an x-next-token header
// while more remain, which the SDK's paginator sends back as nextToken.
// The token is the position of the page's last sandbox (its start and
// ID), not an offset, so sandboxes made or removed between two pages
// neither repeat nor skip the others.
const (
	defaultPageSize = 100
	maxPageSize     = 100
	headerNextToken = "X-Next-Token"
)

// page is where one page of a list starts and how long it is.
type page struct {
	limit int
	after *cursor // nil: from the newest
}

// cursor is a sandbox's place in the newest-first order.
type cursor struct {
	started time.Time
	id      string
}

// pageOf reads limit and nextToken.
func pageOf(q url.Values) (page, error) {
	p := page{limit: defaultPageSize}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			return page{}, fmt.Errorf("limit: %q is not a number from 1 to %d", v, maxPageSize)
		}
		p.limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		c, err := parseCursor(v)
		if err != nil {
			return page{}, fmt.Errorf("nextToken: %q is not a token this server gave: %w", v, err)
		}
		p.after = &c
	}
	return p, nil
}

func parseCursor(token string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return cursor{}, err
	}
	at, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return cursor{}, errors.New("malformed")
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return cursor{}, err
	}
	return cursor{started: t, id: id}, nil
}

func (c cursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.started.UTC().Format(time.RFC3339Nano) + "|" + c.id))
}

// before orders newest first, then by ID, so the order is total.
func (c cursor) before(o cursor) bool {
	if !c.started.Equal(o.started) {
		return c.started.After(o.started)
	}
	return c.id < o.id
}

// cut sorts ds newest first and returns p's page of them, setting the
// next page's token on w when more remain.
func (p page) cut(w http.ResponseWriter, ds []detailJSON) []detailJSON {
	at := func(d detailJSON) cursor { return cursor{started: d.StartedAt, id: d.SandboxID} }
	slices.SortFunc(ds, func(a, b detailJSON) int {
		if at(a).before(at(b)) {
			return -1
		}
		return 1
	})
	if p.after != nil {
		i := slices.IndexFunc(ds, func(d detailJSON) bool { return p.after.before(at(d)) })
		if i < 0 {
			i = len(ds)
		}
		ds = ds[i:]
	}
	if len(ds) > p.limit {
		ds = ds[:p.limit]
		w.Header().Set(headerNextToken, at(ds[len(ds)-1]).token())
	}
	return ds
}
