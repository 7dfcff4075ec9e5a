//go:build !gocclnext

package osu

import "github.com/goccl/goccl/comm"

// nextColls adds nothing until comm has the collectives of colls_next.go.
func nextColls[T comm.Number](map[string]collImpl[T]) {}

// p2pFor returns no point-to-point calls until comm has Send and Recv.
func p2pFor[T comm.Number]() p2pImpl[T] { return p2pImpl[T]{} }
