package wire

import (
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SchemaVersion is the compute.request schema version this package reads
// and writes.
const SchemaVersion = 1

// Limits of schema version 1. Raising a limit is an additive change; lowering
// one needs a new version. String lengths count Unicode code points, as JSON
// Schema's maxLength does.
const (
	MaxDataBytes       = 64 << 10   // a request's data JSON
	MaxEntryBytes      = 256 << 10  // a whole entry (checked by the blackboard)
	MaxDepth           = 64         // JSON nesting, payload included
	MaxNameLen         = 128        // name
	MaxIdentLen        = 128        // template, account, gang_id, gpu_model, node_selector keys
	MaxKeyLen          = 256        // idempotency_key, node_selector values
	MaxArgs            = 256        // elements of command, and of arguments
	MaxArgLen          = 4096       // one argv element
	MaxEnv             = 128        // environment variables
	MaxEnvValueLen     = 4096       // one environment value
	MaxNodeSelector    = 32         // node_selector pairs
	MaxCPUCores        = 1024       // resource_requirements.cpu_cores
	MinCPUCores        = 0.01       // resource_requirements.cpu_cores: the smallest share of a core a job may ask for
	MinMemoryGB        = 1.0 / 1024 // resource_requirements.memory: 1 MiB
	MaxMemoryGB        = 65536      // resource_requirements.memory
	MaxGPUCount        = 64         // resource_requirements.gpu_count
	MaxGPUMemoryGB     = 1024       // resource_requirements.gpu_memory (per GPU)
	MaxStorageGB       = 1 << 20    // resource_requirements.storage
	MaxNetworkMbps     = 1_000_000  // resource_requirements.network_bandwidth
	MaxDurationSeconds = 31_622_400 // estimated_duration, timeout: 366 days
	MaxRetries         = 10         // max_retries
	MaxGangSize        = 1024       // gang_size
	MaxPriority        = 9          // priority is 0..MaxPriority, 9 most urgent
	MaxEpochSeconds    = 1e11       // deadline; catches milliseconds sent as seconds
)

// Default resources, used when resource_requirements omits them.
const (
	DefaultCPUCores = 1.0
	DefaultMemoryGB = 0.25
)

// EnvReservedPrefix starts the environment variables the adapter sets
// itself ($COMPUTEBOARD_PAYLOAD, …); requests may not set them.
const EnvReservedPrefix = "COMPUTEBOARD_"

// Request is the data of a compute.request entry, schema version 1.
// DecodeRequest returns it with every default filled in; marshalling it with
// encoding/json gives JSON that decodes to the same value.
type Request struct {
	Version     int               `json:"version"`               // always SchemaVersion
	Name        string            `json:"name,omitempty"`        // free text for humans
	Template    string            `json:"template,omitempty"`    // operator-approved template; exactly one of Template and Command
	Command     []string          `json:"command,omitempty"`     // argv; argv[0] must be on the operator's allowlist
	Arguments   []string          `json:"arguments,omitempty"`   // appended to the template's or command's argv
	Environment map[string]string `json:"environment,omitempty"` // extra environment variables
	Resources   Resources         `json:"resource_requirements"` // defaults filled
	Priority    int               `json:"priority"`              // 0..9, 9 most urgent; default from the entry priority
	Account     string            `json:"account"`               // fair-share account; default the entry's source_module
	// Deadline is when the result stops being useful, epoch seconds; 0 = none.
	// A deadline already past is accepted here and judged by the engine.
	Deadline          float64           `json:"deadline,omitempty"`
	EstimatedDuration float64           `json:"estimated_duration,omitempty"` // seconds; 0 = unknown
	Timeout           float64           `json:"timeout,omitempty"`            // seconds of run time; 0 = none
	MaxRetries        int               `json:"max_retries,omitempty"`        // 0..10
	IdempotencyKey    string            `json:"idempotency_key"`              // default the entry id
	NodeSelector      map[string]string `json:"node_selector,omitempty"`      // node labels that must all match
	GangID            string            `json:"gang_id,omitempty"`            // jobs sharing a GangID start together
	GangSize          int               `json:"gang_size,omitempty"`          // members of the gang; set with GangID
	// Provider names the provider (adapter config `providers:`) whose
	// nodes may run the job: the node selector ProviderLabel=Provider.
	Provider string `json:"provider,omitempty"`
	// Placement chooses among the nodes that fit: one of Placements
	// ("cheapest": where the request costs least per hour at its
	// provider's prices); "" = the scheduler's default.
	Placement string `json:"placement,omitempty"`
	// Payload is any JSON, written for the job to the file named by
	// $COMPUTEBOARD_PAYLOAD. It is held in encoding/json's compact form; nil = none.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Resources is resource_requirements. Quantities are per job (per gang
// member for gangs); GPU memory is per GPU.
type Resources struct {
	CPUCores    float64 `json:"cpu_cores"`                   // cores, > 0; default 1
	MemoryGB    float64 `json:"memory"`                      // GB, > 0; default 0.25
	GPUCount    int     `json:"gpu_count,omitempty"`         // whole GPUs (or MIG slices with MIGProfile)
	GPUMemoryGB float64 `json:"gpu_memory,omitempty"`        // minimum memory per GPU, GB
	GPUModel    string  `json:"gpu_model,omitempty"`         // e.g. "H100"; "" = any
	MIGProfile  string  `json:"mig_profile,omitempty"`       // e.g. "1g.10gb"; "" = whole GPUs
	StorageGB   float64 `json:"storage,omitempty"`           // scratch storage, GB
	StorageTier string  `json:"storage_tier,omitempty"`      // "nvme", "ssd", "hdd" or "" = any
	NetworkMbps float64 `json:"network_bandwidth,omitempty"` // Mbps
	NUMALocal   bool    `json:"numa_local,omitempty"`        // keep CPUs, memory and GPUs on one NUMA node
}

// ProviderLabel is the node label naming a node's provider; a request's
// provider is the node selector ProviderLabel=provider.
const ProviderLabel = "provider"

// Placements are the values of placement: the engine's strategies.
var Placements = []string{"best-fit", "first-fit", "worst-fit", "balanced", "most-allocated", "cheapest"}

// Storage tiers.
const (
	StorageNVMe = "nvme"
	StorageSSD  = "ssd"
	StorageHDD  = "hdd"
)

// EntryInfo is what DecodeRequest needs from the compute.request entry.
type EntryInfo struct {
	ID           string   // entry_id, 32 lowercase hex
	SourceModule string   // source_module
	Priority     int      // entry priority, 0 LOW .. 3 CRITICAL
	Timestamp    float64  // epoch seconds
	TTLSeconds   *float64 // nil = never expires
}

// AcceptBy returns the time by which the request must leave the inbox
// (timestamp + ttl_seconds), and false when the entry has no TTL.
func (in EntryInfo) AcceptBy() (float64, bool) {
	if in.TTLSeconds == nil {
		return 0, false
	}
	return in.Timestamp + *in.TTLSeconds, true
}

// Entry priorities (the blackboard's EntryPriority), for callers that hold
// plain ints.
const (
	EntryPriorityLow      = 0
	EntryPriorityNormal   = 1
	EntryPriorityHigh     = 2
	EntryPriorityCritical = 3
)

// DefaultPriority maps an entry priority to a request priority:
// LOW→2, NORMAL→4, HIGH→6, CRITICAL→8. Out-of-range values are clamped.
func DefaultPriority(entryPriority int) int {
	return 2 + 2*min(max(entryPriority, EntryPriorityLow), EntryPriorityCritical)
}

var (
	identRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	envKeyRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	migProfileRE = regexp.MustCompile(`^([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\+[a-z]+)?$`)
)

// Validate checks every invariant of a decoded request (defaults filled).
// DecodeRequest calls it; call it on a Request built in Go before posting.
// Fields are checked in schema order, so the first problem is reported.
func (r *Request) Validate() *Error {
	if r.Version != SchemaVersion {
		return errorf(CodeUnsupportedVersion, "version", "version %d is not supported; this reader supports version %d", r.Version, SchemaVersion)
	}
	if e := checkLen("name", r.Name, MaxNameLen); e != nil {
		return e
	}
	switch {
	case r.Template == "" && len(r.Command) == 0:
		return errorf(CodeMissingField, "template", "one of template and command is required")
	case r.Template != "" && len(r.Command) > 0:
		return errorf(CodeInvalidValue, "command", "template and command are mutually exclusive")
	}
	if r.Template != "" {
		if e := checkIdent("template", r.Template); e != nil {
			return e
		}
	}
	if len(r.Command) > 0 {
		if e := checkArgv("command", r.Command); e != nil {
			return e
		}
		if r.Command[0] == "" {
			return errorf(CodeInvalidValue, "command[0]", "must not be empty")
		}
	}
	if e := checkArgv("arguments", r.Arguments); e != nil {
		return e
	}
	if e := checkEnv(r.Environment); e != nil {
		return e
	}
	if e := r.Resources.validate(); e != nil {
		return e
	}
	if r.Priority < 0 || r.Priority > MaxPriority {
		return errorf(CodeInvalidValue, "priority", "%d is outside 0..%d", r.Priority, MaxPriority)
	}
	if r.Account == "" {
		return errorf(CodeMissingField, "account", "is required (it defaults to the entry's source_module)")
	}
	if e := checkLen("account", r.Account, MaxIdentLen); e != nil {
		return e
	}
	if r.Deadline != 0 && !(r.Deadline > 0 && r.Deadline <= MaxEpochSeconds) {
		return errorf(CodeInvalidValue, "deadline", "%v is not epoch seconds in (0, %g]", r.Deadline, float64(MaxEpochSeconds))
	}
	if e := checkRange("estimated_duration", r.EstimatedDuration, MaxDurationSeconds); e != nil {
		return e
	}
	if e := checkRange("timeout", r.Timeout, MaxDurationSeconds); e != nil {
		return e
	}
	if r.MaxRetries < 0 || r.MaxRetries > MaxRetries {
		return errorf(CodeInvalidValue, "max_retries", "%d is outside 0..%d", r.MaxRetries, MaxRetries)
	}
	if r.IdempotencyKey == "" {
		return errorf(CodeMissingField, "idempotency_key", "is required (it defaults to the entry id)")
	}
	if e := checkLen("idempotency_key", r.IdempotencyKey, MaxKeyLen); e != nil {
		return e
	}
	if e := checkSelector(r.NodeSelector); e != nil {
		return e
	}
	if r.Provider != "" {
		if e := checkIdent("provider", r.Provider); e != nil {
			return e
		}
		if v, ok := r.NodeSelector[ProviderLabel]; ok && v != r.Provider {
			return errorf(CodeInvalidValue, "provider", "%q contradicts node_selector.%s %q", r.Provider, ProviderLabel, v)
		}
	}
	if r.Placement != "" && !slices.Contains(Placements, r.Placement) {
		return errorf(CodeInvalidValue, "placement", "%q is not one of %s", r.Placement, strings.Join(Placements, ", "))
	}
	switch {
	case r.GangID == "" && r.GangSize != 0:
		return errorf(CodeMissingField, "gang_id", "is required with gang_size")
	case r.GangID != "" && r.GangSize == 0:
		return errorf(CodeMissingField, "gang_size", "is required with gang_id")
	case r.GangID != "":
		if e := checkIdent("gang_id", r.GangID); e != nil {
			return e
		}
		if r.GangSize < 1 || r.GangSize > MaxGangSize {
			return errorf(CodeInvalidValue, "gang_size", "%d is outside 1..%d", r.GangSize, MaxGangSize)
		}
	}
	if r.Payload != nil && !json.Valid(r.Payload) {
		return errorf(CodeMalformedJSON, "payload", "is not valid JSON")
	}
	return nil
}

func (res *Resources) validate() *Error {
	const p = "resource_requirements."
	// Below the granularity a request would round to (almost) nothing and
	// a node would take thousands of such jobs at once.
	if !(res.CPUCores >= MinCPUCores && res.CPUCores <= MaxCPUCores) {
		return errorf(CodeInvalidValue, p+"cpu_cores", "%v is outside [%v, %d] (cores are counted in thousandths, at least %v)", res.CPUCores, MinCPUCores, MaxCPUCores, MinCPUCores)
	}
	if !(res.MemoryGB >= MinMemoryGB && res.MemoryGB <= MaxMemoryGB) {
		return errorf(CodeInvalidValue, p+"memory", "%v GB is outside [1 MiB, %d GB] (memory is counted in MiB)", res.MemoryGB, MaxMemoryGB)
	}
	if res.GPUCount < 0 || res.GPUCount > MaxGPUCount {
		return errorf(CodeInvalidValue, p+"gpu_count", "%d is outside 0..%d", res.GPUCount, MaxGPUCount)
	}
	if e := checkRange(p+"gpu_memory", res.GPUMemoryGB, MaxGPUMemoryGB); e != nil {
		return e
	}
	if res.GPUModel != "" {
		if e := checkLen(p+"gpu_model", res.GPUModel, MaxIdentLen); e != nil {
			return e
		}
	}
	if res.MIGProfile != "" && (len(res.MIGProfile) > 32 || !migProfileRE.MatchString(res.MIGProfile)) {
		return errorf(CodeInvalidValue, p+"mig_profile", "%q is not a MIG profile like \"1g.10gb\"", res.MIGProfile)
	}
	if res.GPUCount == 0 {
		for _, f := range []struct {
			name string
			set  bool
		}{{"gpu_memory", res.GPUMemoryGB != 0}, {"gpu_model", res.GPUModel != ""}, {"mig_profile", res.MIGProfile != ""}} {
			if f.set {
				return errorf(CodeInvalidValue, p+f.name, "needs gpu_count ≥ 1")
			}
		}
	}
	if e := checkRange(p+"storage", res.StorageGB, MaxStorageGB); e != nil {
		return e
	}
	switch res.StorageTier {
	case "", StorageNVMe, StorageSSD, StorageHDD:
	default:
		return errorf(CodeInvalidValue, p+"storage_tier", "%q is not one of \"nvme\", \"ssd\", \"hdd\"", res.StorageTier)
	}
	return checkRange(p+"network_bandwidth", res.NetworkMbps, MaxNetworkMbps)
}

// checkRange requires 0 ≤ v ≤ limit (false for NaN).
func checkRange(field string, v, limit float64) *Error {
	if v >= 0 && v <= limit {
		return nil
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return errorf(CodeInvalidValue, field, "must be a finite number")
	}
	return errorf(CodeInvalidValue, field, "%v is outside [0, %s]", v, strconv.FormatFloat(limit, 'f', -1, 64))
}

func checkLen(field, s string, limit int) *Error {
	if n := utf8.RuneCountInString(s); n > limit {
		return errorf(CodeInvalidValue, field, "is %d characters long; the limit is %d", n, limit)
	}
	return nil
}

func checkIdent(field, s string) *Error {
	if e := checkLen(field, s, MaxIdentLen); e != nil {
		return e
	}
	if !identRE.MatchString(s) {
		return errorf(CodeInvalidValue, field, "%q must match %s", s, identRE)
	}
	return nil
}

func checkArgv(field string, argv []string) *Error {
	if len(argv) > MaxArgs {
		return errorf(CodeInvalidValue, field, "has %d elements; the limit is %d", len(argv), MaxArgs)
	}
	for i, a := range argv {
		f := field + "[" + strconv.Itoa(i) + "]"
		if e := checkLen(f, a, MaxArgLen); e != nil {
			return e
		}
		if strings.IndexByte(a, 0) >= 0 {
			return errorf(CodeInvalidValue, f, "contains a NUL character")
		}
	}
	return nil
}

func checkEnv(env map[string]string) *Error {
	if len(env) > MaxEnv {
		return errorf(CodeInvalidValue, "environment", "has %d variables; the limit is %d", len(env), MaxEnv)
	}
	for _, k := range sortedKeys(env) {
		f := "environment." + k
		switch {
		case len(k) > MaxIdentLen || !envKeyRE.MatchString(k):
			return errorf(CodeInvalidValue, f, "%q is not a variable name matching %s (at most %d characters)", k, envKeyRE, MaxIdentLen)
		case strings.HasPrefix(k, EnvReservedPrefix):
			return errorf(CodeInvalidValue, f, "names starting with %s are reserved for the adapter", EnvReservedPrefix)
		}
		if e := checkLen(f, env[k], MaxEnvValueLen); e != nil {
			return e
		}
		if strings.IndexByte(env[k], 0) >= 0 {
			return errorf(CodeInvalidValue, f, "contains a NUL character")
		}
	}
	return nil
}

func checkSelector(sel map[string]string) *Error {
	if len(sel) > MaxNodeSelector {
		return errorf(CodeInvalidValue, "node_selector", "has %d labels; the limit is %d", len(sel), MaxNodeSelector)
	}
	for _, k := range sortedKeys(sel) {
		f := "node_selector." + k
		if k == "" {
			return errorf(CodeInvalidValue, f, "label names must not be empty")
		}
		if e := checkLen(f, k, MaxIdentLen); e != nil {
			return e
		}
		if e := checkLen(f, sel[k], MaxKeyLen); e != nil {
			return e
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
