//go:build unix

package couch

import "syscall"

// buffersSupported: SO_SNDBUF and SO_RCVBUF are set before connecting.
const buffersSupported = true

// control sets the buffer sizes and the priority on the socket before it
// connects (the receive buffer then also sizes the TCP window scale).
func (o SocketOptions) control(_, _ string, c syscall.RawConn) error {
	var err error
	cerr := c.Control(func(fd uintptr) {
		if o.SendBuffer != 0 {
			if err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, o.SendBuffer); err != nil {
				return
			}
		}
		if o.ReceiveBuffer != 0 {
			if err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, o.ReceiveBuffer); err != nil {
				return
			}
		}
		if o.Priority != nil {
			err = setPriority(fd, *o.Priority)
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}
