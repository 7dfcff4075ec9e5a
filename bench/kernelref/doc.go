// Package kernelref is the C reference of the reduction kernels' benchmark
// (bench.BenchmarkReduceKernel): the loop d[i] op= s[i] per type and
// operation, compiled by gcc -O3 -march=native through cgo. Benchmarks
// only; without cgo it builds a stub whose Available is false.
package kernelref
