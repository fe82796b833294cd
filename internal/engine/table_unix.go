//go:build unix

package engine

import (
	"syscall"
	"unsafe"
)

// allocTable returns n zeroed uint64s outside the garbage collector's heap.
// The id set is the one structure that grows with the input; on the heap,
// the collector's headroom (as much again as the live heap) would double
// it. Mapped memory costs only the pages written. It falls back to the heap
// when the mapping fails.
func allocTable(n int) []uint64 {
	b, err := syscall.Mmap(-1, 0, n*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]uint64, n)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// freeTable gives back a table from allocTable.
func freeTable(t []uint64) {
	if len(t) == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t))), len(t)*8)
	// A table that came from the heap (the mapping failed) is not mapped:
	// munmap refuses it, and the collector frees it.
	_ = syscall.Munmap(b)
}
