package fx

import "strings"

// Render prints a header and rows, one per line.
func Render(header string, rows []string) string {
	return header + "\n" + strings.Join(rows, "\n") + "\n"
}
