package kv

import (
	"fmt"
	"runtime"
	"strings"
)

// BudgetError is the error of a transaction attempt that went over its
// store's Budget (FDBREP_KV_BUDGET): it names the call site that created
// the transaction, so that a test failure points at the code to fix. It is
// not an Error, so no retry loop retries it.
type BudgetError struct {
	// Site is the first caller outside the storage layer when the
	// transaction was created, as "path/file.go:123 pkg.Func".
	Site string
	// Stack is the creating goroutine's stack from Site outwards (at most
	// budgetStackDepth frames).
	Stack []string
	// Reason says what went over the budget, with the budget.
	Reason string
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("kv: transaction budget exceeded: %s; transaction created at %s (stack: %s)",
		e.Reason, e.Site, strings.Join(e.Stack, " <- "))
}

// budgetStackDepth is how many frames a BudgetError's Stack keeps.
const budgetStackDepth = 8

// CallSite is the stack of a goroutine, captured cheaply (program counters
// only) when a transaction is created and resolved only if it is needed.
type CallSite struct {
	pcs []uintptr
}

// CaptureCallSite records the calling goroutine's stack.
func CaptureCallSite() CallSite {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(2, pcs)
	return CallSite{pcs: pcs[:n]}
}

// storageLayer are the function-name prefixes of the packages whose frames
// a call site skips: the storage layer itself, whose callers are the
// interesting ones. kvtest is not skipped: its helpers are call sites.
var storageLayer = []string{
	"github.com/fdbrep/fdbrep/pkg/kv.",
	"github.com/fdbrep/fdbrep/pkg/kv/embedded.",
	"github.com/fdbrep/fdbrep/pkg/kv/faultkv.",
	"github.com/fdbrep/fdbrep/pkg/kv/fdbkv.",
	"runtime.",
}

func inStorageLayer(fn string) bool {
	for _, p := range storageLayer {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// Frames returns the call site (the first frame outside the storage
// layer; test files never count as part of it) and the stack from it
// outwards.
func (c CallSite) Frames() (site string, stack []string) {
	frames := runtime.CallersFrames(c.pcs)
	for {
		f, more := frames.Next()
		inside := inStorageLayer(f.Function) && !strings.HasSuffix(f.File, "_test.go")
		if f.Function != "" && (len(stack) > 0 || !inside) {
			stack = append(stack, fmt.Sprintf("%s:%d %s", trimPath(f.File), f.Line, shortFunc(f.Function)))
			if len(stack) == budgetStackDepth {
				break
			}
		}
		if !more {
			break
		}
	}
	if len(stack) == 0 {
		return "unknown", nil
	}
	return stack[0], stack
}

// BudgetError returns the error for a transaction created at c that went
// over its budget for reason.
func (c CallSite) BudgetError(reason string) *BudgetError {
	site, stack := c.Frames()
	return &BudgetError{Site: site, Stack: stack, Reason: reason}
}

// trimPath keeps the module-relative part of a source path.
func trimPath(file string) string {
	if i := strings.Index(file, "/fdbrep/fdbrep/"); i >= 0 {
		return file[i+len("/fdbrep/fdbrep/"):]
	}
	if i := strings.LastIndex(file, "/"); i >= 0 {
		if j := strings.LastIndex(file[:i], "/"); j >= 0 {
			return file[j+1:]
		}
	}
	return file
}

// shortFunc drops the module path from a function name.
func shortFunc(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
}
