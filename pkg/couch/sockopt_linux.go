package couch

import "syscall"

// prioritySupported: SO_PRIORITY is a Linux option.
const prioritySupported = true

func setPriority(fd uintptr, p int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PRIORITY, p)
}
