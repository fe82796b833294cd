//go:build !unix

package engine

// allocTable returns n zeroed uint64s (on the heap where memory cannot be
// mapped simply).
func allocTable(n int) []uint64 { return make([]uint64, n) }

func freeTable([]uint64) {}
