package frontend

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// readBody reads a request body of at most max bytes. A gzip-encoded body
// (Content-Encoding: gzip, which CouchDB clients such as kivik send) is
// decompressed, and the limit applies to both the compressed and the
// decompressed size.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *httpError) {
	if r.ContentLength > max {
		return nil, errTooLarge
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, max)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, badRequest("malformed gzip request body")
		}
		defer zr.Close()
		body = io.LimitReader(zr, max+1)
	default:
		return nil, newError(http.StatusUnsupportedMediaType, "bad_content_type", "unsupported Content-Encoding "+strconv.Quote(enc))
	}
	b, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errTooLarge
		}
		if errors.Is(err, errBodyTimeout) {
			return nil, newError(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
		}
		return nil, badRequest("could not read the request body")
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// isJSONType tells whether a Content-Type is application/json.
func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// checkObject checks, without building it, that b is one JSON object in
// valid UTF-8, nested at most maxDepth levels, with nothing after it.
func checkObject(b []byte, maxDepth int) *httpError {
	if len(bytes.TrimSpace(b)) == 0 {
		return badRequest("Request body must be a JSON object")
	}
	if !utf8.Valid(b) {
		return badRequest("invalid UTF-8 JSON")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	depth, values := 0, 0
	for {
		t, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return badRequest("invalid UTF-8 JSON")
		}
		if depth == 0 {
			if values++; values > 1 {
				return badRequest("invalid UTF-8 JSON")
			}
			if t != json.Delim('{') {
				return badRequest("Request body must be a JSON object")
			}
		}
		if delim, ok := t.(json.Delim); ok {
			switch delim {
			case '{', '[':
				depth++
				if depth > maxDepth {
					return badRequest(fmt.Sprintf("JSON nested deeper than %d levels", maxDepth))
				}
			case '}', ']':
				depth--
			}
		}
	}
}

// decodeObject parses b as one JSON object (numbers kept exact), refusing
// other values, trailing data and nesting deeper than maxDepth.
func decodeObject(b []byte, maxDepth int) (map[string]any, *httpError) {
	if he := checkObject(b, maxDepth); he != nil {
		return nil, he
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, badRequest("invalid UTF-8 JSON")
	}
	return m, nil
}

// writeJSON sends v with CouchDB's headers.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"unknown_error","reason":"response encoding failed"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "must-revalidate")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, he *httpError) {
	writeJSON(w, he.status, map[string]string{"error": he.err, "reason": he.reason})
}
