package frontend

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWT authentication, CouchDB 3.5's jwt_authentication_handler: a request
// whose Authorization header is "Bearer <token>" is the user the token's
// "sub" claim names, with the roles of its roles claim ("_admin" makes a
// server admin), once its signature checks out with a key of [jwt_keys]
// and its claims pass [jwt_auth] required_claims. The user need not be
// an account of [admins] or [users]. A token that fails is refused with
// CouchDB's error (400 bad_request for a malformed token, a bad
// signature, an unknown kid or a missing claim; 401 unauthorized for an
// expired token, one not valid yet or without "sub"); it never falls
// back to the handlers after it.

// Defaults of JWT authentication ([jwt_auth]), CouchDB's.
const (
	// JWTRequiredClaimsDefault is [jwt_auth] required_claims' default.
	JWTRequiredClaimsDefault = "exp"
	// JWTRolesClaimNameDefault is [jwt_auth] roles_claim_name's default:
	// a top-level claim named so, dot included.
	JWTRolesClaimNameDefault = "_couchdb.roles"
	// JWTDefaultKID is the kid of a token that names none.
	JWTDefaultKID = "_default"
)

// Kinds of [jwt_keys] keys: a key is "<kind>:<kid>".
const (
	JWTKeyHMAC = "hmac" // base64 of the secret, for HS256, HS384, HS512
	JWTKeyRSA  = "rsa"  // PEM public key, for RS256, RS384, RS512
	JWTKeyEC   = "ec"   // PEM public key, for ES256, ES384, ES512
)

// jwtAlgorithms are the algorithms a token may be signed with, CouchDB's:
// never "none", and each checked with a key of its own kind.
var jwtAlgorithms = []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}

// jwtChecks are the names [jwt_auth] required_claims takes, CouchDB's:
// the claims exp, nbf, iat and iss ({iss, "issuer"}: with the value it
// must have), and the header parameters kid and typ (which must be
// "JWT"). alg and sig are accepted and always checked.
var jwtChecks = []string{"alg", "exp", "iat", "iss", "kid", "nbf", "sig", "typ"}

// JWTAuth configures JWT authentication ([jwt_auth], [jwt_keys]).
type JWTAuth struct {
	// Keys verify tokens: under "hmac:<kid>" a []byte, under "rsa:<kid>"
	// an *rsa.PublicKey, under "ec:<kid>" an *ecdsa.PublicKey (see
	// ParseJWTKey). A token's alg picks the kind, its kid header the key
	// (JWTDefaultKID without one).
	Keys map[string]any
	// Required are the checks a token must pass, of jwtChecks ([jwt_auth]
	// required_claims, parsed by ParseJWTRequiredClaims); nil requires
	// nothing. exp and nbf are checked whenever a token has them.
	Required []string
	// Issuer is the "iss" a token must have when Required holds "iss".
	Issuer string
	// RolesClaimName is the top-level claim holding the user's roles (a
	// list of strings, or one string of comma-separated roles); "" means
	// JWTRolesClaimNameDefault. A token without it has no roles.
	RolesClaimName string
	// RolesClaimPath, when set, replaces RolesClaimName: the path of the
	// roles claim, its members separated by "." ("\." is a dot within a
	// member's name). A token without it is refused (404 not_found, as
	// CouchDB).
	RolesClaimPath string
}

// jwtHandler authenticates Bearer tokens.
type jwtHandler struct {
	keys      map[string]any
	required  map[string]bool
	issuer    string
	rolesName string
	rolesPath []string // nil: rolesName
	parser    *jwt.Parser
}

func newJWTHandler(o JWTAuth) (*jwtHandler, error) {
	if len(o.Keys) == 0 {
		return nil, fmt.Errorf("%w: JWT authentication needs at least one key", ErrInvalidOptions)
	}
	for name, key := range o.Keys {
		kind, kid, _ := strings.Cut(name, ":")
		ok := kid != ""
		switch kind {
		case JWTKeyHMAC:
			b, isBytes := key.([]byte)
			ok = ok && isBytes && len(b) > 0
		case JWTKeyRSA:
			_, isRSA := key.(*rsa.PublicKey)
			ok = ok && isRSA
		case JWTKeyEC:
			_, isEC := key.(*ecdsa.PublicKey)
			ok = ok && isEC
		default:
			ok = false
		}
		if !ok {
			return nil, fmt.Errorf("%w: JWT key %q: want hmac:<kid> with a []byte, rsa:<kid> with an *rsa.PublicKey or ec:<kid> with an *ecdsa.PublicKey", ErrInvalidOptions, name)
		}
	}
	h := &jwtHandler{keys: o.Keys, required: map[string]bool{}, issuer: o.Issuer,
		rolesName: o.RolesClaimName, rolesPath: jwtClaimPath(o.RolesClaimPath)}
	if h.rolesName == "" {
		h.rolesName = JWTRolesClaimNameDefault
	}
	for _, c := range o.Required {
		if !slices.Contains(jwtChecks, c) {
			return nil, fmt.Errorf("%w: JWT required claim %q: want one of %s", ErrInvalidOptions, c, strings.Join(jwtChecks, ", "))
		}
		h.required[c] = true
	}
	if h.required["iss"] && o.Issuer == "" {
		return nil, fmt.Errorf("%w: JWT required claim iss without the issuer it must be", ErrInvalidOptions)
	}
	// The library checks the signature, with the algorithms allowed; the
	// claims are checked here, with CouchDB's rules and replies.
	h.parser = jwt.NewParser(jwt.WithValidMethods(jwtAlgorithms), jwt.WithoutClaimsValidation())
	return h, nil
}

