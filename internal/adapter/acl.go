package adapter

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/computeboard/computeboard/blackboard"
)

// runACL prints the ACL SETUSER command that creates (or redefines) the
// Redis user of one module on a board with per-module ACLs (broker
// identity "acl"): confined to its own intake lanes and entry keys, able
// to write the shared indexes a post touches, with no access to job
// records, dead letters or adapter state. The password is given as its
// SHA-256 (#…), so the plaintext never appears in the command or in Redis.
func runACL(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("acl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	board := fs.String("board", "default", "blackboard namespace")
	passEnv := fs.String("password-env", "", "environment variable holding the module's password (default: generate one and print it to stderr)")
	user := fs.String("user", "", "Redis user name (default: the module name)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"acl: want exactly one MODULE"}
	}
	module := pos[0]
	rules, err := blackboard.NewKeys(*board).ModuleACL(module)
	if err != nil {
		return usageError{"acl: " + err.Error()}
	}
	name := module
	if *user != "" {
		name = *user
	}
	if strings.ContainsAny(name, " \t\r\n") {
		return usageError{fmt.Sprintf("acl: user name %q contains white space", name)}
	}
	pass := ""
	if *passEnv != "" {
		if pass = getenv(*passEnv); pass == "" {
			return usageError{fmt.Sprintf("acl: $%s is empty", *passEnv)}
		}
	} else {
		var b [24]byte
		_, _ = rand.Read(b[:])
		pass = hex.EncodeToString(b[:])
		fmt.Fprintf(stderr, "generated password for %s (store it for the module; it is not shown again): %s\n", name, pass)
	}
	sum := sha256.Sum256([]byte(pass))
	line := append([]string{"ACL", "SETUSER", name, "reset", "on", "#" + hex.EncodeToString(sum[:])}, rules...)
	fmt.Fprintln(stdout, strings.Join(line, " "))
	return nil
}
