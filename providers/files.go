package providers

import (
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces path with data (mode 0600): readers see the old
// file or the new one, never a part. Providers keep their small per-task
// records with it.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}
