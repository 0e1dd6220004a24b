package slurm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RESTConfig configures the transport over slurmrestd (REST). Slurm's
// controller must accept JWT (AuthAltTypes=auth/jwt, AuthAltParameters=
// jwt_key=<file>), and slurmrestd must run with -a rest_auth/jwt.
type RESTConfig struct {
	// URL is slurmrestd's ("http://127.0.0.1:6820"). Required.
	URL string
	// User is whom the token is for (X-SLURM-USER-NAME) and whom jobs run
	// as when a task names no user. Default: the provider's own user.
	User string
	// TokenFile holds User's token ("SLURM_JWT=<token>", as scontrol token
	// prints it, or the bare token). It is read again whenever the token
	// it held nears its expiry, so whatever renews the file is followed.
	// A task naming another user cannot be submitted with it.
	TokenFile string
	// TokenCommand prints a token (in either form); each "{user}" in its
	// arguments is replaced with the user the token is for. It is run
	// again before the token expires. Default (without TokenFile):
	// scontrol token username={user} lifespan=<TokenLifespan>, which
	// needs root or SlurmUser for another user's token.
	TokenCommand []string
	// TokenLifespan is the default command's token lifespan (default 1h).
	TokenLifespan time.Duration
}

// RESTVersion is the OpenAPI plugin the REST transport speaks (Slurm
// 22.05's newest).
const RESTVersion = "v0.0.38"

// DefaultTokenLifespan is the lifespan of the tokens the default token
// command asks for.
const DefaultTokenLifespan = time.Hour

// REST is the Transport over slurmrestd's OpenAPI v0.0.38 with JWT (the
// token's user must see every job: not hidden by PrivateData=jobs):
// submit (POST job/submit), jobs (GET jobs: the same document squeue
// --json prints), nodes (GET nodes: sinfo --json's), cancel and signal
// (DELETE job/{id}, ?signal=N: every process of the job, the batch step
// included). v0.0.38 has no suspend, resume or requeue: Suspend, Resume,
// Requeue and Release go through CLI (scontrol), which must be reachable
// from the adapter too.
type REST struct {
	base   string // URL + "/slurm/" + RESTVersion
	user   string
	tokens *tokens
	client *http.Client
	cli    Transport
}

var _ Transport = (*REST)(nil)

// NewREST returns the REST transport. Suspend, Resume, Requeue, Release
// and the default token command run Slurm's commands from binDir (empty:
// PATH) with SLURM_CONF=slurmConf (empty: inherited), as CLI does;
// timeout bounds each request and command.
func NewREST(cfg RESTConfig, binDir, slurmConf string, timeout time.Duration) (*REST, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("slurm: rest URL %q: want http(s)://host:port", cfg.URL)
	}
	if cfg.TokenFile != "" && len(cfg.TokenCommand) > 0 {
		return nil, errors.New("slurm: rest: a token file or a token command, not both")
	}
	name := cfg.User
	if name == "" {
		me, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("slurm: rest: own user: %w", err)
		}
		name = me.Username
	}
	lifespan := cfg.TokenLifespan
	if lifespan <= 0 {
		lifespan = DefaultTokenLifespan
	}
	slurmRun := Exec(binDir, slurmConf, timeout)
	tk := &tokens{file: cfg.TokenFile, fileUser: name, cache: map[string]token{}, now: time.Now}
	switch {
	case len(cfg.TokenCommand) > 0:
		cmd, run := cfg.TokenCommand, Exec("", slurmConf, timeout)
		tk.run = func(ctx context.Context, user string) ([]byte, error) {
			argv := make([]string, len(cmd))
			for i, a := range cmd {
				argv[i] = strings.ReplaceAll(a, "{user}", user)
			}
			return run(ctx, argv[0], argv[1:], nil)
		}
	case cfg.TokenFile == "":
		tk.run = func(ctx context.Context, user string) ([]byte, error) {
			return slurmRun(ctx, "scontrol", []string{"token", "username=" + user, "lifespan=" + strconv.Itoa(int(lifespan.Seconds()))}, nil)
		}
	}
	return &REST{base: strings.TrimRight(cfg.URL, "/") + "/slurm/" + RESTVersion, user: name, tokens: tk,
		client: &http.Client{Timeout: timeout}, cli: &CLI{Run: slurmRun}}, nil
}

// restJob is a v0.0.38 job_properties: the subset Submission sets, named
// as sbatch's long options (slurmrestd parses them as such).
type restJob struct {
	Name        string            `json:"name"`
	Comment     string            `json:"comment"`
	Partition   string            `json:"partition,omitempty"`
	Dir         string            `json:"current_working_directory"`
	Stdout      string            `json:"standard_output"`
	Stderr      string            `json:"standard_error"`
	OpenMode    string            `json:"open_mode"`
	Environment map[string]string `json:"environment"`
	TimeLimit   int64             `json:"time_limit,omitempty"` // minutes
	CPUs        int               `json:"cpus_per_task,omitempty"`
	MemoryMiB   int64             `json:"memory_per_node,omitempty"`
	NodeList    string            `json:"nodelist,omitempty"` // not in v0.0.38's schema, but parsed (required_nodes is refused)
	Gres        string            `json:"gres,omitempty"`
}

