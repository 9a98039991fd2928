//go:build race

package testutil

// Race reports whether the race detector is on: code then runs several
// times slower, which wall-clock budgets must allow for.
const Race = true
