package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/computeboard/computeboard/pool"
)

// Inventory is how a provider's nodes are read again while the agent
// runs (a Slurm partition's, whose nodes an operator drains, resumes or
// adds): List returns each node the provider has now, as it should be
// registered, with Record.Unhealthy saying why when it cannot take work
// (drained, down). Only Record.Node (inventory, labels, price) and
// Record.Unhealthy of what it returns are used.
type Inventory struct {
	Every time.Duration // how often (default DefaultRefresh)
	List  func(ctx context.Context) ([]Node, error)
}

// DefaultRefresh is how often an Inventory is read by default.
const DefaultRefresh = time.Minute

// refreshLoop reads each provider's Inventory every Every and makes the
// registry say what it says: a node whose inventory or state changed is
// registered again (a node its provider cannot use now, or no longer
// lists, goes out of scheduling with the reason; its running jobs are
// left to the provider), and nodes it lists for the first time are
// served by an agent of their own (same ID, config and providers: see
// served), started here and stopped with this one. A node out for a
// reason of the agent's own (its starts failing) stays out. The registry
// is compared, not a memory of what was written, so a registration
// another part of the agent made from the start-up record (after a Redis
// restart, or when a probe brings a node back) is corrected within one
// interval.
func (a *Agent) refreshLoop(ctx context.Context) error {
	r := &refresher{a: a, served: map[string]*Agent{}, next: map[string]time.Time{}}
	for name, n := range a.nodes {
		if _, ok := a.cfg.Inventories[n.Record.Provider]; ok {
			r.served[name] = a
		}
	}
	defer r.children.Wait()
	tick := time.Hour
	for _, inv := range a.cfg.Inventories {
		tick = min(tick, every(inv))
	}
	now := time.Now()
	for p, inv := range a.cfg.Inventories {
		r.next[p] = now.Add(every(inv))
	}
	t := time.NewTicker(min(tick, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			var due []string
			for p, at := range r.next {
				if !now.Before(at) {
					due = append(due, p)
					r.next[p] = now.Add(every(a.cfg.Inventories[p]))
				}
			}
			if len(due) > 0 {
				r.step(ctx, due)
			}
		}
	}
}

func every(inv Inventory) time.Duration {
	if inv.Every > 0 {
		return inv.Every
	}
	return DefaultRefresh
}

// refresher is refreshLoop's state; only its goroutine uses it but for
// served, which the children's goroutines also change (under mu).
type refresher struct {
	a        *Agent
	next     map[string]time.Time // by provider: when its inventory is read next
	children sync.WaitGroup

	mu     sync.Mutex
	served map[string]*Agent // by node, the agent serving it (a, or a child); guarded by mu
}

// step reads the inventories of the providers named and acts on them.
func (r *refresher) step(ctx context.Context, provs []string) {
	a := r.a
	states, _, err := a.cfg.Registry.Nodes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("refresh nodes: read the registry", "err", err)
		}
		return
	}
	registered := map[string]pool.NodeRecord{}
	for _, s := range states {
		registered[s.Name] = s.NodeRecord
	}
	var fix []pool.NodeRecord
	var fresh []Node
	slices.Sort(provs)
	for _, prov := range provs {
		list, err := a.cfg.Inventories[prov].List(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("refresh nodes: read the provider's inventory", "provider", prov, "err", err)
			}
			continue
		}
		listed := map[string]bool{}
		for _, n := range list {
			name := n.Record.Name
			listed[name] = true
			r.mu.Lock()
			owner, ok := r.served[name]
			r.mu.Unlock()
			if !ok {
				if n.Record.Unhealthy == "" { // nothing to run there yet: served once usable
					fresh = append(fresh, n)
				}
				continue
			}
			rec := owner.nodes[name].Record // the agent's own fields (Agent, Provider, …) as they are
			rec.Node = n.Record.Node
			rec.Unhealthy = n.Record.Unhealthy
			fix = r.check(fix, owner, rec, registered)
		}
		r.mu.Lock()
		gone := slices.Sorted(maps.Keys(r.served))
		r.mu.Unlock()
		for _, name := range gone {
			r.mu.Lock()
			owner := r.served[name]
			r.mu.Unlock()
			if owner == nil || listed[name] || owner.nodes[name].Record.Provider != prov {
				continue
			}
			rec, ok := registered[name]
			if !ok {
				rec = owner.nodes[name].Record
			}
			rec.Unhealthy = "no longer in its provider's inventory"
			fix = r.check(fix, owner, rec, registered)
		}
	}
	if len(fix) > 0 {
		if err := a.cfg.Registry.Register(ctx, fix...); err != nil && ctx.Err() == nil {
			a.log.Warn("refresh nodes: register", "err", err)
		}
	}
	if len(fresh) > 0 {
		r.serve(ctx, fresh)
	}
}

// check appends rec to fix if the registry does not hold it: with the
// serving agent's own reason when it took the node out and the provider
// has none.
func (r *refresher) check(fix []pool.NodeRecord, owner *Agent, rec pool.NodeRecord, registered map[string]pool.NodeRecord) []pool.NodeRecord {
	if rec.Unhealthy == "" {
		owner.mu.Lock()
		rec.Unhealthy = owner.out[rec.Name]
		owner.mu.Unlock()
	}
	old, ok := registered[rec.Name]
	want, _ := json.Marshal(rec)
	have, _ := json.Marshal(old)
	if ok && bytes.Equal(want, have) {
		return fix
	}
	switch {
	case rec.Unhealthy != "" && (!ok || old.Unhealthy == ""):
		r.a.log.Warn("node out of scheduling: its provider says so", "node", rec.Name, "why", rec.Unhealthy)
	case rec.Unhealthy == "" && ok && old.Unhealthy != "":
		r.a.log.Info("node back in scheduling: its provider takes work there again", "node", rec.Name)
	default:
		r.a.log.Debug("node inventory changed: registered again", "node", rec.Name)
	}
	return append(fix, rec)
}

// serve starts an agent for nodes seen for the first time: this agent's
// config (ID, stores, channel, providers' abilities) over just them, so
// they are registered, their assignment streams read and their tasks
// polled as this agent's are. It runs until ctx ends; if it fails, its
// nodes are forgotten and served again at the next refresh.
func (r *refresher) serve(ctx context.Context, nodes []Node) {
	a := r.a
	cfg := a.cfg
	cfg.Nodes = make([]Node, len(nodes))
	cfg.Inventories = nil // this loop refreshes them
	names := make([]string, len(nodes))
	for i, n := range nodes {
		n.Record.Agent = cfg.ID
		cfg.Nodes[i] = n
		names[i] = n.Record.Name
	}
	child, err := New(cfg)
	if err != nil {
		a.log.Warn("refresh nodes: serve new nodes", "nodes", names, "err", err)
		return
	}
	r.mu.Lock()
	for _, name := range names {
		r.served[name] = child
	}
	r.mu.Unlock()
	a.log.Info("new nodes from the provider's inventory: serving them", "nodes", names)
	r.children.Go(func() {
		err := child.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("agent of new nodes ended: they will be served again at the next refresh", "nodes", names, "err", err)
		r.mu.Lock()
		for _, name := range names {
			delete(r.served, name)
		}
		r.mu.Unlock()
	})
}
