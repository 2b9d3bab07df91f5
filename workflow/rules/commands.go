package rules

import (
	"fmt"
	"strings"

	"smolvm.dev/smolvm/internal/lazyre"
)

// Commands are the shell commands a repository's root rule files give for
// setting it up and for testing it. Agent rule files (AGENTS.md,
// CLAUDE.md, …) write them as prose with a shell block under a heading
// such as "## Setup" or "## Testing"; that block is taken, one command per
// line, and run with sh -c under set -e.
type Commands struct {
	Setup     string `json:"setup,omitempty"`
	SetupFrom string `json:"setup_from,omitempty"` // file:line of the block
	Test      string `json:"test,omitempty"`
	TestFrom  string `json:"test_from,omitempty"`
}

var (
	heading    = lazyre.New(`^(#{1,6})\s+(.*)$`)
	testWords  = lazyre.New(`(?i)\btest(s|ing)?\b|\bchecks?\b`)
	setupWords = lazyre.New(`(?i)\b(set ?up|install(ation|ing)?|bootstrap|dependencies|dev(elopment)? environment|build(ing)?)\b`)
	shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true, "zsh": true}
)

// Commands returns the set-up and test commands of the always-active rules
// at the repository root. A later rule (higher precedence) wins.
func (r *Repo) Commands() Commands {
	var c Commands
	for i := range r.Rules {
		ru := &r.Rules[i]
		if ru.Dir != "." || ru.Activation != Always || ru.OverriddenBy != "" {
			continue
		}
		for _, b := range shellBlocks(ru.Text) {
			from := fmt.Sprintf("%s:%d", ru.Source, ru.Line+b.line)
			switch {
			case testWords().MatchString(b.heading):
				c.Test, c.TestFrom = b.script, from
			case setupWords().MatchString(b.heading):
				c.Setup, c.SetupFrom = b.script, from
			}
		}
	}
	return c
}

type block struct {
	heading string
	line    int  // of the opening fence, from 0 in the text
	prompt  bool // a console block: only "$ " lines are commands
	skip    bool // not a block to take: only read past it
	script  string
}

// shellBlocks returns the first shell block under each heading of text.
func shellBlocks(text string) []block {
	var (
		out   []block
		head  string
		taken bool // the current heading already gave its block
		in    *block
		cmds  []string
	)
	for n, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if in != nil {
			if strings.HasPrefix(t, "```") {
				if !in.skip && len(cmds) > 0 {
					in.script = "set -e\n" + strings.Join(cmds, "\n")
					out = append(out, *in)
				}
				in, cmds = nil, nil
				continue
			}
			t, prompted := strings.CutPrefix(t, "$ ")
			if t != "" && !strings.HasPrefix(t, "#") && (prompted || !in.prompt) {
				cmds = append(cmds, t)
			}
			continue
		}
		if m := heading().FindStringSubmatch(t); m != nil {
			head, taken = m[2], false
			continue
		}
		if lang, ok := strings.CutPrefix(t, "```"); ok {
			lang = strings.ToLower(strings.TrimSpace(lang))
			in = &block{heading: head, line: n, prompt: lang == "console", skip: taken || head == "" || !shellLangs[lang]}
			taken = taken || !in.skip
		}
	}
	return out
}
