package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// change is one row of the source's changes feed: a document and the leaf
// revisions listed for it.
type change struct {
	Seq     json.RawMessage
	ID      string
	Revs    []string
	Deleted bool
	// Doc is the document body when the feed was read with include_docs
	// (see workers.inlineDocs); nil otherwise or when too large to keep.
	Doc json.RawMessage
}

// inlineDocMaxBytes bounds the document bodies kept from an include_docs
// feed; larger ones are fetched like any other.
const inlineDocMaxBytes = 16 << 10

// feedRow is the wire shape of a changes row or a continuous feed's
// terminating last_seq line.
type feedRow struct {
	Seq     json.RawMessage `json:"seq"`
	ID      *string         `json:"id"`
	Changes []struct {
		Rev string `json:"rev"`
	} `json:"changes"`
	Deleted bool            `json:"deleted"`
	Removed bool            `json:"removed"`
	Doc     json.RawMessage `json:"doc"`
	LastSeq json.RawMessage `json:"last_seq"`
}

// errBadFeed reports a changes response that is not what CouchDB sends.
var errBadFeed = errors.New("malformed changes response")

// toChange converts a decoded row; ok is false for rows to skip (no id, or no
// revisions left after a "removed" row drops its first one).
func (r *feedRow) toChange() (change, bool) {
	if r.ID == nil || *r.ID == "" {
		return change{}, false
	}
	revs := make([]string, 0, len(r.Changes))
	for _, c := range r.Changes {
		if c.Rev != "" {
			revs = append(revs, c.Rev)
		}
	}
	if r.Removed && len(revs) > 0 {
		revs = revs[1:]
	}
	if len(revs) == 0 {
		return change{}, false
	}
	c := change{Seq: r.Seq, ID: *r.ID, Revs: revs, Deleted: r.Deleted}
	if len(r.Doc) > 0 && len(r.Doc) <= inlineDocMaxBytes && r.Doc[0] == '{' {
		c.Doc = r.Doc
	}
	return c, true
}

// parseNormalFeed reads a feed=normal response, {"results":[rows...],
// "last_seq": seq, ...}, calling row for every usable row in order (rows
// without an id are skipped). It returns the response's last_seq (nil when
// absent). A row callback error stops parsing and is returned as is.
func parseNormalFeed(r io.Reader, row func(change) error) (json.RawMessage, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var lastSeq json.RawMessage
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errBadFeed, err)
		}
		key, _ := kt.(string)
		switch key {
		case "results":
			if err := expectDelim(dec, '['); err != nil {
				return nil, err
			}
			for dec.More() {
				var fr feedRow
				if err := dec.Decode(&fr); err != nil {
					return nil, fmt.Errorf("%w: %v", errBadFeed, err)
				}
				if c, ok := fr.toChange(); ok {
					if err := row(c); err != nil {
						return nil, err
					}
				}
			}
			if err := expectDelim(dec, ']'); err != nil {
				return nil, err
			}
		case "last_seq":
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, fmt.Errorf("%w: %v", errBadFeed, err)
			}
			lastSeq = raw
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("%w: %v", errBadFeed, err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	return lastSeq, nil
}

// parseContinuousFeed reads a feed=continuous response: one JSON object per
// line, blank heartbeat lines, and possibly a final {"last_seq": seq} line
// (CouchDB ends the stream after its timeout; pouchdb-server never does). It
// returns the last_seq line's value, or nil and io.ErrUnexpectedEOF-wrapped
// errors when the stream is cut mid-row. A clean end without last_seq
// returns (nil, nil).
func parseContinuousFeed(r io.Reader, row func(change) error) (json.RawMessage, error) {
	dec := json.NewDecoder(r)
	for {
		var fr feedRow
		err := dec.Decode(&fr)
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errBadFeed, err)
		}
		if fr.ID == nil && len(fr.LastSeq) > 0 {
			return fr.LastSeq, nil
		}
		if c, ok := fr.toChange(); ok {
			if err := row(c); err != nil {
				return nil, err
			}
		}
	}
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return fmt.Errorf("%w: %w", errBadFeed, io.ErrUnexpectedEOF)
		}
		return fmt.Errorf("%w: %v", errBadFeed, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("%w: expected %q, got %v", errBadFeed, want, tok)
	}
	return nil
}

// seqEqual compares two sequences as JSON values (byte-wise after compacting).
func seqEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
