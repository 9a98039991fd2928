package frontend

import (
	"mime"
	"net/http"
	"net/url"
)

// handleSession serves CouchDB's cookie authentication: POST logs in (JSON
// or form body) and sets AuthSession, GET describes the current user,
// DELETE clears the cookie.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		u := userFrom(r)
		ctx := map[string]any{"name": nil, "roles": []string{}}
		info := map[string]any{"authentication_handlers": s.auth.handlerNames()}
		if !u.Anonymous() {
			ctx["name"] = u.Name
			ctx["roles"] = append([]string{}, u.Roles...)
			info["authenticated"] = u.Method
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "userCtx": ctx, "info": info})
	case http.MethodDelete:
		http.SetCookie(w, &http.Cookie{Name: "AuthSession", Value: "", Path: "/", HttpOnly: true, MaxAge: -1})
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	case http.MethodPost:
		body, he := readBody(w, r, s.opts.MaxRequestSize)
		if he != nil {
			writeError(w, he)
			return
		}
		// field returns a field of the body and whether it is there.
		var field func(key string) (string, bool)
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch mt {
		case "application/json":
			m, he := decodeObject(body, s.opts.MaxJSONDepth)
			if he != nil {
				writeError(w, he)
				return
			}
			for _, k := range []string{"name", "username"} {
				if v, ok := m[k]; ok {
					if _, isStr := v.(string); !isStr {
						writeError(w, badRequest("`"+k+"` must be a string"))
						return
					}
				}
			}
			field = func(key string) (string, bool) {
				v, ok := m[key]
				str, _ := v.(string)
				return str, ok
			}
		case "application/x-www-form-urlencoded":
			v, err := url.ParseQuery(string(body))
			if err != nil {
				writeError(w, badRequest("malformed form body"))
				return
			}
			field = func(key string) (string, bool) { return v.Get(key), v.Has(key) }
		default:
			writeError(w, newError(http.StatusUnsupportedMediaType, "bad_content_type",
				"Content-Type must be application/json or application/x-www-form-urlencoded"))
			return
		}
		name, he := loginName(field)
		if he != nil {
			writeError(w, he)
			return
		}
		password, _ := field("password")
		acc, he := s.auth.login(name, password, clientAddr(r, s.opts.TrustedProxies))
		if he != nil {
			writeError(w, he)
			return
		}
		http.SetCookie(w, s.auth.makeCookie(acc, r))
		roles := append([]string{}, acc.roles...)
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "name": acc.name, "roles": roles})
	}
}

// loginName is the user name of a POST /_session body, as CouchDB 3.5
// reads it (couch_httpd_auth:extract_username): "name", or "username",
// which CouchDB's own tests and several clients send; when both are
// given they must agree.
func loginName(field func(key string) (string, bool)) (string, *httpError) {
	name, hasName := field("name")
	username, hasUsername := field("username")
	switch {
	case !hasName && !hasUsername:
		return "", badRequest("request body must contain a username")
	case !hasUsername:
		return name, nil
	case hasName && username != name:
		return "", badRequest("request body contains different usernames")
	}
	return username, nil
}
