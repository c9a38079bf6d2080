package config

import (
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
)

// User is one entry of the users list: who may connect, with which
// password, to run which commands on which limiters.
type User struct {
	// (Required) The name given to AUTH and HELLO ... AUTH. Printable
	// ASCII without spaces. "default" is the user of require_pass, so it
	// cannot be listed when require_pass is set.
	Name string `mapstructure:"name"`

	// (Required: one of the two) The password, in clear or as the hex
	// SHA-256 of it (what `printf %s pw | sha256sum` prints).
	Password       string `mapstructure:"password"`
	PasswordSHA256 string `mapstructure:"password_sha256"`

	// (Required) Command categories: "acquire" (RL.ACQUIRE, RL.AVAILABLE,
	// RL.GETRATE, CL.THROTTLE, GCRA, RL.THROTTLE, RL.LEASE, RL.RETURN,
	// RL.RENEW, RL.CHARGE), "redis" (every command passthrough forwards)
	// and/or "admin" (every command, "redis" included). Connection
	// commands (PING, HELLO, CLIENT SETNAME, ...) are always allowed.
	Commands []string `mapstructure:"commands"`

	// (Optional) Glob patterns of the limiter names this user may touch
	// ('*' any run of characters, '?' one character). Defaults to all.
	Limiters []string `mapstructure:"limiters"`

	// (Optional) Glob patterns the keys of this user's forwarded commands
	// (passthrough) must match. Defaults to all.
	Keys []string `mapstructure:"keys"`

	// (Optional) The Redis ACL user this user's forwarded commands run as
	// on the backend (passthrough). A user with keys: may run scripts
	// (EVAL*, FCALL*, FUNCTION, SCRIPT LOAD) only with one: what a script
	// touches is checked by Redis, so that ACL user must have the same key
	// patterns (ACL SETUSER <name> on ><password> ~app:* +@all -@admin).
	// Defaults to none: the backend URL's user.
	BackendUser *BackendUser `mapstructure:"backend_user"`
}

// BackendUser is a Redis ACL user on the passthrough backend.
type BackendUser struct {
	// (Required) The ACL user's name.
	Name string `mapstructure:"name"`
	// (Optional) Its password. Defaults to "" (an ACL user with nopass).
	Password string `mapstructure:"password"`
}

// Command categories of User.Commands.
const (
	CategoryAcquire = "acquire"
	CategoryAdmin   = "admin"
	CategoryRedis   = "redis"
)

// TLS reports whether clients are served over TLS too.
func (c Config) TLS() bool { return c.TLSListen != "" }

// checkFrontDoor checks the keys of what clients see: TLS, users and the
// limits on connections and requests.
func (c Config) checkFrontDoor() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: "+format, args...))
	}
	if c.TLSListen != "" {
		if err := checkAddr(c.TLSListen); err != nil {
			bad("tls_listen must be empty or a host:port address (got %q): %v", c.TLSListen, err)
		} else if c.TLSListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			bad("tls_listen must differ from listen (both %q)", c.Listen)
		}
		if c.TLSCertFile == "" || c.TLSKeyFile == "" {
			bad("tls_listen needs tls_cert_file and tls_key_file")
		}
	} else if c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSClientCAFile != "" {
		bad("tls_cert_file, tls_key_file and tls_client_ca_file need tls_listen (the address of the TLS listener)")
	}
	for _, f := range []struct{ key, path string }{
		{"tls_cert_file", c.TLSCertFile}, {"tls_key_file", c.TLSKeyFile}, {"tls_client_ca_file", c.TLSClientCAFile},
	} {
		if f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				bad("%s: %v", f.key, err)
			}
		}
	}
	if c.MaxClients <= 0 {
		bad("max_clients must be > 0 (got %d)", c.MaxClients)
	}
	if c.Timeout < 0 {
		bad("timeout must be >= 0 (got %q)", c.Timeout.String())
	}
	if c.MaxRequestBytes < 16384 || c.MaxRequestBytes > 512<<20 {
		bad("max_request_bytes must be between 16384 and 536870912 (got %d)", c.MaxRequestBytes)
	}
	if c.MaxNameLength < 1 || c.MaxNameLength > 65536 {
		bad("max_name_length must be between 1 and 65536 (got %d)", c.MaxNameLength)
	}
	seen := map[string]int{}
	for i, u := range c.Users {
		key := fmt.Sprintf("users[%d]", i)
		if u.Name != "" {
			key = fmt.Sprintf("users[%d] (%s)", i, u.Name)
		}
		switch {
		case u.Name == "":
			bad("%s: name is missing", key)
		case strings.ContainsFunc(u.Name, func(r rune) bool { return r <= ' ' || r > '~' }):
			bad("%s: name must be printable ASCII without spaces", key)
		case u.Name == "default" && c.RequirePass != "":
			bad("%s: the user default is require_pass's: set one of them", key)
		}
		if j, dup := seen[u.Name]; dup && u.Name != "" {
			bad("%s: duplicate of users[%d]", key, j)
		}
		seen[u.Name] = i
		switch {
		case (u.Password == "") == (u.PasswordSHA256 == ""):
			bad("%s: set exactly one of password and password_sha256", key)
		case u.PasswordSHA256 != "":
			if b, err := hex.DecodeString(u.PasswordSHA256); err != nil || len(b) != 32 {
				bad("%s: password_sha256 must be 64 hex digits (the SHA-256 of the password)", key)
			}
		}
		if len(u.Commands) == 0 {
			bad("%s: commands must list %s, %s and/or %s", key, CategoryAcquire, CategoryRedis, CategoryAdmin)
		}
		for _, cat := range u.Commands {
			if cat != CategoryAcquire && cat != CategoryAdmin && cat != CategoryRedis {
				bad("%s: commands: unknown category %q (use %s, %s or %s)", key, cat, CategoryAcquire, CategoryRedis, CategoryAdmin)
			}
		}
		for _, p := range u.Limiters {
			if p == "" {
				bad("%s: limiters: an empty pattern matches no limiter", key)
			}
		}
		for _, p := range u.Keys {
			if p == "" {
				bad("%s: keys: an empty pattern matches no key", key)
			}
		}
		if u.BackendUser != nil && u.BackendUser.Name == "" {
			bad("%s: backend_user: name is required", key)
		}
	}
	return errs
}

