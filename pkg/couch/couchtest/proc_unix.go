//go:build unix

package couchtest

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd in its own process group so that everything it
// spawns can be killed together, and (on Linux) has it killed if the test
// process dies without running its clean-ups (e.g. a test timeout panic).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// killProcessGroup sends SIGKILL to cmd's process group.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = cmd.Process.Kill()
	}
}
