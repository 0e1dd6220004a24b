package slurm

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// keptEnv are the variables of the job's own environment (as slurmd makes
// it) that a task keeps: Slurm's, the GPU variables Slurm sets for the
// job's GRES, and the user's identity. Everything else is unset before the
// task's own variables are exported.
const keptEnv = "SLURM_*|SLURMD_*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|ZE_AFFINITY_MASK|HOME|USER|LOGNAME"

// envName is a variable name a shell can export.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// script returns the batch script of a task: bash that clears the job's
// environment but for keptEnv, exports env, and execs argv, so the batch
// step's process is the task itself (its exit status is the job's, and
// scancel's signals reach it). Every word is single-quoted: nothing in
// argv or env is ever interpreted by the shell.
func script(taskID string, argv []string, env map[string]string) []byte {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	fmt.Fprintf(&b, "# computeboard task %s; generated, every word quoted.\n", quote(taskID))
	fmt.Fprintf(&b, "for __cb_v in $(compgen -e); do case $__cb_v in %s) ;; *) unset \"$__cb_v\" 2>/dev/null ;; esac; done\n", keptEnv)
	b.WriteString("unset __cb_v\n")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "export %s=%s\n", k, quote(env[k]))
	}
	b.WriteString("exec --")
	for _, a := range argv {
		b.WriteByte(' ')
		b.WriteString(quote(a))
	}
	b.WriteByte('\n')
	return []byte(b.String())
}

// quote single-quotes s for a POSIX shell: inside single quotes nothing
// is special but the quote itself, which is closed, escaped and reopened.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
