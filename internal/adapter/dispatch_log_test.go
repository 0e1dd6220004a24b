package adapter

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestJobEndedLogsTheExitCode checks that the "job ended" line shows the
// exit code's value (it once printed the pointer's address) or "none".
func TestJobEndedLogsTheExitCode(t *testing.T) {
	t.Parallel()
	three := 3
	tests := map[string]struct {
		code *int
		want string
	}{
		"exited":     {code: &three, want: "exit_code=3"},
		"no process": {code: nil, want: "exit_code=none"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("job ended", "exit_code", exitCodeValue(tc.code))
			if got := buf.String(); !strings.Contains(got, " "+tc.want+"\n") {
				t.Errorf("log line %q, want it to end with %s", got, tc.want)
			}
		})
	}
}
