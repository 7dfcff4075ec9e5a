//go:build unix && !linux

package main

import "syscall"

// procAttr puts a rank in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