// ParseJWTKey parses the value of the [jwt_keys] key name ("hmac:<kid>":
// the secret in base64; "rsa:<kid>", "ec:<kid>": a PEM public key,
// its newlines written as "\n" as CouchDB takes them) into what
// JWTAuth.Keys holds. Errors never hold the value.
func ParseJWTKey(name, value string) (any, error) {
	kind, kid, ok := strings.Cut(name, ":")
	if !ok || kid == "" {
		return nil, fmt.Errorf("%w: %q is not <kind>:<kid> (hmac:_default, rsa:<kid>, ec:<kid>)", ErrInvalidOptions, name)
	}
	pemText := []byte(strings.ReplaceAll(value, `\n`, "\n"))
	switch kind {
	case JWTKeyHMAC:
		b, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			b, err = base64.RawStdEncoding.DecodeString(value)
		}
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("%w: %s: the HMAC secret must be given in base64", ErrInvalidOptions, name)
		}
		return b, nil
	case JWTKeyRSA:
		k, err := jwt.ParseRSAPublicKeyFromPEM(pemText)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: not an RSA public key in PEM (-----BEGIN PUBLIC KEY-----\\n…): %v", ErrInvalidOptions, name, err)
		}
		return k, nil
	case JWTKeyEC:
		k, err := jwt.ParseECPublicKeyFromPEM(pemText)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: not an EC public key in PEM (-----BEGIN PUBLIC KEY-----\\n…): %v", ErrInvalidOptions, name, err)
		}
		return k, nil
	}
	return nil, fmt.Errorf("%w: %s: the kind of key must be %s, %s or %s", ErrInvalidOptions, name, JWTKeyHMAC, JWTKeyRSA, JWTKeyEC)
}

// jwtRequiredClaim is one item of [jwt_auth] required_claims: a name, or
// {name, "value"}.
var jwtRequiredClaim = regexp.MustCompile(`^\s*(?:([a-z]+)|\{\s*([a-z]+)\s*,\s*"([^"]+)"\s*\})\s*(?:,|$)`)

// ParseJWTRequiredClaims parses [jwt_auth] required_claims in CouchDB's
// syntax (exp, nbf, {iss, "issuer"}): the checks and the issuer. Every
// name must be one of CouchDB's checks, iss with the issuer it must be
// and no other with a value.
func ParseJWTRequiredClaims(s string) (required []string, issuer string, err error) {
	for rest := strings.TrimSpace(s); rest != ""; {
		m := jwtRequiredClaim.FindStringSubmatch(rest)
		if m == nil {
			return nil, "", fmt.Errorf("%w: %q: want names and {name, \"value\"} pairs separated by commas", ErrInvalidOptions, rest)
		}
		rest = strings.TrimSpace(rest[len(m[0]):])
		name, value := m[1]+m[2], m[3]
		switch {
		case !slices.Contains(jwtChecks, name):
			return nil, "", fmt.Errorf("%w: %q is not a claim fdbrep checks (%s)", ErrInvalidOptions, name, strings.Join(jwtChecks, ", "))
		case name == "iss" && value == "":
			return nil, "", fmt.Errorf("%w: iss needs the issuer tokens must have: {iss, \"issuer\"}", ErrInvalidOptions)
		case name != "iss" && value != "":
			return nil, "", fmt.Errorf("%w: {%s, %q}: only iss takes a value", ErrInvalidOptions, name, value)
		}
		required = append(required, name)
		if value != "" {
			issuer = value
		}
	}
	return required, issuer, nil
}

// jwtClaimPath splits [jwt_auth] roles_claim_path at its dots, "\." being
// a dot within a member; nil for "".
func jwtClaimPath(path string) []string {
	if path == "" {
		return nil
	}
	const escaped = "\x00"
	parts := strings.Split(strings.ReplaceAll(path, `\.`, escaped), ".")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, escaped, ".")
	}
	return parts
}

// CouchDB's replies to tokens it refuses.
var (
	errJWTMalformed = badRequest("Malformed token")
	errJWTNoSub     = newError(http.StatusUnauthorized, "unauthorized", "Token missing sub claim.")
)

