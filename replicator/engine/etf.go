package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"
)

// This file holds a minimal encoder for the Erlang external term format
// (term_to_binary with {minor_version, 1}), the input CouchDB hashes for its
// version 4 replication ids. Only the shapes that occur in a replication id
// are supported.

// Erlang external term format tags.
const (
	etfVersion     = 131
	etfNewFloat    = 70
	etfSmallInt    = 97
	etfInt         = 98
	etfAtom        = 100
	etfSmallTuple  = 104
	etfNil         = 106
	etfString      = 107
	etfList        = 108
	etfBinary      = 109
	etfSmallBig    = 110
	etfLargeBig    = 111
	etfMaxStrBytes = 65535
)

// etfAtomT is an Erlang atom such as undefined or remote.
type etfAtomT string

// etfStr is an Erlang string (a list of bytes), as ibrowse returns URL parts.
type etfStr string

// etfTuple is an Erlang tuple.
type etfTuple []any

// etfListT is a proper Erlang list.
type etfListT []any

// etfEncoder appends terms to a buffer.
type etfEncoder struct {
	buf bytes.Buffer
	// listsOnly encodes every list as a list, a list of bytes too, as
	// fdbrep's ids did before they were CouchDB's (legacy).
	listsOnly bool
}

// termToBinary encodes term with the leading version byte.
func termToBinary(term any) ([]byte, error) { return encodeTerm(term, false) }

func encodeTerm(term any, listsOnly bool) ([]byte, error) {
	e := &etfEncoder{listsOnly: listsOnly}
	e.buf.WriteByte(etfVersion)
	if err := e.encode(term); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

func (e *etfEncoder) encode(term any) error {
	switch v := term.(type) {
	case etfAtomT:
		if len(v) > 255 {
			return fmt.Errorf("atom too long: %d bytes", len(v))
		}
		e.buf.WriteByte(etfAtom)
		e.u16(len(v))
		e.buf.WriteString(string(v))
	case etfStr:
		switch {
		case len(v) == 0:
			e.buf.WriteByte(etfNil)
		case len(v) <= etfMaxStrBytes:
			e.buf.WriteByte(etfString)
			e.u16(len(v))
			e.buf.WriteString(string(v))
		default:
			items := make(etfListT, len(v))
			for i := 0; i < len(v); i++ {
				items[i] = int64(v[i])
			}
			return e.encode(items)
		}
	case string: // a binary (EJSON string)
		e.buf.WriteByte(etfBinary)
		e.u32(len(v))
		e.buf.WriteString(v)
	case etfTuple:
		if len(v) > 255 {
			return fmt.Errorf("tuple too large: %d", len(v))
		}
		e.buf.WriteByte(etfSmallTuple)
		e.buf.WriteByte(byte(len(v)))
		for _, x := range v {
			if err := e.encode(x); err != nil {
				return err
			}
		}
	case etfListT:
		if len(v) == 0 {
			e.buf.WriteByte(etfNil)
			return nil
		}
		if b, ok := byteList(v); ok && !e.listsOnly {
			// As term_to_binary: a list of integers 0..255 is a string.
			return e.encode(etfStr(b))
		}
		e.buf.WriteByte(etfList)
		e.u32(len(v))
		for _, x := range v {
			if err := e.encode(x); err != nil {
				return err
			}
		}
		e.buf.WriteByte(etfNil)
	case int:
		return e.encode(int64(v))
	case int64:
		switch {
		case v >= 0 && v <= 255:
			e.buf.WriteByte(etfSmallInt)
			e.buf.WriteByte(byte(v))
		case v >= math.MinInt32 && v <= math.MaxInt32:
			e.buf.WriteByte(etfInt)
			e.u32(int(int32(v)))
		default:
			e.bigInt(new(big.Int).SetInt64(v))
		}
	case *big.Int:
		if v.IsInt64() {
			return e.encode(v.Int64())
		}
		e.bigInt(v)
	case float64:
		e.buf.WriteByte(etfNewFloat)
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], math.Float64bits(v))
		e.buf.Write(b[:])
	default:
		return fmt.Errorf("cannot encode %T as an Erlang term", term)
	}
	return nil
}

