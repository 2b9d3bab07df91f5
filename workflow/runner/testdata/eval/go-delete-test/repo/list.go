package fx

import "strings"

// ParseList splits a comma-separated list, trimming spaces.
func ParseList(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
