// Package examples holds runnable programs of fdbjobs' runtime, each on
// the embedded store in memory: go run ./examples/typed (the program of
// fdbjobs/README.md), ./examples/retries, ./examples/cancel,
// ./examples/unique, ./examples/transactional, ./examples/schedule and
// ./examples/limits (cluster-wide limits and priorities),
// ./examples/partitions (a limit per customer across three nodes),
// ./examples/fair (fair shares between tenants) and ./examples/fairtime
// (fair shares of run time). Each example's test runs its main.
package examples
