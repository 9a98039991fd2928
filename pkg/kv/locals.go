package kv

import (
	"slices"
	"sync"
)

// Locals is the state that code joining a transaction keeps with it, and
// lives exactly as long as the Transaction it belongs to (Transaction.Locals):
//
//   - Values survive the retries of one retry loop, which reuses its
//     Transaction: a function run again after commit_unknown_result (its
//     earlier attempt may have committed) finds what that attempt chose,
//     such as a UUID it drew, and writes the same. Reset drops them, as it
//     makes the Transaction new.
//   - Hooks added by OnCommit run once the attempt that added them commits
//     (Run and RunRead run them, in the caller's goroutine, after the
//     commit and before returning); an attempt that fails drops its hooks,
//     and its retry adds its own. Logs and counters of what a transaction
//     did go there.
//   - An attempt whose commit may have happened (IsMaybeCommitted) keeps
//     its hooks aside. A retry that finds that attempt's writes (and so
//     writes nothing again) calls Adopt with the attempt's number (Attempt,
//     noted beside what it wrote): the kept hooks run when the retry
//     commits, so what the transaction did is logged and counted once,
//     neither lost nor twice.
//
// A Transaction committed outside Run runs no hooks. Locals is safe for
// concurrent use; the zero value is ready.
type Locals struct {
	mu     sync.Mutex // guards the fields below
	values map[any]any
	hooks  []func()
	// attempt counts the attempts that ended; kept holds the
	// hooks of those whose commit may have happened, by attempt, until
	// the loop commits; adopted are the attempts whose kept hooks the
	// current attempt runs if it commits.
	attempt int
	kept    map[int][]func()
	adopted []int
}

// Value returns the value stored under key, if any.
func (l *Locals) Value(key any) (any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.values[key]
	return v, ok
}

// SetValue stores v under key. Keys follow context.Context's advice: a type
// of the caller's package avoids collisions.
func (l *Locals) SetValue(key, v any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.values == nil {
		l.values = map[any]any{}
	}
	l.values[key] = v
}

// OnCommit adds f to the hooks that run once the current attempt commits.
func (l *Locals) OnCommit(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hooks = append(l.hooks, f)
}

// Committed runs and drops the hooks of the attempt that committed. Run and
// RunRead call it; a backend's own loop must too.
func (l *Locals) Committed() {
	l.mu.Lock()
	var hooks []func()
	for _, a := range l.adopted {
		hooks = append(hooks, l.kept[a]...)
	}
	hooks = append(hooks, l.hooks...)
	l.hooks, l.kept, l.adopted = nil, nil, nil
	l.attempt++
	l.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// Failed ends an attempt that did not commit, for err: it drops the
// attempt's hooks, or keeps them for Adopt when err says the commit may
// have happened (IsMaybeCommitted). Run calls it before OnError.
func (l *Locals) Failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.hooks) > 0 && IsMaybeCommitted(err) {
		if l.kept == nil {
			l.kept = map[int][]func(){}
		}
		l.kept[l.attempt] = l.hooks
	}
	l.hooks, l.adopted = nil, nil // what it adopted stays kept for the next
	l.attempt++
}

// Attempt returns the number of the current attempt of the retry loop,
// from 0: a function that notes it beside what the attempt writes can
// name that attempt to Adopt from a retry.
func (l *Locals) Attempt() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attempt
}

// Adopt says that attempt (a number from Attempt), whose commit was
// reported as maybe done, did commit: the current attempt found its
// writes. Its kept hooks run once the current attempt commits, before the
// current attempt's own; if the current attempt fails, they stay kept for
// the next one to adopt. Adopting an attempt twice runs its hooks once;
// an attempt with no hooks kept (its commit failed for sure, or it added
// none) adopts nothing.
func (l *Locals) Adopt(attempt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept[attempt]) > 0 && !slices.Contains(l.adopted, attempt) {
		l.adopted = append(l.adopted, attempt)
	}
}

// Reset drops values and hooks: the Transaction is new. Backends call it
// from Transaction.Reset.
func (l *Locals) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.values, l.hooks, l.kept, l.adopted, l.attempt = nil, nil, nil, nil, 0
}
