package ratelimit

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLS from PEM files (WithTLSFiles); WithTLS takes a configuration as it is.

// TLSFiles are PEM files for a TLS connection; every field is optional.
type TLSFiles struct {
	// CAFile verifies the server; empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate for mTLS; both or neither.
	CertFile string
	KeyFile  string
	// ServerName is the name the server certificate must carry, when it differs from the
	// target's host (e.g. a target given by IP address).
	ServerName string
}

// WithTLSFiles connects over TLS configured from PEM files, read when the client is created.
func WithTLSFiles(files TLSFiles) Option { return func(o *options) { o.tlsFiles = &files } }

// loadTLS reads `files` into a client configuration (TLS 1.2 at least).
func loadTLS(files TLSFiles) (*tls.Config, error) {
	config := &tls.Config{ServerName: files.ServerName, MinVersion: tls.VersionTLS12}
	if files.CAFile != "" {
		pem, err := os.ReadFile(files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ratelimit: CA file %s: no PEM certificate", files.CAFile)
		}
		config.RootCAs = pool
	}
	if files.CertFile != "" || files.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}
