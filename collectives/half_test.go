package collectives

import (
	"encoding/binary"
	"testing"
)

func TestReduceHalf(t *testing.T) {
	put := func(b []byte, vs ...uint16) {
		for i, v := range vs {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
	}
	dst, src := make([]byte, 4), make([]byte, 4)
	put(dst, F32ToF16(1.5), F32ToF16(-2))
	put(src, F32ToF16(0.25), F32ToF16(3))
	if err := Reduce(Float16, Sum, dst, src); err != nil {
		t.Fatal(err)
	}
	got0, got1 := F16ToF32(binary.LittleEndian.Uint16(dst)), F16ToF32(binary.LittleEndian.Uint16(dst[2:]))
	if got0 != 1.75 || got1 != 1 {
		t.Fatalf("sum = %v, %v", got0, got1)
	}
}
