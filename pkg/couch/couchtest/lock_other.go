//go:build !unix

package couchtest

// lockFile is a no-op where flock is unavailable: concurrent test processes
// may then race to install pouchdb-server; run `make pouchdb` first.
func lockFile(string) (func(), error) { return func() {}, nil }
