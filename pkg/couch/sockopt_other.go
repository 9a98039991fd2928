//go:build !unix

package couch

import (
	"errors"
	"syscall"
)

// prioritySupported: SO_PRIORITY is a Linux option.
const prioritySupported = false

// buffersSupported: fdbrep sets SO_SNDBUF and SO_RCVBUF on Unix systems
// only.
const buffersSupported = false

// control refuses buffer sizes where fdbrep cannot set them before
// connecting; Validate refuses them before.
func (o SocketOptions) control(_, _ string, _ syscall.RawConn) error {
	return errors.New("socket_options: sndbuf and recbuf are supported on Unix systems only")
}
