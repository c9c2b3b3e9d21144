// Package testredis runs a real redis-server (the Debian package's binary) for tests, on a Unix
// socket or a free loopback port, with persistence off so that a restart starts empty.
package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	t    testing.TB
	dir  string
	args []string
	cmd  *exec.Cmd
	URL  string // redis:// or unix:// URL
	Addr string // host:port, "" on a Unix socket
}

// Binary returns the redis-server path, or "" when it is not installed.
func Binary() string {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// Start runs redis-server on a Unix socket in a temporary directory, or skips the test when the
// binary is missing. It is stopped at the end of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	s := newServer(t, dir, "--port", "0", "--unixsocket", sock)
	s.URL = "unix://" + sock
	s.start()
	return s
}

// StartTCP runs redis-server on a free loopback port (for other processes that take a
// host:port), or skips the test when the binary is missing.
func StartTCP(t testing.TB) *Server {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, t.TempDir(), "--port", strconv.Itoa(port), "--bind", "127.0.0.1")
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.URL = "redis://" + s.Addr
	s.start()
	return s
}

func newServer(t testing.TB, dir string, args ...string) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("redis-server is not installed (Debian: apt-get install redis-server); skipping the Redis tests")
	}
	args = append(args, "--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "no",
		"--loglevel", "warning")
	s := &Server{t: t, dir: dir, args: append([]string{bin}, args...)}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	if err := s.wait(5 * time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// wait polls PING until the server answers.
func (s *Server) wait(d time.Duration) error {
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer within %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (no-op when stopped).
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart stops the server and starts it again, empty, at the same address.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Client returns a client for the server, closed at the end of the test.
func (s *Server) Client() *redis.Client {
	s.t.Helper()
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(opt)
	s.t.Cleanup(func() { c.Close() })
	return c
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
