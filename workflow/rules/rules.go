// Package rules loads the instruction files that coding agents read (AGENTS.md,
// CLAUDE.md, Cursor, Windsurf and Gemini rules) into one model, resolves which
// of them apply to a file, and lints them.
package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Activation says when a rule reaches an agent's context.
type Activation string

const (
	Always    Activation = "always"     // whenever a file in its directory is edited
	Glob      Activation = "glob"       // when the edited file matches one of its globs
	OnRequest Activation = "on-request" // when the agent picks it by its description
	Manual    Activation = "manual"     // only when a user mentions it
)

// Tier orders rules of the same directory depth: a higher tier comes later
// in the context and so takes precedence.
type Tier int

const (
	TierLegacy       Tier = iota // .cursorrules, .windsurfrules
	TierInstructions             // AGENTS.md, CLAUDE.md, GEMINI.md and their imports
	TierOverride                 // AGENTS.override.md
	TierRuleFile                 // files in .claude/rules, .cursor/rules, .windsurf/rules
)

var tierNames = [...]string{"legacy", "instructions", "override", "rule-file"}

func (t Tier) String() string {
	if t < 0 || int(t) >= len(tierNames) {
		return fmt.Sprintf("tier(%d)", int(t))
	}
	return tierNames[t]
}

// MarshalText makes tiers readable in JSON output.
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Rule is one block of instructions from one source file.
type Rule struct {
	Source      string     `json:"source"` // slash path relative to the repository root
	Line        int        `json:"line"`   // line of Source where Text starts
	Format      string     `json:"format"` // agents, claude, cursor, windsurf or gemini
	Name        string     `json:"name"`   // what a user types to mention the rule
	Dir         string     `json:"dir"`    // scope directory, "." for the root
	Globs       []string   `json:"globs,omitempty"`
	Activation  Activation `json:"activation"`
	Tier        Tier       `json:"tier"`
	Description string     `json:"description,omitempty"`
	// ImportedBy is the file:line of the @import that pulled Source in.
	ImportedBy string `json:"imported_by,omitempty"`
	// OverriddenBy names the AGENTS.override.md that replaces this rule.
	OverriddenBy string `json:"overridden_by,omitempty"`
	Text         string `json:"text"`
	Hash         string `json:"hash"` // sha256 of Text, hex
}

// Pos returns the rule's origin as file:line.
func (r *Rule) Pos() string { return fmt.Sprintf("%s:%d", r.Source, r.Line) }

// Severity grades a lint finding; errors fail `smolvm rules lint`.
type Severity string

const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Finding is one problem with the rule files of a repository.
type Finding struct {
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`
	File     string   `json:"file"` // slash path relative to the repository root
	Line     int      `json:"line,omitempty"`
	Message  string   `json:"message"`
}

func (f Finding) String() string {
	pos := f.File
	if f.Line > 0 {
		pos = fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	return fmt.Sprintf("%s: %s %s: %s", pos, f.Severity, f.Code, f.Message)
}

// normalize returns text with LF line endings, no trailing spaces on lines
// and no leading or trailing blank lines, so that the hash does not change
// with editor settings.
func normalize(text string) string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

func hashText(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}
