// Package calc does arithmetic on ints.
package calc

// Add returns a + b.
func Add(a, b int) int { return a + b }

// Clamp limits x to the range [lo, hi].
func Clamp(x, lo, hi int) int {
	if x < lo {
		return lo
	}
	return x
}
