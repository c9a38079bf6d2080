package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Checked is Load's error when --check-config was given: the file has
// been checked and nothing should start. Problems holds one line per
// problem, each naming its key; none means the file is fine.
type Checked struct {
	Problems []string
	Config   Config // the config as read: what a caller checks further (rls_config)
}

func (c *Checked) Error() string {
	if len(c.Problems) == 0 {
		return "config: ok"
	}
	return "config: " + strings.Join(c.Problems, "; ")
}

// check turns what loading the file gave (c and err) into the report of
// --check-config. On top of what Load validates, it parses the TLS files,
// which otherwise only fail when rlproxy starts or reloads.
func check(c Config, err error) *Checked {
	out := Checked{Config: c}
	var add func(error)
	add = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				add(e)
			}
			return
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			out.Problems = append(out.Problems, strings.TrimPrefix(line, "config: "))
		}
	}
	if err != nil {
		add(err)
	}
	for _, err := range c.parseTLSFiles() {
		add(err)
	}
	return &out
}

// parseTLSFiles parses the TLS files that exist (Validate reports those
// that do not): certificates with their keys, CA bundles.
func (c Config) parseTLSFiles() []error {
	var errs []error
	exists := func(path string) bool {
		_, err := os.Stat(path)
		return path != "" && err == nil
	}
	pairs := []struct{ certKey, cert, keyKey, key string }{
		{"tls_cert_file", c.TLSCertFile, "tls_key_file", c.TLSKeyFile},
		{"backend_tls_cert_file", c.BackendTLSCertFile, "backend_tls_key_file", c.BackendTLSKeyFile},
	}
	for _, p := range pairs {
		if exists(p.cert) && exists(p.key) {
			if _, err := tls.LoadX509KeyPair(p.cert, p.key); err != nil {
				errs = append(errs, fmt.Errorf("%s %s, %s %s: %v", p.certKey, p.cert, p.keyKey, p.key, err))
			}
		}
	}
	for _, ca := range []struct{ key, path string }{
		{"tls_client_ca_file", c.TLSClientCAFile}, {"backend_tls_ca_file", c.BackendTLSCAFile},
	} {
		if !exists(ca.path) {
			continue
		}
		pem, err := os.ReadFile(ca.path)
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			err = errors.New("no PEM certificate in it")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %v", ca.key, ca.path, err))
		}
	}
	return errs
}
