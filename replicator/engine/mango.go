package engine

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// This file normalizes a Mango selector as CouchDB 3.5 does before it
// hashes one into a replication id (couch_replicator_filters:parse:
// ejsort(mango_selector:normalize(Selector))), on the Erlang terms ejson
// decodes: an object is etfTuple{etfListT{etfTuple{key, value}, …}}, an
// array etfListT, a string a Go string (a binary), an integer *big.Int, a
// float float64, true, false and null atoms. Equal selectors written
// differently ({"a": 1} and {"a": {"$eq": 1}}) normalize alike, so they
// share an id, as in CouchDB.

// errSelector is a selector mango_selector:normalize refuses, with
// mango_error's reason; CouchDB then fails the replication.
func errSelector(format string, args ...any) error {
	return fmt.Errorf("%w: parameter `selector`: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// Mango's reasons (mango_error:info of mango_selector).
const (
	msgBadArg          = "Bad argument for operator %s"
	msgInvalidOperator = "Invalid operator: %s"
	msgNotSupported    = "Unsupported operator: %s"
	msgBadField        = "Invalid field normalization on selector"
	msgMissingField    = "One or more conditions is missing a field name."
)

// normalizeSelector is mango_selector:normalize/1 followed by
// couch_replicator_filters:ejsort/1.
func normalizeSelector(sel any) (any, error) {
	if props, ok := ejObject(sel); ok && len(props) == 0 {
		return sel, nil
	}
	v, err := normOps(sel)
	if err != nil {
		return nil, err
	}
	if v, err = normFields(v); err != nil {
		return nil, err
	}
	if v, err = normNegations(v); err != nil {
		return nil, err
	}
	props, ok := ejObject(v)
	if !ok {
		return nil, errSelector(msgBadField)
	}
	for _, p := range props {
		if p[0] == "" {
			return nil, errSelector(msgMissingField)
		}
	}
	return ejsort(v), nil
}

// ejObject returns the pairs of an object term.
func ejObject(v any) ([]etfTuple, bool) {
	t, ok := v.(etfTuple)
	if !ok || len(t) != 1 {
		return nil, false
	}
	l, ok := t[0].(etfListT)
	if !ok {
		return nil, false
	}
	props := make([]etfTuple, 0, len(l))
	for _, e := range l {
		p, ok := e.(etfTuple)
		if !ok || len(p) != 2 {
			return nil, false
		}
		if _, ok := p[0].(string); !ok {
			return nil, false
		}
		props = append(props, p)
	}
	return props, true
}

// single returns the key and value of a one-member object.
func single(v any) (string, any, bool) {
	props, ok := ejObject(v)
	if !ok || len(props) != 1 {
		return "", nil, false
	}
	return props[0][0].(string), props[0][1], true
}

// obj1 is the object {k: v}.
func obj1(k string, v any) etfTuple { return etfTuple{etfListT{etfTuple{k, v}}} }

func isList(v any) bool   { _, ok := v.(etfListT); return ok }
func isBinary(v any) bool { _, ok := v.(string); return ok }
func isBool(v any) bool   { return v == etfAtomT("true") || v == etfAtomT("false") }
func isInt(v any) bool    { _, ok := v.(*big.Int); return ok }
func isObj(v any) bool    { _, ok := ejObject(v); return ok }

// mapList applies f to each element of a list term.
func mapList(v any, f func(any) (any, error)) (etfListT, error) {
	l, _ := v.(etfListT)
	out := make(etfListT, 0, len(l))
	for _, e := range l {
		x, err := f(e)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// listOf is the object {op: [f(a) for each a of args]}.
func listOf(op string, args any, f func(any) (any, error)) (any, error) {
	l, err := mapList(args, f)
	if err != nil {
		return nil, err
	}
	return obj1(op, l), nil
}

// oneOf is the object {op: f(arg)}.
func oneOf(op string, arg any, f func(any) (any, error)) (any, error) {
	a, err := f(arg)
	if err != nil {
		return nil, err
	}
	return obj1(op, a), nil
}

// normOps is mango_selector:norm_ops/1: operators validated, implicit
// ones made explicit ({"a": 1} is {"a": {"$eq": 1}}, an object of several
// members an $and of each).
func normOps(v any) (any, error) {
	if props, ok := ejObject(v); ok && len(props) > 1 {
		args := make(etfListT, 0, len(props))
		for _, p := range props {
			a, err := normOps(etfTuple{etfListT{p}})
			if err != nil {
				return nil, err
			}
			args = append(args, a)
		}
		return obj1("$and", args), nil
	}
	op, arg, ok := single(v)
	if !ok {
		return obj1("$eq", v), nil // a bare value, {} included, means equality
	}
	badArg := func() (any, error) { return nil, errSelector(msgBadArg, op) }
	switch op {
	case "$and", "$or", "$nor":
		if !isList(arg) {
			return badArg()
		}
		return listOf(op, arg, normOps)
	case "$not", "$elemMatch", "$allMatch", "$keyMapMatch":
		if !isObj(arg) {
			return badArg()
		}
		return oneOf(op, arg, normOps)
	case "$in", "$nin", "$all":
		if !isList(arg) {
			return badArg()
		}
		return v, nil
	case "$exists":
		if !isBool(arg) {
			return badArg()
		}
		return v, nil
	case "$type":
		if !isBinary(arg) {
			return badArg()
		}
		return v, nil
	case "$mod":
		l, ok := arg.(etfListT)
		if !ok || len(l) != 2 || !isInt(l[0]) || !isInt(l[1]) {
			return badArg()
		}
		return v, nil
	case "$regex":
		// CouchDB also compiles it (PCRE); the source's _changes refuses
		// one that does not compile.
		if !isBinary(arg) {
			return nil, errSelector(msgInvalidOperator, op)
		}
		return v, nil
	case "$beginsWith":
		if !isBinary(arg) {
			return nil, errSelector(msgInvalidOperator, op)
		}
		return v, nil
	case "$size":
		if n, ok := arg.(*big.Int); !ok || n.Sign() < 0 {
			return badArg()
		}
		return v, nil
	case "$text":
		switch arg.(type) {
		case string, *big.Int, float64:
		default:
			if !isBool(arg) {
				return badArg()
			}
		}
		return obj1("$default", obj1("$text", arg)), nil
	case "$default", "$lt", "$lte", "$eq", "$ne", "$gte", "$gt":
		return v, nil
	case "$where", "$geoWithin", "$geoIntersects", "$near", "$nearSphere":
		return nil, errSelector(msgNotSupported, op)
	}
	if strings.HasPrefix(op, "$") {
		return nil, errSelector(msgInvalidOperator, op)
	}
	return oneOf(op, arg, normOps)
}

// normFields is mango_selector:norm_fields/1: field names pushed down to
// the operators, nested ones joined with dots ({"a": {"b": {"$gt": 1}}}
// is {"a.b": {"$gt": 1}}).
func normFields(v any) (any, error) {
	if props, ok := ejObject(v); ok && len(props) == 0 {
		return v, nil
	}
	return normFieldsAt(v, "")
}

func normFieldsAt(v any, path string) (any, error) {
	if props, ok := ejObject(v); ok && len(props) == 0 {
		return etfTuple{path, v}, nil // as CouchDB: a pair, not an object
	}
	op, arg, ok := single(v)
	if !ok {
		return nil, errSelector(msgBadField)
	}
	switch op {
	case "$and", "$or", "$nor":
		return listOf(op, arg, func(a any) (any, error) { return normFieldsAt(a, path) })
	case "$not":
		return oneOf(op, arg, func(a any) (any, error) { return normFieldsAt(a, path) })
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		c, err := oneOf(op, arg, normFields)
		if err != nil {
			return nil, err
		}
		return obj1(path, c), nil
	case "$default":
		if k, _, ok := single(arg); ok && k == "$text" && path == "" {
			return v, nil
		}
		return nil, errSelector(msgBadField)
	}
	switch {
	case strings.HasPrefix(op, "$"):
		return obj1(path, v), nil
	case path == "":
		return normFieldsAt(arg, op)
	}
	return normFieldsAt(arg, path+"."+op)
}

// normNegations is mango_selector:norm_negations/1: $not and $nor moved
// down to the operators they negate (De Morgan's laws).
func normNegations(v any) (any, error) {
	op, arg, ok := single(v)
	if !ok {
		return v, nil
	}
	switch op {
	case "$not":
		return negate(arg)
	case "$nor":
		return listOf("$and", arg, negate)
	case "$and", "$or":
		return listOf(op, arg, normNegations)
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		return oneOf(op, arg, normNegations)
	}
	return v, nil
}

// negations are the operators negate turns into one another.
var negations = map[string]string{
	"$lt": "$gte", "$lte": "$gt", "$eq": "$ne", "$ne": "$eq", "$gte": "$lt", "$gt": "$lte", "$in": "$nin", "$nin": "$in",
}

// negate is mango_selector:negate/1.
func negate(v any) (any, error) {
	op, arg, ok := single(v)
	if !ok {
		return nil, errSelector(msgBadArg, "$not")
	}
	switch op {
	case "$not":
		return normNegations(arg)
	case "$nor":
		return listOf("$or", arg, normNegations)
	case "$and":
		return listOf("$or", arg, negate)
	case "$or":
		return listOf("$and", arg, negate)
	case "$default":
		return nil, errSelector(msgBadArg, "$not")
	case "$exists":
		if arg == etfAtomT("true") {
			return obj1(op, etfAtomT("false")), nil
		}
		return obj1(op, etfAtomT("true")), nil
	}
	if to, ok := negations[op]; ok {
		return obj1(to, arg), nil
	}
	if strings.HasPrefix(op, "$") {
		return obj1("$not", v), nil
	}
	return oneOf(op, arg, negate)
}

// ejsort is couch_replicator_filters:ejsort/1: every object's members
// sorted by key (bytewise, stable), recursively.
func ejsort(v any) any {
	switch t := v.(type) {
	case etfListT:
		out := make(etfListT, len(t))
		for i, e := range t {
			out[i] = ejsort(e)
		}
		return out
	case etfTuple:
		props, ok := ejObject(t)
		if !ok {
			return v
		}
		sorted := make([]etfTuple, len(props))
		for i, p := range props {
			sorted[i] = etfTuple{p[0], ejsort(p[1])}
		}
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i][0].(string) < sorted[j][0].(string) })
		l := make(etfListT, len(sorted))
		for i, p := range sorted {
			l[i] = p
		}
		return etfTuple{l}
	}
	return v
}
