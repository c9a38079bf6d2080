package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/oneline"
	"github.com/tidwall/match"
)

// acquireCommands are the commands of the "acquire" category: what an
// application needs to be rate limited, and nothing that changes a
// limiter. Commands are named here whether or not this build has them
// all, so that a command added later falls in its category by itself.
var acquireCommands = map[string]bool{
	"RL.ACQUIRE": true, "RL.AVAILABLE": true, "RL.GETRATE": true, "CL.THROTTLE": true,
	"GCRA": true, "RL.THROTTLE": true, "RL.LEASE": true, "RL.RETURN": true,
	"RL.RENEW": true, "RL.CHARGE": true,
}

// adminSubcommands are the server's own subcommands that only admins may
// run: they show or touch other clients.
var adminSubcommands = map[string]bool{"CLIENT|LIST": true, "CLIENT|KILL": true, "CLIENT|UNBLOCK": true}

// user is one configured user, as the server checks it.
type user struct {
	name     string
	hash     [sha256.Size]byte // of the password
	admin    bool
	acquire  bool
	redis    bool                // may run forwarded commands (passthrough)
	limiters []string            // glob patterns; nil: every limiter
	keys     []string            // glob patterns of forwarded commands' keys; nil: every key
	backend  *config.BackendUser // the Redis ACL user its forwarded commands run as; nil: the URL's
}

// access is who may connect: the users by name. Authentication is
// required when there is any user ("default" is require_pass's).
type access struct {
	users    map[string]*user
	required bool
}

// everyone is the user of a connection when no authentication is
// required: the admin "default" user, as in Redis.
var everyone = &user{name: "default", admin: true}

// newAccess compiles require_pass and the users list (already validated
// by config).
func newAccess(requirePass string, users []config.User) (*access, error) {
	a := &access{users: map[string]*user{}}
	if requirePass != "" {
		a.users["default"] = &user{name: "default", hash: sha256.Sum256([]byte(requirePass)), admin: true}
	}
	for _, cu := range users {
		u := &user{name: cu.Name}
		if cu.PasswordSHA256 != "" {
			b, err := hex.DecodeString(cu.PasswordSHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("user %s: password_sha256 must be 64 hex digits", cu.Name)
			}
			copy(u.hash[:], b)
		} else {
			u.hash = sha256.Sum256([]byte(cu.Password))
		}
		for _, c := range cu.Commands {
			switch c {
			case config.CategoryAdmin:
				u.admin = true
			case config.CategoryAcquire:
				u.acquire = true
			case config.CategoryRedis:
				u.redis = true
			default:
				return nil, fmt.Errorf("user %s: unknown command category %q", cu.Name, c)
			}
		}
		for _, p := range cu.Limiters {
			if p == "*" {
				u.limiters = nil
				break
			}
			u.limiters = append(u.limiters, p)
		}
		for _, p := range cu.Keys {
			if p == "*" {
				u.keys = nil
				break
			}
			u.keys = append(u.keys, p)
		}
		if cu.BackendUser != nil {
			b := *cu.BackendUser
			u.backend = &b
		}
		a.users[u.name] = u
	}
	a.required = len(a.users) > 0
	return a, nil
}

// check returns the user name and password authenticate, or nil. The
// password is compared in constant time, also for an unknown user.
func (a *access) check(name, password string) *user {
	got := sha256.Sum256([]byte(password))
	u := a.users[name]
	want := [sha256.Size]byte{}
	if u != nil {
		want = u.hash
	}
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || u == nil {
		return nil
	}
	return u
}

// mayTouch reports whether u may use the limiter called name.
func (u *user) mayTouch(name string) bool {
	if u.limiters == nil {
		return true
	}
	for _, p := range u.limiters {
		if match.Match(name, p) {
			return true
		}
	}
	return false
}

// permit checks a call of cmd (a subcommand when sub is set) by client c
// before it runs: the limiter name's (or policy pattern's) length, then
// the user's rights.
// Nothing that fails here reaches a backend.
func (s *Server) permit(c *client, cmd, sub *commands.Command, args []string) error {
	key, hasKey := cmd.Key(args)
	var others []string
	if hasKey && cmd.OtherKeys != nil {
		others = cmd.OtherKeys(args)
	}
	if hasKey {
		if err := commands.CheckName(key, s.limits().MaxNameLength); err != nil {
			return err
		}
		for _, k := range others {
			if err := commands.CheckName(k, s.limits().MaxNameLength); err != nil {
				return err
			}
		}
	}
	if sub != nil {
		if p, ok := sub.Pattern(args); ok {
			if err := commands.CheckPattern(p, s.limits().MaxNameLength); err != nil {
				return err
			}
		}
	}
	u := c.user.Load()
	if u == nil || u.admin {
		return nil
	}
	if s.own[cmd.Name] {
		if sub != nil && adminSubcommands[cmd.Name+"|"+sub.Name] {
			return noPerm(u, strings.ToLower(cmd.Name+"|"+sub.Name))
		}
		return nil
	}
	if !u.acquire || !acquireCommands[cmd.Name] {
		return noPerm(u, strings.ToLower(cmd.Name))
	}
	if hasKey && !u.mayTouch(key) {
		return fmt.Errorf("NOPERM No permissions to access the %s limiter", oneline.Quote(key))
	}
	for _, k := range others {
		if !u.mayTouch(k) {
			return fmt.Errorf("NOPERM No permissions to access the %s limiter", oneline.Quote(k))
		}
	}
	// With passthrough a GCRA key is a Redis key, named as the client
	// names it: the user's key patterns hold for it too.
	if hasKey && gcraCommands[cmd.Name] && s.opts.Forward != nil && u.keys != nil && !matchAny(key, u.keys) {
		return errNoPermKey
	}
	return nil
}

// gcraCommands keep their state in the key as named when passthrough is
// on (like redis-cell and Redis 8.8's GCRA).
var gcraCommands = map[string]bool{"GCRA": true, "CL.THROTTLE": true, "RL.THROTTLE": true}

var errNoPermKey = errors.New("NOPERM No permissions to access a key")

func noPerm(u *user, command string) error {
	return fmt.Errorf("NOPERM User %s has no permissions to run the '%s' command", u.name, command)
}

// authenticate runs AUTH [user] password for client c: on success the
// client is that user; on failure nothing changes and the failure is
// counted and logged (at most once a second).
func (s *Server) authenticate(c *client, name, password string, named bool) error {
	a := s.access.Load()
	if !a.required {
		switch {
		case !named:
			return fmt.Errorf("AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		case name != "default":
			// As Redis 7 without users: only "default" exists (any password).
			s.authFailed(c, name)
			return fmt.Errorf("WRONGPASS invalid username-password pair or user is disabled.")
		}
		c.login(everyone)
		return nil
	}
	u := a.check(name, password)
	if u == nil {
		s.authFailed(c, name)
		return fmt.Errorf("WRONGPASS invalid username-password pair or user is disabled.")
	}
	c.login(u)
	return nil
}

// login makes c's requests run as u.
func (c *client) login(u *user) {
	c.user.Store(u)
	c.authed = true
}

func (s *Server) authFailed(c *client, name string) {
	s.authFails.add(s.opts.Log, "authentication failed", "addr", c.addr, "user", oneline.Quote(name))
}

// userName is the name CLIENT INFO shows: "default" before AUTH, as Redis.
func (c *client) userName() string {
	if u := c.user.Load(); u != nil {
		return u.name
	}
	return "default"
}
