//go:build !cgo || !linux || goccl_noverbs

package ibv

import (
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Available reports whether this build can call libibverbs.
const Available = false

// Open reports that this build has no verbs support.
func Open() (Lib, error) {
	return nil, fmt.Errorf("libibverbs: built without cgo, off Linux or with the goccl_noverbs tag: %w", transport.ErrNotSupported)
}

// libraryStatusString: no library in this build.
func libraryStatusString(uint32) (string, bool) { return "", false }
