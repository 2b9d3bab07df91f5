package runner

import (
	"strings"
	"testing"
)

// TestJudgeEvidence: the verdict from the hunks and the regressions,
// without sandboxes.
func TestJudgeEvidence(t *testing.T) {
	code := HunkPin{File: "a.js", Header: "@@ -1 +1 @@", Pinned: true, By: []string{"t"}}
	loose := HunkPin{File: "b.js", Header: "@@ -2 +2 @@"}
	test := HunkPin{File: "a.test.js", Header: "@@ -0,0 +1 @@", Test: true}
	for _, c := range []struct {
		e          Evidence
		pinningOff bool
		verdict    string
		reason     string
	}{
		{Evidence{Hunks: []HunkPin{code, test}}, false, Proven, "every hunk"},
		{Evidence{Hunks: []HunkPin{code, loose}}, false, NeedsReview, "b.js @@ -2 +2 @@ is not pinned"},
		{Evidence{Hunks: []HunkPin{code}, PassToFail: []string{"u"}}, false, NeedsReview, "regressions: u"},
		{Evidence{Hunks: []HunkPin{test}}, false, NeedsReview, "no code hunk"},
		{Evidence{Hunks: []HunkPin{loose}}, true, NeedsReview, "pinning off"},
	} {
		v, why := judgeEvidence(&c.e, c.pinningOff)
		if v != c.verdict || !strings.Contains(why, c.reason) || c.pinningOff && strings.Contains(why, "not pinned by any test") {
			t.Errorf("%+v: %s (%s), want %s (%s)", c.e.Hunks, v, why, c.verdict, c.reason)
		}
	}
}
