package couch

import (
	"cmp"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// RefusedLoginMemoryDefault is how long Logins remembers a refused login:
// the default of CouchDB's [chttpd_auth_lockout] max_lifetime (300,000
// ms), for which CouchDB counts a failed login toward locking the account.
const RefusedLoginMemoryDefault = 5 * time.Minute

// refusedLoginsMax bounds the refusals a Logins keeps; past it the oldest
// is forgotten first.
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
// tried again after Memory. Only a digest of the credentials is kept.
// Safe for concurrent use.
type Logins struct {
	memory time.Duration
	clock  clockwork.Clock

	mu      sync.Mutex
	refused map[[sha256.Size]byte]refusal
}

// refusal is a remembered refused login.
type refusal struct {
	err HTTPError
	at  time.Time
}

// NewLogins returns an empty Logins that remembers refusals for memory
// (0: RefusedLoginMemoryDefault) by clock (nil: the real clock).
func NewLogins(memory time.Duration, clock clockwork.Clock) *Logins {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Logins{memory: cmp.Or(memory, RefusedLoginMemoryDefault), clock: clock, refused: map[[sha256.Size]byte]refusal{}}
}

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

// remember records a refused login under key. At refusedLoginsMax it
// first forgets the refusals that are over, then the oldest.
func (l *Logins) remember(key [sha256.Size]byte, err HTTPError) {
	if l == nil {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.refused) >= refusedLoginsMax {
		var oldest [sha256.Size]byte
		var oldestAt time.Time
		for k, r := range l.refused {
			switch {
			case now.Sub(r.at) >= l.memory:
				delete(l.refused, k)
			case oldestAt.IsZero() || r.at.Before(oldestAt):
				oldest, oldestAt = k, r.at
			}
		}
		if len(l.refused) >= refusedLoginsMax {
			delete(l.refused, oldest)
		}
	}
	l.refused[key] = refusal{err: err, at: now}
}