// Changed returns the keys whose values differ between old and new, in
// field order.
func Changed(old, new Config) []string {
	var changed []string
	a, b := reflect.ValueOf(old), reflect.ValueOf(new)
	for i, key := range keys() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			changed = append(changed, key)
		}
	}
	return changed
}

// fileOnly are the keys set in the config file only (no flag or
// environment variable): structured values (users, policies), and reload_may_drop_auth,
// which a reload must find in the file it reads.
var fileOnly = []string{"users", "policies", "reload_may_drop_auth"}

// authKeys are the keys that decide who may connect and how.
var authKeys = []string{"require_pass", "users", "tls_listen", "tls_cert_file", "tls_key_file", "tls_client_ca_file"}

// AuthChanged returns the keys of authentication (require_pass, users,
// the TLS listener and its files) whose values differ between old and
// new, in field order.
func AuthChanged(old, new Config) []string {
	var out []string
	for _, key := range Changed(old, new) {
		if slices.Contains(authKeys, key) {
			out = append(out, key)
		}
	}
	return out
}

// DroppedAuth returns what new drops of old's authentication: a setting
// old has and new lacks, which lets in a client old would refuse (or
// locks out every admin) — require_pass, the users (all of them), a
// user's limiters or keys list (then it may touch every limiter or key)
// or backend_user (its scripts would run as the backend URL's user), tls_listen,
// tls_client_ca_file (client certificates required). An empty or
// half-written file drops these. A changed value (a new password, other
// users, a new certificate or CA file) is not a drop, nor is removing
// some users (it revokes them).
func DroppedAuth(old, new Config) []string {
	var out []string
	if old.RequirePass != "" && new.RequirePass == "" {
		out = append(out, "require_pass")
	}
	if len(old.Users) > 0 && len(new.Users) == 0 {
		out = append(out, "users")
	}
	for _, ou := range old.Users {
		i := slices.IndexFunc(new.Users, func(nu User) bool { return nu.Name == ou.Name })
		if i < 0 {
			continue
		}
		nu := new.Users[i]
		for _, part := range []struct {
			name       string
			had, lacks bool
		}{
			{"limiters", restricts(ou.Limiters), len(nu.Limiters) == 0},
			{"keys", restricts(ou.Keys), len(nu.Keys) == 0},
			{"backend_user", ou.BackendUser != nil, nu.BackendUser == nil},
		} {
			if part.had && part.lacks {
				out = append(out, fmt.Sprintf("users[%d] (%s).%s", i, ou.Name, part.name))
			}
		}
	}
	if old.TLSListen != "" && new.TLSListen == "" {
		out = append(out, "tls_listen")
	}
	if old.TLSClientCAFile != "" && new.TLSClientCAFile == "" {
		out = append(out, "tls_client_ca_file")
	}
	return out
}

// restricts reports whether a user's patterns restrict it (none, or "*",
// do not).
func restricts(patterns []string) bool {
	return len(patterns) > 0 && !slices.Contains(patterns, "*")
}

func isFileOnly(key string) bool { return slices.Contains(fileOnly, key) }
