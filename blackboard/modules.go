package blackboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Capability is a set of module capability flags (ASI:BUILD's
// ModuleCapability).
type Capability uint

// Capabilities, with the original's flag values.
const (
	CapProducer Capability = 1 << iota
	CapConsumer
	CapTransformer
	CapReasoner
	CapValidator
	CapLearner
)

var capabilityNames = [...]string{"PRODUCER", "CONSUMER", "TRANSFORMER", "REASONER", "VALIDATOR", "LEARNER"}

// Names returns the names of the set flags, sorted alphabetically.
func (c Capability) Names() []string {
	names := []string{}
	for i, n := range capabilityNames {
		if c&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// MarshalJSON writes the capabilities as a sorted array of names.
func (c Capability) MarshalJSON() ([]byte, error) { return marshal(c.Names()) }

// UnmarshalJSON reads an array of names.
func (c *Capability) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("%w: capabilities: %v", ErrInvalid, err)
	}
	var out Capability
	for _, n := range names {
		i := slices.Index(capabilityNames[:], n)
		if i < 0 {
			return fmt.Errorf("%w: unknown capability %q", ErrInvalid, n)
		}
		out |= 1 << i
	}
	*c = out
	return nil
}

func (c Capability) valid() bool { return bits.Len(uint(c)) <= len(capabilityNames) }

// ModuleInfo describes a registered module; stored as JSON in P:modules.
type ModuleInfo struct {
	Name           string     `json:"name"`
	Version        string     `json:"version"`      // default "0.0.0"
	Capabilities   Capability `json:"capabilities"` // default CapProducer
	Description    string     `json:"description"`
	TopicsProduced []string   `json:"topics_produced"` // sorted, unique
	TopicsConsumed []string   `json:"topics_consumed"` // sorted, unique
}

type registeredPayload struct {
	ModuleName   string   `json:"module_name"`
	Capabilities []string `json:"capabilities"`
	Version      string   `json:"version"`
}

// RegisterModule adds a module and emits blackboard.module.registered
// {module_name, capabilities (sorted names), version}. A taken name is
// ErrConflict.
func (s *Store) RegisterModule(ctx context.Context, m ModuleInfo) error {
	if m.Name == "" || !m.Capabilities.valid() {
		return fmt.Errorf("blackboard: register module %q: %w", m.Name, ErrInvalid)
	}
	if m.Version == "" {
		m.Version = "0.0.0"
	}
	if m.Capabilities == 0 {
		m.Capabilities = CapProducer
	}
	m.TopicsProduced = sortedSet(m.TopicsProduced)
	m.TopicsConsumed = sortedSet(m.TopicsConsumed)
	info, err := marshal(m)
	if err != nil {
		return fmt.Errorf("blackboard: register module %s: %w", m.Name, err)
	}
	payload, _ := marshal(registeredPayload{m.Name, m.Capabilities.Names(), m.Version})
	if err := s.registerModule(ctx, s.clock.Now(), m.Name, string(info), string(payload)); err != nil {
		return fmt.Errorf("blackboard: register module %s: %w", m.Name, err)
	}
	return nil
}

// UnregisterModule removes a module and emits
// blackboard.module.unregistered. An unknown name is ErrNotFound.
func (s *Store) UnregisterModule(ctx context.Context, name string) error {
	if err := s.unregisterModule(ctx, s.clock.Now(), name); err != nil {
		return fmt.Errorf("blackboard: unregister module %s: %w", name, err)
	}
	return nil
}

// Module returns one registered module.
func (s *Store) Module(ctx context.Context, name string) (ModuleInfo, error) {
	raw, err := s.rdb.HGet(ctx, s.keys.Modules(), name).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			err = ErrNotFound
		}
		return ModuleInfo{}, fmt.Errorf("blackboard: module %s: %w", name, err)
	}
	var m ModuleInfo
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return ModuleInfo{}, fmt.Errorf("blackboard: module %s: %w: %v", name, ErrInvalid, err)
	}
	return m, nil
}

// Modules returns every registered module, sorted by name.
func (s *Store) Modules(ctx context.Context) ([]ModuleInfo, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Modules()).Result()
	if err != nil {
		return nil, fmt.Errorf("blackboard: modules: %w", err)
	}
	out := make([]ModuleInfo, 0, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		var m ModuleInfo
		if err := json.Unmarshal([]byte(all[name]), &m); err != nil {
			return nil, fmt.Errorf("blackboard: modules: %s: %w: %v", name, ErrInvalid, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func sortedSet(v []string) []string {
	if v == nil {
		return []string{}
	}
	return slices.Compact(slices.Sorted(slices.Values(v)))
}
