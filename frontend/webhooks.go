package frontend

import (
	"net/http"
)

// handleWebhooks lists the caller's webhooks (GET /_scheduler/webhooks;
// ?user=NAME another user's, for server admins).
func (s *Server) handleWebhooks(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	resp, err := s.opts.Scheduler.Webhooks(r.Context(), userFrom(r).Viewer(), r.URL.Query().Get("user"))
	s.answer(w, r, resp, err)
}

// handleWebhook writes (PUT, 201 when new), reads (GET, with its
// deliveries) or removes (DELETE) one of the caller's webhooks
// (/_scheduler/webhooks/{id}; see control.Plane.PutWebhook); for GET and
// DELETE, ?user=NAME names another user's, for server admins.
func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.schedulerFor(w, r) {
		return
	}
	id, he := pathVar(r, "id")
	if he != nil {
		writeError(w, he)
		return
	}
	viewer := userFrom(r).Viewer()
	switch r.Method {
	case http.MethodPut:
		b, ok := s.readObject(w, r)
		if !ok {
			return
		}
		resp, created, err := s.opts.Scheduler.PutWebhook(r.Context(), viewer, id, b)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		writeJSON(w, status, resp)
	case http.MethodDelete:
		resp, err := s.opts.Scheduler.DeleteWebhook(r.Context(), viewer, r.URL.Query().Get("user"), id)
		s.answer(w, r, resp, err)
	default:
		resp, err := s.opts.Scheduler.Webhook(r.Context(), viewer, r.URL.Query().Get("user"), id)
		s.answer(w, r, resp, err)
	}
}
