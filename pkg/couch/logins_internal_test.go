package couch

import (
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// A refused login is remembered for the memory, by peer, user and
// password; other credentials are not refused by it; past the memory it
// is forgotten; the oldest goes first beyond refusedLoginsMax.
func TestLoginsRemember(t *testing.T) {
	clk := clockwork.NewFakeClock()
	l := NewLogins(time.Minute, clk)
	key := loginKey("http://h:5984", "bob", "wrong")
	refusal := HTTPError{Status: 401, Error_: "unauthorized", Reason: "Name or password is incorrect.", Login: true}
	l.remember(key, refusal)

	for _, tc := range []struct {
		name string
		key  [32]byte
		want bool
	}{
		{"the same credentials", key, true},
		{"another password", loginKey("http://h:5984", "bob", "right"), false},
		{"another user", loginKey("http://h:5984", "alice", "wrong"), false},
		{"another peer", loginKey("http://h:6984", "bob", "wrong"), false},
		{"no field run into the next", loginKey("http://h:5984", "bobwrong", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, ok := l.lookup(tc.key)
			require.Equal(t, tc.want, ok)
			if ok {
				require.Equal(t, refusal, got)
			}
		})
	}

	clk.Advance(time.Minute)
	_, _, ok := l.lookup(key)
	require.False(t, ok, "forgotten after the memory")

	var nilLogins *Logins
	nilLogins.remember(key, refusal)
	_, _, ok = nilLogins.lookup(key)
	require.False(t, ok, "a nil Logins remembers nothing")
}

func TestLoginsBounded(t *testing.T) {
	clk := clockwork.NewFakeClock()
	l := NewLogins(0, clk)
	first := loginKey("o", "u", "0")
	l.remember(first, HTTPError{Status: 401})
	for i := 1; i <= refusedLoginsMax; i++ {
		clk.Advance(time.Millisecond)
		l.remember(loginKey("o", "u", strconv.Itoa(i)), HTTPError{Status: 401})
	}
	require.Len(t, l.refused, refusedLoginsMax)
	_, _, ok := l.lookup(first)
	require.False(t, ok, "the oldest is forgotten first")
}
