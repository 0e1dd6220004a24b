package slurm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Job is what the provider reads of one job in squeue --json (Slurm's
// openapi v0.0.38 shape, Slurm 22.05).
type Job struct {
	ID           string
	Name         string
	Comment      string
	State        string // base state: "PENDING", "RUNNING", "COMPLETED", ...
	Reason       string // state_reason
	ExitStatus   int    // raw wait status of the batch script
	Submitted    time.Time
	Started      time.Time // zero until it ran
	Ended        time.Time // zero until it ended
	Partition    string
	Nodes        string
	Stdout       string
	Stderr       string
	RestartCount int
}

// rawJob is one element of squeue --json's "jobs". Numbers Slurm may
// leave unset are null there.
type rawJob struct {
	JobID        json.Number     `json:"job_id"`
	Name         string          `json:"name"`
	Comment      string          `json:"comment"`
	JobState     json.RawMessage `json:"job_state"` // a string in 22.05, an array of strings later
	StateReason  string          `json:"state_reason"`
	ExitCode     json.RawMessage `json:"exit_code"` // raw wait status in 22.05
	SubmitTime   *int64          `json:"submit_time"`
	StartTime    *int64          `json:"start_time"`
	EndTime      *int64          `json:"end_time"`
	Partition    string          `json:"partition"`
	Nodes        string          `json:"nodes"`
	Stdout       string          `json:"standard_output"`
	Stderr       string          `json:"standard_error"`
	RestartCount *int            `json:"restart_cnt"`
}

// decodeJobs decodes squeue --json.
func decodeJobs(data []byte) ([]Job, error) {
	var v struct {
		Errors []json.RawMessage `json:"errors"`
		Jobs   []rawJob          `json:"jobs"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode squeue --json: %w", err)
	}
	if len(v.Errors) > 0 {
		return nil, reportedErr("squeue", v.Errors)
	}
	jobs := make([]Job, 0, len(v.Jobs))
	for _, r := range v.Jobs {
		j := Job{ID: r.JobID.String(), Name: r.Name, Comment: r.Comment, Reason: r.StateReason,
			Partition: r.Partition, Nodes: r.Nodes, Stdout: r.Stdout, Stderr: r.Stderr}
		j.State = decodeState(r.JobState)
		j.ExitStatus = decodeExit(r.ExitCode)
		j.Submitted = unixTime(r.SubmitTime)
		if j.State != "PENDING" {
			j.Started = unixTime(r.StartTime)
		}
		if terminal(j.State) {
			j.Ended = unixTime(r.EndTime)
		}
		if r.RestartCount != nil {
			j.RestartCount = *r.RestartCount
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// decodeState reads job_state: a string ("COMPLETED") in 22.05; an array
// of a base state and flags (["COMPLETED"], ["PENDING","REQUEUED"]) from
// 23.02 on, whose first element is the base state.
func decodeState(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var a []string
	if json.Unmarshal(raw, &a) == nil && len(a) > 0 {
		return a[0]
	}
	return ""
}

// decodeExit reads exit_code: 22.05's raw wait status, or a later
// version's {"status": ..., "return_code": N, "signal": {"id": N}}
// object, turned back into a wait status.
func decodeExit(raw json.RawMessage) int {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n
	}
	var o struct {
		ReturnCode json.RawMessage `json:"return_code"`
		Signal     struct {
			ID json.RawMessage `json:"id"`
		} `json:"signal"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return 0
	}
	if sig := number(o.Signal.ID); sig > 0 {
		return sig & 0x7f
	}
	return (number(o.ReturnCode) & 0xff) << 8
}

// number reads a JSON number, or a {"set": true, "number": N} (Slurm
// 23.02+), as an int; anything else is 0.
func number(raw json.RawMessage) int {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n
	}
	var o struct {
		Set    bool `json:"set"`
		Number int  `json:"number"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Set {
		return o.Number
	}
	return 0
}

func unixTime(p *int64) time.Time {
	if p == nil || *p <= 0 {
		return time.Time{}
	}
	return time.Unix(*p, 0)
}

// NodeInfo is what the provider reads of one node in sinfo --json.
type NodeInfo struct {
	Name       string   `json:"name"`
	State      string   `json:"state"` // "idle", "mixed", "allocated", "down", "drained", ...
	StateFlags []string `json:"state_flags"`
	CPUs       int      `json:"cpus"`
	RealMemory int64    `json:"real_memory"` // MiB
	Gres       string   `json:"gres"`        // "gpu:a100:4(S:0-1),gpu:2"
	Features   string   `json:"active_features"`
	Partitions []string `json:"partitions"`
	Address    string   `json:"address"`
	Hostname   string   `json:"hostname"`
	Reason     string   `json:"reason"`
}

// decodeNodes decodes sinfo --json.
func decodeNodes(data []byte) ([]NodeInfo, error) {
	var v struct {
		Errors []json.RawMessage `json:"errors"`
		Nodes  []NodeInfo        `json:"nodes"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode sinfo --json: %w", err)
	}
	if len(v.Errors) > 0 {
		return nil, reportedErr("sinfo", v.Errors)
	}
	return v.Nodes, nil
}

// reportedErr is the error of a client whose JSON lists errors: the
// first, compacted. Slurm 22.05's clients say only "Unspecified error"
// (errno -1) when slurmctld does not answer at all (after trying for
// about MessageTimeout), which the message then says.
func reportedErr(client string, errs []json.RawMessage) error {
	var e struct {
		Error string `json:"error"`
		Errno int    `json:"errno"`
	}
	hint := ""
	if json.Unmarshal(errs[0], &e) == nil && e.Error == "Unspecified error" && e.Errno == -1 {
		hint = " (what it reports when slurmctld does not answer: is slurmctld running and reachable?)"
	}
	var b bytes.Buffer
	if json.Compact(&b, errs[0]) != nil {
		b.Reset()
		b.Write(errs[0])
	}
	return fmt.Errorf("%s --json reported errors: %s%s", client, b.String(), hint)
}

// gres is one entry of a node's GRES list.
type gres struct {
	Name, Type string
	Count      int
}

// parseGres parses a GRES string ("gpu:a100:4(S:0-1),gpu:2,shard:8");
// entries it cannot read are skipped.
func parseGres(s string) []gres {
	var out []gres
	for _, e := range splitGres(s) {
		if i := strings.IndexByte(e, '('); i >= 0 {
			e = e[:i]
		}
		parts := strings.Split(e, ":")
		g := gres{Name: parts[0], Count: 1}
		switch len(parts) {
		case 1:
		case 2:
			n, err := strconv.Atoi(parts[1])
			if err != nil { // "gpu:a100" = one of that type
				g.Type = parts[1]
			} else {
				g.Count = n
			}
		case 3:
			n, err := strconv.Atoi(parts[2])
			if err != nil {
				continue
			}
			g.Type, g.Count = parts[1], n
		default:
			continue
		}
		if g.Name != "" && g.Count > 0 {
			out = append(out, g)
		}
	}
	return out
}

// splitGres splits at commas outside parentheses ("gpu:2(S:0,1)").
func splitGres(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if rest := s[start:]; rest != "" && rest != "(null)" {
		out = append(out, rest)
	}
	return out
}
