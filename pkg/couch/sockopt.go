package couch

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
)

// SocketBufferMax bounds the sndbuf and recbuf socket options, in bytes. A
// replication's own socket_options come from whoever may write a
// _replicator document; kernels cap the buffers further (Linux at
// net.core.wmem_max and rmem_max).
const SocketBufferMax = 64 << 20

// SocketPriorityMax is the highest priority option accepted: Linux lets
// an unprivileged process set SO_PRIORITY from 0 to 6.
const SocketPriorityMax = 6

// SocketOptions are CouchDB's socket_options, the TCP options of every
// connection to an endpoint. Nil and zero fields keep Go's defaults:
// TCP_NODELAY on (CouchDB's default is off: Go writes a request in several
// segments, and Nagle's algorithm with delayed ACKs would hold each one
// back), keep-alive probes on, the kernel's buffer sizes, no priority.
type SocketOptions struct {
	// NoDelay is nodelay: TCP_NODELAY, sending small segments at once.
	NoDelay *bool
	// KeepAlive is keepalive: TCP keep-alive probes on idle connections.
	KeepAlive *bool
	// SendBuffer and ReceiveBuffer are sndbuf and recbuf: SO_SNDBUF and
	// SO_RCVBUF in bytes, set before connecting (0: the kernel's
	// autotuning; 1 to SocketBufferMax).
	SendBuffer, ReceiveBuffer int
	// Priority is priority: SO_PRIORITY, 0 to SocketPriorityMax (Linux
	// only; nil: not set).
	Priority *int
}

// SocketOptionsDefault is the node-wide socket_options of replications
// that set none ([replicator] socket_options' default): keepalive and
// nodelay on. CouchDB's default turns nodelay off; fdbrep keeps it on.
const SocketOptionsDefault = "[{keepalive, true}, {nodelay, true}]"

// ParseSocketOptions parses CouchDB's socket_options syntax, an Erlang
// list of {name, value} tuples such as "[{keepalive, true}, {nodelay,
// false}, {sndbuf, 262144}]" ("" and "[]" are no options; a later tuple
// overrides an earlier one of the same name). fdbrep applies keepalive,
// nodelay, sndbuf, recbuf and priority; any other option is refused with
// an error naming it, where CouchDB drops what it does not know without a
// word. Errors wrap ErrInvalidOptions.
func ParseSocketOptions(s string) (SocketOptions, error) {
	var o SocketOptions
	p := termParser{s: s}
	if p.skip(); p.done() {
		return o, nil
	}
	if !p.eat('[') {
		return o, p.syntax("a list such as [{keepalive, true}, {nodelay, false}]")
	}
	for first := true; ; first = false {
		if p.eat(']') {
			break
		}
		if !first && !p.eat(',') {
			return o, p.syntax("',' or ']'")
		}
		if !p.eat('{') {
			return o, p.syntax("a {name, value} tuple")
		}
		name := p.atom()
		if name == "" {
			return o, p.syntax("an option name")
		}
		if !p.eat(',') {
			return o, p.syntax("',' after " + name)
		}
		value, ok := p.value()
		if !ok {
			return o, p.syntax("'}' closing the option " + name)
		}
		if err := o.set(name, value); err != nil {
			return SocketOptions{}, err
		}
	}
	if p.skip(); !p.done() {
		return o, p.syntax("the end after ']'")
	}
	return o, o.Validate()
}

// set applies one {name, value} tuple.
func (o *SocketOptions) set(name, value string) error {
	boolean := func() (*bool, error) {
		switch value {
		case "true":
			return new(true), nil
		case "false":
			return new(false), nil
		}
		return nil, invalidOptions("socket_options: %s takes true or false, got %s", name, value)
	}
	integer := func(lo, hi int) (int, error) {
		n, err := strconv.Atoi(value)
		if err != nil || n < lo || n > hi {
			return 0, invalidOptions("socket_options: %s takes an integer from %d to %d, got %s", name, lo, hi, value)
		}
		return n, nil
	}
	var err error
	known := map[string]bool{"nodelay": true, "keepalive": true, "sndbuf": true, "recbuf": true, "priority": true}
	switch {
	case known[name] && value == "":
		return invalidOptions("socket_options: %s has no value", name)
	case known[name] && strings.ContainsAny(value, ",{}[]<>\""):
		return invalidOptions("socket_options: %s takes one value, got %s", name, value)
	}
	switch name {
	case "nodelay":
		o.NoDelay, err = boolean()
	case "keepalive":
		o.KeepAlive, err = boolean()
	case "sndbuf":
		o.SendBuffer, err = integer(1, SocketBufferMax)
	case "recbuf":
		o.ReceiveBuffer, err = integer(1, SocketBufferMax)
	case "priority":
		var n int
		if n, err = integer(0, SocketPriorityMax); err == nil {
			o.Priority = &n
		}
	case "buffer":
		err = invalidOptions("socket_options: buffer (the Erlang runtime's own receive buffer) has no equivalent in fdbrep; use recbuf for the kernel's")
	default:
		err = invalidOptions("socket_options: %s is not supported; fdbrep applies keepalive, nodelay, sndbuf, recbuf and priority", name)
	}
	return err
}

