//go:build linux && (amd64 || arm64)

package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRecordsUnlinkNothing: publishing a record makes the one file and no
// temp file (an unnamed one linked in), and a second publication is
// refused; the state record is written into its reservation, the same
// inode renamed, so no file is made or unlinked for it.
func TestRecordsUnlinkNothing(t *testing.T) {
	dir := t.TempDir()
	rec := ExitRecord{Version: RecordVersion, State: StateSucceeded}
	done, err := publishUnnamed(dir, filepath.Join(dir, FileExit), []byte(`{"version":1,"state":"succeeded"}`+"\n"), true)
	if !done || err != nil {
		t.Fatalf("publishUnnamed = %v, %v; want done (O_TMPFILE and /proc are there on Linux)", done, err)
	}
	if err := PublishRecord(dir, FileExit, rec, false); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second publication: %v, want ErrRecordExists", err)
	}
	if got, err := ReadExit(dir); err != nil || got.State != StateSucceeded {
		t.Fatalf("ReadExit = %+v, %v", got, err)
	}
	reserve := filepath.Join(dir, FileState+".reserve")
	if err := os.WriteFile(reserve, make([]byte, stateReserve), 0o600); err != nil {
		t.Fatal(err)
	}
	ino := func(p string) uint64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := ino(reserve)
	if err := syncRecordFrom(dir, filepath.Base(reserve), FileState, StateRecord{Version: RecordVersion, TaskID: filepath.Base(dir), PID: 7}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadState(dir); err != nil || got.PID != 7 {
		t.Fatalf("ReadState = %+v, %v", got, err)
	}
	if after := ino(filepath.Join(dir, FileState)); after != before {
		t.Errorf("the state record is inode %d, the reservation was %d: a new file", after, before)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("task directory holds %v, want the two records alone", ents)
	}
}
