//go:build fdb

package fdbkv

import (
	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/fdbrep/fdbrep/pkg/kv"
)

// fdbKey converts a key; a nil KeyConvertible is the empty key.
func fdbKey(k kv.KeyConvertible) fdb.Key {
	if k == nil {
		return fdb.Key{}
	}
	return fdb.Key(k.FDBKey())
}

func fdbSelector(s kv.Selectable) fdb.KeySelector {
	ks := s.FDBKeySelector()
	return fdb.KeySelector{Key: fdbKey(ks.Key), OrEqual: ks.OrEqual, Offset: ks.Offset}
}

func fdbExactRange(r kv.ExactRange) fdb.KeyRange {
	b, e := r.FDBRangeKeys()
	return fdb.KeyRange{Begin: fdbKey(b), End: fdbKey(e)}
}

func fdbRange(r kv.Range) fdb.Range {
	b, e := r.FDBRangeKeySelectors()
	return fdb.SelectorRange{Begin: fdbSelector(b), End: fdbSelector(e)}
}

var streamingModes = map[kv.StreamingMode]fdb.StreamingMode{
	kv.StreamingModeIterator: fdb.StreamingModeIterator,
	kv.StreamingModeWantAll:  fdb.StreamingModeWantAll,
	kv.StreamingModeExact:    fdb.StreamingModeExact,
	kv.StreamingModeSmall:    fdb.StreamingModeSmall,
	kv.StreamingModeMedium:   fdb.StreamingModeMedium,
	kv.StreamingModeLarge:    fdb.StreamingModeLarge,
	kv.StreamingModeSerial:   fdb.StreamingModeSerial,
}

// fdbRangeOptions converts options. An unknown streaming mode, which kv
// allows backends to ignore, becomes the default, Iterator; Exact without a
// limit, which FoundationDB refuses, becomes WantAll.
func fdbRangeOptions(o kv.RangeOptions) fdb.RangeOptions {
	mode, ok := streamingModes[o.Mode]
	if !ok {
		mode = fdb.StreamingModeIterator
	}
	if mode == fdb.StreamingModeExact && o.Limit == 0 {
		mode = fdb.StreamingModeWantAll
	}
	return fdb.RangeOptions{Limit: o.Limit, Mode: mode, Reverse: o.Reverse}
}

func kvKeyValue(e fdb.KeyValue) kv.KeyValue {
	return kv.KeyValue{Key: kv.Key(e.Key), Value: e.Value}
}

// rangeResult adapts fdb.RangeResult.
type rangeResult struct {
	rr fdb.RangeResult
}

func (r rangeResult) GetSliceWithError() ([]kv.KeyValue, error) {
	kvs, err := r.rr.GetSliceWithError()
	if err != nil {
		return nil, convertErr(err)
	}
	out := make([]kv.KeyValue, len(kvs))
	for i, e := range kvs {
		out[i] = kvKeyValue(e)
	}
	return out, nil
}

func (r rangeResult) GetSliceOrPanic() []kv.KeyValue { return kv.Must(r.GetSliceWithError()) }

func (r rangeResult) Iterator() kv.RangeIterator {
	return &rangeIterator{it: r.rr.Iterator()}
}

// rangeIterator adapts fdb.RangeIterator to kv's contract, which differs
// from the binding's: in kv, Advance moves to the next entry and Get
// returns the current one (any number of times), and after Advance has
// reported an error once (true, then Get returns it) it returns false. The
// binding's Advance only reports whether an entry or error is pending and
// its Get moves, so Advance here calls both and keeps the result.
type rangeIterator struct {
	it  *fdb.RangeIterator
	cur kv.KeyValue
	err error // the error reported by the last Advance that returned true
}

func (i *rangeIterator) Advance() bool {
	if i.err != nil {
		return false
	}
	if !i.it.Advance() {
		return false
	}
	e, err := i.it.Get()
	if err != nil {
		i.cur, i.err = kv.KeyValue{}, convertErr(err)
		return true
	}
	i.cur = kvKeyValue(e)
	return true
}

func (i *rangeIterator) Get() (kv.KeyValue, error) {
	if i.err != nil {
		return kv.KeyValue{}, i.err
	}
	return i.cur, nil
}

func (i *rangeIterator) MustGet() kv.KeyValue { return kv.Must(i.Get()) }
