package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"sort"
	"strconv"
	"strings"
)

// doc is one revision of a document fetched from the source, ready to be
// written to the target with new_edits=false.
type doc struct {
	ID      string
	Rev     string
	Deleted bool
	// Body is the document JSON as the source sent it (with _revisions and
	// _attachments, which are stubs, inline base64 data or "follows").
	Body json.RawMessage
	// Revisions is the revision path, newest first, as "N-hash" strings.
	Revisions []string
	// Atts holds attachment bodies that arrived as multipart parts, by name.
	Atts map[string][]byte
	// AttNames lists the document's attachments (stubs included).
	AttNames []string
	// lease counts what the document holds until it is written (nil for
	// documents that were not fetched with open_revs, which carry no
	// attachment bodies).
	lease *docLease
}

// idRev names one revision of a document.
type idRev struct {
	ID  string
	Rev string
}

// docMeta is the part of a document the engine inspects.
type docMeta struct {
	ID        string `json:"_id"`
	Rev       string `json:"_rev"`
	Deleted   bool   `json:"_deleted"`
	Revisions *struct {
		Start int      `json:"start"`
		IDs   []string `json:"ids"`
	} `json:"_revisions"`
	Attachments json.RawMessage `json:"_attachments"`
}

// errBadDoc reports a document or fetch response the engine cannot use.
var errBadDoc = errors.New("malformed document response")

// newDoc decodes the metadata of a document body.
func newDoc(body json.RawMessage) (*doc, error) {
	var m docMeta
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadDoc, err)
	}
	if m.ID == "" || m.Rev == "" {
		return nil, fmt.Errorf("%w: document without _id or _rev", errBadDoc)
	}
	d := &doc{ID: m.ID, Rev: m.Rev, Deleted: m.Deleted, Body: body}
	if m.Revisions != nil {
		for i, h := range m.Revisions.IDs {
			d.Revisions = append(d.Revisions, strconv.Itoa(m.Revisions.Start-i)+"-"+h)
		}
	}
	if len(m.Attachments) > 0 && !bytes.Equal(m.Attachments, []byte("null")) {
		names, err := objectKeys(m.Attachments)
		if err != nil {
			return nil, fmt.Errorf("%w: _attachments: %v", errBadDoc, err)
		}
		d.AttNames = names
	}
	return d, nil
}

// covers reports whether writing d also stores rev: rev is d's revision or
// one of its ancestors (as happens when latest=true returns a newer leaf).
func (d *doc) covers(rev string) bool {
	if d.Rev == rev {
		return true
	}
	for _, r := range d.Revisions {
		if r == rev {
			return true
		}
	}
	return false
}

// hasAttachments reports whether d carries an _attachments member.
func (d *doc) hasAttachments() bool { return len(d.AttNames) > 0 }

// objectKeys returns the keys of a JSON object in document order.
func objectKeys(raw json.RawMessage) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object")
	}
	var keys []string
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, kt.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// bulkGetResult is one result of a _bulk_get reply.
type bulkGetResult struct {
	ID   string `json:"id"`
	Docs []struct {
		OK      json.RawMessage `json:"ok"`
		Missing string          `json:"missing"`
		// Error is an object in CouchDB, a string in pouchdb-server.
		Error json.RawMessage `json:"error"`
	} `json:"docs"`
}

// parseBulkGet decodes a _bulk_get reply, {"results": [...]}, one result
// at a time, each at most resultMax bytes, and calls each with the
// documents it returned, in order; an error of each stops it and is
// returned as it is. Error and missing entries are dropped: the caller
// matches the documents against what it asked for by id and revision
// (never by position, since pouchdb-server groups results per id) and
// fetches the rest individually. A result over resultMax fails with
// errPartTooLarge; read errors are wrapped.
func parseBulkGet(r io.Reader, resultMax int64, each func(*doc) error) error {
	pr := &partReader{r: r, max: resultMax}
	dec := json.NewDecoder(pr)
	bad := func(err error) error { return fmt.Errorf("%w: _bulk_get: %w", errBadDoc, err) }
	if err := nextDelim(dec, '{'); err != nil {
		return bad(err)
	}
	for dec.More() {
		pr.reset()
		kt, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		if key, _ := kt.(string); key != "results" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return bad(err)
			}
			continue
		}
		if err := nextDelim(dec, '['); err != nil {
			return bad(err)
		}
		for dec.More() {
			pr.reset()
			var res bulkGetResult
			if err := dec.Decode(&res); err != nil {
				return bad(err)
			}
			for _, e := range res.Docs {
				if len(e.OK) == 0 || bytes.Equal(e.OK, []byte("null")) {
					continue
				}
				d, err := newDoc(e.OK)
				if err != nil {
					return err
				}
				if err := each(d); err != nil {
					return err
				}
			}
		}
		if err := nextDelim(dec, ']'); err != nil {
			return bad(err)
		}
	}
	if err := nextDelim(dec, '}'); err != nil {
		return bad(err)
	}
	return nil
}