// Submit posts job/submit as the submission's user (User's token when
// it names none).
func (r *REST) Submit(ctx context.Context, s Submission) (string, error) {
	who := r.user
	if s.User != "" {
		u, err := user.LookupId(s.User)
		if err != nil {
			return "", fmt.Errorf("slurmrestd submit: user %s: %w", s.User, err)
		}
		who = u.Username
	}
	j := restJob{Name: s.Name, Comment: s.Comment, Partition: s.Partition, Dir: s.Dir, Stdout: s.Stdout, Stderr: s.Stderr,
		OpenMode: "append", NodeList: s.NodeList, Gres: s.Gres, CPUs: s.CPUs, MemoryMiB: s.MemoryMiB,
		// sbatch --export=NONE's: nothing of the adapter's; the script
		// clears the rest.
		Environment: map[string]string{"SLURM_EXPORT_ENV": "NONE"}}
	if s.CPUs > 0 {
		j.Environment["SLURM_CPUS_PER_TASK"] = strconv.Itoa(s.CPUs) // as sbatch exports it
	}
	if s.TimeLimit > 0 {
		j.TimeLimit = int64((s.TimeLimit + time.Minute - 1) / time.Minute)
	}
	body, err := json.Marshal(struct {
		Script string  `json:"script"`
		Job    restJob `json:"job"`
	}{string(s.Script), j})
	if err != nil {
		return "", err
	}
	var out struct {
		JobID json.Number `json:"job_id"`
	}
	if err := r.do(ctx, who, http.MethodPost, "/job/submit", body, &out); err != nil {
		return "", err
	}
	if id := out.JobID.String(); validJobID(id) {
		return id, nil
	}
	return "", fmt.Errorf("slurmrestd submit: answer without a job ID (%q)", out.JobID)
}

// Jobs gets jobs: every job slurmctld still knows.
func (r *REST) Jobs(ctx context.Context) ([]Job, error) {
	var raw json.RawMessage
	if err := r.do(ctx, r.user, http.MethodGet, "/jobs", nil, &raw); err != nil {
		return nil, err
	}
	return decodeJobs(raw)
}

// Nodes gets nodes.
func (r *REST) Nodes(ctx context.Context) ([]NodeInfo, error) {
	var raw json.RawMessage
	if err := r.do(ctx, r.user, http.MethodGet, "/nodes", nil, &raw); err != nil {
		return nil, err
	}
	return decodeNodes(raw)
}

// Cancel deletes job/{id}.
func (r *REST) Cancel(ctx context.Context, jobID string) error {
	return r.do(ctx, r.user, http.MethodDelete, "/job/"+url.PathEscape(jobID), nil, nil)
}

// Signal deletes job/{id} with ?signal=N: slurmctld signals every step
// of the job, the batch step (the task itself) included.
func (r *REST) Signal(ctx context.Context, jobID string, sig syscall.Signal) error {
	return r.do(ctx, r.user, http.MethodDelete, "/job/"+url.PathEscape(jobID)+"?signal="+strconv.Itoa(int(sig)), nil, nil)
}

// Suspend, Resume, Requeue and Release are not in v0.0.38: the CLI's.
func (r *REST) Suspend(ctx context.Context, jobID string) error { return r.cli.Suspend(ctx, jobID) }
func (r *REST) Resume(ctx context.Context, jobID string) error  { return r.cli.Resume(ctx, jobID) }
func (r *REST) Requeue(ctx context.Context, jobID string) error { return r.cli.Requeue(ctx, jobID) }
func (r *REST) Release(ctx context.Context, jobID string) error { return r.cli.Release(ctx, jobID) }

// RESTError is a request slurmrestd refused or failed.
type RESTError struct {
	Method, Path string
	Status       int    // HTTP status
	Message      string // the answer's errors, or its body
}

func (e *RESTError) Error() string {
	return fmt.Sprintf("slurmrestd %s %s: %d: %s", e.Method, e.Path, e.Status, e.Message)
}

// do sends one request as user with user's token and decodes the answer
// into out (nil: only its errors). A refusal with a cached token (22.05
// answers a bad or expired one with 500, "Unspecified error") drops it
// and tries once more with a fresh one: revoked, or the clocks disagree.
func (r *REST) do(ctx context.Context, who, method, path string, body []byte, out any) error {
	for attempt := 0; ; attempt++ {
		tok, fresh, err := r.tokens.get(ctx, who)
		if err != nil {
			return fmt.Errorf("slurmrestd %s %s: token for %s: %w", method, path, who, err)
		}
		err = r.send(ctx, who, tok, method, path, body, out)
		re, ok := errors.AsType[*RESTError](err)
		if attempt == 0 && !fresh && ok && (re.Status == http.StatusUnauthorized || re.Status == http.StatusForbidden || re.Status == http.StatusInternalServerError) {
			r.tokens.drop(who, tok)
			continue
		}
		return err
	}
}

