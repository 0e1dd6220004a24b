package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
)

// Identity modes (Config.Identity).
const (
	// IdentityTrusted trusts what posters write: the legacy shared lanes
	// P:inbox:compute:p<N> (version 1 messages) are read as well as the
	// per-module lanes, and a request's module is its entry's
	// source_module. For boards without Redis ACLs.
	IdentityTrusted = "trusted"
	// IdentityACL takes a request's module from what Redis enforces: only
	// the per-module lanes P:inbox:compute:m:<module>:p<N> are read, and a
	// request whose source_module, or whose entry id's module, is not the
	// lane's module is refused with identity_mismatch. Each module posts as
	// its own Redis ACL user confined to its own lanes and entry keys
	// (`adapter acl MODULE` prints the user).
	IdentityACL = "acl"
)

// lane is one intake stream the feed reads. Lanes are immutable once made;
// the Broker's lane list is replaced, never changed in place.
type lane struct {
	key    string
	prio   int    // the request priority 0..9 the lane carries
	module string // the module the lane belongs to; "" for a legacy shared lane
}

// laneSet is the feed's lanes, most urgent level first and, within a
// level, the legacy lane first and then the modules by name.
type laneSet struct {
	lanes  []*lane
	byKey  map[string]*lane
	levels [NumPriorities]int // lanes per level, most urgent (p9) first
}

func newLaneSet(lanes []*lane) *laneSet {
	slices.SortFunc(lanes, func(a, b *lane) int {
		if a.prio != b.prio {
			return b.prio - a.prio
		}
		return cmp.Compare(a.module, b.module)
	})
	s := &laneSet{lanes: lanes, byKey: make(map[string]*lane, len(lanes))}
	for _, l := range lanes {
		s.byKey[l.key] = l
		s.levels[NumPriorities-1-l.prio]++
	}
	return s
}

func (s *laneSet) keys() []string {
	out := make([]string, len(s.lanes))
	for i, l := range s.lanes {
		out[i] = l.key
	}
	return out
}

// legacyLanes are the ten shared lanes of a trusted board.
func (b *Broker) legacyLanes() []*lane {
	if b.cfg.Identity == IdentityACL {
		return nil
	}
	out := make([]*lane, 0, NumPriorities)
	for p := NumPriorities - 1; p >= 0; p-- {
		out = append(out, &lane{key: b.keys.Inbox(p), prio: p})
	}
	return out
}

// replayLane is the lane an operator replay of a dead letter posts to: the
// lane the message came from when the dead letter names one of this
// board's intake lanes, else the entry's module's own lane (a trusted
// board: its source_module's lane, or the legacy lane for a name that
// cannot have one; an ACL board: the lane of the module its entry id
// names). "" when there is none: the dead letter cannot be replayed.
func (b *Broker) replayLane(from string, e blackboard.Entry) string {
	prio := blackboard.RequestLane(e)
	if _, _, ok := b.parseLaneKey(from); ok {
		return from
	}
	if b.cfg.Identity == IdentityACL {
		if m := blackboard.IDModule(e.ID); blackboard.ValidModule(m) {
			return b.keys.ModuleInbox(m, prio)
		}
		return ""
	}
	for p := range NumPriorities {
		if from == b.keys.Inbox(p) {
			return from
		}
	}
	return b.keys.RequestLane(e.SourceModule, prio)
}

// parseLaneKey reads a per-module lane key back: its module and priority.
func (b *Broker) parseLaneKey(key string) (module string, prio int, ok bool) {
	rest, found := strings.CutPrefix(key, b.keys.ModuleInboxes())
	if !found {
		return "", 0, false
	}
	return blackboard.ParseLaneMember(rest)
}

