package engine

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Dim names one resource dimension of a Resources vector.
type Dim int

// The resource dimensions, with their units. The order is fixed: State and
// golden files depend on it.
const (
	DimCPU       Dim = iota // millicores
	DimMemory               // MiB
	DimGPU                  // whole GPUs (or MIG instances when Job.MIGProfile is set)
	DimGPUMemory            // MiB, summed over the GPUs
	DimNetwork              // Mbps
	DimNVMe                 // GiB of NVMe storage
	DimSSD                  // GiB of SSD storage
	DimHDD                  // GiB of HDD storage
	NumDims                 // number of dimensions
)

var dimNames = [NumDims]string{"cpu", "memory", "gpu", "gpu_memory", "network", "nvme", "ssd", "hdd"}

// String returns the dimension's JSON name ("cpu", "memory", …).
func (d Dim) String() string {
	if d < 0 || d >= NumDims {
		return fmt.Sprintf("dim(%d)", int(d))
	}
	return dimNames[d]
}

// Storage tier names, as used by Job.StorageTier.
const (
	TierNVMe = "nvme"
	TierSSD  = "ssd"
	TierHDD  = "hdd"
)

// TierDim returns the dimension of a storage tier name, and false for an
// unknown name.
func TierDim(tier string) (Dim, bool) {
	switch tier {
	case TierNVMe:
		return DimNVMe, true
	case TierSSD:
		return DimSSD, true
	case TierHDD:
		return DimHDD, true
	}
	return 0, false
}

// Resources is a fixed-size vector of amounts, indexed by Dim:
// Resources{DimCPU: 2000, DimMemory: 4096} is two cores and 4 GiB.
// It is a value type; the zero value is "nothing".
type Resources [NumDims]int64

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	for i := range r {
		r[i] += o[i]
	}
	return r
}

// Sub returns r − o (components may go negative).
func (r Resources) Sub(o Resources) Resources {
	for i := range r {
		r[i] -= o[i]
	}
	return r
}

// Fits reports whether r ≤ avail in every dimension.
func (r Resources) Fits(avail Resources) bool {
	for i := range r {
		if r[i] > avail[i] {
			return false
		}
	}
	return true
}

// IsZero reports whether every component is zero.
func (r Resources) IsZero() bool { return r == Resources{} }

// Storage returns the storage summed over the three tiers (GiB).
func (r Resources) Storage() int64 { return r[DimNVMe] + r[DimSSD] + r[DimHDD] }

// String formats the non-zero components as "cpu=2000 memory=4096", or "0".
func (r Resources) String() string {
	var b strings.Builder
	for d, v := range r {
		if v == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", Dim(d), v)
	}
	if b.Len() == 0 {
		return "0"
	}
	return b.String()
}

// MarshalJSON writes the non-zero components as an object keyed by
// dimension name, so stored State stays readable and survives new dimensions.
func (r Resources) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for d, v := range r {
		if v == 0 {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%q:%d", Dim(d).String(), v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// UnmarshalJSON reads the object form written by MarshalJSON. Unknown
// dimension names are an error.
func (r *Resources) UnmarshalJSON(data []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("engine: resources: %w", err)
	}
	*r = Resources{}
	for k, v := range m {
		d := dimByName(k)
		if d < 0 {
			return fmt.Errorf("engine: resources: unknown dimension %q", k)
		}
		r[d] = v
	}
	return nil
}

func dimByName(s string) Dim {
	for d, n := range dimNames {
		if n == s {
			return Dim(d)
		}
	}
	return -1
}
