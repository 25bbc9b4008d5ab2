package ratelimit_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ratelimit.dev/client/go/ratelimit"
)

// testToken is the admin token of servers started with an admin token.
const testToken = "s3cret-admin-token"

// testLimits is the limits file of every test server.
const testLimits = `limits:
  - name: api
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 5
  - name: other
    kind: token_bucket
    rate: 1
    period: 1h
    capacity: 5
`

// server is a ratelimit-server process on a free port, in a temporary directory.
type server struct {
	t         *testing.T
	dir       string
	addr      string
	tokenFile string
	cmd       *exec.Cmd
	logPath   string
	done      chan struct{}
}

// startServer starts $RATELIMIT_SERVER with the test limits file and an admin token file, and
// stops it when the test ends. extra are more flags.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	return launchServer(t, true, extra)
}

// startServerWithoutAdminToken is startServer without an admin token: Reset is disabled.
func startServerWithoutAdminToken(t *testing.T, extra ...string) *server {
	t.Helper()
	return launchServer(t, false, extra)
}

func launchServer(t *testing.T, adminToken bool, extra []string) *server {
	t.Helper()
	bin := os.Getenv("RATELIMIT_SERVER")
	if bin == "" {
		t.Fatal("RATELIMIT_SERVER is not set: it must be the absolute path of ratelimit-server")
	}
	dir := t.TempDir()
	s := &server{t: t, dir: dir, tokenFile: filepath.Join(dir, "token"), logPath: filepath.Join(dir, "server.log"), done: make(chan struct{})}
	must(t, os.WriteFile(filepath.Join(dir, "limits.yaml"), []byte(testLimits), 0o600))
	must(t, os.WriteFile(s.tokenFile, []byte(testToken+"\n"), 0o600))
	portFile := filepath.Join(dir, "port")
	args := []string{"--listen=127.0.0.1:0", "--port_file=" + portFile,
		"--data_dir=" + filepath.Join(dir, "data"),
		"--limits_file=" + filepath.Join(dir, "limits.yaml"),
		// No metrics endpoint: its default port is fixed, and another server may hold it.
		"--metrics_listen="}
	if adminToken {
		args = append(args, "--admin_token_file="+s.tokenFile)
	}
	args = append(args, extra...)
	s.cmd = exec.Command(bin, args...)
	if !adminToken { // nor from the environment
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, ratelimit.AdminTokenEnv+"=") {
				s.cmd.Env = append(s.cmd.Env, kv)
			}
		}
	}
	logFile, err := os.Create(s.logPath)
	must(t, err)
	defer logFile.Close()
	s.cmd.Stderr = logFile
	s.cmd.Stdout = logFile
	must(t, s.cmd.Start())
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(portFile)
		if port, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil &&
			port > 0 {
			s.addr = "127.0.0.1:" + strconv.Itoa(port)
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("ratelimit-server exited before listening: %s", s.log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ratelimit-server did not write its port file: %s", s.log())
		}
	}
}

// log is what the server printed.
func (s *server) log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// stop ends the server: SIGTERM, then SIGKILL after a deadline. Idempotent.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// client connects to the server; closed when the test ends.
func (s *server) client(opts ...ratelimit.Option) *ratelimit.Client {
	s.t.Helper()
	c, err := ratelimit.Dial(s.addr, opts...)
	must(s.t, err)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// one is a one-limit request.
func one(name, key string, count float64) ratelimit.Request {
	return ratelimit.Request{Limits: []ratelimit.Limit{{Name: name, Key: key, Count: count}}}
}

// inline is a one-limit request with an inline token bucket: capacity tokens, refilling one per
// hour (so that nothing refills during a test).
func inline(name, key string, count, capacity float64) ratelimit.Request {
	return ratelimit.Request{Limits: []ratelimit.Limit{{Name: name, Key: key, Count: count,
		Config: &ratelimit.Config{Kind: ratelimit.TokenBucket, Rate: 1, Period: time.Hour,
			Capacity: ratelimit.Ptr(capacity)}}}}
}
