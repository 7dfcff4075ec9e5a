package shm

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
)

var hostID struct {
	once sync.Once
	id   string
	hash [16]byte
	err  error
}

// HostID identifies the set of processes this one can reach over shared
// memory: the kernel's boot id, the network namespace (where abstract Unix
// sockets live), the pid namespace (the credential check compares pids) and
// the user namespace and uid (the credential check requires the same user).
// Two processes with equal HostIDs can connect shm endpoints; comm publishes
// it through bootstrap to choose shm for peers on the same host, so that
// containers and network namespaces on one machine count as different
// hosts.
func HostID() (string, error) {
	hostID.once.Do(func() {
		boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			hostID.err = fmt.Errorf("shm: host id: %w", err)
			return
		}
		parts := []string{strings.TrimSpace(string(boot))}
		for _, ns := range []string{"net", "pid", "user"} {
			l, err := os.Readlink("/proc/self/ns/" + ns)
			if err != nil {
				hostID.err = fmt.Errorf("shm: host id: %w", err)
				return
			}
			parts = append(parts, l)
		}
		parts = append(parts, fmt.Sprintf("uid:%d", os.Getuid()))
		hostID.id = strings.Join(parts, "/")
		sum := sha256.Sum256([]byte(hostID.id))
		copy(hostID.hash[:], sum[:16])
	})
	return hostID.id, hostID.err
}

func hostHash() ([16]byte, error) {
	_, err := HostID()
	return hostID.hash, err
}
