//go:build !cgo

package kernelref

import "github.com/goccl/goccl/collectives"

// Available says whether the C reference was built (it needs cgo).
const Available = false

// Run panics: the C reference needs cgo.
func Run(dt collectives.DataType, op collectives.ReduceOp, dst, src []byte, ranks int) {
	panic("kernelref: built without cgo")
}
