package backend

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"
)

// TLSFiles name the PEM files of the TLS connections to rediss://
// backends. Empty fields keep go-redis's defaults: the system's roots, no
// client certificate.
type TLSFiles struct {
	CAFile   string // CAs that sign the servers' certificates
	CertFile string // client certificate, for servers that require one
	KeyFile  string // its key
}

// tlsSetup is TLSFiles loaded: what every rediss:// connection adds to
// the TLS config its URL gave (server name, skip_verify).
type tlsSetup struct {
	roots *x509.CertPool
	certs []tls.Certificate
}

func (f TLSFiles) load() (tlsSetup, error) {
	var s tlsSetup
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return s, fmt.Errorf("backend TLS CA file: %w", err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pem) {
			return s, fmt.Errorf("backend TLS CA file %s: no PEM certificate in it", f.CAFile)
		}
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return s, fmt.Errorf("backend TLS client certificate: %w", err)
		}
		s.certs = []tls.Certificate{cert}
	}
	return s, nil
}

// apply adds the setup to a URL's TLS config; nil (a redis:// URL) stays nil.
func (s tlsSetup) apply(c *tls.Config) {
	if c == nil {
		return
	}
	if s.roots != nil {
		c.RootCAs = s.roots
	}
	if s.certs != nil {
		c.Certificates = s.certs
	}
}

// URLTLS returns the TLS config of a rediss:// URL with the files
// applied, as the backends' connections use it; nil for redis://.
func URLTLS(url string, f TLSFiles) (*tls.Config, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	s, err := f.load()
	if err != nil {
		return nil, err
	}
	s.apply(opt.TLSConfig)
	return opt.TLSConfig, nil
}
