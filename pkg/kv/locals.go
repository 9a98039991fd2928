package kv

import "sync"

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
//     commit and before returning); an attempt that fails, or whose commit
//     reports commit_unknown_result, drops its hooks, and its retry adds
//     its own. Logs and counters of what a transaction did go there.
//
// A Transaction committed outside Run runs no hooks. Locals is safe for
// concurrent use; the zero value is ready.
type Locals struct {
	mu     sync.Mutex
	values map[any]any
	hooks  []func()
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
	hooks := l.hooks
	l.hooks = nil
	l.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// Failed drops the hooks of an attempt that did not commit (or whose commit
// is unknown). Run calls it before OnError.
func (l *Locals) Failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hooks = nil
}

// Reset drops values and hooks: the Transaction is new. Backends call it
// from Transaction.Reset.
func (l *Locals) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.values, l.hooks = nil, nil
}
