package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/fdbrep/fdbrep/cluster"
	"github.com/fdbrep/fdbrep/pkg/config"
)

// The runtime configuration API, CouchDB's /_node/{node}/_config, on the
// layers of package cluster: {node} is _local (the node answering), a
// node's name (GET /_membership lists them), or _cluster (the layer every
// node applies). GET shows the configuration in effect on the node (for
// _cluster, the cluster layer's own settings), with secrets replaced by
// cluster.Redacted; PUT and DELETE change the node's (or the cluster's)
// layer in the store, where every node watching it picks the change up,
// and answer the value in effect before. Only keys that can change at run
// time are accepted (config.CheckRuntimeKey), and only for nodes that run
// a role the key applies to.

// SetAccounts replaces the accounts that can log in (a change of [admins]
// or [users] at run time). Sessions of accounts whose password hash
// changed or that are gone stop being valid.
func (s *Server) SetAccounts(a *Accounts) { s.auth.accounts.Store(a) }

// errNoValue is a DELETE's edit finding no value in the layer it names.
var errNoValue = errors.New("frontend: no runtime value")

// configTarget is what a /_node/{node}/_config request names.
type configTarget struct {
	scope string         // cluster.ScopeCluster or a node name
	local bool           // the node answering
	base  *config.Config // the node's start-up configuration; for _cluster, the answering node's
}

func (s *Server) configTarget(r *http.Request) (configTarget, error) {
	node, he := pathVar(r, "node")
	if he != nil {
		return configTarget{}, he
	}
	cn := s.opts.Cluster
	switch {
	case node == "_local" || node == cn.Name():
		return configTarget{scope: cn.Name(), local: true, base: cn.Base()}, nil
	case node == cluster.ScopeCluster:
		return configTarget{scope: cluster.ScopeCluster, base: cn.Base()}, nil
	}
	base, ok, err := cn.Store().Published(r.Context(), node)
	if err != nil {
		return configTarget{}, err
	}
	if !ok {
		return configTarget{}, notFound("no such node: " + node)
	}
	return configTarget{scope: node, base: base}, nil
}

// handleConfig serves GET /_node/{node}/_config[/{section}[/{key}]] and
// PUT and DELETE of a key.
func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r) {
		return
	}
	if s.opts.Cluster == nil {
		writeError(w, newError(http.StatusServiceUnavailable, "service_unavailable", "this node has no runtime configuration"))
		return
	}
	t, err := s.configTarget(r)
	if err != nil {
		s.reply(w, r, err)
		return
	}
	vars := mux.Vars(r)
	section, he := pathVar(r, "section")
	if he != nil {
		writeError(w, he)
		return
	}
	key, he := pathVar(r, "key")
	if he != nil {
		writeError(w, he)
		return
	}
	section, key = config.Normalize(section, key)
	switch {
	case r.Method == http.MethodPut:
		s.putConfig(w, r, t, section, key)
		return
	case r.Method == http.MethodDelete:
		s.changeConfig(w, r, t, section, key, nil)
		return
	}
	values, _, err := s.configValues(r.Context(), t)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, hasSection := vars["section"]
	_, hasKey := vars["key"]
	switch {
	case hasKey:
		v, ok := values[section][key]
		if !ok {
			writeError(w, notFound("unknown_config_value"))
			return
		}
		writeJSON(w, http.StatusOK, v)
	case hasSection:
		writeJSON(w, http.StatusOK, cmpOr(values[section], map[string]string{}))
	default:
		writeJSON(w, http.StatusOK, values)
	}
}

func cmpOr(m, def map[string]string) map[string]string {
	if m == nil {
		return def
	}
	return m
}

