//go:build race

package comm

func init() { bigCount = 1<<14 + 3 }
