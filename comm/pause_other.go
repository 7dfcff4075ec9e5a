//go:build !amd64

package comm

// spinPause is a pause between two polls (see pause_amd64.go): nothing
// here.
func spinPause() {}