// configValues returns what GET shows of t, secrets redacted, and the
// configuration in effect on t (nil for _cluster).
func (s *Server) configValues(ctx context.Context, t configTarget) (map[string]map[string]string, *config.Config, error) {
	cn := s.opts.Cluster
	l, err := cn.Store().Layers(ctx, t.scope)
	if err != nil {
		return nil, nil, err
	}
	if t.scope == cluster.ScopeCluster {
		return redact(l.Cluster), nil, nil
	}
	eff, err := l.Merge(t.base, t.scope)
	if err != nil {
		// Not valid on the node: it keeps what it had.
		eff = t.base
		if t.local {
			eff = cn.Config()
		}
	}
	values := redact(eff.All())
	// [couchdb] uuid left to the store shows the server UUID in effect,
	// as CouchDB's does.
	if sec, ok := values["couchdb"]; ok && sec["uuid"] == "" && s.opts.UUID != "" {
		sec["uuid"] = s.opts.UUID
	}
	return values, eff, nil
}

func redact(values map[string]map[string]string) map[string]map[string]string {
	out := make(map[string]map[string]string, len(values))
	for sec, kvs := range values {
		out[sec] = make(map[string]string, len(kvs))
		for k, v := range kvs {
			out[sec][k] = redactValue(sec, k, v)
		}
	}
	return out
}

func redactValue(section, key, v string) string {
	if v != "" && config.IsSecret(section, key) {
		return cluster.Redacted
	}
	return v
}

// putConfig checks a PUT's value (one JSON string) and stores it.
func (s *Server) putConfig(w http.ResponseWriter, r *http.Request, t configTarget, section, key string) {
	body, he := readBody(w, r, s.opts.MaxRequestSize)
	if he != nil {
		writeError(w, he)
		return
	}
	var value string
	if err := json.Unmarshal(body, &value); err != nil {
		writeError(w, badRequest("a JSON string expected"))
		return
	}
	value = strings.TrimSpace(value)
	if config.IsSecret(section, key) && value == cluster.Redacted {
		writeError(w, badRequest(fmt.Sprintf("%q is what GET shows in place of a secret, not a value", cluster.Redacted)))
		return
	}
	if _, he := s.checkRuntimeKey(t, section, key); he != nil {
		writeError(w, he)
		return
	}
	if err := config.CheckValue(section, key, value, "_config ("+t.scope+")"); err != nil {
		writeError(w, configError(err)) // in any layer, even where another hides it
		return
	}
	if (section == config.SectionAdmins || section == config.SectionUsers) && value != "" && !isHashed(value) {
		// Hashed here, once, as CouchDB does: only the hash is stored.
		h := PasswordHashing(s.opts.Cluster.Config())
		hashed, err := HashPassword(value, h.PRF, h.Iterations)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		value = hashed
	} else if section == config.SectionAdmins || section == config.SectionUsers {
		if _, err := parseHash(value); value != "" && err != nil {
			writeError(w, badRequest(fmt.Sprintf("[%s] %s: malformed password hash", section, key)))
			return
		}
	}
	s.changeConfig(w, r, t, section, key, &value)
}

// checkRuntimeKey refuses keys that cannot change at run time, and keys
// for roles the target node does not run.
func (s *Server) checkRuntimeKey(t configTarget, section, key string) (config.Apply, *httpError) {
	apply, err := config.CheckRuntimeKey(section, key)
	if err != nil {
		return apply, configError(err)
	}
	if t.scope == cluster.ScopeCluster {
		return apply, nil
	}
	roles := t.base.Roles()
	if !slices.ContainsFunc(apply.Roles(), func(role string) bool { return slices.Contains(roles, role) }) {
		return apply, badRequest(fmt.Sprintf("[%s] %s applies to %s nodes and %s runs %s: set it on one of those (GET /_membership lists them), or for every node with /_node/_cluster/_config/%s/%s",
			section, key, strings.Join(apply.Roles(), " and "), t.scope, strings.Join(roles, " and "), section, key))
	}
	return apply, nil
}

