package kv

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ProbeTimeoutDefault bounds Probe: how long a store may take to hand out a
// read version before it counts as unreachable.
const ProbeTimeoutDefault = 10 * time.Second

// ErrUnreachable is wrapped by Probe's error when the store did not answer.
var ErrUnreachable = errors.New("kv: store unreachable")

// Probe checks that db answers, as a node should right after opening its
// store: it gets a read version and reads one key in a transaction with a
// timeout of two thirds of timeout (ProbeTimeoutDefault if 0), retrying
// retryable errors within that time. Opening a FoundationDB database
// contacts nobody, so without a probe a wrong cluster file or a cluster
// that is down shows only as requests that hang. The error wraps
// ErrUnreachable and the last error, names the store (its String method,
// when it has one: fdbkv's names the cluster file) and says what to check
// in one line: the store's own diagnosis when it has one (an Explainer,
// given the rest of the time), else a general hint. ctx bounds the probe
// too.
func Probe(ctx context.Context, db Database, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = ProbeTimeoutDefault
	}
	err := probe(ctx, db, timeout*2/3)
	if err == nil {
		return nil
	}
	name := "the store"
	if s, ok := db.(fmt.Stringer); ok {
		name = s.String()
	}
	if ex, ok := db.(Explainer); ok && ctx.Err() == nil {
		ectx, cancel := context.WithTimeout(ctx, timeout/3)
		defer cancel()
		if why := ex.Explain(ectx, err); why != "" {
			return fmt.Errorf("%w: %s: %s (%w)", ErrUnreachable, name, why, err)
		}
	}
	return fmt.Errorf("%w: %s did not hand out a read version within %v: %w "+
		"(check that the cluster file names the cluster's coordinators, that the cluster is up "+
		"and configured, and that this host can reach it)", ErrUnreachable, name, (timeout * 2 / 3).Round(100*time.Millisecond), err)
}

// Explainer is a store that can say why a probe failed (fdbkv's reads
// its cluster file and FoundationDB's status): a sentence that says what
// to check, or "" when it cannot tell.
type Explainer interface {
	Explain(ctx context.Context, err error) string
}

func probe(ctx context.Context, db Database, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tr, err := db.CreateTransaction()
	if err != nil {
		return err
	}
	defer tr.Cancel()
	if err := tr.Options().SetTimeout(timeout.Milliseconds()); err != nil {
		return err
	}
	for {
		_, err := Await(ctx, tr.GetReadVersion())
		if err == nil {
			// A read, not only a version: a FoundationDB tenant that does
			// not exist fails here.
			_, err = Await(ctx, tr.Get(Key("")))
		}
		if err == nil {
			return nil
		}
		var e Error
		if !errors.As(err, &e) {
			return err
		}
		if _, oerr := Await(ctx, tr.OnError(e)); oerr != nil {
			return oerr
		}
	}
}
