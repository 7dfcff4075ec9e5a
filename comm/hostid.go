package comm

import "github.com/goccl/goccl/transport/shm"

// shmHostID is the host identity that decides which peers share memory.
func shmHostID() (string, error) { return shm.HostID() }
