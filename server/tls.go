package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"
)

// TLSOptions configure the listener for clients over TLS.
type TLSOptions struct {
	// Listen is the address of the TLS listener; empty: none.
	Listen string
	// CertFile and KeyFile are the PEM certificate (with its chain) and
	// key rlproxy presents.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes client certificates required: they
	// must be signed by one of its CAs (mutual TLS).
	ClientCAFile string
}

// tlsHandshakeTimeout bounds a client's TLS handshake.
const tlsHandshakeTimeout = 10 * time.Second

// loadTLS reads the files of o into the config each new TLS connection
// uses. Connections already open keep the certificates they began with.
func loadTLS(o TLSOptions) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls_cert_file %s, tls_key_file %s: %w", o.CertFile, o.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.ClientCAFile != "" {
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls_client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_client_ca_file %s: no PEM certificate in it", o.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// listenerTLS is the config of the TLS listener: it hands every new
// connection the config loaded last, so that a reload (Server.Reload)
// applies to the next client at once.
func (s *Server) listenerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.tls.Load(), nil
		},
	}
}

// ListenerTLS is the TLS listener's config, for another listener with
// the same certificates (they follow a reload).
func (s *Server) ListenerTLS() *tls.Config { return s.listenerTLS() }