// parseOpenRevs decodes a GET doc?open_revs=[...] reply: either a JSON array
// of {"ok": doc} / {"missing": rev} entries (what pouchdb-server always
// sends), or multipart/mixed whose parts are JSON documents, multipart/related
// documents with attachment bodies, or {"missing": rev} error parts (CouchDB).
// It returns the documents and the revisions reported missing.
func parseOpenRevs(contentType string, r io.Reader) ([]*doc, []string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err == nil && mt == "multipart/mixed" {
		if params["boundary"] == "" {
			return nil, nil, fmt.Errorf("%w: multipart/mixed without boundary", errBadDoc)
		}
		return parseOpenRevsMultipart(multipart.NewReader(r, params["boundary"]))
	}
	var entries []struct {
		OK      json.RawMessage `json:"ok"`
		Missing string          `json:"missing"`
	}
	if err := json.NewDecoder(r).Decode(&entries); err != nil {
		return nil, nil, fmt.Errorf("%w: open_revs: %w", errBadDoc, err)
	}
	var docs []*doc
	var missing []string
	for _, e := range entries {
		switch {
		case len(e.OK) > 0 && !bytes.Equal(e.OK, []byte("null")):
			d, err := newDoc(e.OK)
			if err != nil {
				return nil, nil, err
			}
			docs = append(docs, d)
		case e.Missing != "":
			missing = append(missing, e.Missing)
		}
	}
	return docs, missing, nil
}

func parseOpenRevsMultipart(mr *multipart.Reader) ([]*doc, []string, error) {
	var docs []*doc
	var missing []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return docs, missing, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: open_revs multipart: %w", errBadDoc, err)
		}
		mt, params, err := mime.ParseMediaType(part.Header.Get("Content-Type"))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: open_revs part: %v", errBadDoc, err)
		}
		switch {
		case mt == "multipart/related":
			if params["boundary"] == "" {
				return nil, nil, fmt.Errorf("%w: multipart/related without boundary", errBadDoc)
			}
			d, err := parseRelatedDoc(multipart.NewReader(part, params["boundary"]))
			if err != nil {
				return nil, nil, err
			}
			docs = append(docs, d)
		default:
			body, err := io.ReadAll(part)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: open_revs part: %w", errBadDoc, err)
			}
			if params["error"] == "true" {
				var e struct {
					Missing string `json:"missing"`
				}
				if err := json.Unmarshal(body, &e); err != nil {
					return nil, nil, fmt.Errorf("%w: open_revs error part: %v", errBadDoc, err)
				}
				if e.Missing != "" {
					missing = append(missing, e.Missing)
				}
				continue
			}
			d, err := newDoc(body)
			if err != nil {
				return nil, nil, err
			}
			docs = append(docs, d)
		}
	}
}

// parseRelatedDoc reads a multipart/related document: the JSON body, then
// one part per attachment marked "follows", matched by the part's filename
// or, without one, by the order of the _attachments object.
func parseRelatedDoc(mr *multipart.Reader) (*doc, error) {
	part, err := mr.NextPart()
	if err != nil {
		return nil, fmt.Errorf("%w: multipart/related: %w", errBadDoc, err)
	}
	body, err := io.ReadAll(part)
	if err != nil {
		return nil, fmt.Errorf("%w: multipart/related: %w", errBadDoc, err)
	}
	d, err := newDoc(body)
	if err != nil {
		return nil, err
	}
	var atts map[string]struct {
		Follows bool `json:"follows"`
	}
	var follows []string
	if d.hasAttachments() {
		var m struct {
			Atts json.RawMessage `json:"_attachments"`
		}
		_ = json.Unmarshal(body, &m)
		if err := json.Unmarshal(m.Atts, &atts); err != nil {
			return nil, fmt.Errorf("%w: _attachments: %v", errBadDoc, err)
		}
		for _, n := range d.AttNames {
			if atts[n].Follows {
				follows = append(follows, n)
			}
		}
	}
	d.Atts = map[string][]byte{}
	next := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: multipart/related: %w", errBadDoc, err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return nil, fmt.Errorf("%w: multipart/related: %w", errBadDoc, err)
		}
		name := p.FileName()
		if _, ok := atts[name]; name == "" || !ok {
			for next < len(follows) && d.Atts[follows[next]] != nil {
				next++
			}
			if next >= len(follows) {
				return nil, fmt.Errorf("%w: unexpected attachment part", errBadDoc)
			}
			name = follows[next]
		}
		d.Atts[name] = data
	}
	for _, n := range follows {
		if d.Atts[n] == nil {
			return nil, fmt.Errorf("%w: attachment %q announced but not sent", errBadDoc, n)
		}
	}
	return d, nil
}