// Validate checks the ranges and that the platform can apply every option;
// errors wrap ErrInvalidOptions.
func (o SocketOptions) Validate() error {
	for _, b := range []struct {
		name string
		n    int
	}{{"sndbuf", o.SendBuffer}, {"recbuf", o.ReceiveBuffer}} {
		if b.n < 0 || b.n > SocketBufferMax {
			return invalidOptions("socket_options: %s takes an integer from 1 to %d, got %d", b.name, SocketBufferMax, b.n)
		}
		if b.n != 0 && !buffersSupported {
			return invalidOptions("socket_options: %s is supported on Unix systems only", b.name)
		}
	}
	if o.Priority != nil {
		if *o.Priority < 0 || *o.Priority > SocketPriorityMax {
			return invalidOptions("socket_options: priority takes an integer from 0 to %d, got %d", SocketPriorityMax, *o.Priority)
		}
		if !prioritySupported {
			return invalidOptions("socket_options: priority (SO_PRIORITY) exists on Linux only")
		}
	}
	return nil
}

// IsZero reports whether o sets nothing.
func (o SocketOptions) IsZero() bool {
	return o.NoDelay == nil && o.KeepAlive == nil && o.SendBuffer == 0 && o.ReceiveBuffer == 0 && o.Priority == nil
}

// String prints o in CouchDB's syntax, options in a fixed order, so that
// ParseSocketOptions(o.String()) is o.
func (o SocketOptions) String() string {
	var parts []string
	add := func(name, v string) { parts = append(parts, "{"+name+", "+v+"}") }
	if o.KeepAlive != nil {
		add("keepalive", strconv.FormatBool(*o.KeepAlive))
	}
	if o.NoDelay != nil {
		add("nodelay", strconv.FormatBool(*o.NoDelay))
	}
	if o.SendBuffer != 0 {
		add("sndbuf", strconv.Itoa(o.SendBuffer))
	}
	if o.ReceiveBuffer != 0 {
		add("recbuf", strconv.Itoa(o.ReceiveBuffer))
	}
	if o.Priority != nil {
		add("priority", strconv.Itoa(*o.Priority))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// KeepAliveDefault is the idle time before keep-alive probes start, and
// the time between probes.
const KeepAliveDefault = 30 * time.Second

// dialer returns the dial function of a DB: a net.Dialer with timeout,
// keep-alive, the address policy's check of the resolved address and the
// buffer and priority options before connecting, and TCP_NODELAY set
// after (Go turns it on for every connection).
func (o SocketOptions) dialer(timeout time.Duration, addrs *AddressPolicy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: KeepAliveDefault}
	if o.KeepAlive != nil && !*o.KeepAlive {
		d.KeepAlive = -1
	}
	sockopts := o.SendBuffer != 0 || o.ReceiveBuffer != 0 || o.Priority != nil
	switch {
	case addrs != nil && sockopts:
		d.Control = func(network, address string, c syscall.RawConn) error {
			if err := addrs.control(network, address, c); err != nil {
				return err
			}
			return o.control(network, address, c)
		}
	case addrs != nil:
		d.Control = addrs.control
	case sockopts:
		d.Control = o.control
	}
	if o.NoDelay == nil || *o.NoDelay {
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			if err := tc.SetNoDelay(false); err != nil {
				c.Close()
				return nil, fmt.Errorf("socket_options: nodelay: %w", err)
			}
		}
		return c, nil
	}
}

// termParser reads the small part of Erlang's term syntax that
// socket_options uses: lists, tuples, atoms and integers.
type termParser struct {
	s string
	i int
}

func (p *termParser) skip() {
	for p.i < len(p.s) && unicode.IsSpace(rune(p.s[p.i])) {
		p.i++
	}
}

func (p *termParser) done() bool { return p.i >= len(p.s) }

// eat consumes c (after spaces) if it is next.
func (p *termParser) eat(c byte) bool {
	p.skip()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// value reads the rest of a tuple, balanced brackets included, and the
// '}' that closes it; it returns the text before that '}', trimmed.
func (p *termParser) value() (string, bool) {
	start, depth := p.i, 0
	for ; p.i < len(p.s); p.i++ {
		switch p.s[p.i] {
		case '{', '[', '<':
			depth++
		case ']', '>':
			depth--
		case '}':
			if depth == 0 {
				v := strings.TrimSpace(p.s[start:p.i])
				p.i++
				return v, true
			}
			depth--
		}
	}
	return "", false
}

// atom reads an atom or an integer ("" if neither is next).
func (p *termParser) atom() string {
	p.skip()
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

func (p *termParser) syntax(want string) error {
	at := "the end"
	if p.i < len(p.s) {
		at = strconv.Quote(p.s[p.i:min(len(p.s), p.i+12)])
	}
	return invalidOptions("socket_options %q: expected %s at %s", p.s, want, at)
}
