package supervise

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRecords(t *testing.T) {
	dir := t.TempDir()
	code := 3
	rec := ExitRecord{Version: RecordVersion, State: StateFailed, ExitCode: &code, Error: "exit status 3"}
	if err := PublishRecord(dir, FileExit, rec, false); err != nil {
		t.Fatal(err)
	}
	other := ExitRecord{Version: RecordVersion, State: StateSucceeded}
	if err := PublishRecord(dir, FileExit, other, true); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second PublishRecord: %v, want ErrRecordExists", err)
	}
	if err := SyncPublished(dir, FileExit); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExit(dir)
	if err != nil || got.State != StateFailed || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Fatalf("ReadExit = %+v, %v; want the first record", got, err)
	}
	st := StateRecord{Version: RecordVersion, Provider: "local", TaskID: filepath.Base(dir), PID: 42}
	if err := syncRecord(dir, FileState, st); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadState(dir); err != nil || got.PID != 42 {
		t.Fatalf("ReadState = %+v, %v", got, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("task directory holds %v, want the two records and no temp files", ents)
	}
}

// TestEmptyRecordIsNone: a record whose name survived a power loss
// without its data (published unsynced) reads as no record.
func TestEmptyRecordIsNone(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{FileExit, FileStop, FileState} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadExit(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadExit of an empty record: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadStop(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadStop of an empty record: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadState(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadState of an empty record: %v, want fs.ErrNotExist", err)
	}
}
