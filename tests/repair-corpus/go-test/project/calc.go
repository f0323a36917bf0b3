package calc

// Total sums xs (the planted bug drops the last item).
func Total(xs []int) int {
	s := 0
	for i := 0; i < len(xs)-1; i++ {
		s += xs[i]
	}
	return s
}

// Add adds.
func Add(a, b int) int { return a + b }
