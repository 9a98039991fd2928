package couch

import (
	"context"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The options reach the sockets a DB dials.
func TestSocketOptionsApplied(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
	})
	u, err := url.Parse("http://" + ln.Addr().String() + "/db/")
	require.NoError(t, err)

	type sock struct{ nodelay, keepalive, sndbuf, rcvbuf, priority int }
	read := func(t *testing.T, o SocketOptions) sock {
		t.Helper()
		db, err := NewDB(Endpoint{URL: u}, Options{Socket: o}, nil)
		require.NoError(t, err)
		c, err := db.tr.DialContext(context.Background(), "tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		raw, err := c.(*net.TCPConn).SyscallConn()
		require.NoError(t, err)
		var s sock
		var gerr error
		require.NoError(t, raw.Control(func(fd uintptr) {
			get := func(level, opt int) int {
				v, err := syscall.GetsockoptInt(int(fd), level, opt)
				if err != nil {
					gerr = err
				}
				return v
			}
			s = sock{get(syscall.IPPROTO_TCP, syscall.TCP_NODELAY), get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE),
				get(syscall.SOL_SOCKET, syscall.SO_SNDBUF), get(syscall.SOL_SOCKET, syscall.SO_RCVBUF),
				get(syscall.SOL_SOCKET, syscall.SO_PRIORITY)}
		}))
		require.NoError(t, gerr)
		return s
	}
	def := read(t, SocketOptions{})
	require.Equal(t, 1, def.nodelay, "Go's default")
	require.Equal(t, 1, def.keepalive)
	require.Zero(t, def.priority)

	o, err := ParseSocketOptions("[{nodelay, false}, {keepalive, false}, {sndbuf, 65536}, {recbuf, 32768}, {priority, 4}]")
	require.NoError(t, err)
	got := read(t, o)
	require.Zero(t, got.nodelay)
	require.Zero(t, got.keepalive)
	require.Equal(t, 2*65536, got.sndbuf, "Linux doubles the size asked for")
	require.Equal(t, 2*32768, got.rcvbuf)
	require.Equal(t, 4, got.priority)
}
