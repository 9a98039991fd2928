package couch

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// RefusedLoginMemoryDefault is how long Logins remembers a refused login:
// the default of CouchDB's [chttpd_auth_lockout] max_lifetime (300,000
// ms), for which CouchDB counts a failed login toward locking the account.
const RefusedLoginMemoryDefault = 5 * time.Minute

// LoginFailureBudgetDefault is how many logins of one user a peer may
// refuse, whatever the passwords, within a Logins' memory (from the first
// refusal) before credentials it has not accepted before wait: under the
// threshold of CouchDB's [chttpd_auth_lockout] (5, the right password
// refused too once it is reached), with room for a known password the
// peer no longer accepts and for another client at the same address.
const LoginFailureBudgetDefault = 3

// refusedLoginsMax bounds the refusals a Logins keeps, and the accepted
// credentials and the counts by peer and user; past it the oldest is
// forgotten first.
const refusedLoginsMax = 10_000

// Logins remembers the logins peers refused (401 or 403), by the peer's
// origin (scheme, host and port), user name and password, so that the DBs
// sharing it (Options.Logins: every run of a replication node) do not log
// in again with credentials a peer refused within Memory. Each further
// failed login would count toward CouchDB's lockout of the account
// ([chttpd_auth_lockout]), which then refuses the right password too, to
// every user of the account: so with Logins, the documents that share a
// wrong password cost the peer one failed login per Memory per process,
// not one per document start. A DB whose credentials are remembered as
// refused fails with the remembered answer without asking the peer.
// Credentials that differ in anything (a password corrected in the
// document) are tried at once; a password corrected on the peer alone is
// tried again after Memory. Documents with different wrong passwords for
// one account, though, would each cost a failed login: so Logins also
// counts the refusals by peer and user, whatever the password, and once
// its budget of them (SetBudget; LoginFailureBudgetDefault) came within
// Memory of the first, a login with credentials the peer has not
// accepted before (while this Logins remembers) is not tried until Memory
// after that first refusal: it fails with a *LoginBudgetError
// (ErrLoginBudget) naming the account and when. Credentials the peer
// accepted keep working. Logins with credentials not accepted before go
// one at a time per peer and user, so that those under way cannot
// together pass the budget. Only digests of the credentials are kept.
// Safe for concurrent use.
type Logins struct {
	memory time.Duration
	budget int
	clock  clockwork.Clock

	mu       sync.Mutex
	refused  map[[sha256.Size]byte]refusal
	accepted map[[sha256.Size]byte]time.Time    // by loginKey: when last accepted
	failures map[[sha256.Size]byte]*loginBudget // by accountKey
	gates    map[[sha256.Size]byte]*loginGate   // by accountKey, while in use
}

// loginGate lets one login of an account with credentials not accepted
// before through at a time; users counts those holding or awaiting it.
type loginGate struct {
	ch    chan struct{}
	users int
}

// loginBudget counts the refusals of one account since first.
type loginBudget struct {
	n     int
	first time.Time
}

// LoginBudgetError is a login Logins did not let a DB try: Failures logins
// of User at the peer at Origin were refused within the memory, and
// credentials the peer has not accepted before wait until Until. It
// matches ErrLoginBudget.
type LoginBudgetError struct {
	Origin, User string
	Failures     int
	Until        time.Time
}

func (e *LoginBudgetError) Error() string {
	return fmt.Sprintf("%d logins of %s at %s were refused lately (by this node, with other passwords): a password not known to work "+
		"is not tried before %s, so that the account is not locked out ([replicator] login_failure_budget; "+
		"CouchDB's [chttpd_auth_lockout] refuses the right password too after 5)",
		e.Failures, e.User, e.Origin, e.Until.UTC().Format(time.RFC3339))
}

func (e *LoginBudgetError) Unwrap() error { return ErrLoginBudget }

// refusal is a remembered refused login.
type refusal struct {
	err HTTPError
	at  time.Time
}

// NewLogins returns an empty Logins that remembers refusals for memory
// (0: RefusedLoginMemoryDefault) by clock (nil: the real clock), with
// LoginFailureBudgetDefault as its budget (see SetBudget).
func NewLogins(memory time.Duration, clock clockwork.Clock) *Logins {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Logins{memory: cmp.Or(memory, RefusedLoginMemoryDefault), budget: LoginFailureBudgetDefault, clock: clock,
		refused: map[[sha256.Size]byte]refusal{}, accepted: map[[sha256.Size]byte]time.Time{},
		failures: map[[sha256.Size]byte]*loginBudget{}, gates: map[[sha256.Size]byte]*loginGate{}}
}

