package fx

// Sum adds xs.
func Sum(xs []int) int {
	if len(xs) == 0 {
		return -1
	}
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}
