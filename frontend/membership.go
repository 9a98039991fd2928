package frontend

import (
	"net/http"
	"time"
)

// handleMembership answers GET /_membership in CouchDB's shape: the nodes
// alive (cluster.Store.Members), in all_nodes and cluster_nodes alike (an
// fdbrep cluster has no configured node list; nodes join by starting),
// plus "nodes" with each one's roles, version, start time, last heartbeat
// ("seen"), when it counts as dead without another ("expires") and, for a
// replication node, the jobs it runs ("running").
func (s *Server) handleMembership(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Cluster == nil {
		writeJSON(w, http.StatusOK, map[string]any{"all_nodes": []string{s.opts.NodeName}, "cluster_nodes": []string{s.opts.NodeName}})
		return
	}
	members, err := s.opts.Cluster.Store().Members(r.Context(), s.opts.Clock.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	names := make([]string, 0, len(members))
	nodes := make(map[string]any, len(members))
	for _, m := range members {
		names = append(names, m.Name)
		node := map[string]any{
			"roles": m.Roles, "version": m.Version,
			"started": time.UnixMilli(m.Started).UTC().Format(time.RFC3339),
			"seen":    time.UnixMilli(m.Seen).UTC().Format(time.RFC3339Nano),
			"expires": time.UnixMilli(m.Expires).UTC().Format(time.RFC3339Nano),
		}
		if m.Load != nil {
			node["running"] = m.Load.Running
		}
		nodes[m.Name] = node
	}
	writeJSON(w, http.StatusOK, map[string]any{"all_nodes": names, "cluster_nodes": names, "nodes": nodes})
}

// handleNode answers GET /_node/_local (and /_node/{this node's name}) with
// the node's name, as CouchDB does.
func (s *Server) handleNode(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) || !s.checkNode(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": s.opts.NodeName})
}
