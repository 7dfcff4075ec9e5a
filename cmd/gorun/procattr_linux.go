package main

import "syscall"

// procAttr puts a rank in its own process group, and has the kernel kill it
// if gorun dies first.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
