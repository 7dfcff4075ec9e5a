//go:build !cgo || !linux || goccl_noverbs

package ibv

import (
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Available reports whether this build calls libibverbs.
const Available = false

// Open reports that this build has no verbs support.
func Open() (Lib, error) {
	return nil, fmt.Errorf("libibverbs: built without cgo, off Linux or with goccl_noverbs: %w", transport.ErrNotSupported)
}

// StatusString names a work completion status.
func StatusString(status uint32) string { return fmt.Sprintf("wc status %d", status) }