// authenticate returns the user of a Bearer token, nil without one.
func (h *jwtHandler) authenticate(r *http.Request, now time.Time) (*User, *httpError) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		return nil, nil
	}
	claims := jwt.MapClaims{}
	tok, err := h.parser.ParseWithClaims(strings.TrimSpace(token), claims, h.key)
	if err != nil {
		return nil, h.refusal(tok, err)
	}
	if he := h.checkClaims(claims, now); he != nil {
		return nil, he
	}
	roles, he := h.roles(claims)
	if he != nil {
		return nil, he
	}
	sub, ok := claims["sub"]
	if !ok || sub == "" {
		return nil, errJWTNoSub
	}
	name, ok := sub.(string)
	if !ok {
		return nil, errJWTMalformed
	}
	return &User{Name: name, Roles: roles, Method: AuthJWT}, nil
}

// key picks the key of a token whose alg is one of jwtAlgorithms (the
// parser checked it), after its header's checks: of its kind (an HS
// token is never checked with a public key, nor an RS token with an
// HMAC secret) and its kid.
func (h *jwtHandler) key(tok *jwt.Token) (any, error) {
	if h.required["typ"] {
		switch typ, ok := tok.Header["typ"]; {
		case !ok:
			return nil, badRequest("Missing typ header parameter")
		case typ != "JWT":
			return nil, badRequest("Invalid typ header parameter")
		}
	}
	kid := JWTDefaultKID
	switch v := tok.Header["kid"].(type) {
	case nil:
		if h.required["kid"] {
			return nil, badRequest("Missing kid claim")
		}
	case string:
		kid = v
	default:
		return nil, errJWTMalformed
	}
	kind := map[string]string{"HS": JWTKeyHMAC, "RS": JWTKeyRSA, "ES": JWTKeyEC}[tok.Method.Alg()[:2]]
	key, ok := h.keys[kind+":"+kid]
	if !ok {
		return nil, badRequest("Unknown kid")
	}
	return key, nil
}

// refusal is CouchDB's reply to a token the parser refused.
func (h *jwtHandler) refusal(tok *jwt.Token, err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	if tok == nil || errors.Is(err, jwt.ErrTokenMalformed) {
		return errJWTMalformed
	}
	alg, ok := tok.Header["alg"]
	switch {
	case !ok:
		return badRequest("Missing alg header parameter")
	case !slices.Contains(jwtAlgorithms, fmt.Sprint(alg)):
		return badRequest("Invalid alg header parameter")
	case strings.HasPrefix(fmt.Sprint(alg), "HS"):
		return badRequest("Bad HMAC")
	}
	return badRequest("Bad signature")
}

// checkClaims checks a verified token's claims in CouchDB's order: iss,
// iat, nbf, exp. exp and nbf are checked whenever present (CouchDB
// checks only those of required_claims: docs/COMPAT.md).
func (h *jwtHandler) checkClaims(claims jwt.MapClaims, now time.Time) *httpError {
	if h.required["iss"] {
		switch iss, ok := claims["iss"]; {
		case !ok:
			return badRequest("Missing iss claim")
		case iss != h.issuer:
			return badRequest("Invalid iss claim")
		}
	}
	if h.required["iat"] {
		switch iat, ok := claims["iat"]; {
		case !ok:
			return badRequest("Missing iat claim")
		case !isInteger(iat):
			return badRequest("Invalid iat claim")
		}
	}
	sec := float64(now.Unix())
	for _, c := range []struct {
		name string
		ok   func(t float64) bool
		fail string
	}{
		{"nbf", func(t float64) bool { return t < sec }, "nbf not in past"},
		{"exp", func(t float64) bool { return t > sec }, "exp not in future"},
	} {
		v, ok := claims[c.name]
		if !ok {
			if h.required[c.name] {
				return badRequest("Missing " + c.name + " claim")
			}
			continue
		}
		t, isNum := v.(float64)
		if !isNum {
			return badRequest("Invalid " + c.name + " claim")
		}
		if !c.ok(t) {
			return newError(http.StatusUnauthorized, "unauthorized", c.fail)
		}
	}
	return nil
}

func isInteger(v any) bool {
	f, ok := v.(float64)
	return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
}

// roles are the roles of a verified token: its roles claim, a list of
// strings or one string of comma-separated roles.
func (h *jwtHandler) roles(claims jwt.MapClaims) ([]string, *httpError) {
	var v any = map[string]any(claims)
	if h.rolesPath == nil {
		var ok bool
		if v, ok = claims[h.rolesName]; !ok {
			return []string{}, nil
		}
	}
	for _, member := range h.rolesPath {
		obj, isObj := v.(map[string]any)
		if !isObj {
			return nil, notFound("json_mismatch")
		}
		var ok bool
		if v, ok = obj[member]; !ok {
			return nil, notFound("missing json key: " + member)
		}
	}
	switch v := v.(type) {
	case string:
		return splitRoles(v), nil
	case []any:
		roles := make([]string, 0, len(v))
		for _, r := range v {
			s, isStr := r.(string)
			if !isStr {
				return nil, errJWTMalformed
			}
			roles = append(roles, s)
		}
		return roles, nil
	}
	return nil, errJWTMalformed
}

// splitRoles splits a comma-separated list of roles, dropping blanks.
func splitRoles(s string) []string {
	roles := []string{}
	for _, r := range strings.Split(s, ",") {
		if r = strings.TrimSpace(r); r != "" {
			roles = append(roles, r)
		}
	}
	return roles
}