// byteList returns a list's elements as bytes when they all are integers
// 0..255 and they fit a STRING_EXT.
func byteList(l etfListT) (string, bool) {
	if len(l) > etfMaxStrBytes {
		return "", false
	}
	b := make([]byte, len(l))
	for i, x := range l {
		var n int64
		switch v := x.(type) {
		case int:
			n = int64(v)
		case int64:
			n = v
		case *big.Int:
			if !v.IsInt64() {
				return "", false
			}
			n = v.Int64()
		default:
			return "", false
		}
		if n < 0 || n > 255 {
			return "", false
		}
		b[i] = byte(n)
	}
	return string(b), true
}

func (e *etfEncoder) bigInt(v *big.Int) {
	mag := v.Bytes() // big-endian magnitude
	n := len(mag)
	if n <= 255 {
		e.buf.WriteByte(etfSmallBig)
		e.buf.WriteByte(byte(n))
	} else {
		e.buf.WriteByte(etfLargeBig)
		e.u32(n)
	}
	if v.Sign() < 0 {
		e.buf.WriteByte(1)
	} else {
		e.buf.WriteByte(0)
	}
	for i := n - 1; i >= 0; i-- { // little-endian digits
		e.buf.WriteByte(mag[i])
	}
}

func (e *etfEncoder) u16(n int) {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], uint16(n))
	e.buf.Write(b[:])
}

func (e *etfEncoder) u32(n int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	e.buf.Write(b[:])
}

// ejson converts a JSON document into the Erlang term CouchDB's decoder
// (jiffy with dedupe_keys) gives: objects become {[{Key, Value}]} in the
// order written, a repeated key kept once, with its last value, where it
// last appears; strings become binaries, integers integers, other numbers
// floats and true/false/null atoms. With legacy set it is fdbrep's earlier
// decoding instead (keys sorted recursively, repeated ones kept), which the
// replication ids of fdbrep before CouchDB's own (legacyID) hashed.
func ejson(raw json.RawMessage, legacy bool) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := ejsonValue(dec, legacy)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func ejsonValue(dec *json.Decoder, legacy bool) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var pairs []etfTuple
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				val, err := ejsonValue(dec, legacy)
				if err != nil {
					return nil, err
				}
				pairs = append(pairs, etfTuple{kt.(string), val})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			if legacy {
				sort.SliceStable(pairs, func(i, j int) bool { return pairs[i][0].(string) < pairs[j][0].(string) })
			} else {
				pairs = dedupeKeys(pairs)
			}
			list := make(etfListT, len(pairs))
			for i, p := range pairs {
				list[i] = p
			}
			return etfTuple{list}, nil
		case '[':
			list := etfListT{}
			for dec.More() {
				val, err := ejsonValue(dec, legacy)
				if err != nil {
					return nil, err
				}
				list = append(list, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %v", t)
	case string:
		return t, nil
	case bool:
		if t {
			return etfAtomT("true"), nil
		}
		return etfAtomT("false"), nil
	case nil:
		return etfAtomT("null"), nil
	case json.Number:
		s := t.String()
		if !strings.ContainsAny(s, ".eE") {
			if n, ok := new(big.Int).SetString(s, 10); ok {
				return n, nil
			}
		}
		f, err := t.Float64()
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// dedupeKeys keeps one member per key, as jiffy's dedupe_keys: the last,
// in its place ({"a":1,"b":2,"a":3} is {"b":2,"a":3}).
func dedupeKeys(pairs []etfTuple) []etfTuple {
	last := make(map[string]int, len(pairs))
	for i, p := range pairs {
		last[p[0].(string)] = i
	}
	if len(last) == len(pairs) {
		return pairs
	}
	out := make([]etfTuple, 0, len(last))
	for i, p := range pairs {
		if last[p[0].(string)] == i {
			out = append(out, p)
		}
	}
	return out
}