// attachmentWire is an attachment entry as the engine rewrites it.
type attachmentWire map[string]json.RawMessage

// multipartDoc encodes d for PUT {target}/{id}?new_edits=false. When the
// document has attachment bodies (multipart parts or inline base64 data) it
// returns a multipart/related body whose JSON part marks them "follows";
// otherwise plain JSON. With decodeGzip, gzip-encoded attachment bodies are
// sent decoded (for peers that store parts as raw bytes), counted on d's
// lease: past DocMax with what the document already holds, the error
// wraps errDocMax.
func multipartDoc(ctx context.Context, d *doc, boundary string, decodeGzip bool) (contentType string, body []byte, err error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(d.Body, &fields); err != nil {
		return "", nil, fmt.Errorf("%w: %v", errBadDoc, err)
	}
	var atts map[string]attachmentWire
	if raw, ok := fields["_attachments"]; ok {
		if err := json.Unmarshal(raw, &atts); err != nil {
			return "", nil, fmt.Errorf("%w: _attachments: %v", errBadDoc, err)
		}
	}
	names := make([]string, 0, len(atts))
	for n := range atts {
		names = append(names, n)
	}
	sort.Strings(names)
	type bodyPart struct {
		name, ctype, encoding string
		data                  []byte
	}
	var parts []bodyPart
	for _, n := range names {
		a := atts[n]
		if isTrue(a["stub"]) {
			continue
		}
		var data []byte
		if b, ok := d.Atts[n]; ok {
			data = b
		} else if raw, ok := a["data"]; ok {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", nil, fmt.Errorf("%w: attachment %q data: %v", errBadDoc, n, err)
			}
			if data, err = base64.StdEncoding.DecodeString(s); err != nil {
				return "", nil, fmt.Errorf("%w: attachment %q data: %v", errBadDoc, n, err)
			}
		} else {
			return "", nil, fmt.Errorf("%w: attachment %q has neither data nor stub", errBadDoc, n)
		}
		var ctype, encoding string
		_ = json.Unmarshal(a["content_type"], &ctype)
		_ = json.Unmarshal(a["encoding"], &encoding)
		if encoding == "gzip" && decodeGzip {
			lease := d.lease
			if lease == nil {
				lease = &docLease{} // DocMax, no turn: a document without one holds no fetched bodies
			}
			plain, err := gunzip(ctx, data, lease)
			if errors.Is(err, errDocMax) || ctx.Err() != nil {
				return "", nil, fmt.Errorf("attachment %q, decompressed: %w", n, err)
			}
			if err != nil {
				return "", nil, fmt.Errorf("%w: attachment %q: %v", errBadDoc, n, err)
			}
			data, encoding = plain, ""
			delete(a, "encoding")
			delete(a, "encoded_length")
			delete(a, "digest")
		}
		delete(a, "data")
		a["follows"] = json.RawMessage("true")
		if encoding != "" {
			a["encoded_length"] = json.RawMessage(strconv.Itoa(len(data)))
		} else {
			a["length"] = json.RawMessage(strconv.Itoa(len(data)))
		}
		parts = append(parts, bodyPart{name: n, ctype: ctype, encoding: encoding, data: data})
	}
	if len(parts) == 0 {
		return "application/json", d.Body, nil
	}
	attsJSON, err := marshalOrdered(names, atts)
	if err != nil {
		return "", nil, err
	}
	fields["_attachments"] = attsJSON
	docJSON, err := json.Marshal(fields)
	if err != nil {
		return "", nil, err
	}
	size := len(docJSON) + 256
	for _, p := range parts {
		size += len(p.data) + len(p.name) + len(p.ctype) + 256
	}
	buf := bytes.NewBuffer(make([]byte, 0, size)) // one allocation, however large the document
	w := multipart.NewWriter(buf)
	if err := w.SetBoundary(boundary); err != nil {
		return "", nil, err
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "application/json")
	pw, err := w.CreatePart(h)
	if err != nil {
		return "", nil, err
	}
	pw.Write(docJSON)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": p.name}))
		if p.ctype != "" {
			h.Set("Content-Type", p.ctype)
		}
		h.Set("Content-Length", strconv.Itoa(len(p.data)))
		if p.encoding != "" {
			h.Set("Content-Encoding", p.encoding)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			return "", nil, err
		}
		pw.Write(p.data)
	}
	if err := w.Close(); err != nil {
		return "", nil, err
	}
	return `multipart/related; boundary="` + boundary + `"`, buf.Bytes(), nil
}

// marshalOrdered encodes the attachments object with keys in names order,
// which is also the order of the multipart parts.
func marshalOrdered(names []string, atts map[string]attachmentWire) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(n)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(map[string]json.RawMessage(atts[n]))
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func isTrue(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "true" }
