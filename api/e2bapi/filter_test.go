package e2bapi_test

import (
	"net/url"
	"strings"
	"testing"

	"smolvm.dev/smolvm/api/e2bapi"
)

func TestSnapshotFilter(t *testing.T) {
	for _, q := range []string{"sandboxID=a%2Fb", "name=..", "sandboxID=" + strings.Repeat("a", 300)} {
		v, _ := url.ParseQuery(q)
		if _, err := e2bapi.ParseSnapshotFilter(v); err == nil || !strings.HasPrefix(err.Error(), strings.Split(q, "=")[0]+": ") {
			t.Errorf("%s: %v, want an error naming the parameter", q, err)
		}
	}
	v, _ := url.ParseQuery("sandboxID=ab12&name=snap")
	f, err := e2bapi.ParseSnapshotFilter(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id    string
		names []string
		want  bool
	}{{"ab12", []string{"x", "snap"}, true}, {"ab12", nil, false}, {"cd34", []string{"snap"}, false}} {
		if got := f.Match(c.id, c.names); got != c.want {
			t.Errorf("Match(%q, %q) = %t", c.id, c.names, got)
		}
	}
	if !(e2bapi.SnapshotFilter{}).Match("any", nil) {
		t.Error("an empty filter refused a snapshot")
	}
}
