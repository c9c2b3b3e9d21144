package kube

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	rbacclient "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// APIServerEnv names the kube-apiserver binary the tests run (scripts/kube-apiserver.sh builds
// one and prints its path); without it, or without etcd on PATH, they skip.
const APIServerEnv = "UBATCH_KUBE_APISERVER"

// controlPlane is a real etcd and kube-apiserver on loopback ports, in a temporary directory:
// no kubelets, no controllers (nothing manages EndpointSlices but the tests). It authorizes with
// RBAC: the admin token is in system:masters, the router's token gets only what the chart's
// Role grants (see grantRouter).
type controlPlane struct {
	dir        string
	url        string // https://127.0.0.1:PORT
	admin      string // kubeconfig of the admin
	router     string // kubeconfig of the router's user, user "router"
	procs      []*exec.Cmd
	exited     chan string // a process's name when it ends
	core       corev1client.CoreV1Interface
	discovery  discoveryclient.DiscoveryV1Interface
	rbac       rbacclient.RbacV1Interface
	startError error
}

var (
	cpOnce sync.Once
	cp     *controlPlane
)

// sharedControlPlane starts the package's control plane on first use (TestMain stops it), or
// skips the test saying what is missing. Tests share it, each in its own namespace.
func sharedControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	bin := os.Getenv(APIServerEnv)
	if bin == "" {
		t.Skipf("%s is not set: no kube-apiserver to test discovery against (scripts/kube-apiserver.sh builds one and prints its path)", APIServerEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s=%s: %v (scripts/kube-apiserver.sh builds it)", APIServerEnv, bin, err)
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (Debian: apt-get install etcd-server): no control plane to test discovery against")
	}
	cpOnce.Do(func() { cp = startControlPlane(bin, etcd) })
	if cp.startError != nil {
		t.Fatalf("control plane: %v", cp.startError)
	}
	return cp
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startControlPlane(apiserver, etcd string) *controlPlane {
	c := &controlPlane{exited: make(chan string, 2)}
	dir, err := os.MkdirTemp("", "ubatch-kube-")
	if err != nil {
		c.startError = err
		return c
	}
	c.dir = dir
	if err := c.start(apiserver, etcd); err != nil {
		c.startError = err
	}
	return c
}

func (c *controlPlane) start(apiserver, etcd string) error {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	client, peer, secure := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1]), ports[2]
	if err := c.run("etcd", etcd, "--name=test", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=test="+peer,
		"--unsafe-no-fsync"); err != nil {
		return err
	}
	if err := c.waitFor(30*time.Second, func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return fmt.Errorf("etcd at %s: %w (its log: %s)", client, err, filepath.Join(c.dir, "etcd.log"))
	}
	if err := c.writeSecrets(); err != nil {
		return err
	}
	c.url = fmt.Sprintf("https://127.0.0.1:%d", secure)
	if err := c.run("kube-apiserver", apiserver, "--etcd-servers="+client,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(secure),
		"--cert-dir="+filepath.Join(c.dir, "certs"), "--token-auth-file="+filepath.Join(c.dir, "tokens.csv"),
		"--authorization-mode=RBAC", "--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(c.dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(c.dir, "sa.key"),
		// The kubernetes Service's endpoints would be the advertise address, which may not be
		// loopback: no reconciler (no pod uses that Service here).
		"--endpoint-reconciler-type=none",
		"--profiling=false", "--enable-priority-and-fairness=false"); err != nil {
		return err
	}
	for _, kc := range []struct {
		path *string
		user string
	}{{&c.admin, "admin"}, {&c.router, "router"}} {
		*kc.path = filepath.Join(c.dir, kc.user+".kubeconfig")
		if err := writeKubeconfig(*kc.path, c.url, kc.user, c.token(kc.user)); err != nil {
			return err
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.admin)
	if err != nil {
		return err
	}
	if c.core, err = corev1client.NewForConfig(rc); err != nil {
		return err
	}
	if c.discovery, err = discoveryclient.NewForConfig(rc); err != nil {
		return err
	}
	if c.rbac, err = rbacclient.NewForConfig(rc); err != nil {
		return err
	}
	// Ready once it serves, and once the namespace "default" exists (its bootstrap makes it).
	var last error
	if err := c.waitFor(2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, last = c.core.Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return last == nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver at %s: %w (last: %v; its log: %s)", c.url, err, last, filepath.Join(c.dir, "kube-apiserver.log"))
	}
	return nil
}

// token is user's bearer token (fixed per control plane: derived from its directory name).
func (c *controlPlane) token(user string) string {
	return user + "-" + hex.EncodeToString([]byte(filepath.Base(c.dir)))
}

// writeSecrets writes the token file (admin in system:masters, router in no group) and the
// service-account key pair the API server requires.
func (c *controlPlane) writeSecrets() error {
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,router,router\n", c.token("admin"), c.token("router"))
	if err := os.WriteFile(filepath.Join(c.dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// writeKubeconfig writes a kubeconfig for user with a bearer token. The API server's serving
// certificate is the self-signed one it makes in --cert-dir, so TLS is not verified.
func writeKubeconfig(path, server, user, token string) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: %s
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: %s}
current-context: test
`, server, user, token, user)
	return os.WriteFile(path, []byte(kc), 0o600)
}

// run starts a process of the control plane, its output in DIR/NAME.log.
func (c *controlPlane) run(name string, args ...string) error {
	f, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { cmd.Wait(); f.Close(); c.exited <- name }()
	c.procs = append(c.procs, cmd)
	return nil
}

// stop kills the processes (the API server first) and removes the directory, unless keep.
func (c *controlPlane) stop(keep bool) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		syscall.Kill(-c.procs[i].Process.Pid, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond) // let them go before their files do
	if keep {
		fmt.Fprintf(os.Stderr, "control plane's directory kept for its logs: %s\n", c.dir)
		return
	}
	os.RemoveAll(c.dir)
}

// namespace creates a namespace for one test and deletes it after.
func (c *controlPlane) namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := c.core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.core.Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// waitFor polls cond until it holds, for at most d, or until a process of the control plane
// ends.
func (c *controlPlane) waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		select {
		case name := <-c.exited:
			c.exited <- name
			return fmt.Errorf("%s exited", name)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil && cp.dir != "" {
		cp.stop(code != 0)
	}
	if ubatchBin != "" {
		os.RemoveAll(filepath.Dir(ubatchBin))
	}
	os.Exit(code)
}
