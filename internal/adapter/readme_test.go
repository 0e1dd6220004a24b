package adapter

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/inventory"
)

// configKeys lists the YAML keys of t, dotted: a map of structs adds
// ".<name>.", a list of structs "[].". Durations, resource amounts and
// node sections other than `node` itself are leaves.
func configKeys(prefix string, t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key, ft := prefix+name, f.Type
		switch {
		case ft == reflect.TypeFor[Duration]() || ft == reflect.TypeFor[AmountConfig]():
			out = append(out, key)
		case ft == reflect.TypeFor[inventory.Config]() && key != "node":
			// Another node section (node classes, the fake nodes' shape):
			// the same keys as `node`, documented once there.
			out = append(out, key)
		case ft.Kind() == reflect.Struct:
			out = append(out, configKeys(key+".", ft)...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(key+".<name>.", ft.Elem())...)
		case ft.Kind() == reflect.Slice && ft.Elem() == reflect.TypeFor[inventory.Config]():
			out = append(out, key) // a list of node sections: the keys of `node`
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(key+"[].", ft.Elem())...)
		default:
			out = append(out, key)
		}
	}
	return out
}

// TestReadmeDocumentsEveryConfigKey checks that the README's configuration
// reference names every key the config file accepts.
func TestReadmeDocumentsEveryConfigKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(b), "\n## Configuration\n")
	if !ok {
		t.Fatal("README.md has no Configuration section")
	}
	ref, _, _ = strings.Cut(ref, "\n## ")
	for _, key := range configKeys("", reflect.TypeFor[Config]()) {
		if !strings.Contains(ref, "`"+key+"`") {
			t.Errorf("README's configuration reference does not name `%s`", key)
		}
	}
}
