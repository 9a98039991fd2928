package fdbjobs

import (
	"context"
	"sync"
)

// slots counts the jobs of a kind that a Runtime accepted and that have
// not ended, up to the kind's Concurrency, which SetConcurrency changes
// while the Runtime runs, and, for a kind with a cluster-wide limit, up to
// the Runtime's grant of it (limits.go).
type slots struct {
	mu sync.Mutex
	// limit is the kind's Concurrency, grant the Runtime's lease of a
	// limited kind's capacity (-1: no limit), held the slots taken, and
	// blocked whether a fetcher waits for the grant; mu guards them.
	limit, grant, held int
	blocked            bool
	// everBlocked: a fetcher waited for the grant since wasBlocked last
	// looked.
	everBlocked bool
	// room is signalled (buffer of one) when a slot may have become free.
	room chan struct{}
	// wanting is signalled (buffer of one) when a fetcher waits for a
	// grant: the capacity loop renews its lease then, not at its period.
	wanting chan struct{}
}

func newSlots(limit int) *slots {
	return &slots{limit: limit, grant: -1, room: make(chan struct{}, 1), wanting: make(chan struct{}, 1)}
}

// cap is how many slots may be taken at once; mu held.
func (s *slots) cap() int {
	if s.grant >= 0 {
		return min(s.limit, s.grant)
	}
	return s.limit
}

// take waits for a free slot, then takes as many free ones as there are,
// up to most; 0 when ctx ends first.
func (s *slots) take(ctx context.Context, most int) int {
	for {
		s.mu.Lock()
		if free := s.cap() - s.held; free > 0 {
			n := min(free, most)
			s.held += n
			s.blocked = false
			s.mu.Unlock()
			if free > n {
				s.signal() // for another fetcher
			}
			return n
		}
		byGrant := s.grant >= 0 && s.grant < s.limit
		if byGrant {
			s.everBlocked = true
		}
		if byGrant && !s.blocked {
			s.blocked = true
			select {
			case s.wanting <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
		select {
		case <-s.room:
		case <-ctx.Done():
			return 0
		}
	}
}

// give frees n slots.
func (s *slots) give(n int) {
	s.mu.Lock()
	s.held -= n
	room := s.held < s.cap()
	s.mu.Unlock()
	if room {
		s.signal()
	}
}

// setLimit makes limit the most slots taken at once; slots taken beyond
// it stay taken until given back.
func (s *slots) setLimit(limit int) {
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
	s.signal()
}

// setGrant bounds the slots taken by a lease of a limited kind's capacity
// (-1: no limit); slots taken beyond it stay taken until given back.
func (s *slots) setGrant(grant int) {
	s.mu.Lock()
	s.grant = grant
	s.mu.Unlock()
	s.signal()
}

// wasBlocked reports whether a fetcher waited for the grant since it was
// last asked, and forgets it.
func (s *slots) wasBlocked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.everBlocked
	s.everBlocked = false
	return b
}

// limited reports whether the slots follow a grant.
func (s *slots) limited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grant >= 0
}

// size is the limit.
func (s *slots) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// taken is how many slots are taken.
func (s *slots) taken() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *slots) signal() {
	select {
	case s.room <- struct{}{}:
	default:
	}
}
