package frontend

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fdbrep/fdbrep/pkg/config"
)

// OptionsFromConfig fills the configurable Options from cfg ([chttpd],
// [chttpd_auth], [chttpd_auth_lockout], [jwt_auth], [jwt_keys], [admins], [users], [user_roles],
// [log] requests, [node] name) and hashes plaintext passwords; it returns the names of accounts
// whose password was plaintext, to warn about. DB, Logger, Version and the
// replicator wiring are the caller's.
func OptionsFromConfig(cfg *config.Config) (Options, []string, error) {
	accounts, plain, err := AccountsFromConfig(cfg)
	if err != nil {
		return Options{}, nil, err
	}
	o := Options{
		Accounts:         accounts,
		SessionTimeout:   keySessionTimeout.Get(cfg),
		SessionCookies:   !keyPersistentCookies.Get(cfg),
		SameSite:         sameSites[strings.ToLower(keySameSite.Get(cfg))],
		PasswordHashing:  PasswordHashing(cfg),
		AuthCacheSize:    int(keyAuthCacheSize.Get(cfg)),
		MaxRequestSize:   keyMaxRequestSize.Get(cfg),
		MaxDocumentSize:  int(keyMaxDocumentSize.Get(cfg)),
		MaxJSONDepth:     int(keyMaxJSONDepth.Get(cfg)),
		PublicAllDBs:     !keyAdminOnlyAllDBs.Get(cfg),
		RequireValidUser: keyRequireValidUser.Get(cfg),
		LogRequests:      cfg.Bool("log", "requests"),
		NodeName:         cfg.NodeName(),
		Limits:           LimitsFromConfig(cfg),
		Lockout: Lockout{Mode: keyLockoutMode.Get(cfg), Threshold: int(keyLockoutThreshold.Get(cfg)),
			MaxLifetime: keyLockoutMaxLifetime.Get(cfg), MaxObjects: int(keyLockoutMaxObjects.Get(cfg))},
	}
	auth, err := authFromConfig(cfg)
	if err != nil {
		return Options{}, nil, err
	}
	o.AuthHandlers, o.JWT, o.Proxy = auth.handlers, auth.jwt, auth.proxy
	if o.TrustedProxies, err = TrustedProxiesFromConfig(cfg); err != nil {
		return Options{}, nil, err
	}
	if o.UtilsDir, err = utilsDirFromConfig(cfg); err != nil {
		return Options{}, nil, err
	}
	if o.AuthCacheSize == 0 {
		o.AuthCacheSize = -1 // 0 in the file means "no cache"
	}
	if s := keySecret.Get(cfg); s != "" {
		o.Secret = []byte(s)
	}
	return o, plain, nil
}

// utilsDirFromConfig is [chttpd] utils_dir, checked, or UtilsDirDefault
// (made absolute) when that is empty and the directory holds a dashboard.
func utilsDirFromConfig(cfg *config.Config) (string, error) {
	dir := keyUtilsDir.Get(cfg)
	if dir == "" {
		if checkUtilsDir(UtilsDirDefault) != nil {
			return "", nil
		}
		return filepath.Abs(UtilsDirDefault)
	}
	if err := checkUtilsDir(dir); err != nil {
		return "", fmt.Errorf("config: [chttpd] utils_dir %q is not Fauxton's dist/release directory (no index.html in it)", dir)
	}
	return dir, nil
}

// AccountsFromConfig builds the accounts of [admins], [users] and
// [user_roles], hashing plaintext passwords (see NewAccounts); it returns
// the names of the accounts whose password was plaintext.
func AccountsFromConfig(cfg *config.Config) (*Accounts, []string, error) {
	roles := map[string][]string{}
	for name := range cfg.Users() {
		roles[name] = cfg.UserRoles(name)
	}
	return NewAccounts(cfg.Admins(), cfg.Users(), roles, PasswordHashing(cfg))
}

// PasswordHashing is how cfg hashes plaintext passwords ([chttpd_auth]
// pbkdf2_prf and iterations).
func PasswordHashing(cfg *config.Config) AccountsOptions {
	return AccountsOptions{PRF: keyHashPRF.Get(cfg), Iterations: int(keyHashIterations.Get(cfg))}
}

// HashConfigPasswords returns cfg with the plaintext passwords of [admins]
// and [users] replaced by hashes ([chttpd_auth] pbkdf2_prf and
// iterations), and the names of those accounts. A node hashes its
// start-up configuration once, so that the configurations merged at run
// time hold the same hashes (an account's cookies stay valid) and no
// password is hashed again.
func HashConfigPasswords(cfg *config.Config) (*config.Config, []string, error) {
	layer := config.Layer{Values: map[string]map[string]string{}}
	hashing := PasswordHashing(cfg)
	var plain []string
	for _, section := range []string{config.SectionAdmins, config.SectionUsers} {
		for name, stored := range cfg.Section(section) {
			if isHashed(stored) {
				continue
			}
			h, err := HashPassword(stored, hashing.PRF, hashing.Iterations)
			if err != nil {
				return nil, nil, err
			}
			if layer.Values[section] == nil {
				layer.Values[section] = map[string]string{}
			}
			layer.Values[section][name] = h
			plain = append(plain, name)
		}
	}
	if len(plain) == 0 {
		return cfg, nil, nil
	}
	hashed, err := cfg.With(layer)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(plain)
	return hashed, plain, nil
}

// LimitsFromConfig reads the listener limits from [chttpd].
func LimitsFromConfig(cfg *config.Config) Limits {
	l := Limits{
		MaxConnections:    int(keyMaxConnections.Get(cfg)),
		HeaderTimeout:     keyHeaderTimeout.Get(cfg),
		BodyTimeout:       keyBodyTimeout.Get(cfg),
		IdleTimeout:       keyIdleTimeout.Get(cfg),
		MaxClientRequests: int(keyMaxClientRequests.Get(cfg)),
		MaxHeaderBytes:    int(keyMaxHeaderBytes.Get(cfg)),
	}
	if l.MaxClientRequests == 0 {
		l.MaxClientRequests = -1 // 0 in the file means "no cap"
	}
	return l
}
