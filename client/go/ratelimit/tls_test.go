package ratelimit_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ratelimit.dev/client/go/ratelimit"
)

// selfSigned makes a self-signed EC certificate for one day with common name cn and, unless san
// is empty, that subjectAltName; it returns the paths of dir/name.pem and dir/name.key.
func selfSigned(t *testing.T, dir, name, cn, san string) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	args := []string{"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
		"-nodes", "-days", "1", "-subj", "/CN=" + cn, "-keyout", key, "-out", cert}
	if san != "" {
		args = append(args, "-addext", "subjectAltName="+san)
	}
	if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v: %s", err, out)
	}
	return cert, key
}

func TestTLSWithCAFile(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "server", "ratelimit", "DNS:ratelimit.test,IP:127.0.0.1")
	s := startServer(t, "--tls_cert_file="+cert, "--tls_key_file="+key)
	c := s.client(ratelimit.WithTLSFiles(ratelimit.TLSFiles{CAFile: cert}))
	r, err := c.Consume(ctx(t), one("api", "k", 1))
	must(t, err)
	if !r.Allowed {
		t.Fatalf("consume over TLS: %+v", r)
	}
	named := s.client(ratelimit.WithTLSFiles(ratelimit.TLSFiles{CAFile: cert,
		ServerName: "ratelimit.test"}))
	_, err = named.Check(ctx(t), one("api", "k", 1))
	must(t, err)
	// A client that does not trust the certificate fails (and says so), plaintext too.
	other, _ := selfSigned(t, dir, "other", "other", "")
	untrusting := s.client(ratelimit.WithTLSFiles(ratelimit.TLSFiles{CAFile: other}),
		ratelimit.WithCheckAttempts(1))
	if _, err := untrusting.Check(ctx(t), one("api", "k", 1)); status.Code(err) !=
		codes.Unavailable {
		t.Fatalf("untrusted server certificate: %v", err)
	}
	if _, err := ratelimit.Dial(s.addr, ratelimit.WithTLSFiles(ratelimit.TLSFiles{
		CAFile: filepath.Join(dir, "missing.pem")})); err == nil {
		t.Fatal("Dial accepted a missing CA file")
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.pem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ratelimit.Dial(s.addr, ratelimit.WithTLSFiles(ratelimit.TLSFiles{
		CAFile: filepath.Join(dir, "empty.pem")})); err == nil {
		t.Fatal("Dial accepted a CA file without a certificate")
	}
}

func TestMutualTLSWithAClientCertificate(t *testing.T) {
	dir := t.TempDir()
	serverCert, serverKey := selfSigned(t, dir, "server", "server", "IP:127.0.0.1")
	clientCert, clientKey := selfSigned(t, dir, "client", "client", "URI:spiffe://test/client")
	s := startServer(t, "--tls_cert_file="+serverCert, "--tls_key_file="+serverKey,
		"--tls_client_ca_file="+clientCert)

	withCert := s.client(ratelimit.WithTLSFiles(ratelimit.TLSFiles{CAFile: serverCert,
		CertFile: clientCert, KeyFile: clientKey}))
	r, err := withCert.Consume(ctx(t), one("api", "k", 1))
	must(t, err)
	if !r.Allowed {
		t.Fatalf("consume over mTLS: %+v", r)
	}

	// The same through WithTLS and a tls.Config.
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(serverCert)
	must(t, err)
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	must(t, err)
	withConfig := s.client(ratelimit.WithTLS(&tls.Config{RootCAs: pool,
		Certificates: []tls.Certificate{pair}}))
	_, err = withConfig.Check(ctx(t), one("api", "k", 1))
	must(t, err)

	withoutCert := s.client(ratelimit.WithTLSFiles(ratelimit.TLSFiles{CAFile: serverCert}),
		ratelimit.WithCheckAttempts(1))
	if _, err := withoutCert.Check(ctx(t), one("api", "k", 1)); status.Code(err) !=
		codes.Unavailable {
		t.Fatalf("mTLS server, no client certificate: %v", err)
	}
	if _, err := ratelimit.Dial(s.addr, ratelimit.WithTLSFiles(ratelimit.TLSFiles{
		CAFile: serverCert, CertFile: clientCert})); err == nil {
		t.Fatal("Dial accepted a client certificate without its key")
	}
}
