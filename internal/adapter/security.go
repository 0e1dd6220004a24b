package adapter

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/computeboard/computeboard/wire"
)

// Identity modes (Config.Identity).
const (
	IdentityTrusted = "trusted"
	IdentityACL     = "acl"
)

// deniedEnvNames are variables no request may set, whatever the operator
// allows: they change how the dynamic loader, a shell or an interpreter
// starts, so setting one runs code the operator never approved.
var deniedEnvNames = []string{
	"BASH_ENV", "ENV", "IFS", "PATH", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
	"GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF", "GLIBC_TUNABLES",
	"NODE_OPTIONS", "NODE_PATH", "CLASSPATH", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS",
	"LUA_PATH", "LUA_CPATH", "TCLLIBPATH", "OPENSSL_CONF", "OPENSSL_ENGINES", "SSLKEYLOGFILE",
	"HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "EDITOR", "VISUAL", "PAGER", "R_LIBS", "R_PROFILE", "R_ENVIRON",
}

// deniedEnvPrefixes are families of such variables.
var deniedEnvPrefixes = []string{
	"LD_", "DYLD_", "MALLOC_", "PYTHON", "PERL5", "PERLLIB", "PERL_", "RUBY", "GEM_", "BUNDLE_",
	"NODE_", "NPM_", "GIT_", "BASH_FUNC_", "JULIA_", wire.EnvReservedPrefix,
}

// deniedEnv says why a request may never set variable k, or "".
func deniedEnv(k string) string {
	if slices.Contains(deniedEnvNames, k) {
		return fmt.Sprintf("%s changes how programs are found or started and is never taken from a request", k)
	}
	for _, p := range deniedEnvPrefixes {
		if strings.HasPrefix(k, p) {
			return fmt.Sprintf("%s is a loader or interpreter variable (%s*) and is never taken from a request", k, p)
		}
	}
	return ""
}

// checkEnvAllow refuses an env_allow list that names a denied variable.
func checkEnvAllow(names []string) error {
	for _, k := range names {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("bad variable name %q", k)
		}
		if why := deniedEnv(k); why != "" {
			return fmt.Errorf("%s", why)
		}
	}
	return nil
}

// checkRequestEnv enforces the environment policy on a request: each
// variable must be listed in allow and never denied.
func checkRequestEnv(env map[string]string, allow []string, what string) *wire.Error {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if why := deniedEnv(k); why != "" {
			return &wire.Error{Code: wire.CodeEnvNotAllowed, Field: "environment." + k, Message: why}
		}
		if !slices.Contains(allow, k) {
			allowed := "none"
			if len(allow) > 0 {
				allowed = strings.Join(allow, ", ")
			}
			return &wire.Error{Code: wire.CodeEnvNotAllowed, Field: "environment." + k,
				Message: fmt.Sprintf("%s does not let requests set %s (allowed: %s)", what, k, allowed)}
		}
	}
	return nil
}

// fillSecurity fills and checks the security settings.
func (c *Config) fillSecurity() error {
	switch c.Identity {
	case "":
		c.Identity = IdentityTrusted
	case IdentityTrusted, IdentityACL:
	default:
		return fmt.Errorf("identity %q: want trusted or acl", c.Identity)
	}
	if c.euid < 0 {
		c.euid = os.Geteuid()
	}
	if c.RunAs == "" && c.euid == 0 {
		c.RunAs = "nobody" // never root by default
	}
	if err := c.checkUser(c.RunAs); err != nil {
		return fmt.Errorf("run_as: %w", err)
	}
	h := &c.HTTP
	if h.MaxConnections == 0 {
		h.MaxConnections = 256
	}
	if h.MaxConnections < 0 {
		return fmt.Errorf("http.max_connections: negative")
	}
	for _, d := range []struct {
		v   *Duration
		def time.Duration
	}{{&h.ReadTimeout, 10 * time.Second}, {&h.WriteTimeout, 30 * time.Second}, {&h.IdleTimeout, 60 * time.Second}} {
		if *d.v == 0 {
			*d.v = Duration(d.def)
		}
	}
	if c.Retention == 0 {
		c.Retention = Duration(7 * 24 * time.Hour)
	}
	if c.Retention < 0 {
		return fmt.Errorf("retention: negative")
	}
	if c.MaxOutputMB == 0 {
		c.MaxOutputMB = 64
	}
	if c.MaxOutputMB < 0 {
		return fmt.Errorf("max_output_mb: negative")
	}
	return nil
}

// checkUser checks that name ("" = inherit) is a user jobs may run as: it
// exists, it is root only with allow_root, and an adapter that is not root
// can only run jobs as itself.
func (c *Config) checkUser(name string) error {
	if name == "" {
		return nil
	}
	uid, err := lookupUID(name)
	if err != nil {
		return err
	}
	if uid == 0 && !c.AllowRoot {
		return fmt.Errorf("user %q is root: jobs run as root only with allow_root: true", name)
	}
	if c.euid != 0 && uid != c.euid {
		return fmt.Errorf("user %q: the adapter runs as uid %d and can only run jobs as itself (run it as root to run jobs as another user)", name, c.euid)
	}
	return nil
}

// lookupUID resolves a user name or numeric uid.
func lookupUID(name string) (int, error) {
	var (
		u   *user.User
		err error
	)
	if _, nerr := strconv.Atoi(name); nerr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return 0, fmt.Errorf("no user %q: %w", name, err)
	}
	return strconv.Atoi(u.Uid)
}

// userFor is the user a job runs as: the template's or allowlist entry's
// own, else its account's, else the board-wide default.
func (c *Config) userFor(override, account string) string {
	if override != "" {
		return override
	}
	for _, a := range c.Accounts {
		if a.Name == account && a.RunAs != "" {
			return a.RunAs
		}
	}
	return c.RunAs
}

// MayBill reports whether module may bill account: its own account
// always, another only when that account lists the module (or "*", every
// module) in accounts[].modules.
func (c *Config) MayBill(module, account string) bool {
	if account == module {
		return true
	}
	for _, a := range c.Accounts {
		if a.Name == account {
			return slices.Contains(a.Modules, module) || slices.Contains(a.Modules, "*")
		}
	}
	return false
}

// mayBill is the broker's billing check: with identity acl, a module
// bills its own account, or one whose accounts[].modules lists it. With
// identity trusted a module's name is what it says it is, so the check
// applies only when the config lists modules on some account (and is nil,
// any account, otherwise: the behaviour of boards before ACLs).
func (c *Config) mayBill() func(module, account string) bool {
	if c.Identity == IdentityACL {
		return c.MayBill
	}
	for _, a := range c.Accounts {
		if len(a.Modules) > 0 {
			return c.MayBill
		}
	}
	return nil
}
