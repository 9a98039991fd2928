//go:build unix && !linux

package couchtest

import "syscall"

// setDeathSignal is a no-op where Pdeathsig does not exist.
func setDeathSignal(*syscall.SysProcAttr) {}
