// Package bench holds goccl's benchmarks: the OSU-compatible programs and
// their formats (bench/osu, bench/cmd/osu), plotting (bench/plot), and Go
// benchmarks of the hot paths that benchstat compares between commits:
//
//	go test -run '^$' -bench . -benchmem ./bench/ > new.txt
//	benchstat old.txt new.txt
//
// BenchmarkAllreduceTCP2 and BenchmarkAllreduceMem2 time a 2-rank
// allreduce (float32 sum, registered buffers, out of place) with both ranks
// as goroutines of the benchmark process, over TCP on loopback and over the
// in-memory transport; allocs/op counts both ranks' allocations per call.
// BenchmarkReduceKernel times collectives.Reduce per type and operation.
package bench
