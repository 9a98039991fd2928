package engine

import (
	"bufio"
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
	// size is what the row counts toward ChangesQueueMax (bytes).
	size int64
}

// bytes is about what c holds in memory: its strings and slices, and its
// own fields.
func (c change) bytes() int64 {
	n := int64(changeOverhead + len(c.Seq) + len(c.ID) + len(c.Doc))
	for _, r := range c.Revs {
		n += int64(stringOverhead + len(r))
	}
	return min(n, ChangesQueueMax)
}

// changeOverhead and stringOverhead are what a change and each string in
// it hold besides their bytes (headers, allocation rounding).
const (
	changeOverhead = 160
	stringOverhead = 24
)

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
// absent). A row callback error stops parsing and is returned as is. Each
// row, and each other member of the response, is at most rowMax bytes:
// past it the error wraps errPartTooLarge.
func parseNormalFeed(r io.Reader, rowMax int64, row func(change) error) (json.RawMessage, error) {
	pr := &partReader{r: r, max: rowMax}
	dec := json.NewDecoder(pr)
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var lastSeq json.RawMessage
	for dec.More() {
		pr.reset()
		kt, err := dec.Token()
		if err != nil {
			return nil, feedError(err)
		}
		key, _ := kt.(string)
		switch key {
		case "results":
			if err := expectDelim(dec, '['); err != nil {
				return nil, err
			}
			for dec.More() {
				pr.reset()
				var fr feedRow
				if err := dec.Decode(&fr); err != nil {
					return nil, feedError(err)
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
				return nil, feedError(err)
			}
			lastSeq = raw
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, feedError(err)
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
// returns (nil, nil). Each line is at most rowMax bytes: past it the error
// wraps errPartTooLarge. Heartbeats cost nothing, however many.
func parseContinuousFeed(r io.Reader, rowMax int64, row func(change) error) (json.RawMessage, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if int64(len(line)+len(chunk)) > rowMax+1 { // the newline does not count
			return nil, errPartTooLarge
		}
		if err == bufio.ErrBufferFull {
			line = append(line, chunk...)
			continue
		}
		if len(line) > 0 {
			chunk = append(line, chunk...)
			line = line[:0]
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		text := bytes.TrimSpace(chunk)
		if len(text) > 0 {
			var fr feedRow
			if derr := json.NewDecoder(bytes.NewReader(text)).Decode(&fr); derr != nil {
				if err == io.EOF && errors.Is(derr, io.ErrUnexpectedEOF) {
					return nil, derr // cut mid-row
				}
				return nil, feedError(derr)
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
		if err == io.EOF {
			return nil, nil
		}
	}
}

// feedError is the error of a feed that does not decode: it wraps
// errBadFeed, or, for a part over its limit, errPartTooLarge.
func feedError(err error) error {
	if errors.Is(err, errPartTooLarge) {
		return err
	}
	return fmt.Errorf("%w: %v", errBadFeed, err)
}

// expectDelim reads the next token of a feed and checks that it is want.
func expectDelim(dec *json.Decoder, want json.Delim) error {
	err := nextDelim(dec, want)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", errBadFeed, io.ErrUnexpectedEOF)
	}
	return feedError(err)
}

// nextDelim reads the next token of dec and checks that it is want; an
// answer that ends first is io.ErrUnexpectedEOF.
func nextDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, got %v", want, tok)
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