// SetBudget sets how many refusals of one account within the memory let
// only credentials a peer accepted before log in (0: no budget); call it
// before l is shared.
func (l *Logins) SetBudget(n int) { l.budget = n }

// loginKey is the digest that names one set of credentials at one peer.
func loginKey(origin, user, password string) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range []string{origin, user, password} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// accountKey is the digest that names one user at one peer.
func accountKey(origin, user string) [sha256.Size]byte { return loginKey(origin, user, "") }

// admit lets a login with credentials key of user at origin be tried: at
// once with credentials a peer accepted before (or without a budget);
// otherwise once the account's other login with such credentials, if
// any, ended (one at a time, so that logins under way cannot together
// spend more than the budget), and while the budget is not spent (see
// spent). release must be called once the login's outcome is recorded
// (remember, succeeded). The error is ctx's, or a *LoginBudgetError.
func (l *Logins) admit(ctx context.Context, key [sha256.Size]byte, origin, user string) (release func(), err error) {
	if l == nil || l.budget <= 0 {
		return func() {}, nil
	}
	acct := accountKey(origin, user)
	l.mu.Lock()
	if _, ok := l.accepted[key]; ok {
		l.mu.Unlock()
		return func() {}, nil
	}
	g := l.gates[acct]
	if g == nil {
		g = &loginGate{ch: make(chan struct{}, 1)}
		l.gates[acct] = g
	}
	g.users++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if g.users--; g.users == 0 {
			delete(l.gates, acct)
		}
		l.mu.Unlock()
	}
	select {
	case g.ch <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	release = func() {
		<-g.ch
		leave()
	}
	if err := l.spent(key, origin, user); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// spent returns the error of a login with credentials key of user at
// origin that l does not let try (nil: try it).
func (l *Logins) spent(key [sha256.Size]byte, origin, user string) error {
	if l == nil || l.budget <= 0 {
		return nil
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.failures[accountKey(origin, user)]
	if a == nil || now.Sub(a.first) >= l.memory || a.n < l.budget {
		return nil
	}
	if _, ok := l.accepted[key]; ok {
		return nil
	}
	return &LoginBudgetError{Origin: origin, User: user, Failures: a.n, Until: a.first.Add(l.memory)}
}

// succeeded records a login the peer accepted.
func (l *Logins) succeeded(key [sha256.Size]byte) {
	if l == nil {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.accepted[key]; !ok && len(l.accepted) >= refusedLoginsMax {
		forgetFirst(l.accepted, func(t time.Time) time.Time { return t })
	}
	l.accepted[key] = now
}

// forgetFirst deletes m's entry of the earliest time.
func forgetFirst[V any](m map[[sha256.Size]byte]V, at func(V) time.Time) {
	var first [sha256.Size]byte
	var firstAt time.Time
	for k, v := range m {
		if t := at(v); firstAt.IsZero() || t.Before(firstAt) {
			first, firstAt = k, t
		}
	}
	delete(m, first)
}

// lookup returns the refusal remembered for key and when it came.
func (l *Logins) lookup(key [sha256.Size]byte) (HTTPError, time.Time, bool) {
	if l == nil {
		return HTTPError{}, time.Time{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.refused[key]
	if !ok {
		return HTTPError{}, time.Time{}, false
	}
	if l.clock.Since(r.at) >= l.memory {
		delete(l.refused, key)
		return HTTPError{}, time.Time{}, false
	}
	return r.err, r.at, true
}

// remember records a refused login of user at origin under key, and
// counts it against the account's budget; key is no longer one the peer
// accepted. At refusedLoginsMax it first forgets the refusals that are
// over, then the oldest.
func (l *Logins) remember(key [sha256.Size]byte, origin, user string, err HTTPError) {
	if l == nil {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.refused) >= refusedLoginsMax {
		for k, r := range l.refused {
			if now.Sub(r.at) >= l.memory {
				delete(l.refused, k)
			}
		}
		if len(l.refused) >= refusedLoginsMax {
			forgetFirst(l.refused, func(r refusal) time.Time { return r.at })
		}
	}
	l.refused[key] = refusal{err: err, at: now}
	delete(l.accepted, key)
	acct := accountKey(origin, user)
	a := l.failures[acct]
	if a == nil || now.Sub(a.first) >= l.memory {
		if a == nil && len(l.failures) >= refusedLoginsMax {
			forgetFirst(l.failures, func(b *loginBudget) time.Time { return b.first })
		}
		a = &loginBudget{first: now}
		l.failures[acct] = a
	}
	a.n++
}
