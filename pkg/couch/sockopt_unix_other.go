//go:build unix && !linux

package couch

import "errors"

// prioritySupported: SO_PRIORITY is a Linux option.
const prioritySupported = false

func setPriority(uintptr, int) error {
	return errors.New("socket_options: priority exists on Linux only")
}