// changeConfig sets (value != nil) or deletes section/key in t's layer
// and answers the value in effect before.
func (s *Server) changeConfig(w http.ResponseWriter, r *http.Request, t configTarget, section, key string, value *string) {
	if value == nil {
		if _, he := s.checkRuntimeKey(t, section, key); he != nil {
			writeError(w, he)
			return
		}
	}
	cn := s.opts.Cluster
	node := t.scope
	if node == cluster.ScopeCluster {
		node = cn.Name() // checked against the answering node's configuration
	}
	// The edit may run again after a commit that reported
	// commit_unknown_result: when the layer then already holds this
	// request's change, the answer is what the earlier attempt saw.
	var old, seenOld string
	seen := false
	_, err := cn.Store().Update(r.Context(), node, func(l *cluster.Layers) error {
		layer := &l.Node
		old = ""
		if t.scope == cluster.ScopeCluster {
			layer = &l.Cluster
			old, _ = l.Cluster.Get(section, key)
		} else if before, err := l.Merge(t.base, node); err == nil {
			old, _ = before.Get(section, key)
		}
		cur, set := layer.Get(section, key)
		retried := seen && (value == nil && !set || value != nil && set && cur == *value)
		if retried {
			old = seenOld
		} else {
			seenOld, seen = old, true
		}
		if value == nil {
			if !set {
				if retried {
					return nil // an earlier attempt deleted it
				}
				return errNoValue
			}
			layer.Delete(section, key)
		} else {
			if other, ok := config.Alias(section, key); ok {
				layer.Delete(section, other)
			}
			layer.Set(section, key, *value)
		}
		_, err := cn.Merge(t.base, *l)
		return err
	})
	if errors.Is(err, errNoValue) {
		s.reply(w, r, s.noRuntimeValue(r.Context(), t, section, key))
		return
	}
	if err != nil {
		s.reply(w, r, err)
		return
	}
	if t.local || t.scope == cluster.ScopeCluster {
		// In effect here before the reply; other nodes follow their watch.
		if err := cn.Sync(r.Context()); err != nil {
			s.log.Warn().Err(err).Msg("runtime configuration changed; applying it here failed, the node's watch retries")
		}
	}
	writeJSON(w, http.StatusOK, redactValue(section, key, old))
}

// noRuntimeValue explains a DELETE of a value that no _config PUT set in
// the layer it names.
func (s *Server) noRuntimeValue(ctx context.Context, t configTarget, section, key string) error {
	_, eff, err := s.configValues(ctx, t)
	if err != nil {
		return err
	}
	if eff != nil {
		if _, ok := eff.Get(section, key); ok {
			if src := eff.Source(section, key); src != "default" {
				return forbidden(fmt.Sprintf("[%s] %s is set by %s, not by this node's _config: change it there", section, key, src))
			}
		}
	}
	return notFound("unknown_config_value")
}

// configError maps configuration errors to CouchDB replies; nil for
// others.
func configError(err error) *httpError {
	reason := func(sentinel error) string {
		return strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
	}
	switch {
	case errors.Is(err, config.ErrRestartOnly):
		return forbidden(reason(config.ErrRestartOnly))
	case errors.Is(err, config.ErrNotUsed):
		return forbidden(reason(config.ErrNotUsed))
	case errors.Is(err, config.ErrInvalidValue):
		return badRequest(reason(config.ErrInvalidValue))
	case errors.Is(err, config.ErrUnknownKey):
		return badRequest(reason(config.ErrUnknownKey))
	case errors.Is(err, cluster.ErrTooMany), errors.Is(err, cluster.ErrTooLarge):
		return badRequest(strings.TrimPrefix(err.Error(), "cluster: "))
	}
	return nil
}

// reply answers err: a configuration error, a reply of its own, or a
// failure (500, logged).
func (s *Server) reply(w http.ResponseWriter, r *http.Request, err error) {
	if he := configError(err); he != nil {
		writeError(w, he)
		return
	}
	s.fail(w, r, err)
}
