//go:build linux

package couchtest

import "syscall"

// setDeathSignal makes the kernel SIGKILL the child when the thread that
// started it dies, so a test binary killed by a timeout leaves no server
// behind.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
