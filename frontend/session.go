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
		info := map[string]any{"authentication_handlers": []string{"cookie", "default"}}
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
		var name, password string
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch mt {
		case "application/json":
			m, he := decodeObject(body, s.opts.MaxJSONDepth)
			if he != nil {
				writeError(w, he)
				return
			}
			name, _ = m["name"].(string)
			password, _ = m["password"].(string)
		case "application/x-www-form-urlencoded":
			v, err := url.ParseQuery(string(body))
			if err != nil {
				writeError(w, badRequest("malformed form body"))
				return
			}
			name, password = v.Get("name"), v.Get("password")
		default:
			writeError(w, newError(http.StatusUnsupportedMediaType, "bad_content_type",
				"Content-Type must be application/json or application/x-www-form-urlencoded"))
			return
		}
		acc, he := s.auth.login(name, password, clientAddr(r))
		if he != nil {
			writeError(w, he)
			return
		}
		http.SetCookie(w, s.auth.makeCookie(acc, r))
		roles := append([]string{}, acc.roles...)
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "name": acc.name, "roles": roles})
	}
}
