package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// Lane returns the intake lane (0..9) for a compute.request entry: data's
// top-level "priority" when it is a JSON integer 0..9, otherwise
// DefaultPriority(entryPriority). It never fails: the lane is only an intake
// hint, and the broker re-derives the priority from the decoded request.
// It matches the Python rule
//
//	p = data.get("priority")
//	lane = p if type(p) is int and 0 <= p <= 9 else DEFAULT[entry_priority]
func Lane(data []byte, entryPriority int) int {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) == nil {
		if raw, ok := top["priority"]; ok && isIntLiteral(string(raw)) {
			if p, err := strconv.Atoi(string(raw)); err == nil && p >= 0 && p <= MaxPriority {
				return p
			}
		}
	}
	return DefaultPriority(entryPriority)
}

// JobID returns the id of the job (and of its compute.job entry) for a
// request entry: the first 32 hex characters of
// sha256("compute.job:" + requestEntryID). Python:
//
//	hashlib.sha256(("compute.job:" + entry_id).encode()).hexdigest()[:32]
func JobID(requestEntryID string) string {
	sum := sha256.Sum256([]byte("compute.job:" + requestEntryID))
	return hex.EncodeToString(sum[:16])
}