func (r *REST) send(ctx context.Context, who, tok, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-SLURM-USER-NAME", who)
	req.Header.Set("X-SLURM-USER-TOKEN", tok)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("slurmrestd %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("slurmrestd %s %s: %w", method, path, err)
	}
	var v struct {
		Errors []struct {
			Error       string `json:"error"`
			Description string `json:"description"`
		} `json:"errors"`
	}
	jerr := json.Unmarshal(data, &v)
	if resp.StatusCode/100 != 2 || len(v.Errors) > 0 {
		msg := strings.TrimSpace(string(data))
		if len(v.Errors) > 0 {
			var parts []string
			for _, e := range v.Errors {
				parts = append(parts, strings.TrimSpace(e.Description+" "+e.Error))
			}
			msg = strings.Join(parts, "; ")
		}
		return &RESTError{Method: method, Path: path, Status: resp.StatusCode, Message: msg}
	}
	if jerr != nil {
		return fmt.Errorf("slurmrestd %s %s: decode: %w", method, path, jerr)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data
		return nil
	}
	return json.Unmarshal(data, out)
}

// tokens caches a JWT per user and gets a new one before it expires.
type tokens struct {
	file     string // TokenFile, fileUser's
	fileUser string
	// run, when there is no file, gets a user's token (TokenCommand or
	// the default command).
	run func(ctx context.Context, user string) ([]byte, error)
	now func() time.Time

	mu    sync.Mutex
	cache map[string]token // by user; guarded by mu
}

type token struct {
	value        string
	issued, exp  time.Time
	refreshAfter time.Time
}

// get returns user's token, getting a new one (fresh) once the cached
// one is in the last quarter of its life (at most its last minute), or
// when there is none.
func (t *tokens) get(ctx context.Context, user string) (string, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if tk, ok := t.cache[user]; ok && now.Before(tk.refreshAfter) {
		return tk.value, false, nil
	}
	raw, err := t.fetch(ctx, user)
	if err != nil {
		if tk, ok := t.cache[user]; ok && now.Before(tk.exp) {
			return tk.value, false, nil // not renewed yet, but still good
		}
		return "", false, err
	}
	tk, err := parseToken(raw)
	if err != nil {
		return "", false, err
	}
	if !tk.exp.IsZero() && !now.Before(tk.exp) {
		return "", false, fmt.Errorf("the token expired at %s", tk.exp.UTC().Format(time.RFC3339))
	}
	tk.refreshAfter = now.Add(time.Minute) // no exp claim: read again each minute
	if !tk.exp.IsZero() {
		life := tk.exp.Sub(tk.issued)
		if tk.issued.IsZero() || life <= 0 {
			life = tk.exp.Sub(now)
		}
		tk.refreshAfter = tk.exp.Add(-min(life/4, time.Minute))
	}
	t.cache[user] = tk
	return tk.value, true, nil
}

// drop forgets user's token if it is still tok.
func (t *tokens) drop(user, tok string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cache[user].value == tok {
		delete(t.cache, user)
	}
}

func (t *tokens) fetch(ctx context.Context, user string) ([]byte, error) {
	switch {
	case t.file != "":
		if user != t.fileUser {
			return nil, fmt.Errorf("the token file is %s's: no token for %s", t.fileUser, user)
		}
		return os.ReadFile(t.file)
	}
	return t.run(ctx, user)
}

// parseToken reads "SLURM_JWT=<token>" or a bare token, and its iat and
// exp claims (unverified: slurmctld verifies it; these only say when to
// get a new one).
func parseToken(raw []byte) (token, error) {
	s := strings.TrimSpace(string(raw))
	if i := strings.LastIndex(s, "SLURM_JWT="); i >= 0 {
		s = s[i+len("SLURM_JWT="):]
	}
	s, _, _ = strings.Cut(s, "\n")
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] == "" || strings.ContainsAny(s, " \t\r") {
		return token{}, errors.New("not a JWT (want SLURM_JWT=<header.payload.signature> or the bare token)")
	}
	tk := token{value: s}
	if b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "=")); err == nil {
		var c struct {
			Exp, Iat int64
		}
		if json.Unmarshal(b, &c) == nil {
			if c.Exp > 0 {
				tk.exp = time.Unix(c.Exp, 0)
			}
			if c.Iat > 0 {
				tk.issued = time.Unix(c.Iat, 0)
			}
		}
	}
	return tk, nil
}