// discoverLanes reads the lane registry (P:inbox:compute:lanes) and adds
// the per-module lanes it does not know yet, creating the consumer group
// on each (from the start, so requests posted before any broker ran are
// read). A registry member that is not a valid "<module>:p<N>", or whose
// lane does not exist (posters add the member and the lane's first message
// in one step, so such a member was never a poster's), is removed. It runs
// under intakeMu.
func (b *Broker) discoverLanes(ctx context.Context) error {
	members, err := b.rdb.SMembers(ctx, b.keys.InboxLanes()).Result()
	if err != nil {
		return fmt.Errorf("discover lanes: %w", err)
	}
	b.regSeen = int64(len(members))
	var fresh []*lane
	var junk []any
	for _, m := range members {
		module, prio, ok := blackboard.ParseLaneMember(m)
		if !ok {
			junk = append(junk, m)
			continue
		}
		key := b.keys.ModuleInbox(module, prio)
		if _, known := b.lanes.byKey[key]; !known {
			fresh = append(fresh, &lane{key: key, prio: prio, module: module})
		}
	}
	if len(fresh) > 0 {
		exists := make([]*redis.IntCmd, len(fresh))
		_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, l := range fresh {
				exists[i] = p.Exists(ctx, l.key)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("discover lanes: %w", err)
		}
		kept := fresh[:0]
		for i, l := range fresh {
			if exists[i].Val() == 0 {
				junk = append(junk, blackboard.LaneMember(l.module, l.prio))
				continue
			}
			if err := b.createGroup(ctx, l.key); err != nil {
				return err
			}
			kept = append(kept, l)
		}
		if len(kept) > 0 {
			all := append(slices.Clone(b.lanes.lanes), kept...)
			b.setLanes(newLaneSet(all))
		}
	}
	if len(junk) > 0 {
		if err := b.rdb.SRem(ctx, b.keys.InboxLanes(), junk...).Err(); err != nil {
			return fmt.Errorf("discover lanes: %w", err)
		}
		b.regSeen -= int64(len(junk))
		b.log.Warn("removed lane registry members that name no intake lane", "count", len(junk))
	}
	return nil
}

// setLanes installs a new lane set; lanes new to this broker start their
// own-pending re-read and reclaim cursors at the beginning. Under intakeMu.
//
// A lane found after the first own-pending re-read began has no messages
// pending for this consumer from an earlier run (that run's lanes were in
// the registry when this one started), so it is not re-read.
func (b *Broker) setLanes(s *laneSet) {
	for _, l := range s.lanes {
		if _, ok := b.claimCursor[l.key]; !ok {
			b.ownCursor[l.key] = "0-0"
			if b.ownStarted {
				b.ownCursor[l.key] = ""
			}
			b.claimCursor[l.key] = "0-0"
		}
	}
	b.lanes = s
	b.lanesView.Store(s)
	b.nlanes.Store(int64(len(s.lanes)))
}

// LaneKeys returns the keys of the intake lanes this broker reads, by
// request priority (the legacy shared lane of a trusted board, then the
// per-module lanes found so far).
func (b *Broker) LaneKeys() [NumPriorities][]string {
	var out [NumPriorities][]string
	ls := b.lanesView.Load()
	if ls == nil {
		return out
	}
	for _, l := range ls.lanes {
		out[l.prio] = append(out[l.prio], l.key)
	}
	return out
}

// createGroup creates the consumer group on an intake lane (and the lane).
func (b *Broker) createGroup(ctx context.Context, key string) error {
	err := b.rdb.XGroupCreateMkStream(ctx, key, blackboard.InboxGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("broker: create group on %s: %w", key, err)
	}
	return nil
}

// mayBill reports whether module may bill account: Config.MayBill when
// set; else, on an ACL board, only its own account; on a trusted board any.
func (b *Broker) mayBill(module, account string) bool {
	switch {
	case b.cfg.MayBill != nil:
		return b.cfg.MayBill(module, account)
	case b.cfg.Identity == IdentityACL:
		return account == module
	}
	return true
}

// replayedMember is the P:inbox:compute:replayed member of an intake
// message replayed by an operator.
func replayedMember(messageID, stream string) string { return messageID + " " + stream }
