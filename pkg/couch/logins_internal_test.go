package couch

import (
	"context"
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
	l.remember(key, "http://h:5984", "bob", refusal)

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
	nilLogins.remember(key, "http://h:5984", "bob", refusal)
	_, _, ok = nilLogins.lookup(key)
	require.False(t, ok, "a nil Logins remembers nothing")
}

func TestLoginsBounded(t *testing.T) {
	clk := clockwork.NewFakeClock()
	l := NewLogins(0, clk)
	first := loginKey("o", "u", "0")
	l.remember(first, "o", "u", HTTPError{Status: 401})
	for i := 1; i <= refusedLoginsMax; i++ {
		clk.Advance(time.Millisecond)
		l.remember(loginKey("o", "u", strconv.Itoa(i)), "o", "u", HTTPError{Status: 401})
	}
	require.Len(t, l.refused, refusedLoginsMax)
	_, _, ok := l.lookup(first)
	require.False(t, ok, "the oldest is forgotten first")
}

// Budget refusals of one user at one peer, whatever the passwords, within
// the memory of the first: a password the peer has not accepted is not
// tried until then; an accepted one is, as are other users and peers. A
// password the peer refuses is no longer an accepted one.
func TestLoginsBudget(t *testing.T) {
	clk := clockwork.NewFakeClock()
	l := NewLogins(time.Minute, clk)
	const origin, user = "http://h:5984", "carol"
	right := loginKey(origin, user, "right")
	l.succeeded(right)
	start := clk.Now()
	for i := range LoginFailureBudgetDefault {
		wrong := loginKey(origin, user, "wrong"+strconv.Itoa(i))
		require.NoError(t, l.spent(wrong, origin, user), "refusal %d is within the budget", i)
		clk.Advance(time.Second)
		l.remember(wrong, origin, user, HTTPError{Status: 401})
	}
	err := l.spent(loginKey(origin, user, "another"), origin, user)
	require.ErrorIs(t, err, ErrLoginBudget)
	var be *LoginBudgetError
	require.ErrorAs(t, err, &be)
	require.Equal(t, LoginBudgetError{Origin: origin, User: user, Failures: LoginFailureBudgetDefault, Until: start.Add(time.Second + time.Minute)}, *be)
	require.Contains(t, err.Error(), "3 logins of carol at http://h:5984 were refused lately")
	require.NotContains(t, err.Error(), "another")

	require.NoError(t, l.spent(right, origin, user), "a password the peer accepted")
	require.NoError(t, l.spent(loginKey(origin, "dave", "x"), origin, "dave"), "another user")
	require.NoError(t, l.spent(loginKey("http://h:6984", user, "x"), "http://h:6984", user), "another peer")

	l.remember(right, origin, user, HTTPError{Status: 401}) // changed on the peer
	require.ErrorIs(t, l.spent(right, origin, user), ErrLoginBudget, "no longer accepted")

	clk.Advance(time.Minute)
	require.NoError(t, l.spent(loginKey(origin, user, "another"), origin, "carol"), "the budget's memory is over")

	l.SetBudget(0)
	for i := range 10 {
		l.remember(loginKey(origin, user, "w"+strconv.Itoa(i)), origin, user, HTTPError{Status: 401})
	}
	require.NoError(t, l.spent(loginKey(origin, user, "new"), origin, user), "no budget")
	var nilLogins *Logins
	require.NoError(t, nilLogins.spent(right, origin, user))
	nilLogins.succeeded(right)
}

// Logins with credentials a peer has not accepted go one at a time per
// user and peer, so that logins under way cannot together spend more than
// the budget; accepted credentials, other users and peers do not wait.
func TestLoginsAdmitOneAtATime(t *testing.T) {
	l := NewLogins(time.Minute, clockwork.NewFakeClock())
	const origin, user = "http://h:5984", "carol"
	pw := func(i int) [32]byte { return loginKey(origin, user, "pw"+strconv.Itoa(i)) }
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	release, err := l.admit(ctx, pw(0), origin, user)
	require.NoError(t, err)
	_, err = l.admit(cancelled, pw(1), origin, user)
	require.ErrorIs(t, err, context.Canceled, "another unproven login of carol waits")
	l.succeeded(pw(9))
	r, err := l.admit(cancelled, pw(9), origin, user)
	require.NoError(t, err, "an accepted password does not wait")
	r()
	r, err = l.admit(ctx, loginKey(origin, "dave", "x"), origin, "dave")
	require.NoError(t, err, "dave does not wait for carol")
	r()

	l.remember(pw(0), origin, user, HTTPError{Status: 401})
	release()
	for i := 1; i < LoginFailureBudgetDefault; i++ {
		release, err = l.admit(ctx, pw(i), origin, user)
		require.NoError(t, err)
		l.remember(pw(i), origin, user, HTTPError{Status: 401})
		release()
	}
	_, err = l.admit(ctx, pw(LoginFailureBudgetDefault), origin, user)
	require.ErrorIs(t, err, ErrLoginBudget)
	r, err = l.admit(cancelled, pw(9), origin, user)
	require.NoError(t, err, "the accepted password still logs in")
	r()
	require.Empty(t, l.gates, "no gate left behind")
}
