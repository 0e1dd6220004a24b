package local

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/internal/ttlcache"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// account is who a task runs as.
type account struct {
	name   string // user name, for USER and LOGNAME; "" if the user database has none
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary groups, the primary one included
	// switchTo is set when the task's process must take these credentials
	// (a root provider running a named user); otherwise it runs as this
	// process does.
	switchTo bool
}

// credential is a as the task's Spec carries it to the process that
// starts the task: only set when that process must switch to it.
func (a account) credential() *supervise.Credential {
	if !a.switchTo {
		return nil
	}
	return &supervise.Credential{UID: a.uid, GID: a.gid, Groups: slices.Clone(a.groups)}
}

// errRoot: the task would run as root, and Config.AllowRoot is not set.
var errRoot = errors.New("refusing to run a task as root")

// accountTTL is how long a user looked up (with its groups), and its
// reach of the work directory, serve later tasks: the user database was
// read, and every directory above the work directory stat'ed, for every
// task, 4% of the adapter's CPU time in the e2e bench. A user removed, or
// given other groups, is seen within it, as a name service cache (nscd,
// sssd) would take longer to; a failed lookup or check is not kept.
const accountTTL = 5 * time.Second

// accountCache holds the accounts resolved within accountTTL, by the
// name asked for ("" too), and since when each reaches the work
// directory.
type accountCache struct {
	byName ttlcache.Cache[string, account]
	reach  ttlcache.Cache[uint32, struct{}] // by uid: checkReachable passed
	// resolve, when set (by tests), replaces Provider.resolve.
	resolve func(name string) (account, error)
}

func newAccountCache() accountCache {
	return accountCache{
		byName: ttlcache.Cache[string, account]{TTL: accountTTL},
		reach:  ttlcache.Cache[uint32, struct{}]{TTL: accountTTL},
	}
}

// account resolves the user a task runs as: name (Task.User), else the
// configured default, else the user this process runs as (within
// accountTTL of the last lookup, as it was then).
func (p *Provider) account(name string) (account, error) {
	resolve := p.resolve
	if p.accounts.resolve != nil {
		resolve = p.accounts.resolve
	}
	return p.accounts.byName.Load(name, p.clock.Now(), func() (account, error) { return resolve(name) })
}

// reachable is a.checkReachable(p.workDir), passed within accountTTL by
// the same uid or checked now.
func (p *Provider) reachable(a account) error {
	_, err := p.accounts.reach.Load(a.uid, p.clock.Now(), func() (struct{}, error) {
		return struct{}{}, a.checkReachable(p.workDir)
	})
	return err
}

// resolve is account without the cache. A root provider switches to a
// named user and refuses root itself unless AllowRoot; any other provider
// can only run tasks as its own user.
func (p *Provider) resolve(name string) (account, error) {
	if name == "" {
		name = p.user
	}
	euid := uint32(os.Geteuid())
	if name == "" {
		if euid == 0 && !p.allowRoot {
			return account{}, fmt.Errorf("%w: %w: name a user in Task.User or Config.User, or set Config.AllowRoot", providers.ErrInvalidTask, errRoot)
		}
		a := account{uid: euid, gid: uint32(os.Getegid())}
		if u, err := user.LookupId(strconv.FormatUint(uint64(euid), 10)); err == nil {
			a.name = u.Username
		}
		return a, nil
	}
	a, err := lookupAccount(name)
	if err != nil {
		return account{}, fmt.Errorf("%w: user %q: %w", providers.ErrInvalidTask, name, err)
	}
	switch {
	case a.uid == 0 && !p.allowRoot:
		return account{}, fmt.Errorf("%w: %w: user %q is root; set Config.AllowRoot to allow it", providers.ErrInvalidTask, errRoot, name)
	case euid != 0 && a.uid != euid:
		return account{}, fmt.Errorf("%w: cannot run as user %q (uid %d): the provider runs as uid %d, not root, so tasks can only run as its own user", providers.ErrInvalidTask, name, a.uid, euid)
	}
	a.switchTo = euid == 0
	return a, nil
}

// lookupAccount finds a user by name, or by numeric ID, in the user
// database, with its groups.
func lookupAccount(name string) (account, error) {
	var u *user.User
	var err error
	if _, perr := strconv.ParseUint(name, 10, 32); perr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return account{}, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	ids, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("groups: %w", err)
	}
	a := account{name: u.Username, uid: uint32(uid), gid: uint32(gid), groups: []uint32{uint32(gid)}}
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return account{}, fmt.Errorf("group %q: %w", s, err)
		}
		if !slices.Contains(a.groups, uint32(g)) {
			a.groups = append(a.groups, uint32(g))
		}
	}
	return a, nil
}

// checkReachable reports, as an error that names the culprit, a directory
// on the way to dir (dir included) that a can not search: its task
// directory would be out of its reach.
func (a account) checkReachable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // cannot tell: let the start fail if it must
		}
		perm := uint32(fi.Mode().Perm())
		var bit uint32 = 0o001
		switch {
		case st.Uid == a.uid:
			bit = 0o100
		case slices.Contains(a.groups, st.Gid):
			bit = 0o010
		}
		if perm&bit == 0 {
			return fmt.Errorf("user %q (uid %d) cannot reach the work directory %s: %s (mode %04o, owner %d:%d) is not searchable by it", a.name, a.uid, dir, d, perm, st.Uid, st.Gid)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
