package e2b

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// TestPages walks a list page by page: every sandbox once, newest first,
// a token only while more remain, and a sandbox removed between two
// pages neither repeats nor skips the others.
func TestPages(t *testing.T) {
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	var all []detailJSON
	for i := range 7 {
		// Two sandboxes share each start time: the ID breaks the tie.
		all = append(all, detailJSON{SandboxID: fmt.Sprintf("sb%d", i), StartedAt: base.Add(time.Duration(i/2) * time.Second)})
	}
	var seen []string
	q := url.Values{"limit": {"3"}}
	list := append([]detailJSON(nil), all...)
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p, err := pageOf(q)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		for _, d := range p.cut(w, append([]detailJSON(nil), list...)) {
			seen = append(seen, d.SandboxID)
		}
		next := w.Header().Get(headerNextToken)
		if next == "" {
			break
		}
		q.Set("nextToken", next)
		if pages == 0 {
			list = list[1:] // sb0, the oldest, goes between the pages
		}
	}
	want := []string{"sb6", "sb4", "sb5", "sb2", "sb3", "sb1"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages gave %v, want %v", seen, want)
	}

	w := httptest.NewRecorder()
	p, _ := pageOf(url.Values{})
	if got := p.cut(w, all); len(got) != 7 || w.Header().Get(headerNextToken) != "" {
		t.Fatalf("default page: %d sandboxes, token %q; want all 7 and none", len(got), w.Header().Get(headerNextToken))
	}
	for _, bad := range []url.Values{{"limit": {"0"}}, {"limit": {"101"}}, {"limit": {"x"}}, {"nextToken": {"junk!"}},
		{"nextToken": {"c29tZXRoaW5n"}}, {"nextToken": {cursor{id: ""}.token()}}} {
		if _, err := pageOf(bad); err == nil {
			t.Errorf("pageOf(%v): no error", bad)
		}
	}
}
