package local

import (
	"path/filepath"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// The records in a task directory, and how they are written, are
// supervise's (the supervisor writes most of them); these turn an outcome
// between the record and a providers.Status.

func exitRecordOf(st providers.Status) supervise.ExitRecord {
	return supervise.ExitRecord{
		Version: supervise.RecordVersion, State: string(st.State), ExitCode: st.ExitCode, Error: st.Error,
		TimedOut: st.TimedOut, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		StdoutDropped: st.StdoutDropped, StderrDropped: st.StderrDropped, OOMKilled: st.OOMKilled,
	}
}

// exitStatus turns the record r back into a Status for the task in dir.
func exitStatus(r supervise.ExitRecord, dir string) providers.Status {
	return providers.Status{
		State: providers.State(r.State), ExitCode: r.ExitCode, Error: r.Error, TimedOut: r.TimedOut,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		StdoutPath: filepath.Join(dir, supervise.FileStdout), StderrPath: filepath.Join(dir, supervise.FileStderr),
		StdoutDropped: r.StdoutDropped, StderrDropped: r.StderrDropped, OOMKilled: r.OOMKilled,
	}
}
